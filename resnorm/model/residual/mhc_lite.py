"""mHC-lite (Yang et al. 2026, "mHC-lite: You Don't Need 20 Sinkhorn-Knopp Iterations", arXiv 2601.05732; code
FFTYYY/mhc-lite): mHC (resnorm.model.residual.mhc) with H_res a convex combination of the n! permutation matrices,

    w     = softmax(a_res x' phi_res + b_res)          [n!]   (phi_res: nC x n! columns of phi)
    H_res = sum_k w_k P_k                                     exactly doubly stochastic: no Sinkhorn
    x <- H_res^T x + H_post^T F(N(H_pre x)),   H_pre, H_post, x', a and phi as mHC (Eq. 7-8)

P_k = I[perm_k] in the order of itertools.permutations(range(n)) (P_0 = I): P_k[i, j] = 1 iff j = perm_k(i), the
authors' `get_all_permutations`. The residual streams are mixed as the authors' code mixes them
(`einsum(alpha, residuals, '... s t, ... s d -> ... t d')`): out_t = sum_s H_res[s, t] x_s, i.e. H_res^T x, so
(H_res^T x)_t = sum_k w_k x_{perm_k^-1(t)} and the weight w_k of a checkpoint means what it means in the authors'
code. (Mixing with H_res x instead spans the same models, since the permutations are closed under inversion, but
puts w_k on the inverse permutation; resnorm did that before 2026-12-01, and `model.mhc_lite.mix=direct` keeps
that form: a config stored before the setting existed reads as `direct`, so an old checkpoint is evaluated as the
function it trained and is never silently resumed under the new convention.) The `mix` tap is the matrix acting from
the left, H_res^T (H_res under `direct`). Config `model.mhc_lite.*`; n = 4 is the paper's (24 permutations); n is limited to 1..5 (n!
columns of phi).

Init (`res_logit`, `pre_logit`): b_res = 0 on the identity permutation and -res_logit on the others (8: weight
0.992 on I, as the authors' static logits 0 / -8), b_pre = +/- pre_logit one-hot on stream k mod n (mHC's
`identity` init), b_post = 0 and phi = 0, so the model equals Pre-Norm at init exactly (identical streams, H_res
rows summing to 1, H_pre x absorbed by the block norm). Deviation: the authors' code starts H_post at
2 sigmoid(+/-1) (one-hot-like) and H_pre at sigmoid(+/-1), which is not Pre-Norm at init.
"""
import itertools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from resnorm.core.errors import check
from resnorm.model.residual.base import Variant, register
from resnorm.model.residual.mhc import ROLES, ManifoldHyperConnection, one_hot_pre


def permutation_matrices(n: int) -> np.ndarray:
  """[n!, n, n]: row i of P_k is e_{perm_k(i)}, permutations in itertools order (the identity first)."""
  return np.eye(n, dtype=np.float32)[np.array(list(itertools.permutations(range(n))))]


class MHCLite(ManifoldHyperConnection):
  section = "mhc_lite"

  def _res_shape(self, n: int) -> tuple:
    return (math.factorial(n),)

  def _inits(self, mc, n: int, d: int, sub):
    b_pre = one_hot_pre(mc, n, sub)
    b_res = lambda _rng, shape: -mc.res_logit * (1.0 - jax.nn.one_hot(0, shape[0], dtype=jnp.float32))
    return nn.initializers.zeros, b_pre, b_res

  def _h_res(self, kern, mc, logits_BTr, b_res):
    """The left-acting mixing (the parent computes out = H x with what this returns): H_res^T = sum_k w_k P_k^T
    (`mix=transpose`), or H_res itself (`mix=direct`)."""
    w = jax.nn.softmax(logits_BTr + b_res[None, None], axis=-1)
    spec = "btk,kji->btij" if mc.mix == "transpose" else "btk,kij->btij"
    return jnp.einsum(spec, w, jnp.asarray(permutation_matrices(mc.n)))


def params_per_sublayer(cfg) -> int:
  n = cfg.mhc_lite.n
  k = math.factorial(n) + 2 * n
  return n * cfg.d_model * k + k + 3


def flops_per_sublayer(cfg) -> int:
  """Forward FLOPs per token: x' phi, H_pre x, H_res x, H_post^T y, and sum_k w_k P_k."""
  n, d = cfg.mhc_lite.n, cfg.d_model
  r = math.factorial(n)
  return 2 * n * d * (r + 2 * n) + 2 * n * d + 2 * n * n * d + 2 * n * d + 2 * r * n * n


MIXES = ("transpose", "direct")


def _check(cfg):
  check(1 <= cfg.mhc_lite.n <= 5, f"model.mhc_lite.n={cfg.mhc_lite.n} must be in 1..5 (n! permutation matrices)")
  check(cfg.mhc_lite.mix in MIXES, f"model.mhc_lite.mix={cfg.mhc_lite.mix!r} is unknown; known: {', '.join(MIXES)}")


register(Variant(
    "mhc_lite", MHCLite, streams=lambda cfg: cfg.mhc_lite.n, decay=("phi",), check=_check,
    roles=ROLES,
    extra_params=lambda cfg: 2 * cfg.num_layers * params_per_sublayer(cfg),
    extra_flops=lambda cfg: 2 * cfg.num_layers * flops_per_sublayer(cfg)))
