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

Each DA_l (l >= 1) is stored once at its own shape, packed (`PackedDense`, outside the blocks; the depth store hands
it to every block as `Store.shared`): stored params = params read. A block gathers its DA into the largest shape
(L sources, hidden 4L) and masks the rest, so one scanned body serves every layer (the compute is padded, the params
are not). The state is a depth store (resnorm.model.depth_store): slot j holds X_j (j = 0..L), written once by block
j - 1's MLP; the attention sublayer's X^A rides the carry as the store's `x`. Memory per token: the store, (L + 1) D, kept once by the
backward, plus per block its own activations and its four streams (4 D); the DA is recomputed in the backward.
"""
from functools import partial

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from resnorm.model.depth_store import Store, layer_widths
from resnorm.model.residual.base import Variant, register

WAYS = 4  # Q, K, V, R


def dense_weights(x_BTD, w1_DH, w2_HK, a_CJ, i, eps):
  """A [B, T, ways, J] = GELU(RMSNorm(x) W1) W2 + a over sources j <= i (zero beyond), float32; W1's hidden units
  beyond 4 (i + 1) are masked, W2's columns are c J + j."""
  (c, j_max), h = a_CJ.shape, w1_DH.shape[1]
  x = x_BTD.astype(jnp.float32)
  x = x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + eps)
  hid = jax.nn.gelu(x @ w1_DH, approximate=True) * (jnp.arange(h) < WAYS * (i + 1))[None, None]
  dyn = (hid @ w2_HK).reshape(x_BTD.shape[:2] + (c, j_max))
  return jnp.where((jnp.arange(j_max) <= i)[None, None, None], dyn + a_CJ[None, None], 0.0)


def packed_offsets(l):
  """Where DA_l (l >= 1, l + 1 sources, hidden width 4 (l + 1)) starts in the packed params: W1's columns and a's
  entries at 4 sum_{m=1}^{l-1} (m + 1) = 2 l (l + 1) - 4, W2's entries at 16 sum_{m=1}^{l-1} (m + 1)^2 (works on
  traced ints; l = L gives the totals)."""
  return 2 * l * (l + 1) - 4, 16 * (l * (l + 1) * (2 * l + 1) // 6 - 1)


def _w1_init(d):
  """W1 ~ N(0, 1/D) (Sec. 3), sharded along the embedding like the base weights."""
  return nn.with_logical_partitioning(nn.initializers.normal(d ** -0.5), ("embed", None))


class PackedDense(nn.Module):
  """DA_1 .. DA_{L-1} packed, each at its own shape: W1 [D, sum 4 (l+1)] (DA_l's block of columns), W2 flat
  (DA_l's [4 (l+1), 4 (l+1)] row-major, columns c (l+1) + j) and a flat (DA_l's [4, l+1] row-major). Init (Sec. 3):
  W1 ~ N(0, 1/D), W2 = 0, a_l one-hot on the newest source."""
  cfg: object

  @nn.compact
  def __call__(self):
    num, d = self.cfg.num_layers, self.cfg.d_model
    cols, entries = packed_offsets(num)

    def newest(_rng, shape):
      a = np.zeros(shape, np.float32)
      for l in range(1, num):
        a[packed_offsets(l)[0] + np.arange(WAYS) * (l + 1) + l] = 1.0
      return jnp.asarray(a)
    return {"w1": self.param("w1", _w1_init(d), (d, cols)),
            "w2": self.param("w2", nn.initializers.zeros, (entries,)),
            "bias": self.param("bias", newest, (cols,))}


def _window(packed, l, num):
  """DA_l's params at the padded shape a run's blocks compute with, `num` sources (L for one run, else the sources
  of the run's last block): W1 [D, 4 num], W2 [4 num, 4 num] (columns c num + j), a [4, num]; zero outside DA_l's
  own block (gathers whose gradient lands on DA_l's entries only)."""
  h, c, j = np.arange(WAYS * num), np.arange(WAYS)[:, None], np.arange(num)[None, :]
  off1, off2 = packed_offsets(jnp.maximum(l, 1))
  n_h = WAYS * (l + 1)
  keep_CJ = jnp.broadcast_to(j <= l, (WAYS, num))

  def take(v, idx, keep):  # out-of-range index -> 0 (and no gradient)
    return jnp.take(v, jnp.where(keep, idx, v.shape[-1]), axis=-1, mode="fill", fill_value=0)
  w1 = take(packed["w1"], off1 + h, h < n_h)
  col_K = (c * (l + 1) + j).reshape(-1)                                  # DA_l's column of padded column c L + j
  w2 = take(packed["w2"], off2 + h[:, None] * n_h + col_K[None], (h[:, None] < n_h) & keep_CJ.reshape(1, -1))
  a = take(packed["bias"], off1 + c * (l + 1) + j, keep_CJ)
  return w1, w2, a


@partial(jax.checkpoint, static_argnums=(3, 4), policy=jax.checkpoint_policies.nothing_saveable)
def _dense_read(buf_SBTD, packed, l, num, eps):
  """DA_l's A [B, T, 4, num] from X_l (slot l). Recomputed in the backward from the store and the packed params,
  which the backward keeps anyway, so a block keeps none of its DA: not its gathered weights (4L x 4L, cubic in
  depth over the blocks), nor its hidden units."""
  x_BTD = jax.lax.dynamic_index_in_dim(buf_SBTD, l, axis=0, keepdims=False)
  return dense_weights(x_BTD, *_window(packed, l, num), l, eps)


class MuddAttn(nn.Module):
  """Streams Q, K, V, R from DA_l over X_0..X_l (block 0: the embedding), then X^A = R + MHA(N Q, N K, N V)."""
  cfg: object

  @nn.compact
  def __call__(self, store: Store, branch, norm, layer, sub):
    # sources X_0 .. X_{J-1}: the store's slots but the last (all L + 1 slots, or a run's prefix of them)
    num, dt = store.num_slots - 1, store.buf.dtype
    first = layer == 0
    assert not store.fresh, "MuddAttn reads X_l from the flushed buffer"
    if store.shared is None:   # one block: no DA is read
      a_BTCJ = jnp.zeros(store.x.shape[:2] + (WAYS, num), jnp.float32)
    else:
      a_BTCJ = _dense_read(store.buf, store.shared, layer, num, self.cfg.norm_eps)
    w_CSBT = jnp.pad(jnp.transpose(a_BTCJ, (2, 3, 0, 1)), ((0, 0), (0, 1), (0, 0), (0, 0)))
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


class FinalDense(nn.Module):
  """The last DA (Eq. 8): the R way over X_0 .. X_L, hidden width 4 (L + 1)."""
  cfg: object

  @nn.compact
  def __call__(self, x_BTD):
    num, d = self.cfg.num_layers, x_BTD.shape[-1]
    w1 = self.param("w1", _w1_init(d), (d, WAYS * (num + 1)))
    w2 = self.param("w2", nn.initializers.zeros, (WAYS * (num + 1), num + 1))
    a = self.param("bias", lambda _rng, shape: jax.nn.one_hot(num, num + 1)[None], (1, num + 1))
    return dense_weights(x_BTD, w1, w2, a, num, self.cfg.norm_eps)


def _start(cfg, x_BTD):
  b, t, d = x_BTD.shape
  buf = jnp.concatenate([x_BTD[None], jnp.zeros((cfg.num_layers, b, t, d), x_BTD.dtype)], axis=0)
  shared = PackedDense(cfg, name="dense")() if cfg.num_layers > 1 else None
  return Store(x=x_BTD, buf=buf, kernels=cfg.kernels, shared=shared)


def _finish(cfg, store: Store):
  a = FinalDense(cfg, name="final_dense")(store.slot(cfg.num_layers))
  return store.weighted(jnp.transpose(a, (2, 3, 0, 1))).astype(store.buf.dtype)[0]


def _da_params(d, ways, sources):
  """W1 (D x 4 sources), W2 (4 sources x ways sources) and a (ways x sources): hidden width 4 per source."""
  return d * WAYS * sources + WAYS * sources * ways * sources + ways * sources


def mudd_params_used(cfg) -> int:
  """The paper's count: DA_l for l = 1 .. L-1 over l + 1 sources (4 ways), and the last DA (R way, L + 1)."""
  d, num = cfg.d_model, cfg.num_layers
  return sum(_da_params(d, WAYS, l + 1) for l in range(1, num)) + _da_params(d, 1, num + 1)


def _reach(cfg, l):
  """Block l reads X_0 .. X_l and writes X_{l+1}."""
  return l + 2


def _flops(cfg) -> int:
  """Per token, forward, as computed (padded, masked): per block the DA's two matmuls, its RMSNorm (3 D), GELU and
  the four weighted sums over its run's sources (layer_widths: the run's slots but the last); and the last DA."""
  d, num = cfg.d_model, cfg.num_layers
  def da(ways, sources):
    h, k = WAYS * sources, ways * sources
    return 2 * d * h + 2 * h * k + 3 * d + 8 * h + 2 * k * d
  return sum(da(WAYS, w - 1) for w in layer_widths(cfg, _reach)) + da(1, num + 1)


register(Variant("mudd", (MuddAttn, MuddMLP), start=_start, finish=_finish, decay=("w1", "w2"),
                 roles={"dense/w1": "readout", "dense/w2": "vector", "dense/bias": "vector",
                        "final_dense/w1": "final_readout", "final_dense/w2": "final", "final_dense/bias": "final"},
                 extra_params=mudd_params_used, extra_flops=_flops, reach=_reach))
