"""Model: shapes, causality, scan == loop, remat == no remat, equations vs NumPy, paired init."""
import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import apply_fn, init_and_apply, init_params, representative, tiny_config
from resnorm.config import configlib
from resnorm.model import residual
from resnorm.model.model import LM

VARIANTS = sorted({v.name for v in residual.REGISTRY.values()})


def _init(cfg, seed=0, t=16):
  return init_params(cfg, seed, t=t)


def _logits(mcfg, params, tokens):
  return apply_fn(mcfg)(params, tokens)


# every placement's logits also match its float64 reference (causal by construction) in `make test`
@pytest.mark.parametrize("name", representative(VARIANTS, keep=("mudd",)))
def test_forward_shapes_and_causality(name):
  mcfg, params, tokens, logits = init_and_apply(tiny_config(name, 4))  # its forward: one trace, not two
  assert logits.shape == (2, 16, mcfg.vocab_size) and logits.dtype == jnp.float32
  assert bool(jnp.all(jnp.isfinite(logits)))
  changed = tokens.at[:, 9].set((tokens[:, 9] + 1) % 256)
  logits2 = _logits(mcfg, params, changed)
  np.testing.assert_array_equal(np.asarray(logits[:, :9]), np.asarray(logits2[:, :9]))
  assert not np.allclose(logits[:, 9:], logits2[:, 9:])


def _unstack(params, cfg):
  """Scanned layout {seg: stacked} -> loop layout {seg_i: layer i}."""
  out = {k: v for k, v in params.items()}
  for name, length, _ in residual.get(cfg.model.residual).layer_segments(cfg.model):
    stacked = out.pop(name)
    for i in range(length):
      out[f"{name}_{i}"] = jax.tree.map(lambda a, i=i: a[i], stacked)
  return out


@pytest.mark.parametrize("name", representative(["pre_norm", "mix_ln", "hc", "mhc", "attn_res_block", "laurel",
                                                  "value_residual", "mudd", "keel", "ddl", "kromhc", "resid_lambdas",
                                                  "delta_attn_res", "delta_attn_res_block"], keep=("mix_ln",)))
def test_scan_equals_loop(name):
  cfg = tiny_config(name, 4)
  mcfg, params, tokens = _init(cfg)
  loop_cfg = tiny_config(name, 4, **{"model.scan_layers": False})
  loop_mcfg, loop_params, _ = _init(loop_cfg)
  converted = _unstack(params, cfg)
  # base weights are keyed by layer index, not module path: the loop draws the same ones (the same random
  # bits; init compiled inside and outside scan may round the normal transform differently in the last ulp)
  np.testing.assert_allclose(loop_params[f"{_first_segment(cfg)}_0"]["attn"]["q"],
                             converted[f"{_first_segment(cfg)}_0"]["attn"]["q"], rtol=1e-6)
  np.testing.assert_allclose(_logits(mcfg, params, tokens), _logits(loop_mcfg, converted, tokens),
                             rtol=1e-5, atol=1e-5)


def _first_segment(cfg):
  return residual.get(cfg.model.residual).layer_segments(cfg.model)[0][0]


@pytest.mark.parametrize("name,policy", [("hc", "full"), ("hc", "dots"), pytest.param("attn_res", "full", marks=pytest.mark.integration),
                                         ("laurel", "full"), ("value_residual", "dots"),
                                         pytest.param("mudd", "full", marks=pytest.mark.integration),
                                         *[pytest.param(n, p, marks=pytest.mark.integration) for n, p in (
                                             ("keel", "full"), ("ddl", "dots"), ("kromhc", "full"),
                                             ("resid_lambdas", "dots"), ("delta_attn_res", "full"),
                                             ("delta_attn_res_block", "dots"))]])
def test_remat_equals_no_remat(name, policy):
  cfg = tiny_config(name, 3, **{"model.remat": "none"})
  mcfg, params, tokens = _init(cfg)
  remat_mcfg = configlib.model_config(tiny_config(name, 3, **{"model.remat": policy}))

  def loss(m, p):
    return jnp.mean(jax.nn.log_softmax(_logits(m, p, tokens))[..., 7])

  l1, g1 = jax.value_and_grad(lambda p: loss(mcfg, p))(params)
  l2, g2 = jax.value_and_grad(lambda p: loss(remat_mcfg, p))(params)
  np.testing.assert_allclose(l1, l2, rtol=1e-6)
  for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7)


def _np_norm(x, scale, bias, eps=1e-5):
  mu = x.mean(-1, keepdims=True)
  return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * scale + bias


def _np_attn(x, p):
  q, k, v = (np.einsum("btd,dhk->bthk", x, p[n]) for n in "qkv")
  t, kd = x.shape[1], q.shape[-1]
  s = np.einsum("bqhk,bshk->bhqs", q, k) / np.sqrt(kd) + np.triu(np.full((t, t), -np.inf), 1)
  w = np.exp(s - s.max(-1, keepdims=True))
  w /= w.sum(-1, keepdims=True)
  return np.einsum("bhqs,bshk,hkd->bqd", w, v, p["o"])


def _np_mlp(x, p):
  h = x @ p["wi"]
  return (0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))) @ p["wo"]


@pytest.mark.parametrize("name", ["pre_norm", "post_norm"])
def test_one_block_matches_numpy(name):
  """x <- x + F(N(x)) (+ final N) and x <- N(x + F(x)), written out in NumPy (learned positions, no RoPE)."""
  cfg = tiny_config(name, 1, **{"model.pos": "learned"})
  mcfg, params, tokens = _init(cfg)
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
  blk = jax.tree.map(lambda a: a[0], p["blocks"])
  x = p["embed"][np.asarray(tokens)] + p["pos_embed"][None, :16]
  for kind, f in (("attn", _np_attn), ("mlp", _np_mlp)):
    nrm = lambda h: _np_norm(h, blk[f"{kind}_norm"]["scale"], blk[f"{kind}_norm"]["bias"])
    x = x + f(nrm(x), blk[kind]) if name == "pre_norm" else nrm(x + f(x, blk[kind]))
  if name == "pre_norm":
    x = _np_norm(x, p["final_norm"]["scale"], p["final_norm"]["bias"])
  np.testing.assert_allclose(_logits(mcfg, params, tokens), x @ p["head"], rtol=2e-4, atol=2e-4)


def _params(cfg):
  """The init only, as test_forward_shapes_and_causality's at the same depth: the compiled init is shared through
  the suite's compilation cache."""
  return init_params(cfg)[1]


@pytest.mark.parametrize("name", representative(VARIANTS, keep=("deepnorm", "mix_ln", "mhc")))
def test_paired_init_base_weights_identical_across_variants(name):
  flat = flax.traverse_util.flatten_dict(_params(tiny_config("pre_norm", 4)))
  params = _params(tiny_config(name, 4))
  scales = residual.get(name).init_scales(configlib.model_config(tiny_config(name, 4)))
  other = flax.traverse_util.flatten_dict(params)
  stacked = {}
  for k, v in other.items():  # Mix-LN's segments, concatenated, are the single stack
    if k[0].startswith("blocks_"):
      stacked.setdefault(("blocks",) + k[1:], []).append(v)
    else:
      stacked[k] = v
  other = {k: (jnp.concatenate(v) if isinstance(v, list) else v) for k, v in stacked.items()}
  for key in [k for k in flat if k[-1] in ("embed", "head", "q", "k", "v", "o", "wi", "wo")]:
    scale = scales.get(key[-1], 1.0)
    if scale == 1.0:
      np.testing.assert_array_equal(other[key], flat[key], err_msg=f"{name} {key}")
    else:  # the same draws, rescaled (DeepNorm's beta); the product rounds differently in the last ulp
      np.testing.assert_allclose(other[key], flat[key] * scale, rtol=1e-6, err_msg=f"{name} {key}")


def test_unknown_residual_lists_known_names():
  with pytest.raises(Exception, match="known: .*hc.*pre_norm"):
    _init(tiny_config("nope"))




@pytest.mark.parametrize("init,resid_std,other_std", [
    ("gpt2", 0.02 / 4.0, 0.02),    # L = 8: residual-output projections (attention o, MLP wo) at 0.02 / sqrt(2L)
    ("normal", 0.02, 0.02),        # no depth scaling
])
def test_gpt2_init_scales_residual_outputs_by_one_over_sqrt_2L(init, resid_std, other_std):
  """`model.init=gpt2` (Radford et al. 2019) built at 8 layers: the std of attention o and MLP wo is 0.02 / 4 (hand
  value of 0.02 / sqrt(2 * 8)), every other matrix and the embedding 0.02. Sample stds over >= 8k draws each, to 4%
  (1/sqrt(L) would give 0.0071, 1/(2L) 0.00125)."""
  cfg = tiny_config("pre_norm", 8, **{"model.init": init})
  init = jax.jit(LM(configlib.model_config(cfg)).init)
  params = flax.linen.unbox(init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32)))
  p = params["params"]
  stds = {"o": p["blocks"]["attn"]["o"], "wo": p["blocks"]["mlp"]["wo"], "q": p["blocks"]["attn"]["q"],
          "v": p["blocks"]["attn"]["v"], "wi": p["blocks"]["mlp"]["wi"], "embed": p["embed"], "head": p["head"]}
  for name, a in stds.items():
    a = np.asarray(a, np.float64)
    assert a.size >= 8000, name
    want = resid_std if name in ("o", "wo") else other_std
    assert abs(a.mean()) < 0.1 * want and a.std() == pytest.approx(want, rel=0.04), (name, a.std(), want)


def test_remat_dots_keeps_the_depth_stores_weighted_reads(capsys):
  """model.remat=dots saves the depth store's weighted reads (`depth_read`), contractions over the slots like the
  dots it saves, so the backward does not re-read the whole store to recompute them; remat=full saves nothing."""
  from resnorm.model.depth_store import Store
  from resnorm.model.model import REMAT_POLICIES
  buf, w = jnp.ones((3, 1, 2, 4)), jnp.ones((1, 3, 1, 2))

  def read(buf, w):
    return jnp.sum(jnp.sin(Store(x=buf[0], buf=buf, kernels="reference").weighted(w)))
  for policy, kept in (("dots", True), ("full", False)):
    jax.ad_checkpoint.print_saved_residuals(jax.checkpoint(read, policy=REMAT_POLICIES[policy]), buf, w)
    assert ("[1,1,2,4] named 'depth_read'" in capsys.readouterr().out) == kept, policy
