"""Optimizer: schedules (warmup shape, decay end values), clipping, weight-decay mask, nGPT's renormalization."""
import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from conftest import param_shapes, tiny_config
from resnorm.config import configlib
from resnorm.step import optim


def _np_schedule(name, lr, warm, total, ratio):
  """The documented schedules written out: linear warmup 0 -> lr over `warm` steps, then the decay over the rest."""
  out = []
  for s in range(total + 1):
    if s < warm:
      out.append(lr * s / warm)
      continue
    k, rest = s - warm, total - warm
    if name == "cosine":
      out.append(lr * (ratio + (1 - ratio) * 0.5 * (1 + np.cos(np.pi * min(k, rest) / rest))))
    elif name == "linear":
      out.append(lr + (lr * ratio - lr) * min(k, rest) / rest)
    elif name == "rsqrt":
      out.append(lr / np.sqrt(1 + k / warm))
    else:
      out.append(lr)
  return np.array(out)


@pytest.mark.parametrize("name", configlib.SCHEDULES)
def test_schedule_warmup_then_decay(name):
  cfg = tiny_config(**{"train.steps": 100, "train.warmup_steps": 10, "train.lr": 1e-3, "train.schedule": name,
                       "train.min_lr_ratio": 0.1})
  sched = optim.schedule(cfg.train)
  lrs = np.array([float(sched(s)) for s in range(101)])
  np.testing.assert_allclose(lrs, _np_schedule(name, 1e-3, 10, 100, 0.1), rtol=1e-5, atol=1e-9)
  end = {"cosine": 1e-4, "linear": 1e-4, "constant": 1e-3, "rsqrt": 1e-3 / np.sqrt(1 + 90 / 10)}[name]
  np.testing.assert_allclose(lrs[100], end, rtol=1e-4)


def test_no_warmup_starts_at_peak():
  cfg = tiny_config(**{"train.warmup_steps": 0, "train.schedule": "constant", "train.lr": 3e-3})
  assert float(optim.schedule(cfg.train)(0)) == pytest.approx(3e-3)


def test_decay_mask_embeddings_optional():
  cfg = tiny_config("pre_norm")
  mask = optim.decay_mask(param_shapes(cfg), cfg)
  assert mask["embed"] is False and mask["head"] is True and mask["final_norm"]["scale"] is False
  assert mask["blocks"]["attn"]["q"] is True and mask["blocks"]["attn_norm"]["bias"] is False
  cfg.train.decay_embed = True
  assert optim.decay_mask(param_shapes(cfg), cfg)["embed"] is True


def test_weight_decay_only_touches_masked_params():
  cfg = tiny_config(**{"train.weight_decay": 0.5, "train.lr": 0.1, "train.warmup_steps": 0, "train.grad_clip": 1.0,
                       "train.schedule": "constant"})
  tx = optim.make(cfg)
  params = {"head": jnp.ones((2, 2)), "embed": jnp.ones((2, 2))}
  zero = jax.tree.map(jnp.zeros_like, params)
  updates, _ = tx.update(zero, tx.init(params), params)
  np.testing.assert_allclose(updates["head"], -0.1 * 0.5 * np.ones((2, 2)), rtol=1e-6)
  np.testing.assert_array_equal(updates["embed"], 0.0)


def test_ngpt_weights_stay_unit_norm_after_a_step():
  """nGPT's renormalization (the last transform): every listed matrix has unit norm along d_model after the update,
  in the stacked layout, while the other params move by AdamW alone."""
  from resnorm.model.residual.ngpt import UNIT_NORM
  cfg = tiny_config("ngpt", 2, **{"train.lr": 0.1, "train.warmup_steps": 0, "train.weight_decay": 0.0})
  shapes = param_shapes(cfg)
  leaves, tree = jax.tree.flatten(shapes)
  keys = jax.random.split(jax.random.key(0), 2 * len(leaves))
  params = jax.tree.unflatten(tree, [jax.random.normal(k, s.shape) for k, s in zip(keys, leaves)])
  grads = jax.tree.unflatten(tree, [jax.random.normal(k, s.shape) for k, s in zip(keys[len(leaves):], leaves)])
  tx, plain = optim.make(cfg), optim.make(tiny_config("pre_norm", 2, **{"train.lr": 0.1, "train.warmup_steps": 0,
                                                                        "train.weight_decay": 0.0}))
  step = lambda t: jax.jit(lambda p, g: optax.apply_updates(p, t.update(g, t.init(p), p)[0]))(params, grads)
  new, adam = step(tx), step(plain)
  # the d_model axis of each matrix, written from nGPT's definition (not read from the code under test)
  axes = {"embed": -1, "head": -2, "q": -3, "k": -3, "v": -3, "o": -1, "wi": -2, "wo": -1}
  assert set(axes) == {k for k, _ in UNIT_NORM}
  flat_new, flat_adam = (flax.traverse_util.flatten_dict(t) for t in (new, adam))
  assert {k[-1] for k in flat_new} >= set(axes) | {"alpha", "s_qk", "s_v", "s_z"}
  for path, w in flat_new.items():
    if path[-1] in axes:
      assert w.shape[axes[path[-1]]] == cfg.model.d_model, path
      np.testing.assert_allclose(np.linalg.norm(w, axis=axes[path[-1]]), 1.0, rtol=1e-5, err_msg=str(path))
    else:
      np.testing.assert_allclose(w, flat_adam[path], rtol=1e-6, err_msg=str(path))


# Leaf names that get weight decay, per variant, written from docs/usage.md ("weight matrices (q, k, v, o, MLP, head)
# and a variant's declared dynamic weights (HC's W, mHC's phi); never norms, gates, static HC matrices, or the
# embedding").
MATRICES = {"q", "k", "v", "o", "wi", "wo", "head"}
DECAYED = {"pre_norm": MATRICES, "post_norm": MATRICES, "peri_norm": MATRICES, "deepnorm": MATRICES,
           "rezero": MATRICES, "ln_scaling": MATRICES, "mix_ln": MATRICES,
           "hc": MATRICES | {"w_alpha", "w_beta"}, "mhc": MATRICES | {"phi"}, "mhc_lite": MATRICES | {"phi"},
           # Frac-Connections' dynamic weights as HC's (docs/variants.md); its static A and beta are not decayed
           "frac_hc": MATRICES | {"w_alpha", "w_beta"},
           "admin": MATRICES, "resi_dual": MATRICES, "hybrid_norm": MATRICES, "ngpt": MATRICES,
           # the DenseFormer authors' DWA weights are nn.Linear weights, decayed (residual/denseformer.py)
           "denseformer": MATRICES | {"alpha"}}


@pytest.mark.parametrize("name", sorted(DECAYED))
def test_decay_mask_is_the_readme_list(name):
  for over in ({}, {"model.pos": "learned", "model.tie_embed": True}):
    cfg = tiny_config(name, 2, **over)
    flat = flax.traverse_util.flatten_dict(optim.decay_mask(param_shapes(cfg), cfg))
    decayed = {k[-1] for k, v in flat.items() if v}
    kept = {k[-1] for k, v in flat.items() if not v}
    want = DECAYED[name] - ({"head"} if cfg.model.tie_embed else set())
    assert decayed == want and not decayed & kept, (name, decayed ^ want, decayed & kept)
    gate = {"rezero": "alpha", "ngpt": "alpha"}.get(name, "scale")
    assert "embed" in kept and gate in kept
    assert "pos_embed" in kept or cfg.model.pos == "rope"
