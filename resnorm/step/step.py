"""The jitted functions: init, the train step (guarded against non-finite updates), the eval step and the
diagnostics step.

Nothing here syncs with the host. The train step returns its metrics as device arrays; the loop reads them one
step later.

Gradient accumulation (`train.grad_accum` = A): the global batch of B sequences is split into A micro-batches of
B/A inside the jitted step, and a lax.scan sums their gradients, so one optimizer step still sees the whole batch
(the same loss and gradient as one pass over B, up to float rounding) while only one micro-batch's activations
are alive at a time.
"""
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from resnorm.model import depth_mixing, diagnostics, layers, residual
from resnorm.step import optim
from resnorm.model.model import LM


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


def micro_batches(batch, accum: int):
  """[B, T] arrays -> [A, B/A, T]. Micro-batch i holds rows i, i+A, i+2A, ...: the batch is sharded over devices
  in contiguous blocks of rows, so every device keeps its own rows (no data moves) as long as A divides the
  per-device batch (configlib.validate and runtime.build check it)."""
  def split(x):
    x = jnp.swapaxes(x.reshape((x.shape[0] // accum, accum) + x.shape[1:]), 0, 1)
    return nn.with_logical_constraint(x, (None, "batch", "seq"))
  return jax.tree.map(split, batch)


def diag_rows(cfg) -> int:
  """Sequences the diagnostics step uses: train.diag_batch, or one micro-batch."""
  return cfg.train.get("diag_batch", 0) or cfg.train.batch_size // cfg.train.grad_accum


def first_micro_batch(batch, accum: int):
  return batch if accum == 1 else jax.tree.map(lambda x: x[0], micro_batches(batch, accum))


def loss_and_grads(params, batch, mcfg, accum: int):
  """(mean loss over the batch's target tokens, its gradient); with accum > 1, summed over micro-batches by a
  lax.scan and divided once by the batch's token count, which is what one pass over the whole batch computes."""
  if accum == 1:
    return jax.value_and_grad(make_loss_fn(mcfg))(params, batch)
  model = LM(mcfg)

  def total_fn(p, mb):
    logits, _ = model.apply({"params": p}, mb["inputs"])
    return loss_and_count(logits, mb)[0]

  def body(carry, mb):
    total, grads = carry
    t, g = jax.value_and_grad(total_fn)(params, mb)
    return (total + t, jax.tree.map(jnp.add, grads, g)), None

  zeros = (jnp.zeros((), jnp.float32), jax.tree.map(jnp.zeros_like, params))
  (total, grads), _ = jax.lax.scan(body, zeros, micro_batches(batch, accum))
  count = jnp.maximum(jnp.sum(batch["mask"]), 1.0)
  return total / count, jax.tree.map(lambda g: g / count, grads)


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
  stops the run as diverged, or counts the skip with `train.skip_nonfinite`).

  Both guards are conditionals, not selects: a jnp.where over the new and old state reads every parameter and
  optimizer moment twice more per step (51 ms of a 1.2 s step at d 512, docs/performance.md), and the per-sublayer
  sums that name a non-finite sublayer are another pass over the gradients, needed only when one is non-finite
  (a finite global norm means every partial sum of squares is finite)."""
  loss, grads = loss_and_grads(state["params"], batch, mcfg, cfg.train.grad_accum)
  gnorm = optax.tree.norm(grads)
  ok = jnp.isfinite(loss) & jnp.isfinite(gnorm)

  def update(params_opt):
    params, opt_state = params_opt
    updates, new_opt = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), new_opt
  params, opt_state = jax.lax.cond(ok, update, lambda po: po, (state["params"], state["opt_state"]))

  def first_nonfinite_sublayer():
    bad = ~jnp.isfinite(diagnostics.sublayer_grad_sumsq(grads, cfg))
    return jnp.where(jnp.any(bad), jnp.argmax(bad), -1).astype(jnp.int32)
  nonfinite = jax.lax.cond(ok, lambda: jnp.int32(-1), first_nonfinite_sublayer)
  metrics = {"loss": loss, "grad_norm": gnorm, "lr": optim.schedule(cfg.train)(state["step"]), "finite": ok,
             "nonfinite_sublayer": nonfinite}
  skipped = jnp.where(ok, 0, state["skipped"] + 1)
  new_state = {"params": params, "opt_state": opt_state, "step": state["step"] + 1, "rng": state["rng"],
               "skipped": skipped}
  return new_state, {**metrics, "skipped": skipped}


def eval_step(params, batch, *, mcfg, accum: int = 1):
  """Per row: (sum of target-token losses [B], target-token count [B]), the rows a bootstrap of the eval loss
  resamples (resnorm.core.stats); with accum > 1, over micro-batches (see train_step), rows back in batch order."""
  def one(mb):
    logits, _ = LM(mcfg).apply({"params": params}, mb["inputs"])
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, mb["targets"])
    return jnp.sum(ce * mb["mask"], axis=1), jnp.sum(mb["mask"], axis=1)
  if accum == 1:
    return one(batch)
  _, rows = jax.lax.scan(lambda c, mb: (c, one(mb)), None, micro_batches(batch, accum))  # [A, B/A]
  return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1).reshape(-1), rows)  # micro-batch a, row i: row i*A + a


def jit_train_step(cfg, mcfg, tx, state_sh=None, batch_sh=None, repl=None):
  fn = functools.partial(train_step, cfg=cfg, mcfg=mcfg, tx=tx)
  if state_sh is None:
    return jax.jit(fn, donate_argnums=(0,))
  return jax.jit(fn, in_shardings=(state_sh, batch_sh), out_shardings=(state_sh, repl), donate_argnums=(0,))


def jit_eval_step(mcfg, params_sh=None, batch_sh=None, repl=None, accum: int = 1):
  fn = functools.partial(eval_step, mcfg=mcfg, accum=accum)
  if params_sh is None:
    return jax.jit(fn)
  return jax.jit(fn, in_shardings=(params_sh, batch_sh), out_shardings=(repl, repl))


def make_diag_fn(cfg, mcfg):
  """Jitted (params, batch) -> per-sublayer statistics, grad sum of squares, angular distances and the mean
  mixing matrices: one forward + backward with taps collected, no Python loop over layers. They are computed on
  `train.diag_batch` sequences of the batch (0: one micro-batch, batch_size / grad_accum): the taps keep every
  sublayer's input and output, so their memory grows with this batch times the depth."""
  def fn(params, batch):
    rows = diag_rows(cfg)
    batch = first_micro_batch(batch, batch["inputs"].shape[0] // rows) if batch["inputs"].shape[0] > rows else batch
    def loss_with_taps(p):
      logits, taps = LM(mcfg, collect=True).apply({"params": p}, batch["inputs"])
      total, count = loss_and_count(logits, batch)
      return total / jnp.maximum(count, 1.0), taps
    grads, taps = jax.grad(loss_with_taps, has_aux=True)(params)
    out = {"stats": diagnostics.tap_stats(taps), "grad_sumsq": diagnostics.sublayer_grad_sumsq(grads, cfg),
           "angular": diagnostics.angular_distance(taps["u"]),
           "depth_mixing": depth_mixing.moments(taps["embed"], taps["u"], taps["f"])}
    alpha = diagnostics.norm_alpha(params, cfg)
    if alpha is not None:
      out["stats"][f"{cfg.model.norm}_alpha"] = alpha                              # dyt_alpha | derf_alpha
    if "mix" in taps:
      out["mixing"] = jnp.mean(taps["mix"].astype(jnp.float32), axis=(1, 2))      # [S, n, n]
    if "depth" in taps:
      out["depth_weights"] = jnp.mean(taps["depth"].astype(jnp.float32), axis=(1, 2))  # [S, N+1]
    if "dense" in taps:
      out["dense_weights"] = jnp.mean(taps["dense"].astype(jnp.float32), axis=(1, 2))  # [S, 4, L]
    return out
  return jax.jit(fn)
