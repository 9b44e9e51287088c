"""Admin (Liu et al. 2020, "Understanding the Difficulty of Training Transformers", arXiv 2004.08249).

    x_i = N(omega_i (.) x_{i-1} + F_i(x_{i-1}))          Post-LN with a per-dimension shortcut scale; no final norm

omega_i in R^D is learnable (not weight-decayed) and starts at the paper's profiled value,
omega_i = sqrt(sum_{j<i} Var[F_j(x_{j-1})]) (the output variance accumulated over the sublayers below, the embedding
counting as j = 0). It is computed as the authors' `adaptive-profiling` does (LiyuanLucasLiu/Transformer-Clinic):
one forward pass over the profiling batch, sublayer by sublayer, each omega set before its sublayer runs, so every
later variance is measured in the network Admin will train:

    omega_1 = 1,    omega_{i+1}^2 = Var[omega_i x_{i-1}] + Var[F_i(x_{i-1})]

(variances over all elements of the batch; x_{i-1} is a LayerNorm output of variance ~1, so omega_{i+1}^2 ~
omega_i^2 + Var F_i). The pass runs in `init_params` (called by resnorm.step.step.init_state) as a lax.scan over the
blocks with the model's own attention, MLP and norm modules.

Profiling batch: `model.admin.profile_batch` sequences of `data.seq_len` bytes drawn uniformly from the init key
(`profile_tokens`). Deviation from the paper, which profiles on a training batch: random bytes keep the init a pure
function of (config, seed) that needs no data (`eval.py --init`, the dry run), and deterministic for a seed.
"""
import zlib

import flax.linen as nn
import jax
import jax.numpy as jnp

from resnorm.core.errors import check
from resnorm.model.norms import last_axis, make_norm
from resnorm.model.residual.base import Variant, depth_refusal, register


def admin_update(x, y, omega_D, norm):
  """x <- N(omega (.) x + y)."""
  return norm(last_axis(omega_D.astype(x.dtype), x.ndim) * x + y)


class Admin(nn.Module):
  cfg: object

  @nn.compact
  def __call__(self, x, branch, norm, layer, sub):
    omega = self.param("omega", nn.initializers.ones, (x.shape[-1],))  # set by the profiling pass (init_params)
    y = branch(x)
    return admin_update(x, y, omega, norm), {"u": x, "f": y}


def profile_tokens(rng, batch: int, seq_len: int) -> jax.Array:
  """The profiling batch: [batch, seq_len] random bytes from the init key."""
  return jax.random.randint(jax.random.fold_in(rng, zlib.crc32(b"admin_profile")), (batch, seq_len), 0, 256)


def profile_omegas(cfg, params, tokens, layers) -> jax.Array:
  """[L, 2] omega of every sublayer (attention, MLP) by the sequential profiling pass over `tokens`; `layers` is
  resnorm.model.layers (passed in: the registry must not import the model)."""
  blocks = params["blocks"] if cfg.scan_layers else jax.tree.map(
      lambda *a: jnp.stack(a), *[params[f"blocks_{i}"] for i in range(cfg.num_layers)])
  x = jnp.take(params["embed"], tokens, axis=0)
  pos_T = jnp.arange(tokens.shape[1], dtype=jnp.int32)
  if cfg.pos == "learned":
    x = x + params["pos_embed"][None, : tokens.shape[1]]
  key = jax.random.key(0)  # only used by initializers, never in apply
  attn, mlp, norm = layers.Attention(cfg), layers.MLP(cfg), make_norm(cfg, None)
  branches = (("attn", lambda p, h: attn.apply({"params": p}, h, key, pos_T)),
              ("mlp", lambda p, h: mlp.apply({"params": p}, h, key)))

  def block(carry, p):
    x, r2 = carry
    omegas = []
    for kind, f in branches:
      omega = jnp.sqrt(r2)
      y = f(p[kind], x)
      r2 = jnp.var(omega * x.astype(jnp.float32)) + jnp.var(y.astype(jnp.float32))
      x = admin_update(x, y, jnp.full(x.shape[-1:], omega), lambda h: norm.apply({"params": p[f"{kind}_norm"]}, h))
      omegas.append(omega)
    return (x, r2), jnp.stack(omegas)

  _, omegas = jax.lax.scan(block, (x, jnp.ones((), jnp.float32)), blocks)
  return omegas


def _init_params(cfg, params, rng, seq_len, layers):
  omegas = profile_omegas(cfg, params, profile_tokens(rng, cfg.admin.profile_batch, seq_len), layers)  # [L, 2]
  params = dict(params)

  def set_omegas(block, om):  # om [..., 2] -> each sublayer's omega filled with its profiled value
    block = dict(block)
    for j, kind in enumerate(("attn", "mlp")):
      res = block[f"{kind}_res"]
      block[f"{kind}_res"] = {**res, "omega": jnp.broadcast_to(om[..., j, None], res["omega"].shape)}
    return block

  if cfg.scan_layers:
    params["blocks"] = set_omegas(params["blocks"], omegas)
  else:
    for i in range(cfg.num_layers):
      params[f"blocks_{i}"] = set_omegas(params[f"blocks_{i}"], omegas[i])
  return params


def _check(cfg):
  check(cfg.admin.profile_batch >= 1, f"model.admin.profile_batch={cfg.admin.profile_batch} must be >= 1")


register(Variant("admin", Admin, final_norm=False, init_params=_init_params, check=_check,
                 roles={"omega": "vector"},
                 refuses=depth_refusal("Admin's omega is profiled at init to balance the output variance "
                                       "accumulated over depth, a depth scaling of its own (and the profiling pass "
                                       "runs the sublayers without the branch multiplier)"),
                 extra_params=lambda cfg: 2 * cfg.num_layers * cfg.d_model))
