"""Optimizer (optax): AdamW with a weight-decay mask, global-norm clipping, warmup + decay schedules; under a
parametrization other than `standard`, AdamW per param role (resnorm.model.param) with the role's lr, eps and weight
decay factors, as one optax.multi_transform over the param tree."""
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


def role_labels(params, cfg):
  """Each param's group: its role, and `/decay` where weight decay applies (the same params as decay_mask)."""
  roles = residual.get(cfg.model.residual).roles
  def label(path, _):
    names = tuple(str(p.key) for p in path if hasattr(p, "key"))
    return param.role(names, roles) + ("/decay" if _decayed(names, cfg) else "")
  return jax.tree_util.tree_map_with_path(label, params)


def by_role(cfg, sh: param.Shape) -> optax.GradientTransformation:
  """AdamW per role: lr x rule.lr on the schedule, eps x rule.eps, weight decay x rule.wd on the decayed params.
  optax's AdamW decays by lr x wd x p, so a hidden weight's decay under CompleteP (lr / m_d, wd x m_d) is the same
  at every width, as the reference's torch AdamW groups give."""
  t, lr = cfg.train, schedule(cfg.train)
  groups = {}
  for name in param.ROLES:
    rule = sh.rule(name)
    for decay in (False, True):
      groups[name + ("/decay" if decay else "")] = optax.adamw(
          lambda step, f=rule.lr: lr(step) * f, b1=t.b1, b2=t.b2, eps=t.eps * rule.eps,
          weight_decay=t.weight_decay * rule.wd if decay else 0.0)
  return optax.multi_transform(groups, lambda p: role_labels(p, cfg))


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
