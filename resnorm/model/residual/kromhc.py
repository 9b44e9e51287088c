"""KromHC (arXiv 2601.21579; code wz1119/KromHC, hyper_conn/Kromhc.py): mHC (resnorm.model.residual.mhc) whose
residual mixing is a Kronecker product of K = log2(n) doubly stochastic 2 x 2 factors, each a convex combination of
the two permutations of two streams (the identity and the swap):

    p_k   = softmax(a_res x' phi_res + b_res)_{k, 0}                 [K]      (phi_res: nC x 2K columns of phi)
    U_k   = [[p_k, 1 - p_k], [1 - p_k, p_k]]
    H_res = U_0 (x) U_1 (x) ... (x) U_{K-1}                         [n, n]   exactly doubly stochastic, symmetric
    x <- H_res x + H_post^T F(N(H_pre x)),    H_pre, H_post, x', a and phi as mHC (Eq. 7-8)

U_0 is the outermost factor (stream index bits, most significant first), as the authors' iterated Kronecker product.
Their code mixes out_t = sum_s H[s, t] x_s (H^T x); H is symmetric, so that is H x. n must be a power of 2 (their
assert). Params per sublayer: nC (2n + 2K) for phi (mHC: nC (2n + n^2)), 2n + 2K biases, 3 gates.

Init (`res_logit`, `pre_logit`): b_res = (0, -res_logit) per factor (the authors' static logits 0 / -8: p_k =
sigmoid(8) = 0.99966), b_pre = +/- pre_logit one-hot on stream k mod n, b_post = 0 and phi = 0, so the model equals
Pre-Norm at init exactly, as mHC's `identity` init and mHC-lite. Deviation: the authors' code starts H_pre at
sigmoid(+/-1) and H_post at 2 sigmoid(+/-1), one-hot on a stream drawn at random per sublayer (their
`init_residual_index` when no layer index is passed), which is not Pre-Norm at init; and their stream RMSNorm has a
learned gain (gamma + 1, gamma = 0 at init), which phi absorbs here as in mHC.
"""
import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from resnorm.core.errors import check
from resnorm.model.residual.base import Variant, register
from resnorm.model.residual.mhc import ROLES, ManifoldHyperConnection, one_hot_pre


def factors(n: int) -> int:
  return int(round(math.log2(n)))


def kron_factors(p_BTK: jax.Array) -> jax.Array:
  """[B, T, 2^K, 2^K]: U_0 (x) ... (x) U_{K-1}, U_k = [[p_k, 1 - p_k], [1 - p_k, p_k]] (K = 0: [[1]])."""
  b, t, k = p_BTK.shape
  h = jnp.ones((b, t, 1, 1), p_BTK.dtype)
  for i in range(k):
    p = p_BTK[:, :, i, None, None]
    eye = jnp.eye(2, dtype=p.dtype)[None, None]
    u = p * eye + (1.0 - p) * (1.0 - eye)
    m = h.shape[-1]
    h = (h[:, :, :, None, :, None] * u[:, :, None, :, None, :]).reshape(b, t, 2 * m, 2 * m)
  return h


class KromHC(ManifoldHyperConnection):
  section = "kromhc"

  def _res_shape(self, n: int) -> tuple:
    return (factors(n), 2)

  def _inits(self, mc, n: int, d: int, sub):
    b_pre = one_hot_pre(mc, n, sub)
    b_res = lambda _rng, shape: jnp.tile(jnp.array([0.0, -mc.res_logit], jnp.float32), (shape[0], 1))
    return nn.initializers.zeros, b_pre, b_res

  def _h_res(self, kern, mc, logits_BTr, b_res):
    b, t, k = logits_BTr.shape[0], logits_BTr.shape[1], b_res.shape[0]
    w = jax.nn.softmax(logits_BTr.reshape(b, t, k, 2) + b_res[None, None], axis=-1)
    return kron_factors(w[..., 0])


def params_per_sublayer(cfg) -> int:
  n = cfg.kromhc.n
  k = 2 * factors(n) + 2 * n
  return n * cfg.d_model * k + k + 3


def flops_per_sublayer(cfg) -> int:
  """Forward FLOPs per token: x' phi, H_pre x, H_res x, H_post^T y, and the Kronecker product."""
  n, d = cfg.kromhc.n, cfg.d_model
  return 2 * n * d * (2 * factors(n) + 2 * n) + 2 * n * d + 2 * n * n * d + 2 * n * d + 2 * n * n


def _check(cfg):
  n = cfg.kromhc.n
  check(isinstance(n, int) and n >= 1 and n & (n - 1) == 0,
        f"model.kromhc.n={n!r} must be a power of 2 (H_res is a Kronecker product of 2 x 2 factors)")
  check(cfg.kromhc.res_logit >= 0, f"model.kromhc.res_logit={cfg.kromhc.res_logit} must be >= 0")


register(Variant(
    "kromhc", KromHC, streams=lambda cfg: cfg.kromhc.n, decay=("phi",), check=_check,
    roles=ROLES,
    extra_params=lambda cfg: 2 * cfg.num_layers * params_per_sublayer(cfg),
    extra_flops=lambda cfg: 2 * cfg.num_layers * flops_per_sublayer(cfg)))
