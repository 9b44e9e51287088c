"""The depth store: every earlier output a placement reads (the embedding, sublayer or block outputs, block
summaries), each kept once, and a layer scan whose backward keeps the store once rather than once per layer.

Attention Residuals (Full and Block), DenseFormer, MUDDFormer and LAuReL's PA read earlier outputs. Held in the
`nn.scan` carry, the store of S slots is saved by the scan's backward at every layer: L S D values per token,
quadratic in depth. Their papers keep each output once (O(L D); O(N D) summaries for Block AttnRes).

`Store` is the state of such a placement: `x`, the small per-token state that rides the carry (the stream, a block's
partial sum), and `buf`, the S slots, slot-major [S, B, T, D] (a slot is one contiguous [B, T, D] array: its write
and its read are whole-array copies, and the weighted reads contract the major axis, with no relayout). Within a block, writes are `fresh`: held beside the buffer until the block
ends (`flush`), so every read inside a block sees the block-start buffer plus the fresh values, never a buffer
version written inside the block. The invariant the placements keep: a slot is read only after its last write
(a slot may be overwritten, as Block AttnRes's running summary, but no reader sees an intermediate value).

`shared` holds params every block reads and none changes (MUDDFormer's DAs, each packed at its own shape rather than
stacked at the largest): made once outside the scan, they ride the carry unchanged; the backward reads the final
store's in their place and carries their cotangent, summed over blocks.

`layer_scan` is the scan over blocks with a custom VJP. Its forward runs the blocks and keeps, per block, the
block's own residuals (what `model.remat`'s policy saves), but neither its params (already stacked) nor the
block-start buffer: every reader reads a slot
only after its last write, so the final buffer serves in its place (the slots a block has not reached yet are
exactly the ones it reads with weight 0). Its backward walks the blocks in reverse with the buffer's cotangent in
the carry. Memory: the final buffer once plus each block's own residuals, O(L D + S D) per token; compile time
flat in depth (one scanned body).

Reads over the whole buffer (`weighted`, `rms_logits`) are custom-VJP ops whose only residual is the buffer
itself; one slot (`slot`) is a dynamic index, whose residual is its index. The weighted sums are the kernel sets'
`slot_weighted` (resnorm.model.kernels, `model.kernels`): weights slot-major, sums ways-major, as the store, so no
store-sized array is relaid out.
"""
from functools import partial
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from resnorm.model import kernels


def rms_logit(v_SBTD, q_CD, eps):
  """z[c,s,b,t] = q_c . RMSNorm(v[s,b,t]) (no gain), float32: Attention Residuals' phi(w, k) logit (Eq. 2), for C
  pseudo-queries at once (each key normalized once)."""
  v, q = v_SBTD.astype(jnp.float32), q_CD.astype(jnp.float32)
  r = jax.lax.rsqrt(jnp.mean(jnp.square(v), axis=-1) + eps)
  # one matrix-vector product per query (XLA:CPU runs a [S B T, D] x [D, C] dot with C = 2 several times slower)
  return jnp.stack([r * jnp.einsum("sbtd,d->sbt", v, q[c]) for c in range(q.shape[0])])


@partial(jax.custom_vjp, nondiff_argnums=(2,))
def _rms_logits(buf_SBTD, q_CD, eps):
  return rms_logit(buf_SBTD, q_CD, eps)


def _rms_logits_fwd(buf_SBTD, q_CD, eps):
  return _rms_logits(buf_SBTD, q_CD, eps), (buf_SBTD, q_CD)


def _rms_logits_bwd(eps, res, ct_CSBT):
  # z_c = r (q_c.v), r = (mean v^2 + eps)^-1/2: dz_c/dv = r q_c - r^3 (q_c.v) v / D; dz_c/dq_c = r v
  buf_SBTD, q_CD = res
  v, q = buf_SBTD.astype(jnp.float32), q_CD.astype(jnp.float32)
  r = jax.lax.rsqrt(jnp.mean(jnp.square(v), axis=-1) + eps)
  g = ct_CSBT.astype(jnp.float32) * r[None]
  qv = [jnp.einsum("sbtd,d->sbt", v, q[c]) for c in range(q.shape[0])]
  radial = sum(g[c] * qv[c] for c in range(q.shape[0])) * r * r / v.shape[-1]
  d_v = sum(g[c][..., None] * q[c][None, None, None] for c in range(q.shape[0])) - radial[..., None] * v
  d_q = jnp.stack([jnp.einsum("sbt,sbtd->d", g[c], v) for c in range(q.shape[0])])
  return d_v.astype(buf_SBTD.dtype), d_q.astype(q_CD.dtype)


_rms_logits.defvjp(_rms_logits_fwd, _rms_logits_bwd)


@flax.struct.dataclass
class Store:
  """A placement's state: `x` (rides the carry), `buf` [S, B, T, D] (the slots), `fresh` ((slot, value), ...),
  this block's writes, which `flush` puts into `buf` at the block's end (empty between blocks), and `shared`, params
  every block reads and none changes (MUDDFormer's packed DA weights), made once outside the scan so that their
  layout need not be one shape per layer; their gradient is the sum over blocks, carried by the backward."""
  x: Any
  buf: jax.Array
  fresh: tuple = ()
  shared: Any = None
  pending: Any = None     # what one sublayer computed for a later one of the same block (dropped at `flush`)
  kernels: str = flax.struct.field(pytree_node=False, default="auto")   # model.kernels: the weighted reads' form

  @property
  def num_slots(self) -> int:
    return self.buf.shape[0]

  def with_x(self, x) -> "Store":
    return self.replace(x=x)

  def write(self, slot, value_BTD) -> "Store":
    return self.replace(fresh=self.fresh + ((jnp.asarray(slot, jnp.int32), value_BTD.astype(self.buf.dtype)),))

  def flush(self) -> "Store":
    buf = self.buf
    for slot, value in self.fresh:
      buf = jax.lax.dynamic_update_index_in_dim(buf, value, slot, axis=0)
    return self.replace(buf=buf, fresh=(), pending=None)

  def _stale_S(self):
    """[S] float: 0 at the slots written in this block (their values are fresh), else 1."""
    keep = jnp.ones((self.num_slots,), jnp.float32)
    for slot, _ in self.fresh:
      keep = keep * (jnp.arange(self.num_slots) != slot)
    return keep

  def weighted(self, w_CSBT) -> jax.Array:
    """[C, B, T, D] float32: out[c] = sum_s w[c, s] v_s over every slot (C weightings at once; slot-major
    weights, ways-major output: no relayout of the store-sized arrays in either direction)."""
    out = kernels.get(self.kernels).slot_weighted(self.buf, w_CSBT * self._stale_S()[None, :, None, None])
    for slot, value in self.fresh:
      w = jax.lax.dynamic_index_in_dim(w_CSBT, slot, axis=1, keepdims=False)           # [C, B, T]
      out = out + w[..., None] * value[None].astype(jnp.float32)
    return checkpoint_name(out, "depth_read")       # kept, not recomputed, under model.remat=dots

  def weighted_shared(self, w_S) -> jax.Array:
    """[B, T, D] float32: sum_s w[s] v_s, one weight per slot for every token."""
    return self.weighted(w_S[None, :, None, None])[0]

  def rms_logits(self, q_CD, eps) -> jax.Array:
    """[C, S, B, T] float32: q_c . RMSNorm(v_s) for every slot (fresh ones from their values)."""
    z = _rms_logits(self.buf, q_CD, eps)
    for slot, value in self.fresh:
      z_new = rms_logit(value[None], q_CD, eps)                                        # [C, 1, B, T]
      z = jnp.where((jnp.arange(self.num_slots) == slot)[None, :, None, None], z_new, z)
    return z

  def slot(self, i) -> jax.Array:
    """[B, T, D]: slot i (traced)."""
    v = jax.lax.dynamic_index_in_dim(self.buf, i, axis=0, keepdims=False)
    for slot, value in self.fresh:
      v = jnp.where(slot == i, value, v)
    return v


def chunk_widths(length: int, offset: int, reach, chunks: int) -> tuple:
  """((layers, slots), ...): a segment's `length` layers (the first is layer `offset`) cut into `chunks` runs of
  near-equal length (fewer where the segment is shorter), each with the slots its last layer's `reach` gives: the
  prefix of the store that run reads and writes."""
  n = max(1, min(chunks, length))
  bounds = [offset + (length * k) // n for k in range(n + 1)]
  return tuple((hi - lo, reach(hi - 1)) for lo, hi in zip(bounds, bounds[1:]))


def layer_widths(cfg, reach) -> tuple:
  """The slots each of the model's layers computes over in the scanned training step (`reach(cfg, l)`, the
  placement's; `cfg.depth_chunks` runs): the FLOPs a placement counts as computed."""
  runs = chunk_widths(cfg.num_layers, 0, lambda l: reach(cfg, l), cfg.depth_chunks)
  return tuple(w for n, w in runs for _ in range(n))


def _tails(buf, widths):
  """The slots each run adds to the one before: buf[w_k : w_{k+1}] for consecutive runs, the last up to the end."""
  cuts = [w for _, w in widths] + [buf.shape[0]]
  return [buf[lo:hi] for lo, hi in zip(cuts, cuts[1:])]


def _grow(prefix, tail):
  return prefix if tail.shape[0] == 0 else jnp.concatenate([prefix, tail])


def layer_scan(body, params, store: Store, xs, consts, x_of=None, widths=None):
  """(store, ys) of `for l: store, y_l = body(params[l], store, xs[l], consts)` over the leading axis of params
  and xs, with the backward described in the module docstring. `body` must flush its writes (fresh is empty on
  entry and exit). `consts` are broadcast to every block and get no gradient (keys, positions).

  `widths` ((layers, slots), ...) (`chunk_widths`): the layers run as consecutive scans, each over only the first
  `slots` slots of the store, those its layers read and write: a block computes over the slots written by the end
  of its run, not over the whole store, and its backward accumulates the store's cotangent over that prefix only.
  None: one scan over every slot.

  `x_of(params, buf, l)`, where given: block l's input `x` recomputed from the stacked params and the final buffer
  (a prefix of it holding every slot block l reads; DenseFormer's stream is a read of the store). The backward then
  recomputes it instead of keeping it per block: with remat, a block keeps nothing of its own besides the store."""
  length = jax.tree.leaves(xs)[0].shape[0]
  widths, parts, start = widths or ((length, store.num_slots),), [], 0
  for n, width in widths:
    parts.append((start, n, width))
    start += n
  if start != length or any(w > store.num_slots or n < 1 for _, n, w in parts):
    raise ValueError(f"layer_scan: widths {widths} do not cover {length} layers within {store.num_slots} slots")
  meta = {}

  def cut(tree, lo, n):
    return jax.tree.map(lambda a: a[lo:lo + n], tree)

  def join(parts_ys):
    return parts_ys[0] if len(parts_ys) == 1 else jax.tree.map(lambda *a: jnp.concatenate(a), *parts_ys)

  # A run carries only its prefix of the store, grown by the next run's slots when it ends, and the backward
  # shrinks the buffer and its cotangent the same way: no run copies the whole store beside its prefix.
  def run(params, store, xs, consts):
    def step(s, inp):
      p, x = inp
      return body(p, s, x, consts)
    ys = []
    for lo, n, width in parts:
      # without a backward (evaluation), a run's prefix is written back in place
      sub, y = jax.lax.scan(step, store.replace(buf=store.buf[:width]), cut((params, xs), lo, n))
      buf = sub.buf if width == store.num_slots else jax.lax.dynamic_update_slice_in_dim(store.buf, sub.buf, 0, 0)
      store, ys = sub.replace(buf=buf), ys + [y]
    return store, join(ys)

  @jax.custom_vjp
  def scan(params, store, xs, consts):
    return run(params, store, xs, consts)

  def fwd(params, store, xs, consts):
    def step(k, s, inp):
      p, x = inp
      out, vjp = jax.vjp(lambda p, s: body(p, s, x, consts), p, s)
      leaves, treedef = jax.tree_util.tree_flatten(vjp)
      p_leaves = jax.tree.leaves(p)
      # where each residual comes from in the backward: the final store (-1), this block's params (their index),
      # the store's shared params (-3 - their index), or the residuals kept per block (None). The params are already
      # stacked and the shared ones are the final store's: keeping them again would copy them.
      shared = jax.tree.leaves(s.shared)
      source = tuple(-1 if leaf is s.buf else -2 if x_of is not None and leaf is s.x
                     else next((-3 - i for i, q in enumerate(shared) if leaf is q),
                               next((i for i, q in enumerate(p_leaves) if leaf is q), None)) for leaf in leaves)
      shape = (s.buf.shape, s.buf.dtype)
      # (a run of a few slots can share its shape with a block's own [ways, B, T, D] arrays: MUDD's four streams)
      copies = [i for i, leaf in enumerate(leaves)
                if source[i] is None and (leaf.shape, leaf.dtype) == shape and shape[0][0] > 4]
      if copies:
        raise AssertionError(f"layer_scan: a block saves {len(copies)} store-sized residual(s) besides the store "
                             "itself; read the store through Store's methods")
      meta[k] = treedef, source
      return out[0], (out[1], [leaf for leaf, src in zip(leaves, source) if src is None])
    ys, kept, tails = [], [], _tails(store.buf, widths)
    store = store.replace(buf=store.buf[:parts[0][2]])
    for k, ((lo, n, _), tail) in enumerate(zip(parts, tails)):
      store, (y, kept_k) = jax.lax.scan(partial(step, k), store, cut((params, xs), lo, n))
      store, ys, kept = store.replace(buf=_grow(store.buf, tail)), ys + [y], kept + [kept_k]
    return (store, join(ys)), (params, kept, store.buf, store.shared)

  def bwd(res, cts):
    params, kept, buf, shared = res
    shared = jax.tree.leaves(shared)
    ct_store, ct_ys = cts

    def step(k, buf_k, ct_s, inp):
      treedef, source = meta[k]
      p, kept_l, ct_y, l = inp
      it, p_leaves = iter(kept_l), jax.tree.leaves(p)
      x = x_of(params, buf_k, l) if -2 in source else None
      leaves = [next(it) if src is None else buf_k if src == -1 else x if src == -2
                else shared[-3 - src] if src <= -3 else p_leaves[src] for src in source]
      d_p, d_s = jax.tree_util.tree_unflatten(treedef, leaves)((ct_s, ct_y))
      return d_s, d_p
    d_params, ct_tails, index = [], [], jnp.arange(length, dtype=jnp.int32)
    for k in reversed(range(len(parts))):
      lo, n, width = parts[k]
      if len(parts) > 1:
        # sliced once the later runs are done, so that one prefix of the buffer is live at a time
        buf, ct_store = jax.lax.optimization_barrier((buf, ct_store))
      if width < buf.shape[0]:
        buf, ct_tails = buf[:width], [ct_store.buf[width:]] + ct_tails
      ct_store, d_p = jax.lax.scan(partial(step, k, buf), ct_store.replace(buf=ct_store.buf[:width]),
                                   (*cut((params,), lo, n), kept[k], *cut((ct_ys, index), lo, n)), reverse=True)
      d_params = [d_p] + d_params
    if ct_tails:   # the initial store's cotangent, its prefix and every run's tail joined in one copy
      ct_store = ct_store.replace(buf=jnp.concatenate([ct_store.buf, *ct_tails]))
    return join(d_params), ct_store, None, None

  scan.defvjp(fwd, bwd)
  return scan(params, store, xs, consts)
