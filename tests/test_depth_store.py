"""The depth store (resnorm.model.depth_store): the placements that read earlier outputs equal their carry form
(tests/carry_placements.py) in logits and gradients, the store's reads equal autodiff, and the backward keeps the
store once (the compiled train step's temporaries grow linearly in depth, where the carry's grow quadratically)."""
import dataclasses
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import np_reference_placements
from carry_placements import carry_variants
from conftest import init_and_apply, init_params, tiny_config
from resnorm.config import configlib
from resnorm.model import depth_store, residual
from resnorm.model.model import LM

STORE = ["attn_res", "attn_res_block", "denseformer", "mudd", "laurel"]


def _loss_and_grads(mcfg, params, tokens):
  def loss(p):
    logits = LM(mcfg).apply({"params": p}, tokens)[0]
    return jnp.mean(jax.nn.log_softmax(logits)[..., 7] * jnp.arange(tokens.shape[1])[None])
  return jax.jit(jax.value_and_grad(loss))(params)


def _perturbed(params, seed=3):
  """Every param moved off its init (zero pseudo-queries, one-hot DWA, zero gains make symmetric starts)."""
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  return jax.tree.unflatten(tree, [a + 0.3 * jax.random.normal(k, a.shape) * (jnp.std(a) + 0.1)
                                   for a, k in zip(leaves, keys)])


def _carry_layout(name, params, cfg):
  """The carry form's params: MUDDFormer's packed DAs (each at its own shape) padded per layer to the largest
  (W1 [L, D, 4L], W2 [L, 4L, 4L] with columns c L + j, a [L, 4, L]; zero where a layer reads nothing); Attention
  Residuals' per-layer pair of pseudo-queries [L, 2, D] split into one per sublayer."""
  if name in ("attn_res", "attn_res_block"):
    q = params["blocks"]["attn_res"]["query"]
    return dict(params, blocks=dict(params["blocks"], attn_res={"depth": {"query": q[:, 0]}},
                                    mlp_res={"depth": {"query": q[:, 1]}}))
  if name != "mudd":
    return params
  num, d = cfg.model.num_layers, cfg.model.d_model
  w1, w2, a = np.zeros((num, d, 4 * num)), np.zeros((num, 4 * num, 4 * num)), np.zeros((num, 4, num))
  for l, da in enumerate(np_reference_placements.mudd_unpack(jax.tree.map(np.asarray, params["dense"]), num), 1):
    h = 4 * (l + 1)
    w1[l, :, :h] = da["w1"]
    w2[l, :h] = np.pad(da["w2"].reshape(h, 4, l + 1), ((0, 0), (0, 0), (0, num - l - 1))).reshape(h, 4 * num)
    a[l, :, :l + 1] = da["bias"]
  out = {k: v for k, v in params.items() if k != "dense"}
  out["blocks"] = dict(params["blocks"], attn_res={"dense": {"w1": w1, "w2": w2, "bias": a}})
  return jax.tree.map(jnp.asarray, out)


E2E = pytest.mark.integration  # further settings of a placement: `make test-integration`


@pytest.mark.parametrize("name,over", [
    pytest.param("attn_res", {}, marks=E2E), pytest.param("attn_res_block", {}, marks=E2E),
    pytest.param("attn_res_block", {"model.attn_res.num_blocks": 3}, marks=E2E),
    pytest.param("denseformer", {}, marks=E2E),
    pytest.param("denseformer", {"model.denseformer.dilation": 2, "model.denseformer.period": 2}, marks=E2E),
    ("denseformer", {"model.remat": "full", "model.denseformer.dilation": 2}),
    pytest.param("mudd", {}, marks=E2E), pytest.param("laurel", {"model.laurel.pa_k": 6}, marks=E2E),
    pytest.param("laurel", {}, marks=E2E),
    pytest.param("laurel", {"model.laurel.pa_k": 10, "model.num_layers": 5}, marks=E2E),
    pytest.param("laurel", {"model.laurel.rw": False}, marks=E2E)])
def test_store_equals_carry(name, over):
  cfg = tiny_config(name, 3, **over)
  mcfg, params, tokens, _ = init_and_apply(cfg)
  params = _perturbed(params)
  with carry_variants():
    old_cfg = tiny_config(name, 3, **over)
    old_cfg.model.residual = name + "_carry"
    old = configlib.model_config(old_cfg)
    l_old, g_old = _loss_and_grads(old, _carry_layout(name, params, cfg), tokens)
  l_new, g_new = _loss_and_grads(mcfg, params, tokens)
  np.testing.assert_allclose(l_new, l_old, rtol=1e-5)
  g_new = _carry_layout(name, g_new, cfg)
  assert jax.tree.structure(g_new) == jax.tree.structure(g_old)
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(g_new), jax.tree.leaves(g_old)):
    np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-6, err_msg=jax.tree_util.keystr(path))


def _temp_bytes(name, num_layers, carry=False, remat="none"):
  """Temporary bytes of the compiled gradient (XLA's own memory analysis) at d 32, 16 x 32 tokens: activations
  dominate the params, so a store kept once per block shows as growth in depth."""
  import flax
  # two runs at every depth (model.depth_chunks): the same layout of runs at 4 layers as at 8
  over = {"model.remat": remat, "model.d_model": 32, "model.mlp_dim": 64, "model.num_heads": 2,
          "model.depth_chunks": 2,
          "model.attn_res.num_blocks": num_layers,
          "model.laurel.pa_k": 2 * num_layers}
  cfg = tiny_config(name, num_layers, **over)
  if carry:
    cfg.model.residual = name + "_carry"
  mcfg = configlib.model_config(cfg)
  tokens = jnp.zeros((16, 32), jnp.int32)
  params = jax.eval_shape(lambda: flax.linen.unbox(LM(mcfg).init(jax.random.key(0), tokens)["params"]))
  grad = jax.jit(jax.grad(lambda p: jnp.mean(LM(mcfg).apply({"params": p}, tokens)[0])))
  return grad.lower(params).compile().memory_analysis().temp_size_in_bytes


@pytest.fixture(scope="module")
def pre_norm_bytes():
  return {n: _temp_bytes("pre_norm", n) for n in (4, 8)}


@pytest.mark.parametrize("name", [pytest.param("attn_res", marks=E2E), pytest.param("denseformer", marks=E2E),
                                  pytest.param("mudd", marks=E2E),
                                  pytest.param("attn_res_block", marks=E2E),
                                  pytest.param("laurel", marks=E2E)])
def test_memory_grows_linearly_in_depth(name, pre_norm_bytes):
  """A placement's memory beyond Pre-Norm's at 8 layers is at most 2.3x its memory at 4 (linear: 2x; Block AttnRes
  at N = L blocks). The carry form, which the scan's backward saves at every block, grows quadratically: the same
  measure is above 2.5x for it, so the test fails when the store is swapped back for the carry."""
  def growth(carry):
    extra = [_temp_bytes(name, n, carry) - pre_norm_bytes[n] for n in (4, 8)]
    return extra[1] / extra[0]
  assert growth(False) <= 2.3
  with carry_variants():
    assert growth(True) > 2.5


@pytest.mark.parametrize("name,over", [
    pytest.param("attn_res", {}, marks=E2E), pytest.param("attn_res_block", {"model.attn_res.num_blocks": 5}, marks=E2E),
    pytest.param("mudd", {}, marks=E2E),  # mudd's runs: test_mudd_in_runs_ending_at_a_store_of_four_slots_...
    pytest.param("denseformer", {}, marks=E2E), pytest.param("laurel", {"model.laurel.pa_k": 7}, marks=E2E),
    pytest.param("denseformer", {"model.denseformer.dilation": 2, "model.denseformer.period": 2}, marks=E2E)])
def test_runs_over_store_prefixes_equal_one_scan_over_the_whole_store(name, over):
  """model.depth_chunks: 5 layers in 3 runs (1, 2 and 2 layers), each over the slots its last layer reaches,
  compute what one scan over every slot computes, in the loss and every gradient."""
  cfg = tiny_config(name, 5, **over)
  mcfg, params, tokens, _ = init_and_apply(cfg)
  params = _perturbed(params)
  assert cfg.model.depth_chunks != 1
  cfg.model.depth_chunks = 3
  runs = depth_store.chunk_widths(5, 0, lambda l: residual.get(name).reach(mcfg, l), 3)
  assert runs[0][1] < runs[-1][1], runs
  l_runs, g_runs = _loss_and_grads(configlib.model_config(cfg), params, tokens)
  cfg.model.depth_chunks = 1
  l_one, g_one = _loss_and_grads(configlib.model_config(cfg), params, tokens)
  np.testing.assert_allclose(l_runs, l_one, rtol=1e-5)
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(g_runs), jax.tree.leaves(g_one)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6, err_msg=jax.tree_util.keystr(path))


@E2E
def test_mudd_in_runs_ending_at_a_store_of_four_slots_trains_as_the_layer_loop():
  """MUDDFormer at 3 layers in the default 4 runs: one layer per run, over 2, 3 and 4 slots. Under remat=dots a
  block keeps its four ways' weighted reads, [4, B, T, D]: the last run's own shape, which layer_scan's guard
  against store-sized residuals must let pass (it exempts stores of 4 slots or fewer). Loss and every gradient
  equal the unrolled layer loop's (model.scan_layers=False: plain autodiff, no layer_scan)."""
  over = {"model.remat": "dots"}
  cfg = tiny_config("mudd", 3, **over)
  mcfg, params, tokens = init_params(cfg)
  assert depth_store.chunk_widths(3, 0, lambda l: residual.get("mudd").reach(mcfg, l), cfg.model.depth_chunks) == \
      ((1, 2), (1, 3), (1, 4))
  params = _perturbed(params)
  l_scan, g_scan = _loss_and_grads(mcfg, params, tokens)
  loop = configlib.model_config(tiny_config("mudd", 3, **over, **{"model.scan_layers": False}))
  unrolled = {k: v for k, v in params.items() if k != "blocks"}
  unrolled.update({f"blocks_{i}": jax.tree.map(lambda a: a[i], params["blocks"]) for i in range(3)})
  l_loop, g_loop = _loss_and_grads(loop, unrolled, tokens)
  np.testing.assert_allclose(l_scan, l_loop, rtol=1e-5)
  g_loop = dict(g_loop, blocks=jax.tree.map(lambda *a: jnp.stack(a), *[g_loop.pop(f"blocks_{i}") for i in range(3)]))
  assert jax.tree.structure(g_scan) == jax.tree.structure(g_loop)
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(g_scan), jax.tree.leaves(g_loop)):
    np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-6, err_msg=jax.tree_util.keystr(path))


def test_chunk_widths_cut_a_segment_into_runs_ending_at_their_reach():
  reach = lambda l: 2 * l + 3
  assert depth_store.chunk_widths(10, 2, reach, 4) == ((2, 9), (3, 15), (2, 19), (3, 25))
  assert depth_store.chunk_widths(3, 0, reach, 8) == ((1, 3), (1, 5), (1, 7))
  assert depth_store.chunk_widths(6, 0, reach, 1) == ((6, 13),)


def test_denseformer_recomputes_its_stream_from_the_store(monkeypatch):
  """Under whole-block remat a DenseFormer block keeps nothing of its own besides the store: its input Y_l is a
  read of the store, which the backward recomputes (x_from_store). Kept instead, it is (L - 1) B T D more floats
  (block 0's input is the embedding, which the backward keeps either way)."""
  from resnorm.model.residual import base
  recomputed = _temp_bytes("denseformer", 8, remat="full")
  monkeypatch.setitem(base.REGISTRY, "denseformer", dataclasses.replace(base.REGISTRY["denseformer"],
                                                                      x_from_store=None))
  kept = _temp_bytes("denseformer", 8, remat="full")
  assert kept - recomputed >= 0.99 * (8 - 1) * 16 * 32 * 32 * 4


def _store(seed=0, s=5, fresh=((3, 1.5),)):
  k = jax.random.split(jax.random.key(seed), 4)
  buf = jax.random.normal(k[0], (s, 2, 3, 4))
  store = depth_store.Store(x=jnp.zeros((2, 3, 4)), buf=buf)
  for slot, scale in fresh:
    store = store.write(slot, scale * jax.random.normal(k[1], (2, 3, 4)))
  return store


def _dense(store):
  """The store as a plain [B, T, S, D] array: the buffer with the fresh writes applied."""
  return jnp.moveaxis(store.flush().buf, 0, 2)


@pytest.mark.parametrize("kernels", ["reference", "xla_cpu"])
def test_store_reads_equal_plain_reads_in_value_and_gradient(kernels):
  store = _store().replace(kernels=kernels)
  w = jax.random.normal(jax.random.key(7), (2, 5, 2, 3))                         # [C, S, B, T]
  q = jax.random.normal(jax.random.key(8), (2, 4))                              # two pseudo-queries [C, D]
  def reads(st, w, q):
    return (st.weighted(w), st.weighted_shared(w[0, :, 0, 0]), st.rms_logits(q, 1e-5), st.slot(3))
  def plain(st, w, q):
    v = _dense(st)
    k = v * jax.lax.rsqrt(jnp.mean(v * v, axis=-1, keepdims=True) + 1e-5)
    return (jnp.einsum("csbt,btsd->cbtd", w, v), jnp.einsum("s,btsd->btd", w[0, :, 0, 0], v),
            jnp.einsum("btsd,cd->csbt", k, q), v[:, :, 3])
  for a, b in zip(reads(store, w, q), plain(store, w, q)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  def scalar(f):
    return lambda st, w, q: sum(jnp.sum(jnp.sin(o) * (i + 1)) for i, o in enumerate(f(st, w, q)))
  g_store = jax.grad(scalar(reads), argnums=(0, 1, 2), allow_int=True)(store, w, q)
  g_plain = jax.grad(scalar(plain), argnums=(0, 1, 2), allow_int=True)(store, w, q)
  for a, b in zip(jax.tree.leaves(g_store), jax.tree.leaves(g_plain)):
    if a.dtype != jax.dtypes.float0:
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_a_fresh_slot_is_read_from_its_value_not_the_buffer():
  """Within a block a written slot is read from the write, whatever the buffer holds there (in the backward the
  buffer is the final one, where that slot already has its value), and its gradient goes to the write."""
  store = _store()
  stale = store.replace(buf=store.buf.at[3].set(100.0))
  w = jnp.ones((1, 5, 2, 3))
  np.testing.assert_allclose(stale.weighted(w), store.weighted(w), rtol=1e-6)
  g = jax.grad(lambda st: jnp.sum(st.weighted(w)), allow_int=True)(stale)
  assert float(jnp.abs(g.buf[3]).max()) == 0.0
  np.testing.assert_allclose(g.fresh[0][1], jnp.ones((2, 3, 4)))


def test_layer_scan_refuses_a_block_that_keeps_a_copy_of_the_store():
  store = depth_store.Store(x=jnp.zeros((1, 2, 3)), buf=jnp.ones((5, 1, 2, 3)))
  def body(p, st, x, consts):
    copy = st.buf * p                                   # a store-sized value the backward would keep per block
    return st.replace(x=st.x + jnp.sum(copy * copy, axis=0)), None
  def loss(p):
    return jnp.sum(depth_store.layer_scan(body, p, store, jnp.arange(3), ())[0].x)
  with pytest.raises(AssertionError, match="store-sized residual"):
    jax.grad(loss)(jnp.ones((3,)))


@pytest.mark.parametrize("widths", [None, ((1, 2), (2, 4))])
def test_shared_params_get_the_summed_gradient_and_are_not_kept_per_block(widths):
  """`Store.shared` (params every block reads, MUDDFormer's packed DAs): layer_scan's gradients, for the stacked
  params, the shared ones and the initial store, equal plain autodiff of the scan, in one run or in runs over
  prefixes of the store; its backward keeps the shared params once (the final store's), not once per block, even
  where a block's own residual is the shared array itself."""
  # 5 slots: the blocks write 1..3, and slot 4, never written, keeps its initial value through every run
  buf = jax.random.normal(jax.random.key(0), (5, 1, 2, 3))
  shared = {"w": jax.random.normal(jax.random.key(1), (13,)), "u": jax.random.normal(jax.random.key(2), (3,))}

  def body(p, st, x, consts):
    scale = jnp.dot(st.shared["w"], st.shared["w"]) * x          # keeps the shared array itself as a residual
    read = st.weighted_shared(jnp.where(jnp.arange(st.num_slots) <= x, 0.3, 0.0))      # the slots written so far
    y = jnp.tanh(st.x * p + scale * st.shared["u"][None, None] + read)
    return st.write(x + 1, y).flush().replace(x=y), None

  def loss(run, p, sh, b):
    store = depth_store.Store(x=b[0], buf=b, shared=sh)
    final = run(body, p, store)
    return jnp.sum(final.x ** 2) + jnp.sum(final.buf ** 3)

  def plain(body, p, store):
    return jax.lax.scan(lambda s, inp: body(inp[0], s, inp[1], ()), store, (p, jnp.arange(3)))[0]

  def scanned(body, p, store):
    return depth_store.layer_scan(body, p, store, jnp.arange(3), (), widths=widths)[0]

  p = jnp.array([0.5, -1.2, 0.8])
  want = jax.grad(partial(loss, plain), argnums=(0, 1, 2))(p, shared, buf)
  got = jax.grad(partial(loss, scanned), argnums=(0, 1, 2))(p, shared, buf)
  np.testing.assert_allclose(jax.jit(partial(loss, scanned))(p, shared, buf), loss(plain, p, shared, buf),
                             rtol=1e-6)
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  _, vjp = jax.vjp(partial(loss, scanned), p, shared, buf)
  kept = [leaf.shape for leaf in jax.tree.leaves(vjp) if hasattr(leaf, "shape")]
  assert (13,) in kept and (3, 13) not in kept, kept


def test_flop_counts_charge_each_layer_the_width_of_its_run():
  """extra_flops counts what the scanned step computes (docs/variants.md's table): each layer at the slots P of its
  run, every layer at the whole store in one run. 7 layers: runs of 2, 2, 3 layers at K = 3."""
  for k in (1, 3):
    for name, over in (("denseformer", {}), ("mudd", {}), ("attn_res", {}), ("laurel", {"model.laurel.pa_k": 7})):
      m = configlib.model_config(tiny_config(name, 7, **{"model.depth_chunks": k, **over}))
      v, d, num = residual.get(name), m.d_model, m.num_layers
      runs = depth_store.chunk_widths(num, 0, lambda l: v.reach(m, l), k)
      assert [n for n, _ in runs] == ([7] if k == 1 else [2, 2, 3])
      p = [w for n, w in runs for _ in range(n)]                     # each layer's P
      if name == "denseformer":
        want = sum(2 * w * d for w in p)
      elif name == "laurel":
        want = 2 * num * (4 * m.laurel.rank * d + 4 * d) + sum(2 * 2 * w * d for w in p)
      elif name == "attn_res":
        want = sum(11 * w * d + 18 * d for w in p) + 7 * (2 * num + 1) * d
      else:
        def da(ways, sources):
          h, kk = 4 * sources, ways * sources
          return 2 * d * h + 2 * h * kk + 3 * d + 8 * h + 2 * kk * d
        want = sum(da(4, w - 1) for w in p) + da(1, num + 1)
      assert v.extra_flops(m) == want, (name, k)


def _plain_delta_stream(monkeypatch):
  """Delta AttnRes (Full) with its stream's gradient through the store's sum, not the carried stream."""
  from resnorm.model.residual import delta_attn_res
  monkeypatch.setattr(delta_attn_res, "_stream", lambda c_BTD, x_sum_BTD: x_sum_BTD)


@pytest.mark.parametrize("over", [pytest.param({"model.remat": "full", "model.depth_chunks": 2}, marks=E2E),
                                  pytest.param({"model.scan_layers": False}, marks=E2E)])
def test_delta_full_routes_its_streams_gradient_through_the_carry(over, monkeypatch):
  """Delta AttnRes (Full) reads its stream's value from the store and sends its gradient back along the carried
  stream c (c - c = 0): the loss and every gradient equal those of the plain sum of slots, under the store's scan
  with remat (whose backward recomputes c from the final store) and in the loop."""
  cfg = tiny_config("delta_attn_res", 3, **over)
  mcfg, params, tokens, _ = init_and_apply(cfg)
  params = _perturbed(params)
  l_new, g_new = _loss_and_grads(mcfg, params, tokens)
  _plain_delta_stream(monkeypatch)
  l_old, g_old = _loss_and_grads(mcfg, params, tokens)
  np.testing.assert_allclose(l_new, l_old, rtol=1e-6)
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(g_new), jax.tree.leaves(g_old)):
    np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-7, err_msg=jax.tree_util.keystr(path))


@E2E
def test_delta_fulls_carried_stream_keeps_less_than_the_sum_of_slots(monkeypatch):
  """The sum of slots' cotangent is store-sized at every sublayer; the carry's is one [B, T, D]. XLA:CPU, 8 layers,
  no remat: the compiled gradient's temporaries are smaller by over half a store (measured: 0.88 of one)."""
  store = (2 * 8 + 1) * 16 * 32 * 32 * 4
  routed = _temp_bytes("delta_attn_res", 8)
  _plain_delta_stream(monkeypatch)
  assert _temp_bytes("delta_attn_res", 8) - routed > 0.5 * store
