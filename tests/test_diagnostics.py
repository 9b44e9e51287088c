"""Diagnostics against NumPy references on a tiny model; gains; spikes."""
import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import init_params, tiny_config
from resnorm.config import configlib
from resnorm.model import diagnostics
from resnorm.step import step


def _batch(b=2, t=16):
  tok = jax.random.randint(jax.random.key(3), (b, t + 1), 0, 256)
  return {"inputs": tok[:, :-1], "targets": tok[:, 1:], "mask": jnp.ones((b, t))}


@pytest.fixture(scope="module", params=["pre_norm", "hc"])
def diag(request):
  cfg = tiny_config(request.param, 3)
  mcfg, params, _ = init_params(cfg)
  batch = _batch()
  out = jax.device_get(step.make_diag_fn(cfg, mcfg)(params, batch))
  from resnorm.model.model import LM
  _, taps = jax.jit(lambda p, x: LM(mcfg, collect=True).apply({"params": p}, x))(params, batch["inputs"])
  return cfg, mcfg, params, batch, out, jax.device_get(taps)


def test_taps_are_depth_ordered_sublayer_inputs(diag):
  cfg, _, _, _, out, taps = diag
  assert taps["u"].shape == (6, 2, 16, 32)
  u = np.asarray(taps["u"], np.float64)
  np.testing.assert_allclose(out["stats"]["act_rms"], np.sqrt((u ** 2).mean(axis=(1, 2, 3))), rtol=1e-5)
  cos = (u[:-1] * u[1:]).sum(-1) / (np.linalg.norm(u[:-1], axis=-1) * np.linalg.norm(u[1:], axis=-1))
  cos = cos.reshape(5, -1)
  np.testing.assert_allclose(out["stats"]["cos_next_median"], np.median(cos, axis=1), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(out["stats"]["cos_next_p05"], np.percentile(cos, 5, axis=1), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(out["stats"]["cos_next_p95"], np.percentile(cos, 95, axis=1), rtol=1e-5, atol=1e-6)
  f = np.asarray(taps["f"], np.float64)
  ratio = (np.linalg.norm(f, axis=-1) / np.linalg.norm(u, axis=-1)).mean(axis=(1, 2))
  np.testing.assert_allclose(out["stats"]["update_ratio"], ratio, rtol=1e-5)
  last = u[:, :, -1] / np.linalg.norm(u[:, :, -1], axis=-1, keepdims=True)     # [S, B, D], the last token
  ang = np.arccos(np.clip(np.einsum("sbd,rbd->srb", last, last), -1, 1)).mean(-1) / np.pi
  np.testing.assert_allclose(out["angular"], ang, atol=2e-3)  # arccos near 1 amplifies float32 rounding
  assert np.abs(ang - np.diag(np.diag(ang))).max() > 0.01
  if "mix" in taps:  # hc: row / column sums of H_res off 1, the worst token
    mix = np.asarray(taps["mix"], np.float64)
    np.testing.assert_allclose(out["stats"]["mix_row_err"], np.abs(mix.sum(-1) - 1).max(axis=(1, 2, 3)), atol=1e-6)
    np.testing.assert_allclose(out["stats"]["mix_col_err"], np.abs(mix.sum(-2) - 1).max(axis=(1, 2, 3)), atol=1e-6)


def test_grad_norm_of_stacked_axis_equals_per_layer_norms(diag):
  cfg, mcfg, params, batch, out, _ = diag
  grads = jax.grad(step.make_loss_fn(mcfg))(params, batch)
  flat = flax.traverse_util.flatten_dict(grads["blocks"])
  for i in range(6):
    layer, kind = divmod(i, 2)
    prefix = ("attn", "mlp")[kind]
    sq = sum(float(np.sum(np.square(np.asarray(v[layer], np.float64)))) for k, v in flat.items()
             if k[0].split("_")[0] == prefix)
    np.testing.assert_allclose(np.sqrt(out["grad_sumsq"][i]), np.sqrt(sq), rtol=1e-5)


def test_report_schema(diag):
  cfg, _, _, _, out, _ = diag
  res = diagnostics.summarize(cfg, out, full=True)
  rows = res["sublayers"]
  assert [r["index"] for r in rows] == list(range(6)) and [r["kind"] for r in rows[:2]] == ["attn", "mlp"]
  assert rows[-1]["cos_next_median"] is None and rows[0]["cos_next_median"] is not None
  assert [r["layer"] for r in rows] == [0, 0, 1, 1, 2, 2]
  for r in rows:
    assert r["grad_norm"] == pytest.approx(float(out["grad_sumsq"][r["index"]]) ** 0.5, rel=1e-6)
    assert r["act_rms"] == pytest.approx(float(out["stats"]["act_rms"][r["index"]]), rel=1e-6)
  assert np.array(res["angular_distance"]).shape == (6, 6)
  np.testing.assert_allclose(np.diag(np.array(res["angular_distance"])), 0.0, atol=2e-3)
  if cfg.model.residual == "hc":
    assert rows[3]["gain_forward"] == pytest.approx(1.0) and np.array(res["mixing"]).shape == (6, 4, 4)


def test_cosine_of_identical_inputs_is_one():
  u = jnp.tile(jax.random.normal(jax.random.key(0), (1, 2, 3, 8)), (4, 1, 1, 1))
  stats = diagnostics.tap_stats({"u": u, "f": u})
  np.testing.assert_allclose(stats["cos_next_median"], 1.0, rtol=1e-6)
  np.testing.assert_allclose(stats["cos_next_p05"], 1.0, rtol=1e-6)


def test_mix_errors_on_non_doubly_stochastic_matrices():
  """Row and column sums of H_res off 1, the worst token per sublayer, on random matrices whose row and column
  errors differ (at init HC's A_r = I and mHC's Sinkhorn output have both errors ~0, so they cannot tell them apart)."""
  rng = np.random.default_rng(0)
  mix = rng.uniform(0, 0.6, (3, 2, 4, 3, 3))
  u = rng.normal(size=(3, 2, 4, 8))
  stats = diagnostics.tap_stats({"u": jnp.asarray(u), "f": jnp.asarray(u), "mix": jnp.asarray(mix, jnp.float32)})
  row, col = np.abs(mix.sum(-1) - 1).max(axis=(1, 2, 3)), np.abs(mix.sum(-2) - 1).max(axis=(1, 2, 3))
  assert np.abs(row - col).min() > 0.01
  np.testing.assert_allclose(stats["mix_row_err"], row, rtol=1e-5)
  np.testing.assert_allclose(stats["mix_col_err"], col, rtol=1e-5)


def test_composite_gains_match_numpy():
  mix = jax.random.uniform(jax.random.key(0), (5, 2, 3, 3, 3)) + 0.2
  g = diagnostics.composite_gains(mix)
  m = np.asarray(mix, np.float64)
  for l in range(5):
    fwd = np.broadcast_to(np.eye(3), (2, 3, 3, 3)).copy()
    for i in range(l + 1):
      fwd = m[i] @ fwd
    bwd = np.broadcast_to(np.eye(3), (2, 3, 3, 3)).copy()
    for i in range(l, 5):
      bwd = m[i] @ bwd
    np.testing.assert_allclose(g["gain_forward"][l], np.abs(fwd.sum(-1)).max(-1).mean(), rtol=1e-5)
    np.testing.assert_allclose(g["gain_backward"][l], np.abs(bwd.sum(-2)).max(-1).mean(), rtol=1e-5)
  eye = jnp.broadcast_to(jnp.eye(3), (4, 1, 2, 3, 3))
  np.testing.assert_allclose(diagnostics.composite_gains(eye)["gain_forward"], 1.0)


def test_spike_detector():
  det = diagnostics.SpikeDetector(k=6, warmup=20)
  rng = np.random.default_rng(0)
  losses = list(3.0 + 0.01 * rng.standard_normal(60))
  losses[40] = 4.0
  flags = [det.update(i, l) for i, l in enumerate(losses)]
  assert flags[40] and sum(flags) == 1 and det.events[0]["step"] == 40
  early = diagnostics.SpikeDetector(k=6, warmup=20)
  jumps = losses[:19] + [9.0]  # the 20th loss is still inside the warmup: never a spike
  assert not any(early.update(i, l) for i, l in enumerate(jumps)) and not early.events


def _np_ema(losses, decay=0.98):
  mean, var = losses[0], 0.0
  for x in losses[1:]:
    d = x - mean
    mean += (1 - decay) * d
    var = decay * (var + (1 - decay) * d * d)
  return mean, var ** 0.5


def test_spike_threshold_is_ema_plus_6_sigma():
  """A loss 5 sigma above the EMA of the losses before it is not a spike, 7 sigma is (sigma: EMA of the squared
  deviations, decay 0.98, computed here)."""
  losses = list(3.0 + 0.02 * np.random.default_rng(1).standard_normal(40))
  mean, sigma = _np_ema(losses)
  assert sigma > 5e-3  # well above the 1e-3 floor
  for k, spike in ((5.0, False), (7.0, True)):
    det = diagnostics.SpikeDetector()
    for i, l in enumerate(losses):
      assert not det.update(i, l)
    assert det.update(40, mean + k * sigma) == spike, (k, det.mean, mean, det.var ** 0.5, sigma)


def test_spike_detector_state_survives_a_resume():
  """state() -> JSON (the checkpoint's host item) -> load(): the resumed detector continues exactly."""
  import json
  losses = list(3.0 + 0.01 * np.random.default_rng(2).standard_normal(80))
  losses[30], losses[70] = 4.0, 5.0
  full = diagnostics.SpikeDetector()
  for i, l in enumerate(losses):
    full.update(i, l)
  first = diagnostics.SpikeDetector()
  for i, l in enumerate(losses[:50]):
    first.update(i, l)
  resumed = diagnostics.SpikeDetector()
  resumed.load(json.loads(json.dumps(first.state())))
  for i, l in enumerate(losses[50:], start=50):
    resumed.update(i, l)
  assert resumed.state() == full.state() and [e["step"] for e in full.events] == [30, 70]


def _train_tiny(name, steps=40, **over):
  """`steps` AdamW steps (lr 1e-2) on a learnable toy sequence; returns the trained params, config and a batch."""
  import flax
  from resnorm.step import optim
  cfg = tiny_config(name, 2, **{"train.warmup_steps": 0, "train.lr": 1e-2, "train.steps": steps, **over})
  mcfg, tx = configlib.model_config(cfg), optim.make(cfg)
  tok = jax.random.randint(jax.random.key(0), (steps, 4, 17), 0, 16)
  tok = tok.at[:, :, 1::2].set((tok[:, :, 0::2][:, :, :8] * 3 + 1) % 16)
  batches = {"inputs": tok[:, :, :-1], "targets": tok[:, :, 1:], "mask": jnp.ones((steps, 4, 16))}

  @jax.jit
  def train():
    state = flax.linen.unbox(step.init_state(cfg, mcfg, tx, jax.random.key(0), 16))
    state, _ = jax.lax.scan(lambda s, b: step.train_step(s, b, cfg=cfg, mcfg=mcfg, tx=tx), state, batches)
    return state["params"]
  return train(), cfg, mcfg, jax.tree.map(lambda a: a[0], batches)


@pytest.mark.integration  # trains mHC for its streams to separate: ~25 s
def test_mhc_streams_separate_in_training_at_the_default_init():
  """stream_spread: 0 at init (identical copies), grows under the identity-leaning default; the uniform (J/n) start
  stays collapsed (measured here: median 0.064 against 0.032 at 40 steps; hc reaches 0.32)."""
  spread = {}
  for init in ("default", "uniform"):
    params, cfg, mcfg, batch = _train_tiny("mhc", **({"model.mhc.init": init} if init == "uniform" else {}))
    out = jax.device_get(step.make_diag_fn(cfg, mcfg)(params, batch))
    s = np.asarray(out["stats"]["stream_spread"])
    assert s.shape == (4,) and s[0] == 0.0  # the first sublayer sees the embedding, copied n times
    spread[init] = float(np.median(s[1:]))
  assert spread["default"] > 0.045 and spread["default"] > 1.5 * spread["uniform"], spread


def test_stream_spread_formula():
  from resnorm.model.residual.base import stream_spread
  h = np.random.default_rng(0).normal(size=(2, 3, 4, 8))
  mean = h.mean(2)
  ref = np.mean(np.linalg.norm(h - mean[:, :, None], axis=-1), axis=-1) / np.linalg.norm(mean, axis=-1)
  np.testing.assert_allclose(stream_spread(jnp.asarray(h, jnp.float32)), ref, rtol=1e-5)


def test_depth_mixing_fits_the_sublayer_inputs_on_the_sources(diag):
  """The report's depth-mixing matrix and R^2 are the float64 least-squares fit of each sublayer's input u_l (the `u`
  tap) on the embedding and the earlier sublayers' outputs (`f`), each in its role: inputs and outputs swapped,
  the fit would regress outputs on inputs."""
  cfg, _, _, _, out, taps = diag
  res = diagnostics.summarize(cfg, out, full=False)
  src = np.concatenate([np.asarray(taps["embed"])[None], np.asarray(taps["f"])], 0).astype(np.float64)
  u = np.asarray(taps["u"], np.float64)
  m = np.array(res["depth_mixing"])
  for l in range(u.shape[0]):
    a = src[: l + 1].reshape(l + 1, -1).T
    coef, *_ = np.linalg.lstsq(a, u[l].reshape(-1), rcond=None)
    np.testing.assert_allclose(m[l, : l + 1], coef, atol=2e-3)
    resid = u[l].reshape(-1) - a @ coef
    assert res["sublayers"][l]["mixing_r2"] == pytest.approx(1 - resid @ resid / (u[l] ** 2).sum(), abs=1e-4)


@pytest.mark.parametrize("norm", ["dyt", "derf"])
def test_an_elementwise_norms_alpha_is_reported_per_sublayer(norm):
  """DyT and Derf runs report each sublayer's own norm alpha as `<norm>_alpha`, in depth order (attention, MLP, per
  layer), read back from params set to distinct values; other norms report none."""
  cfg = tiny_config("pre_norm", 2, **{"model.norm": norm})
  mcfg, params, _ = init_params(cfg)
  params = flax.core.unfreeze(params)
  want = {"attn_norm": [0.3, 0.7], "mlp_norm": [1.1, 1.9]}  # [layer 0, layer 1]
  for name, vals in want.items():
    params["blocks"][name]["alpha"] = jnp.asarray(vals, jnp.float32)
  rows = diagnostics.summarize(cfg, jax.device_get(step.make_diag_fn(cfg, mcfg)(params, _batch())), False)["sublayers"]
  assert [r.get(f"{norm}_alpha") for r in rows] == pytest.approx([0.3, 1.1, 0.7, 1.9])
  other = "derf" if norm == "dyt" else "dyt"
  assert all(f"{other}_alpha" not in r for r in rows)


def test_laurel_lr_ratio_is_each_tokens_low_rank_norm_over_its_own_stream_norm():
  """LAuReL's lr_ratio taps ||x_t A B|| / ||x_t|| at every token of every sublayer ([S, B, T]) and reports each
  sublayer's token mean. One token's embedding is 50x the others' and orthogonal to the first sublayer's A (its own
  ratio there 0): a ratio of norms over the whole batch is then near 0 at that sublayer, the per-token mean is not."""
  from resnorm.model.model import LM
  cfg = tiny_config("laurel", 2, **{"model.laurel.rank": 2, "model.laurel.pa_k": 1})
  mcfg, params, _ = init_params(cfg)
  blocks = dict(params["blocks"])
  for i, side in enumerate(("attn_res", "mlp_res")):   # B = 0 at init: every ratio would be 0
    blocks[side] = dict(blocks[side], up=jax.random.normal(jax.random.key(5 + i), blocks[side]["up"].shape))
  a = np.asarray(blocks["attn_res"]["down"][0], np.float64)
  v = np.asarray(jax.random.normal(jax.random.key(7), (32,)), np.float64)
  v -= a @ np.linalg.lstsq(a, v, rcond=None)[0]                                     # v A = 0
  big = 50 * float(jnp.linalg.norm(params["embed"][7])) * v / np.linalg.norm(v)
  params = {**params, "blocks": blocks, "embed": params["embed"].at[7].set(jnp.asarray(big, jnp.float32))}
  batch = _batch()
  batch["inputs"] = batch["inputs"].at[1, 5].set(7)
  _, taps = LM(mcfg, collect=True).apply({"params": params}, batch["inputs"])
  assert taps["lr_ratio"].shape == (4, 2, 16)
  stats = jax.device_get(step.make_diag_fn(cfg, mcfg)(params, batch))["stats"]
  f64 = lambda x: np.asarray(x, np.float64)
  u = f64(taps["u"])                                                               # each sublayer's input x
  ab = [f64(blocks[side]["down"][l]) @ f64(blocks[side]["up"][l]) for l in range(2) for side in ("attn_res", "mlp_res")]
  lr = np.stack([u[s] @ ab[s] for s in range(4)])
  per_token = np.linalg.norm(lr, axis=-1) / np.linalg.norm(u, axis=-1)            # [S, B, T]
  np.testing.assert_allclose(taps["lr_ratio"], per_token, rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(stats["lr_ratio"], per_token.mean(axis=(1, 2)), rtol=1e-4)
  whole = np.sqrt(np.sum(lr[0] ** 2) / np.sum(u[0] ** 2))                          # one norm over the batch
  assert per_token[0, 1, 5] < 1e-3 and whole < 0.3 * per_token[0].mean(), (whole, per_token[0].mean())

def test_laurel_and_mudd_learned_weights_are_the_papers_quantities():
  """LAuReL (a f + b (x + x A B + ...)): laurel_alpha is the weight on F(N(x)) and laurel_beta the one on the
  residual path; lr_ratio is ||x A B|| / ||x|| per token, then averaged (not a ratio of the means). MUDDFormer's
  dense entropy is of |A| normalized over the sources: the weights (+1, -1) have entropy log 2."""
  from resnorm.model.model import LM
  cfg = tiny_config("laurel", 2, **{"model.laurel.rw_scale": 2.0, "model.laurel.rank": 2})
  mcfg, params, _ = init_params(cfg)
  res = dict(params["blocks"]["attn_res"])
  res["rw_logits"] = jnp.broadcast_to(jnp.array([0.5, -0.3]), res["rw_logits"].shape)
  res["up"] = jax.random.normal(jax.random.key(1), res["up"].shape)
  params = {**params, "blocks": {**params["blocks"], "attn_res": res}}
  batch = _batch()
  batch["inputs"] = batch["inputs"].at[0].multiply(0).at[0, :8].set(7)  # tokens of very different sizes of x
  stats = jax.device_get(step.make_diag_fn(cfg, mcfg)(params, batch))["stats"]
  _, taps = LM(mcfg, collect=True).apply({"params": params}, batch["inputs"])
  e = np.exp([0.5, -0.3])
  assert stats["laurel_alpha"][0] == pytest.approx(2 * e[0] / e.sum(), rel=1e-5)
  assert stats["laurel_beta"][0] == pytest.approx(2 * e[1] / e.sum(), rel=1e-5)
  x = np.asarray(taps["u"][0], np.float64)                                         # sublayer 0's input [B, T, D]
  lr = x @ np.asarray(res["down"][0], np.float64) @ np.asarray(res["up"][0], np.float64)
  per_token = np.linalg.norm(lr, axis=-1) / np.linalg.norm(x, axis=-1)
  assert stats["lr_ratio"][0] == pytest.approx(per_token.mean(), rel=1e-4)
  assert abs(per_token.mean() - np.linalg.norm(lr, axis=-1).mean() / np.linalg.norm(x, axis=-1).mean()) > 1e-3
  dense = jnp.array([1.0, -1.0, 0.0, 0.0] * 4).reshape(1, 1, 1, 4, 4)
  ent = diagnostics.learned_weights({"dense": dense})
  assert float(ent["dense_entropy_q"][0]) == pytest.approx(np.log(2), rel=1e-5)
