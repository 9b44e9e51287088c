"""The placements that read earlier outputs as they were before the depth store (resnorm.model.depth_store): every
earlier output in the nn.scan carry, which the scan's backward saves at every block (quadratic in depth). Kept only
as the old path that the store must equal (tests/test_depth_store.py), registered under `<name>_carry` by the
`carry_variants` context manager alone (never in the global registry otherwise)."""
import contextlib

import flax.linen as nn
import jax
import jax.numpy as jnp

from resnorm.model.residual import base
from resnorm.model.residual.base import Variant

VARIANTS = []


def register(variant):
  VARIANTS.append(variant)
  return variant


@contextlib.contextmanager
def carry_variants():
  """The old placements in the registry as `<name>_carry` for the duration."""
  saved = dict(base.REGISTRY)
  for v in VARIANTS:
    base.REGISTRY[v.name] = v
  try:
    yield
  finally:
    base.REGISTRY.clear()
    base.REGISTRY.update(saved)



# ---- attn_res (the carry form) ----
def num_blocks(cfg) -> int:
  """N: 2L for Full AttnRes (one sublayer per block), model.attn_res.num_blocks for Block AttnRes."""
  return 2 * cfg.num_layers if cfg.residual == "attn_res_carry" else cfg.attn_res.num_blocks


class DepthAttention(nn.Module):
  """h = sum_i softmax_i(w . RMSNorm(v_i)) v_i over the slots where `valid_S`; returns h and the weights [B,T,S]."""
  cfg: object

  @nn.compact
  def __call__(self, s_BTSD, valid_S):
    w_D = self.param("query", nn.initializers.zeros, (s_BTSD.shape[-1],))
    v = s_BTSD.astype(jnp.float32)
    k = v * jax.lax.rsqrt(jnp.mean(jnp.square(v), axis=-1, keepdims=True) + self.cfg.norm_eps)
    logits = jnp.where(valid_S[None, None], jnp.einsum("btsd,d->bts", k, w_D), -jnp.inf)
    a_BTS = jax.nn.softmax(logits, axis=-1)
    return jnp.einsum("bts,btsd->btd", a_BTS, v).astype(s_BTSD.dtype), a_BTS


class AttnResSublayer(nn.Module):
  """Sublayer `sub` reads the slots of the blocks before its own (and its block's partial sum after the block's
  first sublayer), and adds its output to its block's slot."""
  cfg: object

  @nn.compact
  def __call__(self, s_BTSD, branch, norm, layer, sub):
    per = 2 * self.cfg.num_layers // num_blocks(self.cfg)          # S sublayers per block
    n, i = sub // per, sub % per                                    # block n (0-based), i-th sublayer in it
    j = jnp.arange(s_BTSD.shape[2])
    valid = (j <= n) | ((j == n + 1) & (i > 0))
    h_BTD, a_BTS = DepthAttention(self.cfg, name="depth")(s_BTSD, valid)
    f_BTD = branch(norm(h_BTD))
    slot = jax.lax.dynamic_index_in_dim(s_BTSD, n + 1, axis=2, keepdims=False)
    s_BTSD = jax.lax.dynamic_update_index_in_dim(s_BTSD, slot + f_BTD, n + 1, axis=2)
    return s_BTSD, {"u": h_BTD, "f": f_BTD, "depth": a_BTS}


def _start(cfg, x_BTD):
  b, t, d = x_BTD.shape
  return jnp.concatenate([x_BTD[:, :, None], jnp.zeros((b, t, num_blocks(cfg), d), x_BTD.dtype)], axis=2)


def _finish(cfg, s_BTSD):
  h_BTD, _ = DepthAttention(cfg, name="final_res")(s_BTSD, jnp.ones((s_BTSD.shape[2],), bool))
  return h_BTD


def _params(cfg) -> int:
  return (2 * cfg.num_layers + 1) * cfg.d_model


def _flops(cfg) -> int:
  """Per token, forward: each of the 2L sublayers and the head's aggregation run over all N + 1 slots (the masked
  ones too): the key RMS (3 D), the logits (2 D) and the weighted sum (2 D) per slot."""
  return (2 * cfg.num_layers + 1) * (num_blocks(cfg) + 1) * 7 * cfg.d_model


def _check(cfg):
  if cfg.residual == "attn_res_block_carry":
    nb, subs = cfg.attn_res.num_blocks, 2 * cfg.num_layers
    check(isinstance(nb, int) and 1 <= nb <= subs and subs % nb == 0,
          f"model.attn_res.num_blocks={nb} must divide the {subs} sublayers of model.num_layers={cfg.num_layers} "
          "(2 per layer) into equal blocks")


for _name in ("attn_res", "attn_res_block"):
  register(Variant(_name + "_carry", AttnResSublayer, start=_start, finish=_finish, extra_params=_params,
                   extra_flops=_flops, check=_check, section="attn_res"))



# ---- denseformer (the carry form) ----
class DenseSublayer(nn.Module):
  """Pre-LN on the current stream (slot 0): y <- y + F(N(y))."""
  cfg: object

  @nn.compact
  def __call__(self, s, branch, norm, layer, sub):
    x = s[:, :, 0]
    y = branch(norm(x))
    return s.at[:, :, 0].set(x + y), {"u": x, "f": y}


def dwa_mask(cfg, i):
  """[L+1] bool: the X_j the DWA after block i (1-based, traced) reads; all False when i is not a DWA block."""
  dc = cfg.denseformer
  j = jnp.arange(cfg.num_layers + 1)
  return (j <= i) & ((i - j) % dc.dilation == 0) & (i % dc.period == 0)


class DWA(nn.Module):
  cfg: object

  @nn.compact
  def __call__(self, s, layer):
    i = layer + 1
    n = self.cfg.num_layers + 1
    alpha = self.param("alpha", lambda _rng, shape: jax.nn.one_hot(i, n, dtype=jnp.float32), (n,))
    x_i = s[:, :, 0]
    s = jax.lax.dynamic_update_slice_in_dim(s, x_i[:, :, None], i + 1, axis=2)
    w = jnp.where(dwa_mask(self.cfg, i), alpha, 0.0).astype(s.dtype)
    y = jnp.where(i % self.cfg.denseformer.period == 0, jnp.einsum("btjd,j->btd", s[:, :, 1:], w), x_i)
    return s.at[:, :, 0].set(y)


def _start(cfg, x_BTD):
  b, t, d = x_BTD.shape
  empty = jnp.zeros((b, t, cfg.num_layers, d), x_BTD.dtype)
  return jnp.concatenate([x_BTD[:, :, None], x_BTD[:, :, None], empty], axis=2)


def _finish(cfg, s):
  return s[:, :, 0]


def dwa_weights_used(cfg) -> int:
  """The paper's parameter count: floor(i/k) + 1 weights for each DWA block i (i = 0 mod p)."""
  dc = cfg.denseformer
  return sum(i // dc.dilation + 1 for i in range(1, cfg.num_layers + 1) if i % dc.period == 0)


def _check(cfg):
  dc = cfg.denseformer
  check(dc.dilation >= 1, f"model.denseformer.dilation={dc.dilation} must be >= 1")
  check(dc.period >= 1, f"model.denseformer.period={dc.period} must be >= 1")


register(Variant(
    "denseformer_carry", DenseSublayer, start=_start, finish=_finish, after_block=DWA, decay=("alpha",), check=_check,
    extra_params=lambda cfg: cfg.num_layers * (cfg.num_layers + 1),
    # the dense masked DWA as computed: a weighted sum over the L+1 slots after every block
    extra_flops=lambda cfg: 2 * cfg.num_layers * (cfg.num_layers + 1) * cfg.d_model))



# ---- mudd (the carry form; the last DA's hidden width 4 (L + 1), as the store's) ----
WAYS = 4  # Q, K, V, R


class DenseWeights(nn.Module):
  """A [B, T, ways, J] = GELU(RMSNorm(x) W1) W2 + a over sources j <= i (zero beyond), hidden units < ways (i+1)."""
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
  def __call__(self, s_BTSD, branch, norm, layer, sub):
    num = self.cfg.num_layers
    x_l = jax.lax.dynamic_index_in_dim(s_BTSD, layer + 1, axis=2, keepdims=False)
    a_BTCJ = DenseWeights(self.cfg, WAYS, num, name="dense")(x_l, layer)
    streams = jnp.einsum("btcj,btjd->btcd", a_BTCJ.astype(s_BTSD.dtype), s_BTSD[:, :, 1:num + 1])
    first = layer == 0
    streams = jnp.where(first, jnp.broadcast_to(s_BTSD[:, :, 1:2], streams.shape), streams)  # block 0: X_0 x 4
    q, k, v, r = (streams[:, :, c] for c in range(WAYS))
    f_BTD = branch(norm(q), kv_BTD=(norm(k), norm(v)))
    taps = {"u": r, "f": f_BTD, "dense": jnp.where(first, jnp.nan, a_BTCJ)}
    return s_BTSD.at[:, :, 0].set(r + f_BTD), taps


class MuddMLP(nn.Module):
  """X_{l+1} = X^A + FFN(N(X^A)), written to slot l + 2."""
  cfg: object

  @nn.compact
  def __call__(self, s_BTSD, branch, norm, layer, sub):
    xa = s_BTSD[:, :, 0]
    f_BTD = branch(norm(xa))
    s_BTSD = jax.lax.dynamic_update_index_in_dim(s_BTSD, xa + f_BTD, layer + 2, axis=2)
    b, t = xa.shape[:2]
    return s_BTSD, {"u": xa, "f": f_BTD, "dense": jnp.full((b, t, WAYS, self.cfg.num_layers), jnp.nan)}


def _start(cfg, x_BTD):
  b, t, d = x_BTD.shape
  return jnp.concatenate([x_BTD[:, :, None], x_BTD[:, :, None],
                          jnp.zeros((b, t, cfg.num_layers, d), x_BTD.dtype)], axis=2)


def _finish(cfg, s_BTSD):
  num = cfg.num_layers
  a = DenseWeights(cfg, 1, num + 1, name="final_dense")(s_BTSD[:, :, num + 1], num)
  return jnp.einsum("btj,btjd->btd", a[:, :, 0].astype(s_BTSD.dtype), s_BTSD[:, :, 1:])


def _da_params(d, ways, sources):
  return d * ways * sources + (ways * sources) ** 2 + ways * sources


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
    k = ways * sources
    return 2 * d * k + 2 * k * k + 3 * d + 8 * k + 2 * ways * sources * d
  return num * da(WAYS, num) + da(1, num + 1)


register(Variant("mudd_carry", (MuddAttn, MuddMLP), start=_start, finish=_finish, decay=("w1", "w2"),
                 extra_params=_params, extra_flops=_flops))



# ---- laurel (the carry form) ----
def column_orthogonal(_rng, shape, dtype=jnp.float32):
  """A [D, r] with A_ij = 1/sqrt(r D) where i mod r == j, else 0 (LAuReL Sec. 3.3, for LLMs)."""
  d, r = shape
  return (jnp.arange(d)[:, None] % r == jnp.arange(r)[None]).astype(dtype) / jnp.sqrt(float(r * d)).astype(dtype)


class Laurel(nn.Module):
  cfg: object

  @nn.compact
  def __call__(self, s_BTkD, branch, norm, layer, sub):
    lc, dt = self.cfg.laurel, s_BTkD.dtype
    d = s_BTkD.shape[-1]
    x_BTD = s_BTkD[:, :, 0]
    f_BTD = branch(norm(x_BTD))
    taps = {"u": x_BTD, "f": f_BTD}
    r_BTD = x_BTD
    if lc.rank:
      a_Dr = self.param("down", nn.with_logical_partitioning(column_orthogonal, ("embed", None)), (d, lc.rank))
      b_rD = self.param("up", nn.with_logical_partitioning(nn.initializers.zeros, (None, "embed")), (lc.rank, d))
      lr_BTD = (x_BTD @ a_Dr.astype(dt)) @ b_rD.astype(dt)
      r_BTD = r_BTD + lr_BTD
      x32 = x_BTD.astype(jnp.float32)
      taps["lr_ratio"] = jnp.linalg.norm(lr_BTD.astype(jnp.float32), axis=-1) / jnp.maximum(
          jnp.linalg.norm(x32, axis=-1), 1e-12)                                        # [B, T]
    if lc.pa_k > 1:
      g_j = self.param("pa_gain", nn.initializers.zeros, (lc.pa_k - 1,))
      r_BTD = r_BTD + jnp.einsum("btjd,j->btd", s_BTkD[:, :, 1:], g_j.astype(dt))
      taps["pa_gain"] = g_j
    if lc.rw:
      w = lc.rw_scale * jax.nn.softmax(self.param("rw_logits", nn.initializers.zeros, (2,)))
      new_BTD = w[0].astype(dt) * f_BTD + w[1].astype(dt) * r_BTD
      taps["rw"] = w
    else:
      new_BTD = f_BTD + r_BTD
    return jnp.concatenate([new_BTD[:, :, None], s_BTkD[:, :, :-1]], axis=2), taps


def _start(cfg, x_BTD):
  b, t, d = x_BTD.shape
  return jnp.concatenate([x_BTD[:, :, None], jnp.zeros((b, t, cfg.laurel.pa_k - 1, d), x_BTD.dtype)], axis=2)


def _finish(cfg, s_BTkD):
  return s_BTkD[:, :, 0]


def _params(cfg) -> int:
  lc = cfg.laurel
  return 2 * cfg.num_layers * (2 * lc.rank * cfg.d_model + (lc.pa_k - 1) + (2 if lc.rw else 0))


def _flops(cfg) -> int:
  """Per token, forward, per sublayer: the two rank-r products (4 r D), the k - 1 weighted earlier inputs and their
  sum (2 (k - 1) D), the two weighted paths (3 D) and the low-rank sum (D)."""
  lc, d = cfg.laurel, cfg.d_model
  return 2 * cfg.num_layers * (4 * lc.rank * d + 2 * (lc.pa_k - 1) * d + 4 * d)


def _check(cfg):
  lc = cfg.laurel
  check(isinstance(lc.rank, int) and 0 <= lc.rank <= cfg.d_model,
        f"model.laurel.rank={lc.rank} must be an integer in 0..model.d_model={cfg.d_model} (0: no low-rank term)")
  check(lc.rw_scale > 0, f"model.laurel.rw_scale={lc.rw_scale} must be > 0 (the sum of the two RW weights)")
  check(isinstance(lc.pa_k, int) and 1 <= lc.pa_k <= 2 * cfg.num_layers,
        f"model.laurel.pa_k={lc.pa_k} must be an integer in 1..{2 * cfg.num_layers} (the sublayers; 1: no earlier "
        "activations)")


register(Variant("laurel_carry", Laurel, start=_start, finish=_finish, decay=("down", "up"), extra_params=_params,
                 extra_flops=_flops, check=_check))
