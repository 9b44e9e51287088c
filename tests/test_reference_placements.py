"""admin, resi_dual, hybrid_norm, denseformer, ngpt, mhc_lite against the float64 NumPy reference
(tests/np_reference_placements.py), at perturbed params: logits, loss, and gradients against central finite
differences of the reference loss. Admin's profiled omegas against the reference profiling pass.

Params are drawn by the model's init and every leaf is perturbed with non-symmetric noise, so that identity-like
inits (DWA weights, permutation weights peaked on I, unit-norm nGPT weights) cannot hide a wrong term. Tolerances
as tests/test_reference.py: logits 1e-4 of max|ref|, loss 1e-5 relative, gradients 2e-3 relative + 1e-3 of the
leaf's max |g| + 1e-7 (a gradient that is 0 exactly, as for the last sublayer's H_res of mHC-lite, whose rows and
columns sum to 1 so the final stream sum cannot see it, comes back from float32 as ~1e-8).
"""
import functools
import zlib

import flax
import jax
import numpy as np
import pytest

import np_reference_placements as ref
from conftest import tiny_config
from resnorm import configlib, optim, step
from resnorm.model import LM
from resnorm.residual import admin

B, T = 3, 12
LOGIT_TOL, LOSS_TOL, GRAD_RTOL, GRAD_ATOL, GRAD_FLOOR = 1e-4, 1e-5, 2e-3, 1e-3, 1e-7

# one case per variant; between them: rope and learned positions, layernorm and rmsnorm, HybridNorm* (both segments)
CASES = {
    "admin": (3, {"model.norm": "rmsnorm", "model.pos": "learned"}),
    "resi_dual": (2, {}),
    "hybrid_norm": (3, {"model.hybrid_norm.first_pre_norm": True, "model.norm": "rmsnorm"}),
    "denseformer": (3, {}),
    "ngpt": (2, {}),
    "mhc_lite": (2, {"model.pos": "learned"}),
}
WEIGHTS = {"embed", "pos_embed", "head", "q", "k", "v", "o", "wi", "wo", "phi"}


def _perturb(params, d_model, rng):
  def noise(path, a):
    a, name = np.asarray(a, np.float64), path[-1].key
    if name in WEIGHTS:
      rms = float(np.sqrt(np.mean(a ** 2)))
      std = 0.5 * rms if rms > 0 else 0.5 / np.sqrt(d_model)
    else:
      std = 1.0 if name == "b_res" else 0.3
    return (a + std * rng.standard_normal(a.shape)).astype(np.float32)
  return jax.tree_util.tree_map_with_path(noise, params)


def _batch(rng):
  tokens = rng.integers(0, 256, (B, T)).astype(np.int32)
  targets = rng.integers(0, 256, (B, T)).astype(np.int32)
  mask = np.ones((B, T), np.float32)
  mask[1, 7:] = 0.0
  return {"inputs": tokens, "targets": targets, "mask": mask}


@functools.lru_cache(maxsize=None)
def _case(name):
  layers, over = CASES[name]
  mcfg = configlib.model_config(tiny_config(name, layers, **over))
  rng = np.random.default_rng(zlib.crc32(name.encode()))
  batch = _batch(rng)
  params = flax.linen.unbox(LM(mcfg).init(jax.random.key(0), batch["inputs"][:1])["params"])
  params = _perturb(jax.device_get(params), mcfg.d_model, rng)

  @jax.jit
  def run(p, batch):
    logits = LM(mcfg).apply({"params": p}, batch["inputs"])[0]
    loss, grads = jax.value_and_grad(step.make_loss_fn(mcfg))(p, batch)
    return logits, loss, grads

  logits, loss, grads = jax.device_get(run(params, batch))
  p64 = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
  return mcfg, p64, batch, np.asarray(logits, np.float64), float(loss), grads


def _flat(tree):
  return flax.traverse_util.flatten_dict(tree)


def _replace(tree, path, value):
  if len(path) == 1:
    return {**tree, path[0]: value}
  return {**tree, path[0]: _replace(tree[path[0]], path[1:], value)}


OWN = ("_res", "qkv", "hidden", "after_block", "logit_scale", "dual_norm")


@pytest.mark.parametrize("name", ref.VARIANTS)
def test_logits_loss_and_grads_match_reference(name):
  mcfg, params, batch, logits, loss, grads = _case(name)
  want = ref.forward(params, mcfg, batch["inputs"])
  np.testing.assert_allclose(logits, want, rtol=0, atol=LOGIT_TOL * np.abs(want).max(), err_msg=f"{name} logits")
  ref_loss = lambda p: ref.cross_entropy(ref.forward(p, mcfg, batch["inputs"]), batch["targets"], batch["mask"])
  np.testing.assert_allclose(loss, ref_loss(params), rtol=LOSS_TOL, err_msg=f"{name} loss")
  # gradients: attention q, MLP wi, the embedding and every param of the variant's own, by central differences
  flat, grads, rng, h = _flat(params), _flat(grads), np.random.default_rng(1), 1e-5
  paths = [p for p in flat if p[-1] in ("q", "wi", "embed") or any(part.endswith(OWN) for part in p)]
  bad = []
  for path in paths:
    a, g = flat[path], np.asarray(grads[path], np.float64)
    gmax = np.abs(g).max()
    for idx in {np.unravel_index(np.argmax(np.abs(g)), g.shape), tuple(rng.integers(0, s) for s in g.shape)}:
      def at(delta):
        b = a.copy()
        b[idx] += delta
        return ref_loss(_replace(params, path, b))
      fd = (at(h) - at(-h)) / (2 * h)
      if abs(g[idx] - fd) > GRAD_RTOL * abs(fd) + GRAD_ATOL * gmax + GRAD_FLOOR:
        bad.append(f"{'/'.join(path)}{list(map(int, idx))}: model {g[idx]:.6g}, finite difference {fd:.6g}")
  assert not bad, f"{name}: " + "; ".join(bad)


def test_admin_profiled_omegas_match_reference_and_are_deterministic():
  """init_state's omegas = the reference profiling pass on LM.init's params (omega = 1) and the same batch."""
  cfg = tiny_config("admin", 3, **{"model.admin.profile_batch": 2})
  mcfg = configlib.model_config(cfg)
  init = jax.jit(lambda r: flax.linen.unbox(step.init_state(cfg, mcfg, _tx(), r, 16))["params"])
  params = jax.device_get(init(jax.random.key(3)))
  base = jax.device_get(flax.linen.unbox(LM(mcfg).init(jax.random.split(jax.random.key(3))[0],
                                                       np.zeros((1, 16), np.int32))["params"]))
  tokens = np.asarray(admin.profile_tokens(jax.random.split(jax.random.key(3))[0], 2, 16))
  want = ref.admin_profile(jax.tree.map(lambda a: np.asarray(a, np.float64), base), mcfg, tokens)
  got = np.stack([params["blocks"]["attn_res"]["omega"][:, 0], params["blocks"]["mlp_res"]["omega"][:, 0]], 1)
  np.testing.assert_allclose(got, want, rtol=1e-5)
  assert want[0, 0] == 1.0 and np.all(np.diff(want.reshape(-1)) > 0)  # variance accumulates
  np.testing.assert_array_equal(jax.device_get(init(jax.random.key(3))["blocks"]["mlp_res"]["omega"]),
                                params["blocks"]["mlp_res"]["omega"])


def _tx():
  return optim.make(tiny_config("admin"))
