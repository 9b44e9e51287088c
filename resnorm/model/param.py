"""The parametrization axis (`model.param`): how init, forward multipliers and the optimizer scale with width and
depth, so that hyperparameters tuned at a base shape transfer to a larger one. Orthogonal to the placement.

With m_d = d_model / param_base.d_model and m_L = num_layers / param_base.num_layers (docs/variants.md, "The
parametrization axis"):

- `standard`: today's parametrization; every factor below is 1 and no multiplier is applied at all.
- `mup`: µP (Yang et al., Tensor Programs V, arXiv 2203.03466), in the multiplier form of EleutherAI's nanoGPT-mup:
  hidden init variance / m_d, hidden Adam lr / m_d, Adam eps / m_d everywhere, logits x 1/m_d, attention scores
  x K_base/K (1/d_head at the base's constant).
- `depth_mup` and `completep`: µP plus the depth rules of CompleteP (Dey et al. 2025, arXiv 2505.01618; the
  reference code's completep branch) with alpha = 1/2 (Depth-µP, arXiv 2310.02244) and alpha = 1:
  branch output x m_L^-alpha; hidden Adam lr x m_L^(alpha-1), eps of hidden params x m_L^-alpha (eps of the
  embedding, unembedding and final norm x 1/m_d only: the 2026-01-19 correction after arXiv 2512.22382); hidden
  weight decay x m_d; no depth factor in the init (GPT-2's 1/sqrt(2L) evaluated at the base depth).

Every factor is a ratio to the base shape, so at the base shape (the default: the model's own) every
parametrization computes exactly what `standard` computes. Each param has a role, read from its path (the base
weights) or declared by its placement (`Variant.roles`); the role decides its factors (ROLES).
"""
import dataclasses

import jax

from resnorm.core.errors import InputError

PARAMS = ("standard", "mup", "depth_mup", "completep")
DEPTH_ALPHA = {"depth_mup": 0.5, "completep": 1.0}  # the depth exponent; absent: no depth rule

# Roles. hidden: a matrix whose fan-in is the width and fan-out the width (attention, MLP); readout: a placement's
# matrix from the width to a few outputs inside the stack (HC's dynamic weights, AttnRes's pseudo-queries); vector:
# a param whose fan-in is finite inside the stack (norm gains and biases, gates, static mixing, scalars); embed,
# unembed; final: a vector after the stack (the final norm); final_readout: a readout after the stack.
ROLES = ("embed", "hidden", "readout", "vector", "unembed", "final", "final_readout")
BASE_ROLES = {"embed": "embed", "pos_embed": "embed", "head": "unembed",
              "q": "hidden", "k": "hidden", "v": "hidden", "o": "hidden", "wi": "hidden", "wo": "hidden",
              "final_norm": "final"}


@dataclasses.dataclass(frozen=True)
class Rule:
  """A role's factors on the standard setting: lr, eps and weight decay of AdamW; init std of base weights."""
  lr: float = 1.0
  eps: float = 1.0
  wd: float = 1.0
  init: float = 1.0


@dataclasses.dataclass(frozen=True)
class Shape:
  """The multipliers of one model: m_d, m_L, the depth exponent alpha (None: no depth rule) and whether the width
  rules apply (every parametrization but standard)."""
  param: str
  m_d: float
  m_L: float
  head_ratio: float  # K_base / K, K the head dim
  alpha: float | None

  @property
  def width(self) -> bool:
    return self.param != "standard"

  @property
  def branch(self) -> float:
    """The factor on every sublayer's output F (CompleteP Eq. for the residual branch: m_L^-alpha)."""
    return self.m_L ** -self.alpha if self.alpha is not None else 1.0

  @property
  def logits(self) -> float:
    """The factor on the head's input (µP's output multiplier 1/m_d, applied before the unembedding)."""
    return 1.0 / self.m_d if self.width else 1.0

  @property
  def query(self) -> float:
    """The factor on the queries: scores scale as 1/K instead of 1/sqrt(K), relative to the base head dim."""
    return self.head_ratio ** 0.5 if self.width else 1.0

  def rule(self, role: str) -> Rule:
    if not self.width:
      return Rule()
    a, m_d, m_L = self.alpha, self.m_d, self.m_L
    depth_lr = m_L ** (a - 1.0) if a is not None else 1.0
    depth_eps = m_L ** -a if a is not None else 1.0
    decay = m_d if a is not None else 1.0  # the reference's completep groups decay hidden weights by wd x m_d
    if role in ("hidden", "readout"):
      return Rule(lr=depth_lr / m_d, eps=depth_eps / m_d, wd=decay, init=m_d ** -0.5 if role == "hidden" else 1.0)
    if role == "vector":
      return Rule(lr=depth_lr, eps=depth_eps / m_d)
    if role == "final_readout":
      return Rule(lr=1.0 / m_d, eps=1.0 / m_d)
    if role in ("embed", "unembed", "final"):
      return Rule(eps=1.0 / m_d)
    raise InputError(f"unknown parametrization role {role!r}; known: {', '.join(ROLES)}")


def base_shape(mcfg) -> tuple[int, int, int]:
  """(d_model, num_layers, head_dim) of the base shape; a 0 in `model.param_base` is the model's own value."""
  pb = mcfg.param_base
  d = pb.d_model or mcfg.d_model
  return d, pb.num_layers or mcfg.num_layers, pb.head_dim or mcfg.d_model // mcfg.num_heads


def shape(mcfg) -> Shape:
  param = mcfg.get("param", "standard")
  if param == "standard":
    return Shape("standard", 1.0, 1.0, 1.0, None)
  d, L, k = base_shape(mcfg)
  return Shape(param, mcfg.d_model / d, mcfg.num_layers / L, k / (mcfg.d_model // mcfg.num_heads),
               DEPTH_ALPHA.get(param))


def _norm_module(name: str) -> bool:
  return name.endswith("norm")


def role(path: tuple, roles: dict) -> str:
  """The role of the param at `path` (its tuple of names, leaf last). Looked up in the placement's declared roles
  (`roles`) and then the base weights' (BASE_ROLES), in this order: a `module/name` suffix (longest first), a module
  the param lies in (nearest first: `final_norm`), the param's own name; a param inside any other norm module is a
  norm gain or bias (`vector`)."""
  # a boxed param's path ends in its box's `.value`, which names nothing
  names = tuple(str(p.key) if hasattr(p, "key") else p for p in path if hasattr(p, "key") or isinstance(p, str))
  keys = (["/".join(names[i:]) for i in range(len(names) - 1)]  # suffixes of two names or more
          + list(reversed(names[:-1])) + [names[-1]])
  for key in keys:
    for table in (roles, BASE_ROLES):
      if key in table:
        return table[key]
  if any(_norm_module(n) for n in names[:-1]):
    return "vector"
  raise InputError(f"param {'/'.join(names)} has no parametrization role: declare it in its placement's roles")


def roles_tree(params, roles: dict):
  """The role of every leaf of a param tree (boxed or not), as a tree of strings of the same structure."""
  return jax.tree_util.tree_map_with_path(lambda path, _: role(path, roles), params)
