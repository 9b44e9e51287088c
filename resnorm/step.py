"""The jitted functions: init, the train step (guarded against non-finite updates), the eval step and the
diagnostics step.

Nothing here syncs with the host. The train step returns its metrics as device arrays; the loop reads them one
step later.
"""
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from resnorm import diagnostics, layers, optim, residual
from resnorm.model import LM


def loss_and_count(logits_BTV, batch):
  ce = optax.softmax_cross_entropy_with_integer_labels(logits_BTV, batch["targets"])
  mask = batch["mask"]
  return jnp.sum(ce * mask), jnp.sum(mask)


def make_loss_fn(mcfg):
  model = LM(mcfg)

  def loss_fn(params, batch):
    logits, _ = model.apply({"params": params}, batch["inputs"])
    total, count = loss_and_count(logits, batch)
    return total / jnp.maximum(count, 1.0)
  return loss_fn


def init_state(cfg, mcfg, tx, rng, seq_len: int):
  """{params, opt_state, step, rng, skipped}; params are boxed with their logical axes (for shardings). A variant's
  `init_params` (Admin's profiling pass, nGPT's unit-norm weights) finishes the init of `LM.init`."""
  p_rng, s_rng = jax.random.split(rng)
  tokens = jnp.zeros((1, seq_len), jnp.int32)
  params = LM(mcfg).init(p_rng, tokens)["params"]
  finish = residual.get(mcfg.residual).init_params
  if finish is not None:
    is_box = lambda x: isinstance(x, nn.meta.AxisMetadata)
    new = finish(mcfg, nn.unbox(params), p_rng, seq_len, layers)
    params = jax.tree.map(lambda old, v: old.replace_boxed(v) if is_box(old) else v, params, new, is_leaf=is_box)
  opt_state = tx.init(params)  # from the boxed params, so the moments carry the params' logical axes
  return {"params": params, "opt_state": opt_state, "step": jnp.zeros((), jnp.int32),
          "rng": jax.random.key_data(s_rng), "skipped": jnp.zeros((), jnp.int32)}


def train_step(state, batch, *, cfg, mcfg, tx):
  """One AdamW step. A non-finite loss or gradient leaves params and optimizer state unchanged (the host then
  stops the run as diverged, or counts the skip with `train.skip_nonfinite`)."""
  loss, grads = jax.value_and_grad(make_loss_fn(mcfg))(state["params"], batch)
  gnorm = optax.tree.norm(grads)
  ok = jnp.isfinite(loss) & jnp.isfinite(gnorm)
  updates, new_opt = tx.update(grads, state["opt_state"], state["params"])
  new_params = optax.apply_updates(state["params"], updates)
  keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(ok, a, b), new, old)
  sub_sq = diagnostics.sublayer_grad_sumsq(grads, cfg)
  bad = ~jnp.isfinite(sub_sq)
  metrics = {"loss": loss, "grad_norm": gnorm, "lr": optim.schedule(cfg.train)(state["step"]),
             "finite": ok, "nonfinite_sublayer": jnp.where(jnp.any(bad), jnp.argmax(bad), -1)}
  skipped = jnp.where(ok, 0, state["skipped"] + 1)
  new_state = {"params": keep(new_params, state["params"]), "opt_state": keep(new_opt, state["opt_state"]),
               "step": state["step"] + 1, "rng": state["rng"], "skipped": skipped}
  return new_state, {**metrics, "skipped": skipped}


def eval_step(params, batch, *, mcfg):
  logits, _ = LM(mcfg).apply({"params": params}, batch["inputs"])
  return loss_and_count(logits, batch)


def jit_train_step(cfg, mcfg, tx, state_sh=None, batch_sh=None, repl=None):
  fn = functools.partial(train_step, cfg=cfg, mcfg=mcfg, tx=tx)
  if state_sh is None:
    return jax.jit(fn, donate_argnums=(0,))
  return jax.jit(fn, in_shardings=(state_sh, batch_sh), out_shardings=(state_sh, repl), donate_argnums=(0,))


def jit_eval_step(mcfg, params_sh=None, batch_sh=None, repl=None):
  fn = functools.partial(eval_step, mcfg=mcfg)
  if params_sh is None:
    return jax.jit(fn)
  return jax.jit(fn, in_shardings=(params_sh, batch_sh), out_shardings=(repl, repl))


def make_diag_fn(cfg, mcfg):
  """Jitted (params, batch) -> per-sublayer statistics, grad sum of squares, angular distances and the mean
  mixing matrices: one forward + backward with taps collected, no Python loop over layers."""
  def fn(params, batch):
    def loss_with_taps(p):
      logits, taps = LM(mcfg, collect=True).apply({"params": p}, batch["inputs"])
      total, count = loss_and_count(logits, batch)
      return total / jnp.maximum(count, 1.0), taps
    grads, taps = jax.grad(loss_with_taps, has_aux=True)(params)
    out = {"stats": diagnostics.tap_stats(taps), "grad_sumsq": diagnostics.sublayer_grad_sumsq(grads, cfg),
           "angular": diagnostics.angular_distance(taps["u"])}
    if "mix" in taps:
      out["mixing"] = jnp.mean(taps["mix"].astype(jnp.float32), axis=(1, 2))      # [S, n, n]
    return out
  return jax.jit(fn)
