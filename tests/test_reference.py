"""The model against an independent float64 NumPy reference (tests/np_reference.py), for every registered variant.

For each case (a variant at a tiny config), the params are drawn by the model's init and then perturbed on every
leaf with non-symmetric noise, so that a transposed mixing matrix, a per-stream norm in place of a flattened one, a
gate on the wrong tensor etc. change the function. Compared:
- logits of the jitted float32 model vs the reference, and the loss of `resnorm.step.step.make_loss_fn` vs the
  reference's masked mean cross-entropy, on a batch with a partly and a fully padded row;
- the model's jax.grad of that loss vs central finite differences of the float64 reference loss, on the entry
  of largest gradient and one random entry of a few leaves (attention q, MLP wi, embedding, a norm scale, and
  every param of the variant's own).

Tolerances. Logits: |model - ref| <= 1e-4 * max|ref| (float32 rounding through a few layers is measured at
<= 7e-7 relative; a planted bug moves logits by 1e-3..1e0 relative). Loss: 1e-5 relative (measured ~1e-7).
Gradients: |g - fd| <= 2e-3 * |fd| + 1e-3 * max|g of the leaf| + 1e-7 (measured: up to 4e-5 relative, in mHC through
the float32 Sinkhorn; the float64 central difference with h = 1e-5 is good to ~1e-9). The 1e-7 floor is for gradients
that are 0 exactly, such as the last sublayer's H_res of mHC-lite (its rows and columns sum to 1, so the final sum of
the streams cannot see it), which come back from float32 as ~1e-8.

The placements admin, resi_dual, hybrid_norm, denseformer, ngpt and mhc_lite have their reference forward in
tests/np_reference_placements.py; Admin's profiled init is checked against its reference profiling pass here.
"""
import functools
import zlib

import flax
import jax
import numpy as np
import pytest

import np_reference as ref
import np_reference_placements
from conftest import tiny_config
from reference_mutants import MUTANTS
from resnorm.config import configlib
from resnorm.model import residual
from resnorm.step import step
from resnorm.model.model import LM

VARIANTS = sorted({v.name for v in residual.REGISTRY.values()})
B, T = 3, 12  # row 0 unpadded, row 1 partly padded, row 2 fully padded
LOGIT_TOL, LOSS_TOL, GRAD_RTOL, GRAD_ATOL, GRAD_FLOOR = 1e-4, 1e-5, 2e-3, 1e-3, 1e-7

# Per variant: (case id, num_layers, config overrides). Between them: rope and learned positions, layernorm and
# rmsnorm, a tied head, HC dynamic and static at n = 1, 2, 4 (and without tanh), mHC at 2 and 20 iterations.
# `nofinal` (model.final_norm=False): the multi-stream variants' sum over the streams reaches the head unnormalized,
# so a mean in its place (which the final norm would cancel) is seen.
CASES = {
    "post_norm": [("learned-ln", 2, {"model.pos": "learned"}),
                  ("dyt-bias-3l", 3, {"model.norm": "dyt", "model.dyt.bias": True})],
    "pre_norm": [("rope-rms-tied", 2, {"model.norm": "rmsnorm", "model.tie_embed": True}),
                 ("dyt", 2, {"model.norm": "dyt", "model.dyt.alpha_attn": 0.8, "model.dyt.alpha_ffn": 0.2}),
                 ("derf", 2, {"model.norm": "derf", "model.derf.alpha_attn": 0.8, "model.derf.alpha_ffn": 0.4})],
    "peri_norm": [("rope-ln", 2, {})],
    "deepnorm": [("rope-rms-3l", 3, {"model.norm": "rmsnorm"})],
    "rezero": [("learned", 2, {"model.pos": "learned"})],
    # DDL: the code's value (from the raw stream, with a bias) and the paper's (linear in the normed input)
    "ddl": [("code-ln", 2, {}), ("paper-rms-learned", 2, {"model.ddl.v": "paper", "model.norm": "rmsnorm",
                                                          "model.pos": "learned"})],
    # Keel: alpha = 2L = 6 with v2's first sublayers; v1's with a set alpha; every sublayer Keel's
    "keel": [("v2-rms-3l", 3, {"model.norm": "rmsnorm"}),
             ("v1-alpha3-ln", 2, {"model.keel.first": "v1", "model.keel.alpha": 3.0}),
             ("none-learned", 2, {"model.keel.first": "none", "model.pos": "learned"})],
    "ln_scaling": [("rope-ln-3l", 3, {})],
    "mix_ln": [("rope-rms-1post-2pre", 3, {"model.norm": "rmsnorm", "model.mix_ln.post_fraction": 0.4})],
    "hc": [("dyn-n4-ln", 2, {"model.hc.n": 4}),
           ("static-n4-rms-learned", 2, {"model.hc.n": 4, "model.hc.dynamic": False, "model.norm": "rmsnorm",
                                         "model.pos": "learned"}),
           ("dyn-n1-rms", 2, {"model.hc.n": 1, "model.norm": "rmsnorm"}),
           ("dyn-notanh-n2-nofinal", 2, {"model.hc.n": 2, "model.hc.tanh": False, "model.final_norm": False}),
           ("dyn-n2-dyt", 2, {"model.hc.n": 2, "model.norm": "dyt"}),
           ("dyn-n2-derf-nobias", 2, {"model.hc.n": 2, "model.norm": "derf", "model.derf.bias": False})],
    # Frac-Connections: fractions of d/m (d 32: m 4 of 8 features, m 2 of 16), static and dynamic, m = 1 under DyT
    "frac_hc": [("dyn-m4-ln", 2, {"model.frac_hc.m": 4}),
                ("static-m2-rms-learned", 2, {"model.frac_hc.m": 2, "model.frac_hc.dynamic": False,
                                              "model.norm": "rmsnorm", "model.pos": "learned"}),
                ("dyn-m1-notanh-dyt", 2, {"model.frac_hc.m": 1, "model.frac_hc.tanh": False, "model.norm": "dyt"})],
    # it2: few iterations, so the column / row order of the Sinkhorn shows in the logits. small-embed: a stream RMS
    # of ~1e-3, where the coefficient RMSNorm's eps (mhc.eps = 1e-20, not norm_eps) matters.
    "mhc": [("n4-it2-ln", 2, {"model.mhc.n": 4, "model.mhc.sinkhorn_iters": 2}),
            ("n3-it20-rms-learned-small-embed-nofinal", 2, {"model.mhc.n": 3, "model.mhc.sinkhorn_iters": 20,
                                                            "model.norm": "rmsnorm", "model.pos": "learned",
                                                            "model.final_norm": False,
                                                            "_shrink": ("embed", "pos_embed")}),
            ("n2-dyt", 2, {"model.mhc.n": 2, "model.norm": "dyt"})],
    # KromHC: n 4 (two factors: their order and the bit order show), n 2 under RMSNorm, n 8 (three) without the final
    # norm; b_res redrawn so the factors sit far from the identity
    "kromhc": [("n4-ln", 2, {"model.kromhc.n": 4, "_redraw": {"b_res": 2.0}}),
               ("n2-rms-learned", 2, {"model.kromhc.n": 2, "model.norm": "rmsnorm", "model.pos": "learned"}),
               ("n8-nofinal", 2, {"model.kromhc.n": 8, "model.final_norm": False, "_redraw": {"b_res": 2.0}})],
    # the placements of tests/np_reference_placements.py; HybridNorm* exercises both of its segments
    "admin": [("rms-learned-3l", 3, {"model.norm": "rmsnorm", "model.pos": "learned"})],
    "resi_dual": [("rope-ln", 2, {})],
    "hybrid_norm": [("star-rms-3l", 3, {"model.hybrid_norm.first_pre_norm": True, "model.norm": "rmsnorm"}),
                    ("all-ln", 2, {"model.hybrid_norm.qkv_norm": "all"}),
                    ("dyt-head", 2, {"model.norm": "dyt"})],
    "denseformer": [("dense-3l", 3, {})],
    # Full: 6 sources by the last sublayer; Block: N = 3 over 6 sublayers (partial sums read), N = 2 under RMSNorm
    "attn_res": [("full-3l", 3, {})],
    "attn_res_block": [("n3-3l", 3, {"model.attn_res.num_blocks": 3}),
                       ("n2-rms-learned", 2, {"model.attn_res.num_blocks": 2, "model.norm": "rmsnorm",
                                              "model.pos": "learned"})],
    # Delta AttnRes: Full over 6 sublayers, and under DyT (no norm cancels a scale of h); Block with N = 2 of 3
    # sublayers (the MLP of layer 1 starts block 2, so it reads the block attention completed) and N = 3 of 2 under
    # RMSNorm (each block's attention reads the block before)
    "delta_attn_res": [("full-3l", 3, {}), ("full-dyt", 2, {"model.norm": "dyt"})],   # DyT sees h_0 = x_0 exactly
    "delta_attn_res_block": [("n2-3l", 3, {"model.attn_res.num_blocks": 2}),
                             ("n3-rms-learned-3l", 3, {"model.attn_res.num_blocks": 3, "model.norm": "rmsnorm",
                                                       "model.pos": "learned"})],
    # LAuReL: all three forms, PA reaching 2 sublayers back; RW off with rank 1 and no PA. Value residual: learned
    # lambdas over 3 layers (2 mixing layers), fixed 1/2 (ResFormer) under RMSNorm
    "laurel": [("rw-lr4-pa3-3l", 3, {}),
               ("rw1-lr2-pa2", 2, {"model.laurel.rw_scale": 1.0, "model.laurel.rank": 2, "model.laurel.pa_k": 2}),
               ("nrw-lr1-rms-learned", 2, {"model.laurel.rw": False, "model.laurel.rank": 1, "model.laurel.pa_k": 1,
                                           "model.norm": "rmsnorm", "model.pos": "learned"})],
    "value_residual": [("learned-3l", 3, {}),
                       ("fixed-rms", 2, {"model.value_residual.learned": False, "model.norm": "rmsnorm"})],
    # MUDDFormer: 3 blocks (DA_1 over 2 sources, DA_2 over 3, the head's over 4), and 2 under RMSNorm with learned
    # positions; its w2 (zero at init) gets the matrices' relative noise, so the dynamic weights are far from 0
    "mudd": [("ln-3l", 3, {}), ("rms-learned", 2, {"model.norm": "rmsnorm", "model.pos": "learned"})],
    "ngpt": [("rope", 2, {})],
    # the speedrun scalars: nanochat's (backout after block 1 of 3, the embedding normalized), modded-nanogpt's
    # backout (after block round(2L/3) = 2 of 3), identity (no embedding norm) under RMSNorm with learned positions
    "resid_lambdas": [("nanochat-3l", 3, {}), ("backout-3l", 3, {"model.resid_lambdas.preset": "backout"}),
                      ("identity-rms-learned", 2, {"model.resid_lambdas.preset": "identity", "model.norm": "rmsnorm",
                                                   "model.pos": "learned"})],
    # b_res redrawn N(0, 3^2) (not added to the init's 0 / -8): the weight sits on a few permutations, most of them
    # not their own inverse, so mixing with H x instead of the authors' H^T x moves the logits far past tolerance.
    "mhc_lite": [("n4-learned-nofinal", 2, {"model.pos": "learned", "model.final_norm": False,
                                            "_redraw": {"b_res": 3.0}}),
                 ("n3-direct", 2, {"model.mhc_lite.n": 3, "model.mhc_lite.mix": "direct", "_redraw": {"b_res": 3.0}})],
}
# A variant without a case still gets a (failing) test, so a new registry entry cannot go unchecked. Each variant's
# first case runs in `make test`; its further cases (other norms, widths and settings) in `make test-integration`.
PARAMS = [pytest.param(name, cid, id=f"{name}-{cid}", marks=pytest.mark.integration if k else ())
          for name in VARIANTS for k, cid in enumerate([c[0] for c in CASES.get(name, [])] or [None])]

# Matrices get noise relative to their size (zero-initialized ones: as if of unit-RMS inputs, 0.5 / sqrt(D));
# mHC's b_res N(0, 1), so the Sinkhorn is far from converged after a few iterations; every other leaf (norm scales
# and biases, gates, static alpha / beta, b_pre, b_post) additive N(0, 0.3^2). `shrink`: leaves scaled by 1e-3;
# `redraw` {name: std}: leaves replaced by N(0, std^2).
WEIGHTS = {"embed", "pos_embed", "head", "q", "k", "v", "o", "wi", "wo", "phi", "w_alpha", "w_beta", "w1", "w2",
           "down", "up", "w_v"}


def _perturb(params, d_model, rng, shrink=(), redraw=None):
  def noise(path, a):
    a, name = np.asarray(a, np.float64), path[-1].key
    if name in (redraw or {}):
      return (redraw[name] * rng.standard_normal(a.shape)).astype(np.float32)
    if name in WEIGHTS:
      rms = float(np.sqrt(np.mean(a ** 2)))
      std = 0.5 * rms if rms > 0 else 0.5 / np.sqrt(d_model)
    else:
      std = 1.0 if name == "b_res" else 0.3
    a = a + std * rng.standard_normal(a.shape)
    return (a * (1e-3 if name in shrink else 1.0)).astype(np.float32)
  return jax.tree_util.tree_map_with_path(noise, params)


def _batch(rng):
  tokens = rng.integers(0, 256, (B, T)).astype(np.int32)
  targets = rng.integers(0, 256, (B, T)).astype(np.int32)
  mask = np.ones((B, T), np.float32)
  mask[1, 7:] = 0.0
  mask[2] = 0.0
  targets[mask == 0] = 257  # PAD
  return {"inputs": tokens, "targets": targets, "mask": mask}


@functools.lru_cache(maxsize=None)
def _case(name, cid):
  """(mcfg, perturbed params as float64, batch, model logits, model loss, model grads), one compile per case; the
  grads (compiled only when read: most cases check the forward alone) are a callable's."""
  assert cid is not None, f"variant {name!r} has no case in tests/test_reference.py CASES"
  layers, over = next((l, o) for c, l, o in CASES[name] if c == cid)
  shrink, redraw = over.get("_shrink", ()), over.get("_redraw")
  mcfg = configlib.model_config(tiny_config(name, layers, **{k: v for k, v in over.items() if k[0] != "_"}))
  rng = np.random.default_rng(zlib.crc32(f"{name}-{cid}".encode()))
  batch = _batch(rng)
  params = flax.linen.unbox(jax.jit(LM(mcfg).init)(jax.random.key(0), batch["inputs"][:1])["params"])
  params = _perturb(jax.device_get(params), mcfg.d_model, rng, shrink, redraw)
  loss_fn = step.make_loss_fn(mcfg)

  @jax.jit
  def run(p, batch):
    return LM(mcfg).apply({"params": p}, batch["inputs"])[0], loss_fn(p, batch)

  logits, loss = jax.device_get(run(params, batch))
  p64 = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
  grads = functools.cache(lambda: jax.device_get(jax.jit(jax.grad(loss_fn))(params, batch)))
  return mcfg, p64, batch, np.asarray(logits, np.float64), float(loss), grads


def _flat(tree):
  return flax.traverse_util.flatten_dict(tree)


def _replace(tree, path, value):
  if len(path) == 1:
    return {**tree, path[0]: value}
  return {**tree, path[0]: _replace(tree[path[0]], path[1:], value)}


def _grad_leaves(params):
  """Attention q of the first segment, MLP wi of the last, the embedding, a norm scale, every variant param."""
  paths = list(_flat(params))
  segs = sorted({p[0] for p in paths if p[0].startswith("blocks")})
  want = [(segs[0], "attn", "q"), (segs[-1], "mlp", "wi"), ("embed",)]
  want += [p for p in [("final_norm", "scale"), (segs[0], "attn_norm", "scale")] if p in paths][:1]
  want += [p for p in [(segs[0], "attn_norm", "alpha"), ("final_norm", "alpha")] if p in paths][:1]  # DyT's
  own = ("_res", "qkv", "hidden", "after_block", "logit_scale", "dual_norm")  # the variant's params, wherever they live
  want += [p for p in paths if any(part.endswith(own) for part in p)]
  return want


@pytest.mark.parametrize("name,cid", PARAMS)
def test_logits_and_loss_match_reference(name, cid):
  mcfg, params, batch, logits, loss, _ = _case(name, cid)
  want = ref.forward(params, mcfg, batch["inputs"])
  scale = np.abs(want).max()
  np.testing.assert_allclose(logits, want, rtol=0, atol=LOGIT_TOL * scale, err_msg=f"{name}-{cid} logits")
  want_loss = ref.cross_entropy(want, batch["targets"], batch["mask"])
  np.testing.assert_allclose(loss, want_loss, rtol=LOSS_TOL, err_msg=f"{name}-{cid} loss")


# The gradient of a placement autodiff differentiates end to end follows from its forward (checked above for every
# variant in `make test`); the ones with a backward of their own (the depth store's, the kernels' Sinkhorn and stream
# mixing) keep their first case in `make test`, the others run in `make test-integration`.
# (delta_attn_res_block: attn_res_block's store backward and delta_attn_res's read; delta_attn_res: its stream's
# gradient routed along a carry, checked equal to the plain sum's in test_depth_store)
OWN_BACKWARD = ("pre_norm", "hc", "mhc", "attn_res", "attn_res_block", "mudd", "denseformer", "laurel")
GRAD_PARAMS = [pytest.param(*p.values, id=p.id, marks=p.marks or (() if p.values[0] in OWN_BACKWARD else
                                                                  pytest.mark.integration)) for p in PARAMS]


@pytest.mark.parametrize("name,cid", GRAD_PARAMS)
def test_grads_match_finite_differences(name, cid):
  mcfg, params, batch, _, _, grads = _case(name, cid)
  grads, rng, h = _flat(grads()), np.random.default_rng(1), 1e-5
  ref_loss = lambda p: ref.loss(p, mcfg, batch["inputs"], batch["targets"], batch["mask"])
  bad = []
  for path in _grad_leaves(params):
    a, g = _flat(params)[path], np.asarray(grads[path], np.float64)
    gmax = np.abs(g).max()
    assert gmax > 0, f"{'/'.join(path)}: zero gradient"
    for idx in {np.unravel_index(np.argmax(np.abs(g)), g.shape), tuple(rng.integers(0, s) for s in g.shape)}:
      def at(delta):
        b = a.copy()
        b[idx] += delta
        return ref_loss(_replace(params, path, b))
      fd = (at(h) - at(-h)) / (2 * h)
      if abs(g[idx] - fd) > GRAD_RTOL * abs(fd) + GRAD_ATOL * gmax + GRAD_FLOOR:
        bad.append(f"{'/'.join(path)}{list(map(int, idx))}: model {g[idx]:.6g}, finite difference {fd:.6g}")
  assert not bad, f"{name}-{cid}: " + "; ".join(bad)


def test_registry_and_reference_agree():
  """Every registered name (aliases included) has a reference for the same variant, and the reference and CASES
  name no variant the registry lacks."""
  for key, variant in residual.REGISTRY.items():
    assert key in ref.NAMES and ref.canonical(key) == variant.name, key
  assert set(ref.VARIANTS) == set(VARIANTS) and set(CASES) <= set(VARIANTS)


def test_alias_and_plain_dict_config():
  """`sandwich` through the reference, with the config as a plain dict, gives peri_norm's model logits."""
  mcfg, params, batch, logits, _, _ = _case("peri_norm", CASES["peri_norm"][0][0])
  cfg = {**mcfg.to_dict(), "residual": "sandwich"}
  want = ref.forward(params, {"model": cfg}, batch["inputs"])
  np.testing.assert_allclose(logits, want, rtol=0, atol=LOGIT_TOL * np.abs(want).max())


def test_reference_rejects_a_param_it_does_not_use():
  mcfg, params, batch, _, _, _ = _case("mhc", CASES["mhc"][0][0])
  extra = _replace(params, ("blocks", "attn_res", "new_gate"), np.zeros((mcfg.num_layers,)))
  with pytest.raises(ref.UnusedParams, match="blocks/attn_res/new_gate"):
    ref.forward(extra, mcfg, batch["inputs"])


def test_admin_profiled_omegas_match_the_reference_pass_and_are_deterministic():
  """step.init_state's omegas = the reference profiling pass on LM.init's params (omega = 1) and the same batch of
  random bytes; the same seed gives the same omegas."""
  import np_reference_placements
  from resnorm.step import optim
  from resnorm.model.residual import admin
  cfg = tiny_config("admin", 3, **{"model.admin.profile_batch": 2})
  mcfg, tx = configlib.model_config(cfg), optim.make(cfg)
  init = jax.jit(lambda r: flax.linen.unbox(step.init_state(cfg, mcfg, tx, r, 16))["params"])
  params = jax.device_get(init(jax.random.key(3)))
  p_rng = jax.random.split(jax.random.key(3))[0]  # init_state's params key
  base = jax.device_get(flax.linen.unbox(jax.jit(LM(mcfg).init)(p_rng, np.zeros((1, 16), np.int32))["params"]))
  tokens = np.asarray(admin.profile_tokens(p_rng, 2, 16))
  want = np_reference_placements.admin_profile(jax.tree.map(lambda a: np.asarray(a, np.float64), base), mcfg, tokens)
  got = np.stack([params["blocks"]["attn_res"]["omega"][:, 0], params["blocks"]["mlp_res"]["omega"][:, 0]], 1)
  np.testing.assert_allclose(got, want, rtol=1e-5)
  assert want[0, 0] == 1.0 and np.all(np.diff(want.reshape(-1)) > 0)  # the variance accumulates with depth
  np.testing.assert_array_equal(jax.device_get(init(jax.random.key(3))["blocks"]["mlp_res"]["omega"]),
                                params["blocks"]["mlp_res"]["omega"])


def test_hybrid_norm_default_is_the_authors_per_head_qkv_norm():
  """The default config's QKV norms are the authors' (BryceZhuo/HybridNorm): per head, one affine of size K shared
  by the heads, before RoPE. The reference is told the form, so a default that drifts from it fails here even when
  the config's own form is right."""
  import np_reference_placements
  mcfg, params, batch, logits, _, _ = _case("hybrid_norm", "star-rms-3l")
  assert "model.hybrid_norm.qkv_norm" not in CASES["hybrid_norm"][0][2]
  want = np_reference_placements.forward(params, mcfg, batch["inputs"], hybrid_form="head")
  np.testing.assert_allclose(logits, want, rtol=0, atol=LOGIT_TOL * np.abs(want).max())
  # the other form at the same params (scales of size K tiled over the heads) is far off: the test can tell them apart
  tiled = jax.tree_util.tree_map_with_path(
      lambda path, a: np.tile(a, mcfg.num_heads) if "qkv" in str(path) else a, params)
  other = np_reference_placements.forward(tiled, mcfg, batch["inputs"], hybrid_form="all")
  assert np.abs(other - want).max() > 100 * LOGIT_TOL * np.abs(want).max()


@pytest.mark.parametrize("mutant", [pytest.param(m, marks=pytest.mark.integration if k else ())
                                    for k, m in enumerate(MUTANTS)])
def test_the_tolerance_catches_each_mutant_of_the_2025_references(mutant, monkeypatch):
  """The unmutated reference passes (the 'correct' control), each mutant is off by far more than LOGIT_TOL."""
  name, cid, what, fn = MUTANTS[mutant]
  mcfg, params, batch, logits, _, _ = _case(name, cid)
  want = ref.forward(params, mcfg, batch["inputs"])
  tol = LOGIT_TOL * np.abs(want).max()
  assert np.abs(logits - want).max() <= tol
  if what == "norm":
    monkeypatch.setattr(ref, "norm", fn)
  elif what.startswith("placements."):
    monkeypatch.setattr(np_reference_placements, what.split(".", 1)[1], fn)
  else:
    monkeypatch.setitem(ref.VARIANTS, what, (fn, *ref.VARIANTS[what][1:]))
  bad = ref.forward(params, mcfg, batch["inputs"])
  assert np.abs(logits - bad).max() > 100 * tol, (mutant, np.abs(logits - bad).max(), tol)
