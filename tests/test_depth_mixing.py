"""The depth-mixing matrix (resnorm.model.depth_mixing): exact for Pre-Norm, HC's A and B products from its
parameters, and the float64 least-squares fit of the taps for a placement where it is only a linearization."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import init_params, tiny_config
from resnorm.model import depth_mixing
from resnorm.model.model import LM

L = 3


def _mixing(cfg, params=None):
  mcfg, p0, tokens = init_params(cfg, batch=2, t=16)
  params = p0 if params is None else params(p0)
  _, taps = jax.jit(lambda p, x: LM(mcfg, collect=True).apply({"params": p}, x))(params, tokens)
  mom = jax.device_get(jax.jit(depth_mixing.moments)(taps["embed"], taps["u"], taps["f"]))
  return (*depth_mixing.solve(**mom), jax.device_get(taps), params)


def test_pre_norm_is_ones_below_the_diagonal():
  m, r2, _, _ = _mixing(tiny_config("pre_norm", L))
  s = 2 * L
  np.testing.assert_allclose(m, np.tril(np.ones((s, s + 1))), atol=2e-4)
  np.testing.assert_allclose(r2, 1.0, atol=1e-5)


def _hc_expected(params, n):
  """HC (Zhu et al., Alg. 2) as a recursion on coefficients, from the static A and B alone: stream r holds
  sum_j c[r, j] s_j; sublayer k reads u_k = sum_m alpha_k[m, 0] H_m and writes
  H'_r = sum_m alpha_k[m, 1 + r] H_m + beta_k[r] f_k."""
  blocks = params["blocks"]
  alphas, betas = [], []
  for layer in range(L):
    for kind in ("attn", "mlp"):
      alphas.append(np.asarray(blocks[f"{kind}_res"]["static_alpha"][layer], np.float64))
      betas.append(np.asarray(blocks[f"{kind}_res"]["static_beta"][layer], np.float64))
  s = 2 * L
  c = np.zeros((n, s + 1))
  c[:, 0] = 1.0
  m = np.zeros((s, s + 1))
  for k in range(s):
    m[k] = alphas[k][:, 0] @ c
    c = alphas[k][:, 1:].T @ c
    c[:, k + 1] += betas[k]
  return m


def test_static_hc_is_the_product_of_its_a_and_b():
  n = 2
  def randomize(p):
    key = iter(jax.random.split(jax.random.key(7), 8))
    blocks = dict(p["blocks"])
    for kind in ("attn", "mlp"):
      res = dict(blocks[f"{kind}_res"])
      for name in ("static_alpha", "static_beta"):
        res[name] = res[name] + 0.4 * jax.random.normal(next(key), res[name].shape)
      blocks[f"{kind}_res"] = res
    return {**p, "blocks": blocks}
  cfg = tiny_config("hc", L, **{"model.hc.n": n, "model.hc.dynamic": False})
  m, r2, _, params = _mixing(cfg, randomize)
  expected = _hc_expected(params, n)
  assert np.abs(expected - np.tril(np.ones_like(expected))).max() > 0.3       # not Pre-Norm's any more
  np.testing.assert_allclose(m, expected, atol=2e-3)
  np.testing.assert_allclose(r2, 1.0, atol=1e-5)


def test_post_norm_is_the_least_squares_fit_of_the_taps():
  """Through a norm the matrix is a linearization: the same float64 regression on the raw taps, with R^2 < 1."""
  m, r2, taps, _ = _mixing(tiny_config("post_norm", L))
  src = np.concatenate([np.asarray(taps["embed"])[None], np.asarray(taps["f"])], 0).astype(np.float64)
  u = np.asarray(taps["u"], np.float64)
  for l in range(2 * L):
    a = src[: l + 1].reshape(l + 1, -1).T
    coef, *_ = np.linalg.lstsq(a, u[l].reshape(-1), rcond=None)
    np.testing.assert_allclose(m[l, : l + 1], coef, atol=2e-3)
    assert np.all(m[l, l + 1:] == 0)
    resid = u[l].reshape(-1) - a @ coef
    np.testing.assert_allclose(r2[l], 1 - resid @ resid / (u[l] ** 2).sum(), atol=1e-4)
  assert r2[1:].min() < 0.999 and np.abs(m - np.tril(np.ones_like(m))).max() > 0.05


def test_solve_keeps_a_source_that_repeats_another_finite():
  """Two identical sources (a collapsed layer) make the Gram matrix singular: the minimum-norm fit, not NaN."""
  e = np.random.default_rng(0).normal(size=(1, 2, 4, 8))
  f = np.concatenate([e, e], 0)
  u = np.concatenate([e, 3 * e], 0)
  mom = depth_mixing.moments(jnp.asarray(e[0]), jnp.asarray(u), jnp.asarray(f))
  m, r2 = depth_mixing.solve(**mom)
  assert np.isfinite(m).all()
  np.testing.assert_allclose(m[1].sum(), 3.0, atol=1e-4)
  np.testing.assert_allclose(r2, 1.0, atol=1e-5)
