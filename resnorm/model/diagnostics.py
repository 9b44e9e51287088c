"""Diagnostics from the stacked `layers` axis and the scan's taps (docs/variants.md section 5): array math only.

Per sublayer (depth order, attention and MLP each count): gradient norm, input RMS, adjacent-input cosine,
update ratio, and for multi-stream variants the composite Amax gains of the residual mixing (mHC paper, Sec. 3)
and the spread of the streams. The jitted function that collects the taps is `resnorm.step.step.make_diag_fn`.
"""
import flax
import jax
import jax.numpy as jnp
import numpy as np

from resnorm.model import depth_mixing, residual
from resnorm.model.norms import ELEMENTWISE

KINDS = ("attn", "mlp")


def _segment_trees(tree, cfg):
  """[(subtree, num_layers, stacked)] per segment, in depth order."""
  out = []
  for name, length, _ in residual.get(cfg.model.residual).layer_segments(cfg.model):
    if cfg.model.scan_layers:
      out.append((tree[name], length, True))
    else:
      out.extend((tree[f"{name}_{i}"], 1, False) for i in range(length))
  return out


def sublayer_grad_sumsq(grads, cfg) -> jax.Array:
  """[S] sum of squared gradients of each sublayer's params (F, its norm, and its variant piece)."""
  grads = flax.core.unfreeze(grads)
  per_segment = []
  for tree, length, stacked in _segment_trees(grads, cfg):
    cols = []
    for kind in KINDS:
      leaves = [v for k, sub in tree.items() if k.split("_")[0] == kind for v in jax.tree.leaves(sub)]
      sq = [jnp.sum(jnp.square(x.astype(jnp.float32)).reshape(length, -1) if stacked
                    else jnp.square(x.astype(jnp.float32)).reshape(1, -1), axis=1) for x in leaves]
      cols.append(sum(sq) if sq else jnp.zeros((length,)))
    per_segment.append(jnp.stack(cols, axis=1).reshape(-1))
  return jnp.concatenate(per_segment)


def norm_alpha(params, cfg) -> jax.Array | None:
  """[S] DyT's (or Derf's) learned alpha of each sublayer's own norm (`attn_norm`, `mlp_norm`), in depth order; None
  unless model.norm is dyt or derf and the sublayers have norms (the learned-parameter tap of docs/diagnostics.md)."""
  if cfg.model.norm not in ELEMENTWISE:
    return None
  per_segment = []
  for tree, length, _ in _segment_trees(flax.core.unfreeze(params), cfg):
    if not all(f"{kind}_norm" in tree for kind in KINDS):
      return None
    cols = [jnp.reshape(tree[f"{kind}_norm"]["alpha"], (length,)).astype(jnp.float32) for kind in KINDS]
    per_segment.append(jnp.stack(cols, axis=1).reshape(-1))
  return jnp.concatenate(per_segment)


def composite_gains(mix_SBTnn: jax.Array) -> dict:
  """Amax gains of the composite residual mixing, averaged over tokens (mHC Fig. 7).

  forward at l: P = H_l ... H_0 (input -> l), gain = max_i |sum_j P_ij| (row sums);
  backward at l: P = H_{S-1} ... H_l (l -> output), gain = max_j |sum_i P_ij| (column sums).
  """
  m = mix_SBTnn.astype(jnp.float32)

  def fwd(acc, h):
    acc = jnp.einsum("btij,btjk->btik", h, acc)
    return acc, acc

  def bwd(acc, h):
    acc = jnp.einsum("btij,btjk->btik", acc, h)
    return acc, acc

  eye = jnp.broadcast_to(jnp.eye(m.shape[-1]), m.shape[1:])
  _, pf = jax.lax.scan(fwd, eye, m)
  _, pb = jax.lax.scan(bwd, eye, m[::-1])
  pb = pb[::-1]
  gain_f = jnp.max(jnp.abs(jnp.sum(pf, axis=-1)), axis=-1)  # [S, B, T]
  gain_b = jnp.max(jnp.abs(jnp.sum(pb, axis=-2)), axis=-1)
  return {"gain_forward": jnp.mean(gain_f, axis=(1, 2)), "gain_backward": jnp.mean(gain_b, axis=(1, 2))}


class SpikeDetector:
  """Loss spikes (docs/variants.md section 5): loss_t > EMA + k * sigma of the losses before it, after `warmup`
  observations. Host-side, on the losses the loop already fetched; spikes are counted, never fatal."""

  def __init__(self, k: float = 6.0, decay: float = 0.98, warmup: int = 20):
    self.k, self.decay, self.warmup = k, decay, warmup
    self.mean, self.var, self.n = 0.0, 0.0, 0
    self.events: list[dict] = []

  def update(self, step: int, loss: float) -> bool:
    spike = False
    if self.n >= self.warmup:
      sigma = self.var ** 0.5
      spike = loss > self.mean + self.k * max(sigma, 1e-3)
      if spike:
        self.events.append({"step": step, "loss": loss, "ema": self.mean, "sigma": sigma})
    if self.n == 0:
      self.mean = loss
    else:
      delta = loss - self.mean
      self.mean += (1 - self.decay) * delta
      self.var = self.decay * (self.var + (1 - self.decay) * delta * delta)
    self.n += 1
    return spike

  def state(self) -> dict:
    return {"mean": self.mean, "var": self.var, "n": self.n, "events": self.events}

  def load(self, s: dict) -> None:
    self.mean, self.var, self.n, self.events = s["mean"], s["var"], s["n"], list(s["events"])


def _cosine(a, b):
  a, b = a.astype(jnp.float32), b.astype(jnp.float32)
  num = jnp.sum(a * b, axis=-1)
  return num / jnp.maximum(jnp.linalg.norm(a, axis=-1) * jnp.linalg.norm(b, axis=-1), 1e-12)


def tap_stats(taps) -> dict:
  """Per-sublayer statistics of the scan's taps (u: branch inputs [S,B,T,D], f: branch outputs)."""
  u, f = taps["u"].astype(jnp.float32), taps["f"].astype(jnp.float32)
  cos = _cosine(u[:-1], u[1:]).reshape(u.shape[0] - 1, -1)                       # [S-1, B*T]
  out = {
      "act_rms": jnp.sqrt(jnp.mean(jnp.square(u), axis=(1, 2, 3))),
      "update_ratio": jnp.mean(jnp.linalg.norm(f, axis=-1) / jnp.maximum(jnp.linalg.norm(u, axis=-1), 1e-12),
                               axis=(1, 2)),
      "cos_next_median": jnp.median(cos, axis=1),
      "cos_next_p05": jnp.percentile(cos, 5, axis=1),
      "cos_next_p95": jnp.percentile(cos, 95, axis=1),
  }
  if "spread" in taps:
    out["stream_spread"] = jnp.mean(taps["spread"].astype(jnp.float32), axis=(1, 2))
  if "depth" in taps:  # AttnRes: each sublayer's softmax over the sources, [S, B, T, N+1]
    a = taps["depth"].astype(jnp.float32)
    out["depth_entropy"] = jnp.mean(-jnp.sum(jnp.where(a > 0, a * jnp.log(jnp.where(a > 0, a, 1.0)), 0.0), -1),
                                    axis=(1, 2))
  out.update(learned_weights(taps))
  if "mix" in taps:
    mix = taps["mix"].astype(jnp.float32)
    out.update(composite_gains(mix))
    out["mix_row_err"] = jnp.max(jnp.abs(jnp.sum(mix, axis=-1) - 1.0), axis=(1, 2, 3))  # Sinkhorn residuals
    out["mix_col_err"] = jnp.max(jnp.abs(jnp.sum(mix, axis=-2) - 1.0), axis=(1, 2, 3))
  return out


def learned_weights(taps) -> dict:
  """[S] per-sublayer learned connection weights a variant taps (docs/diagnostics.md, "Learned weights"): LAuReL's
  RW weights (laurel_alpha, laurel_beta), its PA gains (pa_gain_j, the input j sublayers back) and the size of its
  low-rank term against the stream (lr_ratio, token mean of ||B A x|| / ||x||); value residual's lambda; the
  speedrun scalars' lambda_r and lambda_0 (resid_lambda, x0_lambda, on each block's attention sublayer); DDL's
  gate beta, its token mean (ddl_beta); MUDDFormer's
  entropy of each way's |A| normalized over its sources (dense_entropy_{q,k,v,r}, per token, averaged). NaN where a
  sublayer has none (reported as null)."""
  out = {}
  if "rw" in taps:
    out["laurel_alpha"], out["laurel_beta"] = taps["rw"][:, 0], taps["rw"][:, 1]
  if "pa_gain" in taps:
    out.update({f"pa_gain_{j + 1}": taps["pa_gain"][:, j] for j in range(taps["pa_gain"].shape[1])})
  if "lr_ratio" in taps:
    out["lr_ratio"] = jnp.mean(taps["lr_ratio"].astype(jnp.float32), axis=(1, 2))
  for key in ("value_lambda", "resid_lambda", "x0_lambda", "ddl_beta"):
    if key in taps:
      out[key] = taps[key]
  if "dense" in taps:  # MUDDFormer's per-token DA weights [S, B, T, 4, J], NaN where a sublayer has no DA
    a = jnp.abs(taps["dense"].astype(jnp.float32))
    p = a / jnp.maximum(jnp.sum(a, axis=-1, keepdims=True), 1e-12)
    ent = -jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0), axis=-1)
    ent = jnp.mean(jnp.where(jnp.isnan(jnp.sum(a, axis=-1)), jnp.nan, ent), axis=(1, 2))          # [S, 4]
    out.update({f"dense_entropy_{w}": ent[:, i] for i, w in enumerate("qkvr")})
  return out


def angular_distance(u_SBTD) -> jax.Array:
  """[S, S] Gromov et al. (2403.17887) angular distance (1/pi) arccos cos(u_l, u_m) of the last token, averaged
  over the batch. Row l, column l + k is the distance from sublayer l's input to sublayer (l + k)'s."""
  last = u_SBTD[:, :, -1].astype(jnp.float32)                                     # [S, B, D]
  unit = last / jnp.maximum(jnp.linalg.norm(last, axis=-1, keepdims=True), 1e-12)
  cos = jnp.einsum("sbd,rbd->srb", unit, unit)
  return jnp.mean(jnp.arccos(jnp.clip(cos, -1.0, 1.0)), axis=-1) / jnp.pi


def summarize(cfg, out: dict, full: bool) -> dict:
  """Host-side JSON: `sublayers` (with each row's depth-mixing fit R^2) and the depth-mixing matrix always; the
  angular-distance matrix and the multi-stream mixing matrices when `full`."""
  res = {"sublayers": sublayer_report(cfg, out["stats"], out["grad_sumsq"])}
  mix, r2 = depth_mixing.solve(**out["depth_mixing"])
  res["depth_mixing"] = [[round(float(x), 5) for x in row] for row in mix]
  for row, r in zip(res["sublayers"], r2):
    row["mixing_r2"] = float(r)
  if full:
    res["angular_distance"] = [[round(float(x), 5) for x in row] for row in out["angular"]]
    if "mixing" in out:
      res["mixing"] = [[[round(float(x), 5) for x in row] for row in m] for m in out["mixing"]]
    if "depth_weights" in out:
      res["depth_weights"] = [[round(float(x), 5) for x in row] for row in out["depth_weights"]]
    if "dense_weights" in out:  # MUDDFormer: per block (its attention sublayer), [4 ways][L sources]; block 0 null
      res["dense_weights"] = [None if np.isnan(m).any() else [[round(float(x), 5) for x in row] for row in m]
                              for m in np.asarray(out["dense_weights"])[::2]]
  return res


def depth_summary(rows: list[dict]) -> dict:
  """A few depth-independent numbers from per-sublayer rows (the sweep table's columns, TensorBoard's scalars):
  grad_norm and act_rms last / first sublayer, median cosine over the last quarter of sublayers, median
  update_ratio, and for hc/mhc the max composite gain and the median stream spread. Absent fields are left out."""
  col = lambda key: [r[key] for r in rows if r.get(key) is not None]
  out = {}
  for key, name in (("grad_norm", "grad_ratio_last_first"), ("act_rms", "act_rms_ratio_last_first")):
    vals = col(key)
    if vals and vals[0]:
      out[name] = vals[-1] / vals[0]
  cos = col("cos_next_median")
  if cos:
    out["cos_last_quarter"] = float(np.median(cos[len(cos) * 3 // 4:]))
  if col("update_ratio"):
    out["update_ratio_median"] = float(np.median(col("update_ratio")))
  gains = col("gain_forward") + col("gain_backward")
  if gains:
    out["max_gain"] = max(gains)
  if col("stream_spread"):
    out["stream_spread"] = float(np.median(col("stream_spread")))
  return out


def sublayer_report(cfg, stats: dict, grad_sumsq) -> list[dict]:
  """The per-sublayer JSON objects of docs/design.md, in depth order."""
  stats = {k: [float(x) for x in v] for k, v in stats.items()}
  grads = [float(x) ** 0.5 for x in grad_sumsq]
  rows = []
  for i, g in enumerate(grads):
    row = {"index": i, "layer": i // 2, "kind": KINDS[i % 2], "grad_norm": g}
    for key, vals in stats.items():
      # cos_next_* has S-1 entries: null for the last sublayer; NaN (a sublayer without the field) is null too
      row[key] = vals[i] if i < len(vals) and not np.isnan(vals[i]) else None
    rows.append(row)
  return rows
