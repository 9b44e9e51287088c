"""Residual variants: the equivalences and facts VARIANTS.md states, and that every param learns."""
import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import by_variant, init_and_apply, init_params, param_shapes, representative, tiny_config
from resnorm.config import configlib
from resnorm.model import flops, residual
from resnorm.step import optim, step
from resnorm.model.residual.classic import deepnorm_alpha_beta, mix_ln_split

VARIANTS = sorted({v.name for v in residual.REGISTRY.values()})


def _logits(cfg, seed=0):
  _, params, _, logits = init_and_apply(cfg, seed)
  return logits, params


@pytest.mark.parametrize("n,dynamic", [(1, False), pytest.param(2, True, marks=pytest.mark.integration),
                                       pytest.param(4, False, marks=pytest.mark.integration), (4, True)])
def test_hc_at_paper_init_equals_pre_norm(n, dynamic):
  ref, _ = _logits(tiny_config("pre_norm", 3))
  out, _ = _logits(tiny_config("hc", 3, **{"model.hc.n": n, "model.hc.dynamic": dynamic}))
  np.testing.assert_allclose(out, ref, rtol=1e-4, atol=2e-5)


def test_hc_static_width_connection_reads_stream_k_mod_n_at_init():
  """HC paper Eq. 14: sublayer k = 2l + {0: attn, 1: mlp} reads stream k mod n (A_m = e_{k mod n}), and A_r = I. At
  init the streams are identical copies, so the logits cannot see which stream a sublayer reads: only the params do."""
  n, layers = 4, 3
  _, params, _, _ = init_and_apply(tiny_config("hc", layers, **{"model.hc.n": n}))
  for which, offset in (("attn_res", 0), ("mlp_res", 1)):
    alpha = np.asarray(params["blocks"][which]["static_alpha"])      # [L, n, n+1] = [A_m | A_r]
    assert alpha.shape == (layers, n, n + 1)
    for layer in range(layers):
      want = np.zeros((n, n + 1))
      want[(2 * layer + offset) % n, 0] = 1.0
      want[:, 1:] = np.eye(n)
      np.testing.assert_array_equal(alpha[layer], want, err_msg=f"{which} layer {layer}")


@pytest.mark.parametrize("m,dynamic", [pytest.param(1, True, marks=pytest.mark.integration), pytest.param(2, False, marks=pytest.mark.integration),
                                       (4, True)])
def test_frac_hc_at_init_equals_pre_norm(m, dynamic):
  """Frac-Connections' identity-leaning init (A_m = A_r = I, B = 1, W = 0): every block is x + F(N(x))."""
  ref, _ = _logits(tiny_config("pre_norm", 3))
  out, _ = _logits(tiny_config("frac_hc", 3, **{"model.frac_hc.m": m, "model.frac_hc.dynamic": dynamic}))
  np.testing.assert_allclose(out, ref, rtol=1e-4, atol=2e-5)


def test_frac_hc_with_one_fraction_is_hc_with_one_stream():
  """m = 1 and n = 1: the same param tree, the same init, and the same function at params moved off the init."""
  from conftest import apply_fn
  hc_cfg, fc_cfg = tiny_config("hc", 2, **{"model.hc.n": 1}), tiny_config("frac_hc", 2, **{"model.frac_hc.m": 1})
  (hc_out, hc_p), (fc_out, fc_p) = _logits(hc_cfg), _logits(fc_cfg)
  assert jax.tree.map(np.shape, hc_p) == jax.tree.map(np.shape, fc_p)
  jax.tree.map(np.testing.assert_array_equal, hc_p, fc_p)
  np.testing.assert_allclose(fc_out, hc_out, rtol=1e-5, atol=1e-6)
  rng = np.random.default_rng(0)
  moved = jax.tree.map(lambda a: a + 0.3 * jnp.asarray(rng.standard_normal(np.shape(a)), jnp.float32), hc_p)
  tokens = jax.random.randint(jax.random.key(1), (2, 16), 0, 256)
  a = apply_fn(configlib.model_config(hc_cfg))(moved, tokens)
  b = apply_fn(configlib.model_config(fc_cfg))(moved, tokens)
  assert float(jnp.max(jnp.abs(a - hc_out))) > 1e-2  # the params really moved
  np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)


def test_mhc_identity_init_equals_pre_norm_exactly():
  """The default init (phi = 0, b_post = 0): streams identical, H_res rows sum to 1, H_pre x absorbed by the block
  norm, so the logits are Pre-Norm's up to the norms' eps."""
  ref, _ = _logits(tiny_config("pre_norm", 3))
  out, _ = _logits(tiny_config("mhc", 3))
  np.testing.assert_allclose(out, ref, rtol=1e-4, atol=2e-5)


def test_mhc_uniform_init_equals_pre_norm_without_input_term_and_is_close_with_random_phi():
  ref, _ = _logits(tiny_config("pre_norm", 3))
  out, _ = _logits(tiny_config("mhc", 3, **{"model.mhc.init": "uniform", "model.mhc.alpha_init": 0.0}))
  np.testing.assert_allclose(out, ref, rtol=1e-4, atol=2e-5)
  out, _ = _logits(tiny_config("mhc", 3, **{"model.mhc.init": "uniform"}))
  diff = float(jnp.max(jnp.abs(out - ref)))  # H_post deviates from 1 by O(a): measured < 0.05 here
  assert 2e-5 < diff < 0.05, diff


def test_mhc_identity_init_reads_one_stream_and_keeps_the_others():
  """H_res near I (mean diagonal >= 0.9 at n = 4) and H_pre one-hot-like, sublayer k reading stream k mod n."""
  cfg = tiny_config("mhc", 2)
  _, params, tokens = init_params(cfg)
  out = step.make_diag_fn(cfg, configlib.model_config(cfg))(
      params, {"inputs": tokens, "targets": tokens, "mask": jnp.ones(tokens.shape)})
  mix = np.asarray(out["mixing"])                                    # [S, n, n] token-averaged H_res
  assert mix.shape == (4, 4, 4) and float(np.mean(np.diagonal(mix, axis1=1, axis2=2))) >= 0.9
  b_pre = np.asarray(params["blocks"]["attn_res"]["b_pre"])          # [L, n]
  pre = 1 / (1 + np.exp(-b_pre))
  assert np.argmax(pre[1]) == 2 and pre[1, 2] > 0.95 and np.max(np.delete(pre[1], 2)) < 0.05


@pytest.mark.parametrize("name", ["denseformer", "mhc_lite", "kromhc"])
def test_identity_inits_equal_pre_norm(name):
  """DenseFormer's DWA weights start at the identity (Y_i = X_i); mHC-lite's and KromHC's start (phi = 0, b_post =
  0) keeps the streams identical, their H_res rows sum to 1 and the block norm absorbs H_pre x."""
  ref, _ = _logits(tiny_config("pre_norm", 3))
  out, _ = _logits(tiny_config(name, 3))
  np.testing.assert_allclose(out, ref, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("name,over", [
    ("laurel", {}),                                                      # RW 2 softmax(0) = 1, B = 0, g = 0
    ("laurel", {"model.laurel.rw": False}),
    ("mudd", {}),                                                        # W2 = 0, a one-hot on the newest
    ("value_residual", {"model.value_residual.lambda_init": 0.0}),
    ("value_residual", {"model.value_residual.lambda_init": 0.0, "model.value_residual.learned": False}),
    ("resid_lambdas", {"model.resid_lambdas.preset": "identity"})])   # lambda_r 1, lambda_0 0, lambda_b 0
def test_zero_gate_inits_equal_pre_norm(name, over):
  """LAuReL (RW scaled to 1 + 1, or off), a value residual with lambda = 0 and the speedrun scalars' identity preset
  start as Pre-Norm exactly (same base weights)."""
  ref, _ = _logits(tiny_config("pre_norm", 3))
  out, _ = _logits(tiny_config(name, 3, **over))
  np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


def test_kromhc_h_res_is_the_kronecker_product_of_its_factors_and_doubly_stochastic():
  from resnorm.model.residual.kromhc import kron_factors
  p = jnp.asarray([[[0.9, 0.3, 0.6]]], jnp.float32)                  # [1, 1, 3]: n = 8
  u = [np.array([[q, 1 - q], [1 - q, q]]) for q in (0.9, 0.3, 0.6)]
  h = np.asarray(kron_factors(p))[0, 0]
  np.testing.assert_allclose(h, np.kron(np.kron(u[0], u[1]), u[2]), rtol=1e-6)
  np.testing.assert_allclose(h.sum(0), 1.0, rtol=1e-6)
  np.testing.assert_allclose(h.sum(1), 1.0, rtol=1e-6)
  assert np.asarray(kron_factors(jnp.zeros((2, 3, 0)))).shape == (2, 3, 1, 1)


def test_ddl_with_its_gate_closed_is_its_embedding_through_the_final_norm():
  """beta_init = 0 closes every gate (b_beta = -inf, beta = 0): no block moves the stream, so the logits are the
  embedding through the final norm and the head; at the default gate (1) the blocks do move it."""
  import np_reference as ref
  mcfg, params, tokens, out = init_and_apply(tiny_config("ddl", 3, **{"model.ddl.beta_init": 0.0}))
  final = {k: np.asarray(v, np.float64) for k, v in params["final_norm"].items()}
  y = ref.norm(np.asarray(params["embed"], np.float64)[np.asarray(tokens)], final, mcfg.norm, mcfg.norm_eps)
  np.testing.assert_allclose(out, y @ np.asarray(params["head"], np.float64), rtol=1e-4, atol=1e-5)
  _, params1, _, out1 = init_and_apply(tiny_config("ddl", 3))
  assert float(jnp.max(jnp.abs(out1 - out))) > 1e-2


def test_the_speedrun_scalars_nanochat_preset_differs_from_pre_norm_at_init():
  """nanochat's init (lambda_r 1.15, lambda_0 0.2 at block 0, the embedding normalized) is not Pre-Norm."""
  ref, _ = _logits(tiny_config("pre_norm", 3))
  out, _ = _logits(tiny_config("resid_lambdas", 3))
  assert float(jnp.max(jnp.abs(out - ref))) > 1e-2


@pytest.mark.parametrize("preset,want", [("nanochat", (1.15, 1.05, 0.20, 0.05, 0.2)),
                                         ("backout", (1.0, 1.0, 0.0, 0.0, 0.5))])
def test_the_speedrun_scalars_start_at_their_codes_inits(preset, want):
  """nanochat's lambda_r 1.15 -> 1.05 and lambda_0 0.20 -> 0.05 linearly from block 0 to block L - 1, lambda_b 0.2;
  modded-nanogpt's backout record lambda_r 1, lambda_0 0, lambda_b 0.5."""
  r0, r1, z0, z1, b = want
  _, params = _logits(tiny_config("resid_lambdas", 5, **{"model.resid_lambdas.preset": preset}))
  res = params["blocks"]["attn_res"]
  np.testing.assert_allclose(res["lambda_r"], np.linspace(r0, r1, 5), rtol=1e-6)
  np.testing.assert_allclose(res["lambda_0"], np.linspace(z0, z1, 5), rtol=1e-6, atol=1e-7)
  assert float(params["backout"]["lambda_b"]) == pytest.approx(b)


def test_mhc_lite_h_res_is_a_convex_combination_of_permutations():
  from resnorm.model.residual.mhc_lite import permutation_matrices
  p = permutation_matrices(4)
  assert p.shape == (24, 4, 4) and np.array_equal(p[0], np.eye(4))
  assert len({m.tobytes() for m in p}) == 24 and np.all(p.sum(1) == 1) and np.all(p.sum(2) == 1)


def test_own_params_weight_decay():
  """DenseFormer's DWA weights are decayed (the authors' nn.Linear); Admin's omega and nGPT's scalers are not."""
  for name, decayed, exempt in [("denseformer", {"alpha"}, set()), ("admin", set(), {"omega"}),
                                ("attn_res", set(), {"query"}), ("laurel", {"down", "up"}, {"rw_logits", "pa_gain"}),
                                ("value_residual", set(), {"lambda"}), ("mudd", {"w1", "w2"}, {"bias"}),
                                ("ngpt", set(), {"alpha", "s_qk", "s_v", "s_z"})]:
    cfg = tiny_config(name, 2)
    mask = flax.traverse_util.flatten_dict(optim.decay_mask(param_shapes(cfg), cfg))
    assert {k[-1] for k, v in mask.items() if v} >= decayed and not {k[-1] for k, v in mask.items() if v} & exempt


def test_hc_expand_reduce_on_identity_mixing():
  """Streams stay identical under A_r = I, so the state summed at the end is n times Pre-Norm's."""
  from resnorm.model.residual.hyper import HyperConnection
  cfg = configlib.model_config(tiny_config("hc", 1, **{"model.hc.dynamic": False}))
  x = jax.random.normal(jax.random.key(0), (2, 5, 32))
  h = jnp.repeat(x[:, :, None], 4, axis=2)
  mod = HyperConnection(cfg)
  branch = lambda u: 2.0 * u
  params = mod.init(jax.random.key(1), h, branch, lambda u: u, 0, 0)
  out, taps = mod.apply(params, h, branch, lambda u: u, 0, 0)
  np.testing.assert_allclose(out.sum(2), 4 * (x + 2 * x), rtol=1e-6)
  np.testing.assert_allclose(taps["mix"][0, 0], np.eye(4))


@pytest.mark.parametrize("dynamic", [False, True])
def test_hc_mix_tap_is_the_matrix_that_moved_the_streams(dynamic):
  """At a non-symmetric A_r (and, for DHC, non-zero W_alpha) and a branch that outputs 0, the streams' update is
  H' = A_r^T H alone: the `mix` tap (the per-token H_res, acting from the left, that the gains are built from) must
  reproduce it, and for SHC equal A_r^T read off the params."""
  from resnorm.model.residual.hyper import HyperConnection
  n = 3
  cfg = configlib.model_config(tiny_config("hc", 1, **{"model.hc.dynamic": dynamic, "model.hc.n": n}))
  rng = np.random.default_rng(0)
  h = jnp.asarray(rng.standard_normal((2, 5, n, 32)), jnp.float32)
  branch = lambda u: 0.0 * u
  params = jax.tree.map(lambda a: a + 0.5 * jnp.asarray(rng.standard_normal(a.shape), jnp.float32),
                        HyperConnection(cfg).init(jax.random.key(1), h, branch, lambda u: u, 0, 0))
  a_r = np.array([[0.9, 0.6, 0.0], [0.0, 1.1, -0.4], [0.3, 0.0, 0.8]])  # far from symmetric
  params["params"]["static_alpha"] = params["params"]["static_alpha"].at[:, 1:].set(a_r)
  out, taps = HyperConnection(cfg).apply(params, h, branch, lambda u: u, 0, 0)
  mix = np.asarray(taps["mix"], np.float64)
  assert mix.shape == (2, 5, n, n)
  np.testing.assert_allclose(np.einsum("btij,btjd->btid", mix, np.asarray(h, np.float64)), out, rtol=1e-5,
                             atol=1e-5)
  if not dynamic:
    np.testing.assert_allclose(mix, np.broadcast_to(a_r.T, mix.shape), rtol=1e-6)


@pytest.mark.parametrize("dynamic", [False, True])
def test_frac_hc_mix_tap_is_the_matrix_that_moved_the_fractions(dynamic):
  """Frac-Connections' `mix` tap, the matrix the diagnostics and mixing figure show, acts from the left on the
  fractions: at a non-symmetric A_r and a zero branch, H'_k = sum_i mix[k, i] H_i reproduces the update, and for
  static weights mix == A_r^T read off the params (rows: output fractions, columns: input fractions)."""
  from resnorm.model.residual.frac import FracConnection
  m, d = 3, 24
  cfg = configlib.model_config(tiny_config("frac_hc", 1, **{"model.frac_hc.dynamic": dynamic,
                                                             "model.frac_hc.m": m}))
  rng = np.random.default_rng(1)
  x = jnp.asarray(rng.standard_normal((2, 5, d)), jnp.float32)
  branch = lambda u: 0.0 * u
  params = jax.tree.map(lambda a: a + 0.5 * jnp.asarray(rng.standard_normal(a.shape), jnp.float32),
                        FracConnection(cfg).init(jax.random.key(1), x, branch, lambda u: u, 0, 0))
  a_r = np.array([[0.9, 0.6, 0.0], [0.0, 1.1, -0.4], [0.3, 0.0, 0.8]])  # far from symmetric
  params["params"]["static_alpha"] = params["params"]["static_alpha"].at[:, m:].set(a_r)
  out, taps = FracConnection(cfg).apply(params, x, branch, lambda u: u, 0, 0)
  mix = np.asarray(taps["mix"], np.float64)
  assert mix.shape == (2, 5, m, m)
  h = np.asarray(x, np.float64).reshape(2, 5, m, d // m)
  np.testing.assert_allclose(np.einsum("btki,btif->btkf", mix, h).reshape(2, 5, d), out, rtol=1e-5, atol=1e-5)
  if not dynamic:
    np.testing.assert_allclose(mix, np.broadcast_to(a_r.T, mix.shape), rtol=1e-6)


def test_deepnorm_constants_at_48_layers():
  alpha, beta = deepnorm_alpha_beta(48)
  assert round(alpha, 2) == 3.13 and round(beta, 2) == 0.23


def test_deepnorm_sublayer_is_norm_of_alpha_x_plus_f():
  """x <- N(alpha x + F(x)), alpha = (2M)^(1/4) for M = 4 layers (8^(1/4) = 1.6818), with a real LayerNorm and a
  non-linear F; and the init of v, o, wi, wo is Pre-Norm's draw times beta = (8M)^(-1/4) = 32^(-1/4), q and k as is."""
  from resnorm.model.norms import make_norm
  from resnorm.model.residual.classic import DeepNorm
  cfg = configlib.model_config(tiny_config("deepnorm", 4))
  x = jax.random.normal(jax.random.key(0), (2, 5, 32))
  branch = lambda u: jnp.tanh(u[..., ::-1]) * 3.0
  norm = make_norm(cfg, "n")
  norm_params = norm.init(jax.random.key(2), x)
  apply_norm = lambda u: norm.apply(norm_params, u)
  out, _ = DeepNorm(cfg).apply({}, x, branch, apply_norm, 1, 2)
  xs = np.asarray(x, np.float64)
  h = 8 ** 0.25 * xs + np.tanh(xs[..., ::-1]) * 3.0
  ref = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-5)
  np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
  from resnorm.model.model import LM

  def init(name):
    m = configlib.model_config(tiny_config(name, 4))
    return flax.linen.unbox(jax.jit(LM(m).init)(jax.random.key(0), jnp.zeros((1, 16), jnp.int32))["params"])
  pre, deep = init("pre_norm"), init("deepnorm")
  for blk, name in (("attn", "q"), ("attn", "k"), ("attn", "v"), ("attn", "o"), ("mlp", "wi"), ("mlp", "wo")):
    scale = 32 ** -0.25 if name in ("v", "o", "wi", "wo") else 1.0
    np.testing.assert_allclose(deep["blocks"][blk][name], np.asarray(pre["blocks"][blk][name]) * scale, rtol=1e-6,
                               err_msg=name)


def test_mix_ln_split_and_segments():
  cfg = tiny_config("mix_ln", 8)
  assert mix_ln_split(cfg.model) == 2
  segs = residual.get("mix_ln").layer_segments(cfg.model)
  assert [(s[0], s[1], s[2].__name__) for s in segs] == [("blocks_post", 2, "PostNorm"), ("blocks_pre", 6, "PreNorm")]
  params = param_shapes(cfg)
  assert params["blocks_post"]["attn"]["q"].shape[0] == 2 and params["blocks_pre"]["attn"]["q"].shape[0] == 6


def test_rezero_is_identity_at_init():
  from resnorm.model.residual.classic import ReZero
  cfg = configlib.model_config(tiny_config("rezero"))
  x = jax.random.normal(jax.random.key(0), (2, 5, 32))
  params = ReZero(cfg).init(jax.random.key(1), x, jnp.sin, None, 0, 0)
  out, _ = ReZero(cfg).apply(params, x, jnp.sin, None, 0, 0)
  np.testing.assert_array_equal(out, x)


def test_ln_scaling_factors():
  from resnorm.model.residual.classic import LNScaling
  cfg = configlib.model_config(tiny_config("ln_scaling"))
  x = jnp.ones((1, 2, 32))
  for layer in (0, 3, 8):
    out, _ = LNScaling(cfg).apply({}, x, lambda u: u, lambda u: u, layer, 2 * layer)
    np.testing.assert_allclose(out - x, x / np.sqrt(layer + 1), rtol=1e-6)


def _batch(seed, b=4, t=16):
  tok = jax.random.randint(jax.random.key(seed), (b, t + 1), 0, 256)
  return {"inputs": tok[:, :-1], "targets": tok[:, 1:], "mask": jnp.ones((b, t))}


# Admin's omegas, nGPT's scalers and ReZero's gates also get their gradients checked against finite differences in
# test_reference.py's fast cases; their five-step runs are in `make test-integration`.
# the depth-store placements' five-step runs compile the slowest (all in `make test-integration`); their store is
# tested in test_depth_store.py
@pytest.mark.parametrize("name", [p if p.values[0] != "attn_res_block" else
                                  pytest.param("attn_res_block", marks=pytest.mark.integration)
                                  for p in representative(VARIANTS)])
def test_every_param_learns_and_five_steps_are_finite(name):
  cfg = tiny_config(name, 4, **{"train.warmup_steps": 0, "train.lr": 1e-2})
  mcfg, tx = configlib.model_config(cfg), optim.make(cfg)
  batches = jax.tree.map(lambda *a: jnp.stack(a), *[_batch(i) for i in range(5)])

  @jax.jit
  def run():
    state = flax.linen.unbox(step.init_state(cfg, mcfg, tx, jax.random.key(0), cfg.data.seq_len))
    state, metrics = jax.lax.scan(lambda s, b: step.train_step(s, b, cfg=cfg, mcfg=mcfg, tx=tx), state, batches)
    return metrics["finite"], jax.grad(step.make_loss_fn(mcfg))(state["params"], _batch(9))

  finite, grads = run()
  assert bool(jnp.all(finite)), name
  # after training steps, every param has a non-zero gradient (catches mixing that is computed, then dropped)
  flat = flax.traverse_util.flatten_dict(grads)
  dead = [k for k, g in flat.items() if not float(jnp.max(jnp.abs(g))) > 0]
  assert not dead, dead


def test_weight_decay_mask_exempts_static_hc_and_norms():
  cfg = tiny_config("hc", 2)
  params = param_shapes(cfg)
  mask = flax.traverse_util.flatten_dict(optim.decay_mask(params, cfg))
  by_name = {}
  for k, v in mask.items():
    by_name.setdefault(k[-1], set()).add(v)
  assert by_name["static_alpha"] == {False} and by_name["static_beta"] == {False}
  assert by_name["s_alpha"] == {False} and by_name["scale"] == {False} and by_name["embed"] == {False}
  assert by_name["w_alpha"] == {True} and by_name["q"] == {True} and by_name["wo"] == {True}


@pytest.mark.parametrize("name", VARIANTS)
def test_param_count_formula_matches_tree(name):
  # the elementwise norms' count (alpha, Derf's shift, DyT's optional beta) on a few placements with norms of each kind
  elementwise = [{"model.norm": "derf"}, {"model.norm": "dyt", "model.dyt.bias": True}] \
      if name in ("pre_norm", "hc", "hybrid_norm") else []
  for over in ({}, {"model.norm": "rmsnorm", "model.hc.dynamic": False, "model.tie_embed": True,
                   "model.hybrid_norm.qkv_norm": "all", "model.hybrid_norm.first_pre_norm": True,
                   "model.laurel.rw": False}, *elementwise):
    cfg = tiny_config(name, 4, **over)
    params = param_shapes(cfg)
    assert flops.param_count(configlib.model_config(cfg)) == sum(x.size for x in jax.tree.leaves(params))


def test_flops_hand_count():
  cfg = tiny_config("pre_norm", 2)
  m = configlib.model_config(cfg)
  d, f, v, t = 32, 64, 320, 16
  per_layer = 2 * (4 * d * d + 2 * d * f) + 4 * t * d
  assert flops.forward_flops_per_token(m, t) == 2 * per_layer + 2 * d * v
  hc = configlib.model_config(tiny_config("hc", 2, **{"model.hc.dynamic": False}))
  n = 4
  assert flops.forward_flops_per_token(hc, t) - flops.forward_flops_per_token(m, t) == 4 * (
      2 * n * (n + 1) * d + 2 * n * d)
