"""Each XLA:CPU kernel equals its reference form (resnorm.model.kernels) in value and gradient, float32 and bfloat16,
and the whole model computes the same function under model.kernels=xla_cpu and =reference."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import init_params, tiny_config
from resnorm.config import configlib
from resnorm.model import kernels
from resnorm.model.kernels import reference, xla_cpu
from resnorm.model.model import LM

TOL = {jnp.float32: 2e-5, jnp.bfloat16: 3e-2}


def _inputs(name, t, dtype):
  ks = jax.random.split(jax.random.key(7), 4)
  r = lambda k, shape: jax.random.normal(k, shape).astype(dtype)
  if name == "attention":
    return (r(ks[0], (2, t, 3, 8)), r(ks[1], (2, t, 3, 8)), r(ks[2], (2, t, 3, 8))), {}
  if name == "project":
    return (r(ks[0], (2, t, 16)), r(ks[1], (16, 24)) * 0.3), {}
  if name == "gelu":
    return (r(ks[0], (2, t, 16)) * 3,), {}
  if name == "mix_streams":  # a non-symmetric [.., n, n+1] mixing, as HC's alpha
    return (r(ks[0], (2, t, 4, 8)), jax.random.normal(ks[1], (2, t, 4, 5))), {}
  if name == "slot_weighted":  # the depth store's reads: 5 slots, 2 ways of per-token weights
    return (r(ks[0], (5, 2, t, 8)), jax.random.normal(ks[1], (2, 5, 2, t))), {}
  if name == "slot_weighted_shared":  # one weight per slot for every token (DenseFormer, LAuReL's PA)
    return (r(ks[0], (5, 2, t, 8)), jax.random.normal(ks[1], (1, 5, 1, 1))), {}
  if name in ("norm_project", "rms_project"):  # rows off zero mean, as residual streams are; f32 params
    d = 32
    x = r(ks[0], (2 * t, d)) * 3.0 + 2.0
    scale, bias = 1.0 + 0.2 * jax.random.normal(ks[1], (d,)), 0.3 * jax.random.normal(ks[2], (d,))
    w = jax.random.normal(ks[3], (d, 6)) * 0.2
    return ((x, scale, bias, w) if name == "norm_project" else (x, scale, w)), {}
  logits = jax.random.normal(ks[0], (2, t, 4, 4)) * 2.0
  return (logits.at[0, 0].set(0.0),), {"iters": 20}  # tied logits: the case whose gradient once came back NaN


def _check(name, t, dtype):
  args, kw = _inputs(name, t, dtype)
  if name == "rms_project":  # norm_project with bias None: RMSNorm
    fast, ref = (lambda x, s, w, m=m: m.norm_project(x, s, None, w, 1e-5) for m in (xla_cpu, reference))
  elif name == "norm_project":
    fast, ref = (lambda *a, m=m: m.norm_project(*a, 1e-5) for m in (xla_cpu, reference))
  elif name == "slot_weighted_shared":
    fast, ref = xla_cpu.slot_weighted, reference.slot_weighted
  else:
    fast = lambda *a: getattr(xla_cpu, name)(*a, **kw)
    ref = lambda *a: getattr(reference, name)(*a, **kw)
  out_f, vjp_f = jax.vjp(fast, *args)
  out_r, vjp_r = jax.vjp(ref, *args)
  assert out_f.dtype == out_r.dtype and out_f.shape == out_r.shape
  g = jax.random.normal(jax.random.key(9), out_f.shape).astype(out_f.dtype)
  tol = TOL[dtype] if name != "sinkhorn" else 1e-5
  for a, b in zip((out_f, *vjp_f(g)), (out_r, *vjp_r(g))):
    assert a.dtype == b.dtype
    a32, b32 = np.asarray(a, np.float32), np.asarray(b, np.float32)
    assert np.all(np.isfinite(a32)) and float(np.max(np.abs(b32))) > 1e-3
    np.testing.assert_allclose(a32, b32, rtol=tol, atol=tol * max(1.0, float(np.max(np.abs(b32)))))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("name", ["project", "gelu", "attention", "mix_streams", "norm_project", "rms_project",
                                  "slot_weighted", "slot_weighted_shared"])
def test_xla_cpu_kernel_equals_reference(name, dtype):
  _check(name, 12, dtype)


def test_blocked_attention_equals_reference_past_128_rows():
  """From T = 128 the XLA:CPU attention runs by query blocks (here 33, 33, 33 and 31 rows)."""
  assert [hi - lo for lo, hi in xla_cpu.query_blocks(130)] == [33, 33, 33, 31]
  _check("attention", 130, jnp.float32)


def test_sinkhorn_layouts_agree_and_rows_are_exact():
  _check("sinkhorn", 6, jnp.float32)
  logits = jax.random.normal(jax.random.key(0), (64, 4, 4)) * 2.0
  for impl in (reference, xla_cpu):
    m = impl.sinkhorn(logits, 20)
    np.testing.assert_allclose(m.sum(-1), 1.0, atol=1e-6)  # rows normalized last: exact
    col_err = lambda it: float(jnp.abs(impl.sinkhorn(logits, it).sum(-2) - 1).max())
    assert col_err(20) < 0.05 and col_err(200) < 1e-4 and col_err(2) > col_err(20)


def _np_sinkhorn(logits, iters):
  """float64 Sinkhorn as the paper writes it: exp, then columns and rows normalized in turn."""
  x = np.asarray(logits, np.float64)
  m = np.exp(x - x.max(axis=(-2, -1), keepdims=True))
  for _ in range(iters):
    m = m / m.sum(-2, keepdims=True)
    m = m / m.sum(-1, keepdims=True)
  return m


@pytest.mark.integration  # the layouts' agreement stays in `make test`
def test_sinkhorn_survives_logits_far_apart():
  """A column whose logits sit 60-150 below the rest (mHC's dynamic logits at a large lr): the value is the
  float64 Sinkhorn of those logits and the gradient is finite; an exp-domain float32 iteration gives NaN here."""
  for spread in (60.0, 90.0, 150.0):
    logits = jnp.asarray(np.random.default_rng(0).normal(size=(8, 4, 4))).at[:, :, 3].add(-spread)
    w = jnp.asarray(np.random.default_rng(1).normal(size=(8, 4, 4)))
    for impl in (reference, xla_cpu):
      f = lambda x: jnp.sum(impl.sinkhorn(x, 20) * w)
      val, grad = jax.value_and_grad(f)(logits)
      assert np.isfinite(float(val)) and bool(jnp.isfinite(grad).all()), (impl.__name__, spread)
      np.testing.assert_allclose(impl.sinkhorn(logits, 20), _np_sinkhorn(logits, 20), atol=1e-5)


def test_auto_picks_xla_cpu_on_cpu():
  assert jax.default_backend() == "cpu" and kernels.get("auto") is xla_cpu
  assert kernels.get("reference") is reference


@pytest.mark.parametrize("name", ["hc", pytest.param("mhc", marks=pytest.mark.integration),
                                  pytest.param("mudd", marks=pytest.mark.integration)])
def test_model_same_function_under_both_kernel_sets(name):
  cfg = tiny_config(name, 2, **{"model.kernels": "xla_cpu"})
  mcfg, params, tokens = init_params(cfg)
  ref = configlib.model_config(tiny_config(name, 2, **{"model.kernels": "reference"}))

  def loss(m):
    return lambda p: jnp.mean(jax.nn.log_softmax(LM(m).apply({"params": p}, tokens)[0])[..., 5])

  l1, g1 = jax.jit(jax.value_and_grad(loss(mcfg)))(params)
  l2, g2 = jax.jit(jax.value_and_grad(loss(ref)))(params)
  np.testing.assert_allclose(l1, l2, rtol=1e-6)
  for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("kernel_set", [reference, xla_cpu])
def test_slot_weighted_reads_a_bfloat16_store_with_float32_weights(kernel_set):
  """The store may be bfloat16, its weights (softmax probabilities, gates) are float32 and stay so: the sum equals a
  float64 sum over the store's exact values to float32 precision, not to bfloat16's."""
  ks = jax.random.split(jax.random.key(3), 2)
  buf = jax.random.normal(ks[0], (5, 2, 6, 8)).astype(jnp.bfloat16)
  w = jax.random.uniform(ks[1], (2, 5, 2, 6)) / 5.0
  want = np.einsum("csbt,sbtd->cbtd", np.asarray(w, np.float64), np.asarray(buf.astype(jnp.float32), np.float64))
  got = kernel_set.slot_weighted(buf, w)
  assert got.dtype == jnp.float32
  np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-5, atol=1e-6)
