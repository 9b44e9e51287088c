"""nGPT (Loshchilov et al. 2024, "nGPT: Normalized Transformer with Representation Learning on the Hypersphere",
arXiv 2410.01131; code NVIDIA/ngpt). Every hidden state and every weight vector along the embedding dimension lives
on the unit sphere; per sublayer

    h <- Norm(h + alpha (.) (Norm(F(h)) - h))        Norm(x) = x / ||x||, alpha in R^D ("eigen learning rates")

with no LayerNorm anywhere (no block norms, no final norm), and

- attention: q <- s_qk (.) Norm(q), k <- s_qk (.) Norm(k) per head after RoPE, softmax scale sqrt(K) instead of
  1/sqrt(K) (params `attn/qkv/s_qk` [H, K]);
- MLP: the hidden pre-activation scaled by s_v sqrt(D) before the nonlinearity (`mlp/hidden/s_v` [F]);
- logits: z = s_z (.) (h E_out^T) (`logit_scale/s_z` [V]);
- weights: the embedding rows, the head columns, q, k, v and MLP wi (along D, their input), o and MLP wo (along D,
  their output) are unit-normalized at init (`init_params`) and after every optimizer step (`unit_norm`, the
  optax transform resnorm.step.optim.unit_norm).

Learnable scalers use the paper's reparameterization: the param starts at `scale` and acts as
param * (init / scale), so Adam moves it at the rate of a unit-scale weight: alpha (init `model.ngpt.alpha_init`
0.05, scale 1/sqrt(D); |alpha| is used, as the authors' code), s_qk (init 1, scale 1/sqrt(D)), s_v (init 1, scale 1),
s_z (init 1, scale 1/sqrt(D)).

Left out / changed: the MLP is resnorm's GELU MLP, not SwiGLU, so s_v scales the GELU input (the role of SwiGLU's
gate input v) and SwiGLU's s_u has no counterpart; parameters stay float32 (the authors store matrices in bfloat16);
`model.pos` must be `rope` (a learned position embedding added to a unit-norm token vector would leave the sphere).
The paper trains with no weight decay and no warmup: set train.weight_decay=0, train.warmup_steps=0 (as
configs/ngpt_12l.py does); decay on the renormalized matrices would only be undone by the renormalization.
"""
import flax.linen as nn
import jax
import jax.numpy as jnp

from resnorm.core.errors import check
from resnorm.model.norms import ELEMENTWISE, last_axis
from resnorm.model.residual.base import Variant, register, unit_normalize

# axis of the embedding dimension D, counted from the end (the same in stacked [L, ...] and per-layer layouts)
UNIT_NORM = (("embed", -1), ("head", -2), ("q", -3), ("k", -3), ("v", -3), ("o", -1), ("wi", -2), ("wo", -1))


def justnorm(x):
  """x / ||x|| over the last axis, in float32."""
  x32 = x.astype(jnp.float32)
  return (x32 * jax.lax.rsqrt(jnp.sum(jnp.square(x32), axis=-1, keepdims=True))).astype(x.dtype)


def scaler(mod, name, init: float, scale: float, shape):
  """A learnable scaler param * (init / scale), the param starting at `scale`."""
  return mod.param(name, nn.initializers.constant(scale), shape) * (init / scale)


class QKNorm(nn.Module):
  cfg: object

  @nn.compact
  def __call__(self, q, k, v, rope):
    h, kd = q.shape[-2:]
    s_qk = scaler(self, "s_qk", self.cfg.ngpt.s_qk_init, self.cfg.d_model ** -0.5, (h, kd)).reshape(1, 1, h, kd)
    s_qk = s_qk.astype(q.dtype)
    q, k = s_qk * justnorm(rope(q)), s_qk * justnorm(rope(k))
    return q * kd, k, v  # the kernels scale scores by 1/sqrt(K): q K / sqrt(K) gives nGPT's sqrt(K)


class HiddenScale(nn.Module):
  cfg: object

  @nn.compact
  def __call__(self, h_BTF):
    s_v = scaler(self, "s_v", self.cfg.ngpt.s_v_init, 1.0, (h_BTF.shape[-1],)) * self.cfg.d_model ** 0.5
    return last_axis(s_v.astype(h_BTF.dtype), h_BTF.ndim) * h_BTF


class LogitScale(nn.Module):
  cfg: object

  @nn.compact
  def __call__(self, logits_BTV):
    s_z = scaler(self, "s_z", self.cfg.ngpt.s_z_init, self.cfg.d_model ** -0.5, (logits_BTV.shape[-1],))
    return last_axis(s_z.astype(logits_BTV.dtype), logits_BTV.ndim) * logits_BTV


class NormalizedSublayer(nn.Module):
  cfg: object
  attn_qkv = QKNorm
  mlp_hidden = HiddenScale

  @nn.compact
  def __call__(self, h, branch, norm, layer, sub):
    alpha = scaler(self, "alpha", self.cfg.ngpt.alpha_init, self.cfg.d_model ** -0.5, (h.shape[-1],))
    lr = last_axis(jnp.abs(alpha).astype(h.dtype), h.ndim)
    y = branch(h)
    a, b = justnorm(h), justnorm(y)
    return justnorm(a + lr * (b - a)), {"u": h, "f": y}


def _init_params(cfg, params, rng, seq_len, layers):
  return unit_normalize(params, dict(UNIT_NORM))


def _check(cfg):
  check(cfg.pos == "rope", f"model.residual='ngpt' needs model.pos='rope' (got {cfg.pos!r}): a learned position "
        "embedding added to the unit-norm token vectors would take them off the sphere")
  check(cfg.norm not in ELEMENTWISE, f"model.norm={cfg.norm!r} with model.residual='ngpt': nGPT has no "
        "LayerNorm for an elementwise norm to replace; "
        "its normalizations keep every vector on the unit sphere, which is the method itself (use ngpt with its "
        "default model.norm)")


register(Variant(
    "ngpt", NormalizedSublayer, final_norm=False, block_norms=False, logit_scale=LogitScale,
    init_params=_init_params, unit_norm=UNIT_NORM, check=_check,
    roles={"s_qk": "vector", "alpha": "vector", "s_v": "vector", "s_z": "final"},
    refuses={p: "nGPT keeps its matrices at unit norm and renormalizes them after every step, so the width rules "
             "on their init std and Adam lr have no meaning (and nGPT's lr does not transfer: nuGPT, arXiv "
             "2604.27077)" for p in ("mup", "depth_mup", "completep")},
    extra_params=lambda cfg: cfg.num_layers * (3 * cfg.d_model + cfg.mlp_dim) + cfg.vocab_size))
