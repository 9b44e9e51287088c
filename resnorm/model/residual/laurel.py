"""LAuReL, Learned Augmented Residual Layer (Menghani, Kumar, Kumar; arXiv 2411.07501, ICML 2025), on Pre-Norm
sublayers f(x) = F(N(x)). Sublayer l (attention and MLP each count), with all three of the paper's forms on:

    x_{l+1} = alpha_l f(x_l) + beta_l ( x_l + B_l A_l x_l + sum_{j=1}^{k-1} g_{l,j} x_{l-j} )      (Eq. 6)

- RW (Sec. 2.1), `model.laurel.rw`: (alpha, beta) = c softmax of two learned logits, the paper's bounded option,
  c = `model.laurel.rw_scale`. The paper gives no init and no c (its softmax is c = 1); ours is logits 0 and c = 2, so
  alpha = beta = 1 at init. c = 1 halves both paths in every sublayer, so the embedding reaches sublayer l weighted
  2^-l; at 12 layers that run learned nothing beyond the byte unigram (docs/variants.md). Off: alpha = beta = 1.
- LR (Eq. 3), `model.laurel.rank` r (0: off): A [D, r] "column orthogonal" (A_ij = 1/sqrt(r D) where i mod r = j,
  else 0; Sec. 3.3), B [r, D] zero, so the low-rank term is zero at init.
- PA (Eq. 4), `model.laurel.pa_k` k (1: off): the inputs of the k - 1 sublayers before this one, each with a
  learned scalar g_{l,j}, zero at init. Eq. 4's j = 0 term is the identity itself and is not repeated here, and
  its per-j map h is the identity (the paper allows identity or low rank; Eq. 6's per-j low-rank maps are not built).

At init (c = 2, or RW off) the model is Pre-Norm exactly (tested), and `pre_norm -> laurel` upcycling keeps the
function; with c = 1 it is refused. The paper places one LAuReL per layer in its LLM runs (its count 8ND + 2N); here every sublayer has one,
resnorm's unit of residual. Gemma 3n's form (one LAuReL per layer around attention, the low-rank branch read from
the normed input and RMS-normed, fixed weights 1/sqrt(2)) is not this variant; docs/variants.md says how it differs.

PA's state depends on its reach. For k - 1 <= WINDOW_MAX (the paper's k = 3 among them) the state is the window
itself, [B, T, k, D]: slot 0 the stream x_l, slot j the input of sublayer l - j (zeros before the first), shifted
by one each sublayer; the scan's backward keeps it per block, k D per token and block, linear in depth, and each
sublayer reads exactly its k - 1 inputs. A longer reach uses the depth store (resnorm.model.depth_store): the
stream rides the carry as the store's `x`, slot (k - 1) + m holds the input of sublayer m, written once, and
sublayer l reads its k - 1 inputs as a weighted sum over the slots of its run of `model.depth_chunks` (weights g at
their slots, 0 elsewhere; 2 D FLOPs per token and slot); the store, (2L + k - 1) D, is kept once by the backward, where a window of k - 1 in the
carry would be kept per block (quadratic as k approaches 2L).
A and B are weight-decayed, as matrices; alpha, beta and g are gates and are not (the paper says neither).
"""
import flax.linen as nn
import jax
import jax.numpy as jnp

from resnorm.core.errors import check
from resnorm.model.depth_store import Store, layer_widths
from resnorm.model.residual.base import Variant, register


def column_orthogonal(_rng, shape, dtype=jnp.float32):
  """A [D, r] with A_ij = 1/sqrt(r D) where i mod r == j, else 0 (LAuReL Sec. 3.3, for LLMs)."""
  d, r = shape
  return (jnp.arange(d)[:, None] % r == jnp.arange(r)[None]).astype(dtype) / jnp.sqrt(float(r * d)).astype(dtype)


# The longest reach (k - 1) kept as a window in the scan carry; beyond it, the depth store (the window, saved per
# block, would cost (k - 1) D per token and block against the store's three copies of (2L + k - 1) D in all)
WINDOW_MAX = 4


class Laurel(nn.Module):
  cfg: object

  @nn.compact
  def __call__(self, state, branch, norm, layer, sub):
    lc = self.cfg.laurel
    x_BTD = state.x if isinstance(state, Store) else state[:, :, 0]
    dt, d = x_BTD.dtype, x_BTD.shape[-1]
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
      taps["pa_gain"] = g_j
      if isinstance(state, Store):
        # slot (k - 1) + m holds sublayer m's input: sublayer sub - j's is at slot sub + k - 1 - j, gain g_{j-1}
        w_S = jax.lax.dynamic_update_slice_in_dim(jnp.zeros((state.num_slots,)), g_j[::-1], sub, axis=0)
        r_BTD = r_BTD + state.weighted_shared(w_S).astype(dt)
        state = state.write(sub + lc.pa_k - 1, x_BTD)
      else:
        r_BTD = r_BTD + jnp.einsum("btjd,j->btd", state[:, :, 1:], g_j.astype(dt))
    if lc.rw:
      w = lc.rw_scale * jax.nn.softmax(self.param("rw_logits", nn.initializers.zeros, (2,)))
      new_BTD = w[0].astype(dt) * f_BTD + w[1].astype(dt) * r_BTD
      taps["rw"] = w
    else:
      new_BTD = f_BTD + r_BTD
    if isinstance(state, Store):
      return state.with_x(new_BTD), taps
    return jnp.concatenate([new_BTD[:, :, None], state[:, :, :-1]], axis=2), taps


def _start(cfg, x_BTD):
  b, t, d = x_BTD.shape
  k = cfg.laurel.pa_k
  if k - 1 <= WINDOW_MAX:
    return jnp.concatenate([x_BTD[:, :, None], jnp.zeros((b, t, k - 1, d), x_BTD.dtype)], axis=2)
  return Store(x=x_BTD, buf=jnp.zeros((2 * cfg.num_layers + k - 1, b, t, d), x_BTD.dtype), kernels=cfg.kernels)


def _reach(cfg, l):
  """Layer l's MLP sublayer (2l + 1) writes its input at slot 2l + k, the highest slot layers 0..l touch."""
  return 2 * l + cfg.laurel.pa_k + 1


def _finish(cfg, state):
  return state.x if isinstance(state, Store) else state[:, :, 0]


def _params(cfg) -> int:
  lc = cfg.laurel
  return 2 * cfg.num_layers * (2 * lc.rank * cfg.d_model + (lc.pa_k - 1) + (2 if lc.rw else 0))


def _flops(cfg) -> int:
  """Per token, forward, per sublayer: the two rank-r products (4 r D), the k - 1 weighted earlier inputs and their
  sum (2 (k - 1) D; with the depth store, 2 D per slot of the layer's run, as computed), the two weighted paths
  (3 D) and the low-rank sum (D)."""
  lc, d = cfg.laurel, cfg.d_model
  pa = (2 * 2 * sum(layer_widths(cfg, _reach)) * d if lc.pa_k - 1 > WINDOW_MAX
        else 2 * cfg.num_layers * 2 * (lc.pa_k - 1) * d)
  return 2 * cfg.num_layers * (4 * lc.rank * d + 4 * d) + pa


def _check(cfg):
  lc = cfg.laurel
  check(isinstance(lc.rank, int) and 0 <= lc.rank <= cfg.d_model,
        f"model.laurel.rank={lc.rank} must be an integer in 0..model.d_model={cfg.d_model} (0: no low-rank term)")
  check(lc.rw_scale > 0, f"model.laurel.rw_scale={lc.rw_scale} must be > 0 (the sum of the two RW weights)")
  check(isinstance(lc.pa_k, int) and 1 <= lc.pa_k <= 2 * cfg.num_layers,
        f"model.laurel.pa_k={lc.pa_k} must be an integer in 1..{2 * cfg.num_layers} (the sublayers; 1: no earlier "
        "activations)")


register(Variant("laurel", Laurel, start=_start, finish=_finish, decay=("down", "up"), extra_params=_params,
                 roles={"down": "readout", "up": "vector", "pa_gain": "vector", "rw_logits": "vector"},
                 extra_flops=_flops, check=_check, reach=_reach))
