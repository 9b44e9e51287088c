"""The speedrun's residual scalars (karpathy/nanochat `nanochat/gpt.py`; KellerJordan/modded-nanogpt's records), on
Pre-Norm blocks. Before each block l (0-based) the stream is rescaled and the block input x0 mixed back in:

    x <- lambda_r[l] x + lambda_0[l] x0            (then x <- x + F(N(x)) for attention and the MLP)

and after the last block a middle block's stream is taken back out ("backout") before the final norm:

    y = x_L - lambda_b x_b,     x_b = the stream after block `backout_layer`

x0 is the stream the blocks start from: the embedding, through a parameter-free RMS norm where the preset normalizes
it (nanochat and modded-nanogpt both do: `x = x0 = norm(x)`). Every lambda is learned. Presets
(`model.resid_lambdas.preset`), inits from the authors' code:
- `nanochat` (nanochat since 2026-03-14): lambda_r 1.15 -> 1.05 and lambda_0 0.20 -> 0.05 linearly over the blocks,
  lambda_b 0.2, backout after block L // 2; embedding normalized.
- `backout` (modded-nanogpt's 2025-10-04 record, 12 layers): lambda_r 1, lambda_0 0, lambda_b 0.5, backout after
  block round(2L / 3) (their block 8 of 12); embedding normalized.
- `identity`: lambda_r 1, lambda_0 0, lambda_b 0, backout after block L // 2, embedding not normalized: Pre-Norm at
  init exactly (tested), the preset to upcycle from a Pre-Norm run.
Deviation: both codes give the scalars their own Adam lr and betas (nanochat: lambda_r 0.005, lambda_0 0.5,
lambda_b 0.2); here they train at the run's lr like every other `vector` param, without weight decay.

State: [B, T, 3, D]: slot 0 the stream x, 1 the block input x0, 2 the backout stream x_b.
"""
import flax.linen as nn
import jax.numpy as jnp

from resnorm.core.errors import check
from resnorm.model.residual.base import Variant, register

# preset -> (lambda_r first, last; lambda_0 first, last; lambda_b; backout layer rule; normalize the embedding)
PRESETS = {"nanochat": (1.15, 1.05, 0.20, 0.05, 0.2, "half", True),
           "backout": (1.0, 1.0, 0.0, 0.0, 0.5, "two_thirds", True),
           "identity": (1.0, 1.0, 0.0, 0.0, 0.0, "half", False)}


def backout_layer(cfg) -> int:
  rule = PRESETS[cfg.resid_lambdas.preset][5]
  return cfg.num_layers // 2 if rule == "half" else round(2 * cfg.num_layers / 3)


def _ramp(first: float, last: float, layer, num_layers: int):
  """first at block 0 to last at block L - 1, linearly (nanochat's init), as a function of the traced layer."""
  return lambda _rng, shape: jnp.asarray(first + (last - first) * layer / max(num_layers - 1, 1), jnp.float32)


class ScalarsAttn(nn.Module):
  """x <- lambda_r x + lambda_0 x0, then x <- x + Attn(N(x))."""
  cfg: object

  @nn.compact
  def __call__(self, s_BT3D, branch, norm, layer, sub):
    r0, r1, z0, z1 = PRESETS[self.cfg.resid_lambdas.preset][:4]
    lam_r = self.param("lambda_r", _ramp(r0, r1, layer, self.cfg.num_layers), ())
    lam_0 = self.param("lambda_0", _ramp(z0, z1, layer, self.cfg.num_layers), ())
    x, x0 = s_BT3D[:, :, 0], s_BT3D[:, :, 1]
    x = lam_r.astype(x.dtype) * x + lam_0.astype(x.dtype) * x0
    y = branch(norm(x))
    taps = {"u": x, "f": y, "resid_lambda": lam_r.astype(jnp.float32), "x0_lambda": lam_0.astype(jnp.float32)}
    return s_BT3D.at[:, :, 0].set(x + y), taps


class ScalarsMLP(nn.Module):
  """x <- x + MLP(N(x)); after block `backout_layer` the stream is kept as x_b."""
  cfg: object

  @nn.compact
  def __call__(self, s_BT3D, branch, norm, layer, sub):
    x = s_BT3D[:, :, 0]
    y = branch(norm(x))
    x = x + y
    x_b = jnp.where(layer == backout_layer(self.cfg), x, s_BT3D[:, :, 2])
    nan = jnp.float32(jnp.nan)
    return jnp.stack([x, s_BT3D[:, :, 1], x_b], axis=2), {"u": s_BT3D[:, :, 0], "f": y, "resid_lambda": nan,
                                                           "x0_lambda": nan}


class Backout(nn.Module):
  """y = x_L - lambda_b x_b."""
  cfg: object

  @nn.compact
  def __call__(self, s_BT3D):
    lam_b = self.param("lambda_b", nn.initializers.constant(PRESETS[self.cfg.resid_lambdas.preset][4]), ())
    return s_BT3D[:, :, 0] - lam_b.astype(s_BT3D.dtype) * s_BT3D[:, :, 2]


def _start(cfg, x_BTD):
  if PRESETS[cfg.resid_lambdas.preset][6]:  # a parameter-free RMS norm (nanochat's F.rms_norm, eps: model.norm_eps)
    x32 = x_BTD.astype(jnp.float32)
    x_BTD = (x32 * jnp.reciprocal(jnp.sqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + cfg.norm_eps))).astype(
        x_BTD.dtype)
  return jnp.stack([x_BTD, x_BTD, jnp.zeros_like(x_BTD)], axis=2)


def _finish(cfg, s_BT3D):
  return Backout(cfg, name="backout")(s_BT3D)


def _check(cfg):
  check(cfg.resid_lambdas.preset in PRESETS,
        f"model.resid_lambdas.preset={cfg.resid_lambdas.preset!r} is unknown; known: {', '.join(PRESETS)}")


register(Variant("resid_lambdas", (ScalarsAttn, ScalarsMLP), start=_start, finish=_finish, check=_check,
                 roles={"lambda_r": "vector", "lambda_0": "vector", "lambda_b": "vector"},
                 extra_params=lambda cfg: 2 * cfg.num_layers + 1,
                 extra_flops=lambda cfg: 3 * cfg.num_layers * cfg.d_model + 2 * cfg.d_model))
