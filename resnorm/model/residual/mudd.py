"""MUDDFormer, multiway dynamic dense connections (Xiao et al., arXiv 2502.12170, ICML 2025): each block reads its
query, key, value and residual inputs as four separate, per-token weightings of the embedding and every earlier
block's output, on Pre-Norm blocks. Blocks l = 0 .. L-1, X_0 the embedding, X_{l+1} block l's output:

    A_l(X_l) = GELU(RMSNorm(X_l) W1_l) W2_l + a_l          [T, C, l+1], C = 4 ways (Eq. 6, multiway)
    Xbar^c_l = sum_{j<=l} A_l[c, j] X_j                    c in {Q, K, V, R}            (Eqs. 3, 5)
    X^A      = MHA(N(Xbar^Q), N(Xbar^K), N(Xbar^V)) + Xbar^R                                (Eq. 7)
    X_{l+1}  = FFN(N(X^A)) + X^A
    head     = final N( sum_{j<=L} A_L[R, j] X_j )          the last DA has the R way only  (Eq. 8)

Block 0 reads four copies of the embedding (no DA before it). RMSNorm before W1 has no gain (one is redundant with
W1); its eps is `model.norm_eps`. The hidden width of DA_l is C (l + 1), the multiway form of Eq. 6's l + 1 (W1:
D x C(l+1), W2: C(l+1) x C(l+1)); the last DA's is 4 (L + 1) too, with one way out (W2: 4(L+1) x (L+1)), as the
paper and the authors' code have it. Init (Sec. 3): W1 ~ N(0, 1/D), W2 = 0, a_l one-hot on the newest source
(a_l[c, l] = 1), so every stream is X_l and the model is Pre-Norm exactly at init (tested), which also lets
`pre_norm -> mudd` upcycling keep the function.

Deviations (docs/variants.md): N is the block's own attention norm applied to each of Xbar^Q, Xbar^K, Xbar^V, as
Eq. 7 writes one LN; the authors' code gives each stream its own norm. The authors' code widens the last DA's
hidden layer 4x and rounds widths up to multiples of 64; here the widths are the paper's. W1 and W2 are
weight-decayed, the static a_l (gates) are not; the authors' code decays everything. The FFN width schedule of
Eq. 9 and PrePostDANorm (Eq. 10) are not built.

The params are stacked over layers, so each layer stores the largest shape (L sources, hidden 4L) and masks what
it does not read (DenseFormer's layout); block 0's DA is stored and unused. The state is a depth store
(resnorm.model.depth_store): slot j holds X_j (j = 0..L), written once by block j - 1's MLP; the attention
sublayer's X^A rides the carry as the store's `x`. Memory per token: the store, (L + 1) D, kept once by the
backward, plus per block its own activations, its four streams (4 D) and its DA's hidden units and weights.
"""
import flax.linen as nn
import jax
import jax.numpy as jnp

from resnorm.model.depth_store import Store
from resnorm.model.residual.base import Variant, register

WAYS = 4  # Q, K, V, R


class DenseWeights(nn.Module):
  """A [B, T, ways, J] = GELU(RMSNorm(x) W1) W2 + a over sources j <= i (zero beyond), hidden units < 4 (i+1)."""
  cfg: object
  ways: int
  sources: int

  @nn.compact
  def __call__(self, x_BTD, i):
    c, j_max, d = self.ways, self.sources, x_BTD.shape[-1]
    w1 = self.param("w1", nn.with_logical_partitioning(nn.initializers.normal(d ** -0.5), ("embed", None)),
                    (d, WAYS * j_max))
    w2 = self.param("w2", nn.initializers.zeros, (WAYS * j_max, c * j_max))
    a = self.param("bias", lambda _rng, shape: jnp.broadcast_to(jax.nn.one_hot(i, j_max), shape), (c, j_max))
    x = x_BTD.astype(jnp.float32)
    x = x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + self.cfg.norm_eps)
    h = jax.nn.gelu(x @ w1, approximate=True) * (jnp.arange(WAYS * j_max) < WAYS * (i + 1))[None, None]
    dyn = (h @ w2).reshape(x_BTD.shape[:2] + (c, j_max))
    return jnp.where((jnp.arange(j_max) <= i)[None, None, None], dyn + a[None, None], 0.0)  # [B, T, ways, J] f32


class MuddAttn(nn.Module):
  """Streams Q, K, V, R from DA_l over X_0..X_l (block 0: the embedding), then X^A = R + MHA(N Q, N K, N V)."""
  cfg: object

  @nn.compact
  def __call__(self, store: Store, branch, norm, layer, sub):
    num, dt = self.cfg.num_layers, store.buf.dtype
    a_BTCJ = DenseWeights(self.cfg, WAYS, num, name="dense")(store.slot(layer), layer)
    w_CSBT = jnp.pad(jnp.transpose(a_BTCJ, (2, 3, 0, 1)), ((0, 0), (0, store.num_slots - num), (0, 0), (0, 0)))
    first = layer == 0
    # block 0: X_0 x 4, as weight 1 on slot 0 (a select on the store-sized streams would cost a pass of its own)
    w_CSBT = jnp.where(first, (jnp.arange(store.num_slots) == 0)[None, :, None, None].astype(w_CSBT.dtype), w_CSBT)
    streams_CBTD = store.weighted(w_CSBT).astype(dt)
    q, k, v, r = (streams_CBTD[c] for c in range(WAYS))
    f_BTD = branch(norm(q), kv_BTD=(norm(k), norm(v)))
    taps = {"u": r, "f": f_BTD, "dense": jnp.where(first, jnp.nan, a_BTCJ)}
    return store.with_x(r + f_BTD), taps


class MuddMLP(nn.Module):
  """X_{l+1} = X^A + FFN(N(X^A)), written to slot l + 1."""
  cfg: object

  @nn.compact
  def __call__(self, store: Store, branch, norm, layer, sub):
    xa = store.x
    f_BTD = branch(norm(xa))
    b, t = xa.shape[:2]
    taps = {"u": xa, "f": f_BTD, "dense": jnp.full((b, t, WAYS, self.cfg.num_layers), jnp.nan)}
    return store.write(layer + 1, xa + f_BTD), taps


def _start(cfg, x_BTD):
  b, t, d = x_BTD.shape
  buf = jnp.concatenate([x_BTD[None], jnp.zeros((cfg.num_layers, b, t, d), x_BTD.dtype)], axis=0)
  return Store(x=x_BTD, buf=buf, kernels=cfg.kernels)


def _finish(cfg, store: Store):
  num = cfg.num_layers
  a = DenseWeights(cfg, 1, num + 1, name="final_dense")(store.slot(num), num)
  return store.weighted(jnp.transpose(a, (2, 3, 0, 1))).astype(store.buf.dtype)[0]


def _da_params(d, ways, sources):
  """W1 (D x 4 sources), W2 (4 sources x ways sources) and a (ways x sources): hidden width 4 per source."""
  return d * WAYS * sources + WAYS * sources * ways * sources + ways * sources


def mudd_params_used(cfg) -> int:
  """The paper's count: DA_l for l = 1 .. L-1 over l + 1 sources (4 ways), and the last DA (R way, L + 1)."""
  d, num = cfg.d_model, cfg.num_layers
  return sum(_da_params(d, WAYS, l + 1) for l in range(1, num)) + _da_params(d, 1, num + 1)


def _params(cfg) -> int:
  """As stored: every layer at the largest shape (L sources), plus the last DA."""
  d, num = cfg.d_model, cfg.num_layers
  return num * _da_params(d, WAYS, num) + _da_params(d, 1, num + 1)


def _flops(cfg) -> int:
  """Per token, forward, as computed (padded, masked): per block the DA's two matmuls, its RMSNorm (3 D), GELU and
  the four weighted sums over L sources; and the last DA."""
  d, num = cfg.d_model, cfg.num_layers
  def da(ways, sources):
    h, k = WAYS * sources, ways * sources
    return 2 * d * h + 2 * h * k + 3 * d + 8 * h + 2 * k * d
  return num * da(WAYS, num) + da(1, num + 1)


register(Variant("mudd", (MuddAttn, MuddMLP), start=_start, finish=_finish, decay=("w1", "w2"),
                 extra_params=_params, extra_flops=_flops))
