"""Single-stream variants: where the norm goes and how strong the identity path is.

Equations follow docs/variants.md sections 1 and 4; x is the residual stream [B,T,D], F the sublayer, N its norm.
"""
import flax.linen as nn
import jax.numpy as jnp

from resnorm.core.errors import check
from resnorm.model.norms import make_norm, num_params
from resnorm.model.residual.base import Variant, depth_refusal, register


def _taps(u, f):
  return {"u": u, "f": f}


class PostNorm(nn.Module):
  """Post-LN (Vaswani et al. 2017; Xiong et al. 2020, arXiv 2002.04745): x <- N(x + F(x)). No final norm."""
  cfg: object

  @nn.compact
  def __call__(self, x, branch, norm, layer, sub):
    y = branch(x)
    return norm(x + y), _taps(x, y)


class PreNorm(nn.Module):
  """Pre-LN (Xiong et al. 2020, arXiv 2002.04745): x <- x + F(N(x)), then a final norm before the head."""
  cfg: object

  @nn.compact
  def __call__(self, x, branch, norm, layer, sub):
    y = branch(norm(x))
    return x + y, _taps(x, y)


class PeriNorm(nn.Module):
  """Peri-LN (arXiv 2502.02732) / Sandwich-LN (CogView, arXiv 2105.13290): x <- x + N_out(F(N_in(x))), final norm.

  Deviation: Peri-LN's optional normalization of the embedding output is not applied.
  """
  cfg: object

  @nn.compact
  def __call__(self, x, branch, norm, layer, sub):
    y = make_norm(self.cfg, "out_norm")(branch(norm(x)))
    return x + y, _taps(x, y)


def deepnorm_alpha_beta(num_layers: int) -> tuple[float, float]:
  """DeepNet (arXiv 2203.00555), decoder-only with M layers: alpha = (2M)^(1/4), beta = (8M)^(-1/4)."""
  return (2.0 * num_layers) ** 0.25, (8.0 * num_layers) ** -0.25


class DeepNorm(nn.Module):
  """DeepNorm (Wang et al. 2022, arXiv 2203.00555): x <- N(alpha x + F(x)), alpha = (2M)^(1/4); the init of FFN,
  v_proj and out_proj is scaled by beta = (8M)^(-1/4) (`init_scales`), q and k keep gain 1. No final norm.

  The paper's base init is Xavier (`model.init=xavier`); `normal` is accepted. `gpt2` is refused: its 1/sqrt(2L)
  on residual outputs would scale them by depth a second time, on top of beta.
  """
  cfg: object

  @nn.compact
  def __call__(self, x, branch, norm, layer, sub):
    alpha, _ = deepnorm_alpha_beta(self.cfg.num_layers)
    y = branch(x)
    return norm(alpha * x + y), _taps(x, y)


def _deepnorm_scales(cfg):
  _, beta = deepnorm_alpha_beta(cfg.num_layers)
  return {"v": beta, "o": beta, "wi": beta, "wo": beta}


class ReZero(nn.Module):
  """ReZero (Bachlechner et al. 2020, arXiv 2003.04887): x <- x + a_l F(x), a_l a learned scalar per sublayer
  initialized to `model.rezero.alpha_init` (paper: 0). No norm anywhere, including before the head.

  `model.rezero.share_gate=True`: one gate per block for both sublayers, as the official code's
  `ReZeroEncoderLayer` (one `resweight` for attention and feed-forward)."""
  cfg: object

  @nn.compact
  def __call__(self, x, branch, norm, layer, sub):
    a = self.param("alpha", nn.initializers.constant(self.cfg.rezero.alpha_init), ())
    y = branch(x)
    return x + a.astype(x.dtype) * y, _taps(x, y)


class LNScaling(nn.Module):
  """LayerNorm Scaling (Sun et al. 2025, arXiv 2502.05795): Pre-LN with N(x) / sqrt(l), l = 1..L the block index,
  applied to both norms of the block; final norm unscaled. The paper drops depth-scaled init with it, so
  `model.init=gpt2` is refused; its reference code uses `normal`."""
  cfg: object

  @nn.compact
  def __call__(self, x, branch, norm, layer, sub):
    scale = jnp.sqrt(layer + 1.0).astype(x.dtype)
    y = branch(norm(x) / scale)
    return x + y, _taps(x, y)


def mix_ln_split(cfg) -> int:
  """Mix-LN (Li et al. 2024, arXiv 2412.13795): Post-LN for the first floor(post_fraction * L) layers."""
  return int(cfg.mix_ln.post_fraction * cfg.num_layers)


def _mix_ln_segments(cfg):
  k = mix_ln_split(cfg)
  return (("blocks_post", k, PostNorm), ("blocks_pre", cfg.num_layers - k, PreNorm))


def _check_mix_ln(cfg):
  check(0.0 <= cfg.mix_ln.post_fraction <= 1.0,
        f"model.mix_ln.post_fraction={cfg.mix_ln.post_fraction} must be in [0, 1]")


def _no_depth_scaled_init(name):
  def check_init(cfg):
    check(cfg.init != "gpt2", f"model.init='gpt2' scales residual outputs by 1/sqrt(2L), and model.residual={name!r} "
          "already scales by depth; use model.init=xavier or normal")
  return check_init


def _per_sublayer(count):
  return lambda cfg: count(cfg) * 2 * cfg.num_layers


register(Variant("post_norm", PostNorm, final_norm=False))
register(Variant("pre_norm", PreNorm))
register(Variant("peri_norm", PeriNorm,
                 extra_params=_per_sublayer(lambda cfg: num_params(cfg, cfg.d_model))),
         "sandwich")
register(Variant("deepnorm", DeepNorm, final_norm=False, init_scales=_deepnorm_scales,
                 refuses=depth_refusal("DeepNorm's alpha = (2M)^(1/4) and beta = (8M)^(-1/4) are a depth "
                                       "parametrization of their own; a depth rule on top scales by depth twice"),
                 check=_no_depth_scaled_init("deepnorm")))
register(Variant("rezero", ReZero, roles={"alpha": "vector"}, final_norm=False, block_norms=False, block_shared=lambda cfg: cfg.rezero.share_gate,
                 extra_params=lambda cfg: cfg.num_layers * (1 if cfg.rezero.share_gate else 2)))
register(Variant("ln_scaling", LNScaling, check=_no_depth_scaled_init("ln_scaling"),
                 refuses=depth_refusal("LayerNorm Scaling's 1/sqrt(l) is a depth scaling of its own; a depth rule "
                                       "on top scales by depth twice")))
register(Variant("mix_ln", PreNorm, segments=_mix_ln_segments, check=_check_mix_ln))
