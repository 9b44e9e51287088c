"""eval.py's work: evaluate a checkpoint with its own config (or a fresh init) and write the diagnostics JSON."""
import functools
import os

import jax
import jax.numpy as jnp

from resnorm import ckpt, configlib, data, diagnostics, setup as setup_lib, step as step_lib, workdir as wd
from resnorm.errors import InputError, check
from resnorm.model import LM


def _diag_fn(cfg, mcfg):
  """Jitted: (params, batch) -> (tap statistics, per-sublayer grad sum of squares)."""
  def fn(params, batch):
    def loss_with_taps(p):
      logits, taps = LM(mcfg, collect=True).apply({"params": p}, batch["inputs"])
      total, count = step_lib.loss_and_count(logits, batch)
      return total / jnp.maximum(count, 1.0), taps
    grads, taps = jax.grad(loss_with_taps, has_aux=True)(params)
    return diagnostics.tap_stats(taps), diagnostics.sublayer_grad_sumsq(grads, cfg)
  return jax.jit(fn)


def report(s: setup_lib.Setup, params, batches, step: int) -> dict:
  cfg = s.cfg
  result = {"step": step, "residual": cfg.model.residual, "num_layers": cfg.model.num_layers,
            **s.evaluate(params, batches)}
  with s.mesh_context():
    stats, gsq = jax.device_get(_diag_fn(cfg, s.mcfg)(params, s.device_batch(batches[0])))
  result["sublayers"] = diagnostics.sublayer_report(cfg, stats, gsq)
  return result


def _batches(cfg, eval_batches):
  if eval_batches is not None:
    check(eval_batches >= 1, f"--eval_batches={eval_batches} must be >= 1")
    cfg.data.eval_batches = eval_batches
  return data.eval_batches(cfg, jax.process_index(), jax.process_count())


def eval_init(cfg, outdir: str, eval_batches=None) -> int:
  s = setup_lib.build(cfg)
  batches = _batches(cfg, eval_batches)
  result = report(s, s.init_state()["params"], batches, 0)
  _write(outdir, "init.json", result)
  return 0


def eval_workdir(workdir: str, step: int | None, eval_batches=None) -> int:
  ckpt_dir = os.path.join(os.path.abspath(workdir), "checkpoints")
  check(os.path.isdir(ckpt_dir), f"--workdir={workdir!r} has no checkpoints/ directory")
  checkpointer = ckpt.Checkpointer(ckpt_dir, read_only=True)
  steps = checkpointer.steps()
  check(steps, f"--workdir={workdir!r} has no checkpoint")
  step = steps[-1] if step is None else step
  check(step in steps, f"--step={step} has no checkpoint; available: {', '.join(map(str, steps))}")
  stored = checkpointer.config(step) or wd.read_json(os.path.join(workdir, "config.json"), "workdir config")
  cfg = configlib.from_json(stored)
  s = setup_lib.build(cfg)
  state, _ = checkpointer.restore(step, s.abstract)
  result = report(s, state["params"], _batches(cfg, eval_batches), step)
  _write(os.path.join(workdir, "eval"), f"step_{step}.json", result)
  return 0


def _write(outdir, name, result):
  if jax.process_index() != 0:
    return
  try:
    os.makedirs(outdir, exist_ok=True)
  except OSError as e:
    raise InputError(f"cannot create {outdir!r}: {e.strerror}") from None
  path = os.path.join(outdir, name)
  wd.write_json(path, result)
  print(f"eval_loss {result['eval_loss']:.4f} | bits_per_byte {result['bits_per_byte']:.4f} -> {path}", flush=True)
