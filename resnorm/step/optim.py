"""Optimizer (optax): AdamW with a weight-decay mask, global-norm clipping, warmup + decay schedules; under a
parametrization other than `standard`, AdamW with each param role's lr, eps and weight-decay factors
(resnorm.model.param), as one chain over the param tree."""
import flax
import jax
import optax

from resnorm.model import param, residual
BASE_DECAY = ("q", "k", "v", "o", "wi", "wo", "head")  # weight matrices; norms, embeddings, gates are not decayed


def schedule(tcfg) -> optax.Schedule:
  """Linear warmup 0 -> lr over `warmup_steps` (0 = none), then `schedule` over the remaining steps."""
  lr, warm, total = tcfg.lr, tcfg.warmup_steps, tcfg.steps
  rest, end = max(total - warm, 1), tcfg.lr * tcfg.min_lr_ratio
  if tcfg.schedule == "cosine":
    decay = optax.cosine_decay_schedule(lr, rest, alpha=tcfg.min_lr_ratio)
  elif tcfg.schedule == "linear":
    decay = optax.linear_schedule(lr, end, rest)
  elif tcfg.schedule == "rsqrt":
    decay = lambda step: lr * jax.lax.rsqrt(1.0 + step / max(warm, 1))
  else:
    decay = optax.constant_schedule(lr)
  if warm == 0:
    return decay
  return optax.join_schedules([optax.linear_schedule(0.0, lr, warm), decay], [warm])


def decay_mask(params, cfg):
  """True where weight decay applies: base weight matrices, the variant's declared params, and the embedding
  if `train.decay_embed`."""
  flat = flax.traverse_util.flatten_dict(flax.core.unfreeze(params))
  return flax.traverse_util.unflatten_dict({k: _decayed(k, cfg) for k in flat})


def _decayed(names: tuple, cfg) -> bool:
  decayed = set(BASE_DECAY) | set(residual.get(cfg.model.residual).decay)
  if cfg.train.decay_embed:
    decayed |= {"embed", "pos_embed"}
  return names[-1] in decayed


def _per_leaf(cfg, fn) -> optax.GradientTransformation:
  """A stateless transform: each update leaf u -> fn(u, param, names, role), the names of its path in the tree."""
  roles = residual.get(cfg.model.residual).roles
  def f(updates, params):
    def one(path, u, p):
      names = tuple(str(k.key) for k in path if hasattr(k, "key"))
      return fn(u, p, names, param.role(names, roles))
    return jax.tree_util.tree_map_with_path(one, updates, params)
  return optax.stateless(f)


def by_role(cfg, sh: param.Shape) -> optax.GradientTransformation:
  """AdamW with each param role's lr, eps and weight-decay factors (resnorm.model.param), as one chain over the whole
  tree whose state is one Adam state, like `standard`'s. Adam is invariant to a gradient's scale but for eps, so a
  role's eps x e is Adam with eps on the gradient / e: m / (sqrt(v) + eps e) = (m / e) / (sqrt(v / e^2) + eps).
  The decay is AdamW's decoupled lr x wd x p, so a hidden weight's (lr / m_d, wd x m_d under CompleteP) is the same
  at every width, as the reference's torch AdamW groups give."""
  t, rules = cfg.train, {name: sh.rule(name) for name in param.ROLES}
  decay = lambda u, p, names, r: u + (t.weight_decay * rules[r].wd) * p if _decayed(names, cfg) else u
  return optax.chain(
      _per_leaf(cfg, lambda u, p, names, r: u / rules[r].eps if rules[r].eps != 1.0 else u),
      optax.scale_by_adam(b1=t.b1, b2=t.b2, eps=t.eps),
      _per_leaf(cfg, decay) if t.weight_decay > 0 else optax.identity(),
      optax.scale_by_learning_rate(schedule(t)),
      _per_leaf(cfg, lambda u, p, names, r: u * rules[r].lr if rules[r].lr != 1.0 else u))


def unit_norm(axes: dict) -> optax.GradientTransformation:
  """Keeps the named weights at unit L2 norm along their axis after every step (nGPT, 2410.01131: the matrices
  are renormalized after each optimizer step): the update becomes normalize(params + update) - params."""
  def update(updates, state, params):
    new = residual.unit_normalize(optax.apply_updates(params, updates), axes)
    return jax.tree.map(lambda n, p: n - p, new, params), state
  return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def make(cfg) -> optax.GradientTransformation:
  t = cfg.train
  parts = [optax.clip_by_global_norm(t.grad_clip)] if t.grad_clip > 0 else []
  sh = param.shape(cfg.model)
  if sh.width:
    parts.append(by_role(cfg, sh))
  else:  # `standard`: the one AdamW it has always been (its state layout is the checkpoints')
    parts.append(optax.adamw(schedule(t), b1=t.b1, b2=t.b2, eps=t.eps, weight_decay=t.weight_decay,
                             mask=lambda p: decay_mask(p, cfg)))
  axes = dict(residual.get(cfg.model.residual).unit_norm)
  if axes:
    parts.append(unit_norm(axes))
  return optax.chain(*parts)
