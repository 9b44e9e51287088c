"""Coordinate checks (Yang et al., Tensor Programs V, arXiv 2203.03466, Fig. 5; CompleteP, arXiv 2505.01618, Fig. 3):
train a few steps at one lr over a ladder of widths and one of depths, and record, per step, the mean |coordinate|
of the activations and of each param role's update. Under a parametrization that transfers, each line (one per
step) is flat in width (µP) or depth (CompleteP); under the standard one, activations and updates grow.

Every shape trains the real step (resnorm.step.step.train_step) on the same fixed batches, bytes of the running
interpreter's standard library (the default corpus's text, read directly: no dataset is built).
"""
import dataclasses
import functools
import glob
import math
import os
import sys

import flax
import jax
import jax.numpy as jnp
import numpy as np

from resnorm.config import configlib
from resnorm.model import param, residual
from resnorm.model.model import LM
from resnorm.step import optim, step

# What each activation is, read from the model's taps: the embedding, the residual stream entering each sublayer
# (before its own norm), each sublayer's output F (after the branch multiplier), and the logits.
ACTIVATIONS = ("embed", "stream", "attn_out", "mlp_out", "logits")


@dataclasses.dataclass(frozen=True)
class Ladder:
  """The shapes of one check: `widths` at `width_depth` layers, `depths` at `depth_width`; the base shape is the
  first of each (param_base). Heads keep `head_dim`; the MLP is `mlp_ratio` x the width."""
  widths: tuple = (64, 128, 256, 512)
  depths: tuple = (12, 24, 48, 96)
  width_depth: int = 2
  depth_width: int = 64
  head_dim: int = 16
  mlp_ratio: int = 4


def corpus_batches(n: int, batch: int, seq_len: int) -> list[dict]:
  """`n` fixed batches of `batch` x `seq_len` bytes of the standard library's sources (sorted files, in order)."""
  need, data = n * batch * (seq_len + 1), bytearray()
  for path in sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), "*.py"))):
    with open(path, "rb") as f:
      data += f.read()
    if len(data) >= need:
      break
  tok = np.frombuffer(bytes(data[:need]), np.uint8).astype(np.int32).reshape(n, batch, seq_len + 1)
  return [{"inputs": t[:, :-1], "targets": t[:, 1:], "mask": np.ones((batch, seq_len), np.float32)} for t in tok]


def shaped(cfg, width: int, depth: int, ladder: Ladder, base: tuple[int, int]):
  """cfg at one rung: width, depth, heads and MLP from the ladder, the base shape in model.param_base."""
  c = cfg.copy_and_resolve_references()
  m = c.model
  m.d_model, m.num_layers, m.num_heads, m.mlp_dim = width, depth, max(width // ladder.head_dim, 1), width * ladder.mlp_ratio
  m.param_base.d_model, m.param_base.num_layers = base
  m.param_base.head_dim = ladder.head_dim
  # Block AttnRes: the config's block count where it divides the rung's 2L sublayers, else the largest that does
  m.attn_res.num_blocks = math.gcd(m.attn_res.num_blocks, 2 * depth)
  configlib.validate(c)
  return c


def _mean_abs(x) -> jax.Array:
  return jnp.mean(jnp.abs(x.astype(jnp.float32)))


def activations(mcfg, params, inputs) -> dict:
  """Each of ACTIVATIONS at these params, as arrays. A sublayer's output is F's own, before the parametrization's
  branch multiplier (which makes each of L sublayers' contributions 1/L of the stream by design)."""
  logits, taps = LM(mcfg, collect=True).apply({"params": params}, inputs)
  f_S = taps["f"] / param.shape(mcfg).branch  # [S, B, T, D], attention then MLP per layer
  return {"embed": taps["embed"], "stream": taps["u"], "attn_out": f_S[0::2], "mlp_out": f_S[1::2],
          "logits": logits}


def sizes(now: dict, init: dict) -> tuple[dict, dict]:
  """({name: mean |x|}, {name: mean |x - x_0|}): the activations' size and their change since init."""
  return ({k: _mean_abs(v) for k, v in now.items()},
          {k: _mean_abs(v.astype(jnp.float32) - init[k].astype(jnp.float32)) for k, v in now.items()})


def updates(cfg, old, new) -> dict:
  """Mean |coordinate| of the update of each role's params (every leaf of the role pooled)."""
  roles = residual.get(cfg.model.residual).roles
  sums, counts = {}, {}
  paths = jax.tree_util.tree_flatten_with_path(old)[0]
  for (path, a), b in zip(paths, jax.tree.leaves(new)):
    r = param.role(path, roles)
    sums[r] = sums.get(r, 0.0) + jnp.sum(jnp.abs(b - a))
    counts[r] = counts.get(r, 0) + a.size
  return {r: sums[r] / counts[r] for r in sums}


def measure(cfg, batches: list[dict]) -> dict:
  """{"act": {name: [step 0..N]}, "delta": {name: [step 0..N]} (the change since init), "update": {role: [step
  1..N]}, "loss": [step 1..N]} for N = len(batches) steps of cfg's own optimizer from cfg's init (seed
  `cfg.seed`), the activations on the first batch."""
  mcfg, tx = configlib.model_config(cfg), optim.make(cfg)
  state = jax.jit(lambda: flax.linen.unbox(step.init_state(cfg, mcfg, tx, jax.random.key(cfg.seed),
                                                           batches[0]["inputs"].shape[1])))()
  train = jax.jit(functools.partial(step.train_step, cfg=cfg, mcfg=mcfg, tx=tx))
  act = jax.jit(functools.partial(activations, mcfg))
  upd = jax.jit(functools.partial(updates, cfg))
  probe = batches[0]["inputs"]
  init = act(state["params"], probe)
  measure_sizes = jax.jit(lambda params: sizes(act(params, probe), init))
  out = {"act": {k: [] for k in ACTIVATIONS}, "delta": {k: [] for k in ACTIVATIONS}, "update": {}, "loss": []}

  def record(params):
    a, d = measure_sizes(params)
    for k in ACTIVATIONS:
      out["act"][k].append(float(a[k]))
      out["delta"][k].append(float(d[k]))
  record(state["params"])
  for batch in batches:
    old = state["params"]
    state, metrics = train(state, batch)
    out["loss"].append(float(metrics["loss"]))
    record(state["params"])
    for k, v in upd(old, state["params"]).items():
      out["update"].setdefault(k, []).append(float(v))
  return out


def check(cfg, ladder: Ladder, steps: int, batch: int, seq_len: int, log=None) -> dict:
  """One placement and parametrization (cfg's) over both axes of the ladder (an empty one is skipped): {"width": {w:
  measure}, "depth": {L: measure}, settings}. JSON-ready."""
  batches = corpus_batches(steps, batch, seq_len)
  base_w = (ladder.widths[0] if ladder.widths else 0, ladder.width_depth)
  base_d = (ladder.depth_width, ladder.depths[0] if ladder.depths else 0)
  out = {"residual": cfg.model.residual, "param": cfg.model.param, "lr": cfg.train.lr, "steps": steps,
         "batch": batch, "seq_len": seq_len, "ladder": dataclasses.asdict(ladder), "width": {}, "depth": {}}
  for axis, rungs, shape_of, base in (("width", ladder.widths, lambda w: (w, ladder.width_depth), base_w),
                                      ("depth", ladder.depths, lambda d: (ladder.depth_width, d), base_d)):
    for r in rungs:
      if log:
        log(f"{cfg.model.residual} {cfg.model.param}: {axis} {r}")
      out[axis][str(r)] = measure(shaped(cfg, *shape_of(r), ladder, base), batches)
  return out


def spread(result: dict, axis: str, step: int, kinds=("act", "delta", "update")) -> dict:
  """Per quantity (act/NAME, delta/NAME, update/ROLE), max / min over the axis's rungs of its size at `step`
  (activations: after that many steps; updates: the step-th update). 1 is perfectly flat."""
  rungs = list(result[axis].values())
  out = {}
  for kind, index in ((k, step - 1 if k == "update" else step) for k in kinds):
    for name in rungs[0][kind]:
      vals = [r[kind][name][index] for r in rungs]
      if min(vals) > 0:
        out[f"{kind}/{name}"] = max(vals) / min(vals)
  return out


def log_stderr(msg: str) -> None:
  print(msg, file=sys.stderr, flush=True)


def table(results: list[dict]) -> str:
  """Markdown: per placement and parametrization, over each axis, the largest spread of an activation or of its
  change since init at the last step (which quantity), and the stream's. The page's table (docs/transfer_checks.md)."""
  lines = ["| placement | param | over width: largest | stream | over depth: largest | stream |",
           "|---|---|---|---|---|---|"]
  for res in results:
    cells = []
    for axis in ("width", "depth"):
      s = spread(res, axis, res["steps"], ("act", "delta"))
      worst = max(s, key=s.get)
      cells += [f"{s[worst]:.2f}x ({worst})", f"{s['act/stream']:.2f}x"]
    lines.append(f"| `{res['residual']}` | `{res['param']}` | " + " | ".join(cells) + " |")
  return "\n".join(lines)
