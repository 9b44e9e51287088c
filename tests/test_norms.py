"""Norms: float32 statistics under bfloat16 (the default), and the `compute` ablation that keeps them in bf16."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import tiny_config
from resnorm.config import configlib
from resnorm.model.model import LM
from resnorm.model.norms import Norm


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


def _tanh_dtypes(jaxpr, prim="tanh") -> list:
  """The operand dtype of every tanh (or `prim`) in a jaxpr, sub-jaxprs included (the MLP's GELU has one tanh per
  layer)."""
  out = [str(e.invars[0].aval.dtype) for e in jaxpr.eqns if e.primitive.name == prim]
  for e in jaxpr.eqns:
    for sub in _sub_jaxprs(e.params.values()):
      out += _tanh_dtypes(sub, prim)
  return out


def test_dyt_is_the_papers_elementwise_form_in_float32_under_bf16():
  """DyT (Zhu et al. 2025, Eq. 1): scale * tanh(alpha x) (+ bias), against float64; its tanh in float32 under
  bfloat16 compute unless model.norm_stats_dtype=compute."""
  from resnorm.model.norms import DyT
  x = (jax.random.normal(jax.random.key(0), (4, 64)) * 3).astype(jnp.bfloat16)
  rng = np.random.default_rng(0)
  params = {"alpha": jnp.asarray(0.7), "scale": jnp.asarray(rng.standard_normal(64), jnp.float32),
            "bias": jnp.asarray(rng.standard_normal(64), jnp.float32)}
  y = DyT(alpha_init=0.5, bias=True).apply({"params": params}, x)
  x64 = np.asarray(x, np.float64)
  want = np.tanh(0.7 * x64) * np.asarray(params["scale"], np.float64) + np.asarray(params["bias"], np.float64)
  assert y.dtype == jnp.bfloat16 and np.max(np.abs(np.asarray(y, np.float64) - want)) < 0.02 * np.abs(want).max()
  # in the model: the scanned block's two DyTs and the final one, besides the GELU's tanh in the compute dtype
  tokens = jnp.zeros((2, 16), jnp.int32)
  for stats, f32_count in (("float32", 3), ("compute", 0)):
    mcfg = configlib.model_config(tiny_config("pre_norm", 2, **{"model.dtype": "bfloat16", "model.norm": "dyt",
                                                                "model.kernels": "reference",
                                                                "model.norm_stats_dtype": stats}))
    p = jax.eval_shape(LM(mcfg).init, jax.random.key(0), tokens)["params"]
    dtypes = _tanh_dtypes(jax.make_jaxpr(lambda q: LM(mcfg).apply({"params": q}, tokens))(p).jaxpr)
    assert dtypes.count("float32") == f32_count and len(dtypes) == 4, (stats, dtypes)


def test_dyt_alpha_init_follows_the_side_of_each_norm():
  """The LLaMA recipe's three inits: attention-side (attn_norm, the QKV norms), FFN-side (mlp_norm and the rest),
  final; gamma = 1, no beta unless model.dyt.bias."""
  import flax
  over = {"model.norm": "dyt", "model.dyt.alpha_attn": 0.8, "model.dyt.alpha_ffn": 0.2, "model.dyt.alpha_final": 0.3}
  cases = {"pre_norm": {}, "hybrid_norm": {"model.hybrid_norm.first_pre_norm": True}, "hc": {"model.hc.n": 2}}
  for name, extra in cases.items():
    mcfg = configlib.model_config(tiny_config(name, 2, **over, **extra))
    params = flax.linen.unbox(jax.jit(LM(mcfg).init)(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))["params"])
    alphas = {"/".join(k): np.asarray(v) for k, v in flax.traverse_util.flatten_dict(params).items()
              if k[-1] == "alpha"}
    assert alphas, name
    for path, a in alphas.items():
      leaf = path.split("/")[-2]
      want = 0.3 if leaf == "final_norm" else 0.8 if leaf.startswith(("attn", "q_", "k_", "v_")) else 0.2
      np.testing.assert_array_equal(a, np.full(a.shape, want, np.float32), err_msg=f"{name} {path}")
    assert not any(k[-1] == "bias" for k in flax.traverse_util.flatten_dict(params) if "norm" in "/".join(k)), name
    assert name != "hybrid_norm" or any("q_norm" in p for p in alphas)


def test_derf_is_the_papers_form_in_float32_under_bf16():
  """Derf (arXiv 2512.10938): scale * erf(alpha x + shift) + bias, against float64 (scipy's erf); its erf in float32
  under bfloat16 compute unless model.norm_stats_dtype=compute."""
  from scipy.special import erf
  from resnorm.model.norms import Derf
  x = (jax.random.normal(jax.random.key(0), (4, 64)) * 3).astype(jnp.bfloat16)
  rng = np.random.default_rng(0)
  params = {"alpha": jnp.asarray(0.7), "shift": jnp.asarray(-0.4),
            "scale": jnp.asarray(rng.standard_normal(64), jnp.float32),
            "bias": jnp.asarray(rng.standard_normal(64), jnp.float32)}
  y = Derf().apply({"params": params}, x)
  x64 = np.asarray(x, np.float64)
  want = erf(0.7 * x64 - 0.4) * np.asarray(params["scale"], np.float64) + np.asarray(params["bias"], np.float64)
  assert y.dtype == jnp.bfloat16 and np.max(np.abs(np.asarray(y, np.float64) - want)) < 0.02 * np.abs(want).max()
  tokens = jnp.zeros((2, 16), jnp.int32)
  for stats, f32_count in (("float32", 3), ("compute", 0)):  # the scanned block's two Derfs and the final one
    mcfg = configlib.model_config(tiny_config("pre_norm", 2, **{"model.dtype": "bfloat16", "model.norm": "derf",
                                                                "model.kernels": "reference",
                                                                "model.norm_stats_dtype": stats}))
    p = jax.eval_shape(LM(mcfg).init, jax.random.key(0), tokens)["params"]
    dtypes = _tanh_dtypes(jax.make_jaxpr(lambda q: LM(mcfg).apply({"params": q}, tokens))(p).jaxpr, "erf")
    assert dtypes.count("float32") == f32_count and len(dtypes) == 3, (stats, dtypes)


def test_derf_inits_follow_the_side_of_each_norm_and_nothing_of_it_is_decayed():
  """alpha by side (attention, FFN, final) as DyT's, the shift at model.derf.shift, gamma 1, beta 0 (kept by default);
  none of alpha, shift, gamma, beta is weight-decayed (the authors' code decays no 1-D parameter)."""
  import flax
  from resnorm.step import optim
  over = {"model.norm": "derf", "model.derf.alpha_attn": 0.8, "model.derf.alpha_ffn": 0.2,
          "model.derf.alpha_final": 0.3, "model.derf.shift": 0.1}
  cfg = tiny_config("hybrid_norm", 2, **over, **{"model.hybrid_norm.first_pre_norm": True})
  mcfg = configlib.model_config(cfg)
  params = flax.linen.unbox(jax.jit(LM(mcfg).init)(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))["params"])
  flat = {"/".join(k): np.asarray(v) for k, v in flax.traverse_util.flatten_dict(params).items()}
  alphas = {k: v for k, v in flat.items() if k.endswith("/alpha")}
  assert alphas and any("q_norm" in k for k in alphas)
  for path, a in alphas.items():
    leaf = path.split("/")[-2]
    want = 0.3 if leaf == "final_norm" else 0.8 if leaf.startswith(("attn", "q_", "k_", "v_")) else 0.2
    np.testing.assert_array_equal(a, np.full(a.shape, want, np.float32), err_msg=path)
    np.testing.assert_array_equal(flat[path[:-len("alpha")] + "shift"], np.full(a.shape, 0.1, np.float32))
    np.testing.assert_array_equal(flat[path[:-len("alpha")] + "bias"], 0.0)
    np.testing.assert_array_equal(flat[path[:-len("alpha")] + "scale"], 1.0)
  mask = flax.traverse_util.flatten_dict(optim.decay_mask(params, cfg))
  assert not any(v for k, v in mask.items() if "norm" in "/".join(k)), [k for k, v in mask.items() if v]
  configlib.validate(tiny_config("pre_norm", **{"model.norm": "derf", "model.derf.bias": False}))
  mcfg = configlib.model_config(tiny_config("pre_norm", 2, **{"model.norm": "derf", "model.derf.bias": False}))
  params = flax.linen.unbox(jax.jit(LM(mcfg).init)(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))["params"])
  assert not any(k[-1] == "bias" for k in flax.traverse_util.flatten_dict(params) if "norm" in "/".join(k))


@pytest.mark.parametrize("norm,plain", [pytest.param("dyt", False, marks=pytest.mark.integration),
                                        pytest.param("dyt", True, marks=pytest.mark.integration),
                                        ("derf", None)])
def test_every_placement_runs_norm_free_but_ngpt_is_refused(norm, plain):
  """model.norm=dyt or derf under every variant that has norms: a finite forward; nGPT (no LayerNorm to replace)
  refused. DyT: the conftest.PLAIN_STREAM placements (`plain`) apart from the others."""
  from resnorm.model import residual
  from resnorm.core.errors import InputError
  from conftest import PLAIN_STREAM, init_and_apply
  names = sorted({v.name for v in residual.REGISTRY.values()})
  names = [n for n in names if plain is None or (n in PLAIN_STREAM) == plain]
  if norm == "derf":  # the same make_norm path as DyT's: a placement of each kind of state is enough
    names = ["pre_norm", "post_norm", "hc", "attn_res_block", "ngpt"]
  for name in names:
    cfg = tiny_config(name, 2, **{"model.norm": norm})
    if name == "ngpt":
      with pytest.raises(InputError, match="nGPT has no LayerNorm for an elementwise norm to replace"):
        configlib.validate(cfg)
      continue
    configlib.validate(cfg)
    _, _, _, logits = init_and_apply(cfg)
    assert np.isfinite(np.asarray(logits)).all(), name


@pytest.mark.parametrize("kernels_name", ["reference", "xla_cpu"])
def test_norm_project_follows_the_norm_stats_dtype(kernels_name):
  """HC's fused stream-norm projection (norm_project) honours model.norm_stats_dtype like every other norm: with
  `compute` its statistics are bfloat16's (the norm module, then the matmul), with `float32` the kernel's float32
  ones; on inputs whose bfloat16 statistics are coarse the two differ, and each equals its own path."""
  import flax.linen as nn
  import ml_collections
  from resnorm.model import kernels, norms

  class P(nn.Module):
    cfg: ml_collections.ConfigDict

    @nn.compact
    def __call__(self, x, w):
      return norms.norm_project(self.cfg, "n", x, w, kernels.get(kernels_name))

  class M(nn.Module):
    cfg: ml_collections.ConfigDict

    @nn.compact
    def __call__(self, x, w):
      return norms.make_norm(self.cfg, "n")(x).astype(jnp.float32).reshape(-1, x.shape[-1]) @ w

  x = (1000.0 + jax.random.normal(jax.random.key(0), (2, 3, 64)) * 3).astype(jnp.bfloat16)
  w = jax.random.normal(jax.random.key(1), (64, 6))
  out = {}
  for stats in ("float32", "compute"):
    cfg = ml_collections.ConfigDict({"norm": "layernorm", "norm_eps": 1e-5, "norm_stats_dtype": stats})
    params = P(cfg).init(jax.random.key(2), x, w)
    out[stats] = np.asarray(P(cfg).apply(params, x, w)).reshape(-1, 6)
    via_module = np.asarray(M(cfg).apply(params, x, w))
    np.testing.assert_allclose(out[stats], via_module, rtol=2e-2, atol=2e-2)
  assert np.max(np.abs(out["float32"] - out["compute"])) > 0.5
