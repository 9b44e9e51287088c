"""The depth-mixing matrix M[l, j]: the weight with which sublayer l's input carries source j, where source 0 is the
embedding and source j >= 1 is the output of sublayer j - 1 (docs/diagnostics.md, "The depth-mixing matrix").

One estimator serves every placement, so their pictures are comparable. On a batch, sublayer l's input u_l (the
`u` tap: the branch input before the sublayer's own norm) is regressed on the sources it can read, with one
coefficient per source shared by all tokens and channels:

    M[l, :l+1] = argmin_m  sum_{b,t} || u_l - sum_{j<=l} m_j s_j ||^2          (ordinary least squares)

Where a placement's connection is linear with token-independent weights (Pre-Norm, ReZero, HC and mHC without their
dynamic terms, DenseFormer, LAuReL's RW and PA weights) u_l is exactly such a sum, and the fit recovers the weights
(Pre-Norm: all ones below the diagonal; HC: the products of its A and B, tested against the parameters) with R^2 = 1.
Where the connection passes through a norm (Post-Norm, DeepNorm) or its weights depend on the input (AttnRes,
MUDDFormer, dynamic HC) the fit is a measured linearization on the batch, and R^2 < 1 says how much of u_l it leaves
out. The jitted part only accumulates the moments ([S+1, S+1] and [S, S+1]); the solve runs on the host in float64.
"""
import jax
import jax.numpy as jnp
import numpy as np

_HI = jax.lax.Precision.HIGHEST


def moments(embed_BTD: jax.Array, u_SBTD: jax.Array, f_SBTD: jax.Array) -> dict:
  """The regression's sufficient statistics, summed over the batch's tokens and channels: `gram` [S+1, S+1] between
  the sources, `cross` [S, S+1] between the inputs and the sources, `usq` [S] of the inputs."""
  src = jnp.concatenate([embed_BTD[None], f_SBTD], axis=0).astype(jnp.float32)
  u = u_SBTD.astype(jnp.float32)
  return {"gram": jnp.einsum("jbtd,kbtd->jk", src, src, precision=_HI),
          "cross": jnp.einsum("lbtd,jbtd->lj", u, src, precision=_HI),
          "usq": jnp.einsum("lbtd,lbtd->l", u, u, precision=_HI)}


def solve(gram, cross, usq) -> tuple[np.ndarray, np.ndarray]:
  """(M [S, S+1] with zeros above row l's last source l, R^2 [S] of each row's fit), in float64."""
  g, c, uu = (np.asarray(a, np.float64) for a in (gram, cross, usq))
  s = c.shape[0]
  m, r2 = np.zeros((s, s + 1)), np.zeros(s)
  for l in range(s):
    k = l + 1
    coef = np.linalg.lstsq(g[:k, :k], c[l, :k], rcond=1e-10)[0]
    m[l, :k] = coef
    resid = uu[l] - 2.0 * coef @ c[l, :k] + coef @ g[:k, :k] @ coef
    r2[l] = 1.0 - max(resid, 0.0) / uu[l] if uu[l] > 0 else 1.0
  return m, r2
