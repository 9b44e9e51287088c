"""Norms: float32 statistics under bfloat16 (the default), and the `compute` ablation that keeps them in bf16."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import tiny_config
from resnorm import configlib
from resnorm.model import LM
from resnorm.norms import Norm


def _reduction_dtypes(jaxpr) -> set:
  """Dtypes of the operands of every reduction and rsqrt (the normalization) in a jaxpr, sub-jaxprs (scan, remat,
  custom VJPs) included."""
  out = set()
  for eqn in jaxpr.eqns:
    if eqn.primitive.name in ("reduce_sum", "reduce_max", "rsqrt"):
      out.add(str(eqn.invars[0].aval.dtype))
    for sub in _sub_jaxprs(eqn.params.values()):
      out |= _reduction_dtypes(sub)
  return out


def _sub_jaxprs(values):
  for v in values:
    if isinstance(v, (list, tuple)):
      yield from _sub_jaxprs(v)
    elif hasattr(v, "jaxpr") and hasattr(v, "consts"):  # ClosedJaxpr
      yield v.jaxpr
    elif hasattr(v, "eqns"):  # Jaxpr
      yield v


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_bf16_input_normalized_as_in_float64(kind):
  """A bf16 row with a large offset: float32 statistics give the float64 answer to bf16 output rounding. For
  LayerNorm, statistics in bf16 do not (so this notices a norm that lost its float32 upcast); RMSNorm of such a row
  is well conditioned either way, and the jaxpr test below covers its dtype."""
  x = (1000.0 + jax.random.normal(jax.random.key(0), (4, 64)) * 3).astype(jnp.bfloat16)
  x64 = np.asarray(x, np.float64)
  if kind == "layernorm":
    ref = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
    params = {"scale": jnp.ones(64), "bias": jnp.zeros(64)}
  else:
    ref = x64 / np.sqrt(np.mean(x64 ** 2, -1, keepdims=True) + 1e-5)
    params = {"scale": jnp.ones(64)}
  err = {}
  for f32 in (True, False):
    y = Norm(kind=kind, stats_float32=f32).apply({"params": params}, x)
    assert y.dtype == jnp.bfloat16
    err[f32] = float(np.max(np.abs(np.asarray(y, np.float64) - ref)))
  assert err[True] < 0.02 * max(1.0, float(np.abs(ref).max())), err
  if kind == "layernorm":
    assert err[False] > 3 * err[True], err


@pytest.mark.parametrize("name", ["pre_norm", "hc", "mhc"])
def test_model_under_bf16_reduces_only_in_float32(name):
  """Under model.dtype=bfloat16 every reduction and normalization in the forward pass (norm statistics, softmax,
  mHC's coefficient norm) runs in float32; with model.norm_stats_dtype=compute the norms normalize in bf16."""
  tokens = jnp.zeros((2, 16), jnp.int32)
  cfg = tiny_config(name, 2, **{"model.dtype": "bfloat16", "model.kernels": "reference"})
  mcfg = configlib.model_config(cfg)
  params = jax.eval_shape(LM(mcfg).init, jax.random.key(0), tokens)["params"]
  jaxpr = jax.make_jaxpr(lambda p: LM(mcfg).apply({"params": p}, tokens))(params).jaxpr
  assert _reduction_dtypes(jaxpr) == {"float32"}
  ablate = configlib.model_config(tiny_config(name, 2, **{"model.dtype": "bfloat16", "model.kernels": "reference",
                                                          "model.norm_stats_dtype": "compute"}))
  jaxpr = jax.make_jaxpr(lambda p: LM(ablate).apply({"params": p}, tokens))(params).jaxpr
  assert "bfloat16" in _reduction_dtypes(jaxpr)
