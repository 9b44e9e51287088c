"""DenseFormer (Pagliardini et al. 2024, arXiv 2402.02622; code epfml/DenseFormer): Pre-LN blocks, and after block
i (1-based) a depth-weighted average (DWA) of the embedding X_0 and the block outputs X_1..X_i:

    X_i = Block_i(Y_{i-1}),   Y_i = sum_{j<=i} alpha_{i,j} X_j,   Y_0 = X_0;   final norm on Y_L -> head

alpha_{i,i} = 1 and every other weight 0 at init: the plain Pre-LN stack. The paper's sparse "k x p" form:
dilation k = `model.denseformer.dilation` (the DWA after block i reads only the X_j with j = i mod k) and period
p = `model.denseformer.period` (a DWA only after the blocks with i = 0 mod p; the others pass Y_i = X_i on), as
the authors' `DWAModules`. The DWA weights are weight-decayed, as in the authors' code (nn.Linear weights).

The DWA reads every earlier output, so the state is a depth store (resnorm.model.depth_store): slot j holds X_j
(j = 0..L), written once after block j; the current stream Y rides the carry as the store's `x`. The sublayers are
Pre-LN on it; `after_block` (module `after_block`, param `alpha` [L+1] per block, stacked [L, L+1]) writes X_i and
sets Y_i to the DWA. The weights outside the mask (j > i, the dilation and period) are stored but multiplied by 0
and never used: the paper's count is sum over DWA blocks i of floor(i/k) + 1.

Memory per token: the store, (L + 1) D, kept once by the backward (the authors' code holds each X_j once), plus
the blocks' own activations. Y_i is a read of the store, so the backward recomputes each block's input from it
(`x_from_store`) rather than keeping it: with remat, the store is all a block keeps, as X_i is all a Pre-LN block
keeps. The DWA after block l computes over the slots of its run of `model.depth_chunks` (X_0 up to the run's last
block's output; 2 D FLOPs per token per slot), never over the whole store but in the last run.
"""
import flax.linen as nn
import jax
import jax.numpy as jnp

from resnorm.core.errors import check
from resnorm.model.depth_store import Store, layer_widths
from resnorm.model.residual.base import Variant, register


class DenseSublayer(nn.Module):
  """Pre-LN on the current stream: y <- y + F(N(y))."""
  cfg: object

  @nn.compact
  def __call__(self, store: Store, branch, norm, layer, sub):
    x = store.x
    y = branch(norm(x))
    return store.with_x(x + y), {"u": x, "f": y}


def dwa_mask(cfg, i):
  """[L+1] bool: the X_j the DWA after block i (1-based, traced) reads; all False when i is not a DWA block."""
  dc = cfg.denseformer
  j = jnp.arange(cfg.num_layers + 1)
  return (j <= i) & ((i - j) % dc.dilation == 0) & (i % dc.period == 0)


def dwa_output(cfg, store: Store, alpha, i):
  """Y_i from a store that holds X_0..X_i: the DWA where i = 0 mod p, else X_i."""
  x_i = store.slot(i)
  w_S = jnp.where(dwa_mask(cfg, i), alpha, 0.0)[:store.num_slots]     # a run's prefix of the store: X_0 .. X_{P-1}
  dwa = store.weighted_shared(w_S).astype(x_i.dtype)
  return jnp.where(i % cfg.denseformer.period == 0, dwa, x_i)


class DWA(nn.Module):
  cfg: object

  @nn.compact
  def __call__(self, store: Store, layer):
    i = layer + 1
    n = self.cfg.num_layers + 1
    alpha = self.param("alpha", lambda _rng, shape: jax.nn.one_hot(i, n, dtype=jnp.float32), (n,))
    store = store.write(i, store.x)
    return store.with_x(dwa_output(self.cfg, store, alpha, i))


def _x_from_store(cfg, params, buf_SBTD, l):
  """Y_l, block l's input, from the final store: X_0 for block 0, else the DWA after block l (block l-1's alpha).
  The slots past l hold later outputs, read with weight 0, as the forward read zeros there."""
  alpha = jax.lax.dynamic_index_in_dim(params["after_block"]["alpha"], jnp.maximum(l - 1, 0), keepdims=False)
  store = Store(x=None, buf=buf_SBTD, kernels=cfg.kernels)
  return jnp.where(l == 0, store.slot(0), dwa_output(cfg, store, alpha, l))


def _reach(cfg, l):
  """Block l writes X_{l+1} and its DWA reads X_0 .. X_{l+1}."""
  return l + 2


def _start(cfg, x_BTD):
  b, t, d = x_BTD.shape
  empty = jnp.zeros((cfg.num_layers, b, t, d), x_BTD.dtype)
  return Store(x=x_BTD, buf=jnp.concatenate([x_BTD[None], empty], axis=0), kernels=cfg.kernels)


def _finish(cfg, store: Store):
  return store.x


def dwa_weights_used(cfg) -> int:
  """The paper's parameter count: floor(i/k) + 1 weights for each DWA block i (i = 0 mod p)."""
  dc = cfg.denseformer
  return sum(i // dc.dilation + 1 for i in range(1, cfg.num_layers + 1) if i % dc.period == 0)


def _check(cfg):
  dc = cfg.denseformer
  check(dc.dilation >= 1, f"model.denseformer.dilation={dc.dilation} must be >= 1")
  check(dc.period >= 1, f"model.denseformer.period={dc.period} must be >= 1")


register(Variant(
    "denseformer", DenseSublayer, start=_start, finish=_finish, after_block=DWA, x_from_store=_x_from_store,
    decay=("alpha",), check=_check, reach=_reach, roles={"alpha": "vector"},
    extra_params=lambda cfg: cfg.num_layers * (cfg.num_layers + 1),
    # the masked DWA as computed: after every block, a weighted sum over the slots of its run (layer_widths)
    extra_flops=lambda cfg: 2 * sum(layer_widths(cfg, _reach)) * cfg.d_model))
