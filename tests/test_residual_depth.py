"""The placements that read earlier outputs (resnorm/model/residual/attn_res.py, mudd.py, denseformer.py,
laurel.py): their inits against their papers, and what each one reads."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import np_reference_placements
from conftest import init_and_apply, tiny_config
from resnorm.config import configlib
from resnorm.model import residual
from resnorm.model.residual import mudd
from resnorm.step import step


def _logits(cfg, seed=0):
  _, params, _, logits = init_and_apply(cfg, seed)
  return logits, params


def test_laurel_init_is_identity_leaning():
  """RW's logits start at 0; LR's B and PA's gains at 0 (they add nothing at init); A column orthogonal."""
  from resnorm.model.residual.laurel import column_orthogonal
  _, params = _logits(tiny_config("laurel", 2))
  res = params["blocks"]["attn_res"]
  np.testing.assert_array_equal(res["rw_logits"], 0.0)
  np.testing.assert_array_equal(res["up"], 0.0)
  np.testing.assert_array_equal(res["pa_gain"], 0.0)
  a = np.asarray(column_orthogonal(None, (32, 4)), np.float64)
  assert np.count_nonzero(a) == 32 and a[5, 1] == pytest.approx(1 / np.sqrt(128)) and a[5, 0] == 0
  np.testing.assert_allclose(a.T @ a, np.eye(4) * 8 / 128)
  np.testing.assert_array_equal(res["down"][0], a)


def test_mudd_init_reads_the_newest_output_through_every_way():
  """MUDDFormer Sec. 3: W2 = 0 and a_l one-hot on the newest source (layer l's a[c, l] = 1), the last DA's on X_L;
  W1 ~ N(0, 1/D). Each DA_l is stored at its own shape (packed): stored params = params read."""
  layers = 4
  cfg = tiny_config("mudd", layers)
  _, params = _logits(cfg)
  assert "attn_res" not in params["blocks"]   # the blocks hold no DA params
  das = np_reference_placements.mudd_unpack(jax.tree.map(np.asarray, params["dense"]), layers)
  for l, da in enumerate(das, start=1):
    assert da["w1"].shape == (32, 4 * (l + 1)) and da["w2"].shape == (4 * (l + 1),) * 2
    np.testing.assert_array_equal(da["w2"], 0.0)
    np.testing.assert_array_equal(da["bias"], np.eye(l + 1)[[l] * 4])
  np.testing.assert_array_equal(params["final_dense"]["bias"], np.eye(layers + 1)[-1:])
  assert 0.8 < float(np.std(params["dense"]["w1"])) * np.sqrt(32) < 1.2
  mcfg = configlib.model_config(cfg)
  own = sum(np.size(v) for k in ("dense", "final_dense") for v in jax.tree.leaves(params[k]))
  assert own == mudd.mudd_params_used(mcfg) == residual.get("mudd").extra_params(mcfg)


@pytest.mark.parametrize("layers,k,p", [(6, 1, 1), (7, 2, 1), (8, 3, 2), (5, 1, 5)])
def test_denseformer_dwa_reads_what_the_authors_accumulators_hold(layers, k, p):
  """DWAModules (epfml/DenseFormer): X_j goes to accumulator j % k at position j // k; after block i (1-based, a DWA
  iff i % p == 0) the weights cover accumulator i % k up to position i // k, (i + k) // k of them."""
  from resnorm.model.residual.denseformer import dwa_mask, dwa_weights_used
  cfg = configlib.model_config(tiny_config("denseformer", layers, **{"model.denseformer.dilation": k,
                                                                    "model.denseformer.period": p}))
  used = 0
  for i in range(1, layers + 1):
    group = [g * k + i % k for g in range(i // k + 1)] if i % p == 0 else []
    assert sorted(np.flatnonzero(np.asarray(dwa_mask(cfg, i)))) == group, i
    used += len(group)
    assert not group or len(group) == (i + k) // k
  assert dwa_weights_used(cfg) == used


@pytest.mark.parametrize("name,over", [("attn_res", {}), ("delta_attn_res", {}), pytest.param(
    "attn_res_block", {"model.attn_res.num_blocks": 3}, marks=pytest.mark.integration)])
def test_attn_res_at_its_init_is_pre_norm_up_to_the_norms_eps(name, over):
  """Pseudo-queries 0: every sublayer reads the mean of its sources, Pre-Norm's sum over their count, which the
  sublayer's norm and the final norm cancel up to eps (exact as eps -> 0). Full and Block; the same base weights.
  Delta AttnRes adds that mean to the stream: x (s + 2) / (s + 1), cancelled the same way."""
  tight = {"model.norm_eps": 1e-12, **over}
  ref, _ = _logits(tiny_config("pre_norm", 3, **{"model.norm_eps": 1e-12}))
  out, _ = _logits(tiny_config(name, 3, **tight))
  np.testing.assert_allclose(out, ref, rtol=1e-4, atol=2e-5)
  loose, _ = _logits(tiny_config(name, 3, **over))  # eps 1e-5 against means 1/7 of the sums: visible, small
  assert 1e-6 < float(jnp.max(jnp.abs(loose - ref))) < 0.1 * float(jnp.max(jnp.abs(ref)))


def test_delta_block_at_its_init_is_not_pre_norm():
  """Delta Block's read is the mean of the completed summaries, without the current block's partial sum: not a
  rescaling of the stream, so it moves the function at init (Delta Full's, tested above, does not)."""
  tight = {"model.norm_eps": 1e-12}
  ref, _ = _logits(tiny_config("pre_norm", 3, **tight))
  out, _ = _logits(tiny_config("delta_attn_res_block", 3, **tight, **{"model.attn_res.num_blocks": 3}))
  assert float(jnp.max(jnp.abs(out - ref))) > 1e-2


@pytest.mark.parametrize("full,block", [pytest.param("attn_res", "attn_res_block", marks=pytest.mark.integration),
                                        ("delta_attn_res", "delta_attn_res_block")])
def test_block_of_single_sublayers_is_full(full, block):
  """N = 2L blocks of one sublayer: Block reads exactly Full's sources (the partial sum never); N = 2 does not."""
  rng = np.random.default_rng(0)
  full_cfg = tiny_config(full, 2)
  mcfg, params, tokens, _ = init_and_apply(full_cfg)
  params = jax.tree.map(lambda a: a + 0.3 * jnp.asarray(rng.standard_normal(a.shape), a.dtype), params)
  from conftest import apply_fn
  block_mcfg = configlib.model_config(tiny_config(block, 2, **{"model.attn_res.num_blocks": 4}))
  np.testing.assert_allclose(apply_fn(block_mcfg)(params, tokens), apply_fn(mcfg)(params, tokens), rtol=1e-6,
                             atol=1e-6)
  two = configlib.model_config(tiny_config(block, 2, **{"model.attn_res.num_blocks": 2}))
  assert float(jnp.max(jnp.abs(apply_fn(two)(params, tokens) - apply_fn(mcfg)(params, tokens)))) > 1e-3


@pytest.mark.parametrize("name,want_rows", [
    pytest.param("attn_res", [[1.0 / (l + 1)] * (l + 1) + [0.0] * (6 - l) for l in range(6)],
                 marks=pytest.mark.integration),
    ("attn_res_block", [[1, 0, 0], [.5, .5, 0], [.5, .5, 0], [.5, .5, 0], [1 / 3] * 3, [1 / 3] * 3]),
    # Delta: nothing read before sublayer 0; Block: only completed blocks (the MLP of layer 1 starts block 2)
    ("delta_attn_res", [[0.0] * 7] + [[1.0 / (l + 1)] * (l + 1) + [0.0] * (6 - l) for l in range(1, 6)]),
    pytest.param("delta_attn_res_block", [[0, 0, 0], [1, 0, 0], [1, 0, 0], [.5, .5, 0], [.5, .5, 0], [.5, .5, 0]],
                 marks=pytest.mark.integration)])
def test_depth_weights_at_init_are_uniform_over_the_sources_each_sublayer_reads(name, want_rows):
  """Full: sublayer l reads the embedding and the l outputs before it, 1/(l+1) each (entropy log(l+1)); Block with
  N = 2 over 6 sublayers (S = 3): slot 0, then block 1's partial sum from its 2nd sublayer, block 1 once done. The
  Delta forms the same, less the partial sums and sublayer 0's read. 3 layers."""
  cfg = tiny_config(name, 3, **({"model.attn_res.num_blocks": 2} if name.endswith("_block") else {}))
  _, params, tokens, _ = init_and_apply(cfg)
  out = step.make_diag_fn(cfg, configlib.model_config(cfg))(
      params, {"inputs": tokens, "targets": tokens, "mask": jnp.ones(tokens.shape)})
  np.testing.assert_allclose(np.asarray(out["depth_weights"]), np.array(want_rows, float), atol=1e-6)
  ent = [-sum(p * np.log(p) for p in row if p > 0) for row in want_rows]
  np.testing.assert_allclose(np.asarray(out["stats"]["depth_entropy"]), ent, atol=1e-5)


@pytest.mark.parametrize("n,use,scale", [(0, True, 1.0), (3, True, 1.0), (5, False, 1.0), (2, True, 300.0)])
def test_attn_res_two_phases_equal_one_softmax_over_every_source(n, use, scale):
  """Attention Residuals Sec. 3.2: phase 1 (the queries against the complete slots 0..n, one pass) and phase 2 (one
  more source by online softmax) equal one softmax over all of a sublayer's sources, in float64, for both queries,
  with the weights [B, T, S] summing to 1 (p's at its slot); logits of +-hundreds neither overflow nor NaN."""
  from resnorm.model.depth_store import Store
  from resnorm.model.residual import attn_res
  keys = jax.random.split(jax.random.key(n), 4)
  buf = jax.random.normal(keys[0], (6, 2, 3, 8)) * jnp.arange(1.0, 7.0)[:, None, None, None]
  p = jax.random.normal(keys[1], (2, 3, 8))
  w = jax.random.normal(keys[2], (2, 8)) * scale
  valid = jnp.arange(6) <= n
  stats = attn_res.depth_stats(Store(x=p, buf=buf), w, valid, 1e-6)
  for c in range(2):
    h, a = attn_res.merge(stats, c, p, use, w[c], 1e-6, n + 1)
    src = [np.asarray(buf[s], np.float64) for s in range(n + 1)] + ([np.asarray(p, np.float64)] if use else [])
    z = np.stack([(v / np.sqrt((v ** 2).mean(-1, keepdims=True) + 1e-6)) @ np.asarray(w[c], np.float64)
                  for v in src], -1)
    e = np.exp(z - z.max(-1, keepdims=True))
    e /= e.sum(-1, keepdims=True)
    want = sum(e[..., i, None] * v for i, v in enumerate(src))
    np.testing.assert_allclose(h, want, rtol=2e-4, atol=2e-5)
    want_a = np.zeros((2, 3, 6))
    want_a[..., : n + 1] = e[..., : n + 1]
    if use:
      want_a[..., n + 1] = e[..., n + 1]
    np.testing.assert_allclose(a, want_a, rtol=2e-4, atol=1e-6)
  g = jax.grad(lambda w: jnp.sum(attn_res.merge(attn_res.depth_stats(Store(x=p, buf=buf), w, valid, 1e-6), 1, p,
                                                use, w[1], 1e-6, n + 1)[0] ** 2))(w)
  assert bool(jnp.all(jnp.isfinite(g))) and float(jnp.abs(g).max()) > 0
