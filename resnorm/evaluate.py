"""eval.py's work: evaluate a checkpoint with its own config (or a fresh init) and write the diagnostics JSON."""
import os

import jax

from resnorm import ckpt, configlib, data, diagnostics, runtime, step as step_lib, workdir as wd
from resnorm.tools import plots
from resnorm.errors import InputError, check


def report(s: runtime.Setup, params, batches, step: int) -> dict:
  cfg = s.cfg
  result = {"step": step, "residual": cfg.model.residual, "num_layers": cfg.model.num_layers,
            **s.evaluate(params, batches)}
  with s.mesh_context():
    out = jax.device_get(step_lib.make_diag_fn(cfg, s.mcfg)(params, s.device_batch(batches[0])))
  result.update(diagnostics.summarize(cfg, out, full=True))
  return result


def _batches(cfg, eval_batches):
  if eval_batches is not None:
    check(eval_batches >= 1, f"--eval_batches={eval_batches} must be >= 1")
    cfg.data.eval_batches = eval_batches
  return data.eval_batches(cfg)


def eval_init(cfg, outdir: str, eval_batches=None) -> int:
  s = runtime.build(cfg)
  batches = _batches(cfg, eval_batches)
  result = report(s, s.init_state()["params"], batches, 0)
  _write(outdir, "init.json", result)
  if jax.process_index() == 0:
    plots.depth_figures(result, outdir, prefix="init_")
  return 0


def eval_workdir(workdir: str, step: int | None, eval_batches=None, all_steps: bool = False) -> int:
  ckpt_dir = os.path.join(os.path.abspath(workdir), "checkpoints")
  check(os.path.isdir(ckpt_dir), f"--workdir={workdir!r} has no checkpoints/ directory")
  checkpointer = ckpt.Checkpointer(ckpt_dir, read_only=True)
  steps = checkpointer.steps()
  check(steps, f"--workdir={workdir!r} has no checkpoint")
  if not all_steps:
    step = steps[-1] if step is None else step
    check(step in steps, f"--step={step} has no checkpoint; available: {', '.join(map(str, steps))}")
  outdir = os.path.join(workdir, "eval")
  results = []
  for k in (steps if all_steps else [step]):
    stored = checkpointer.config(k) or wd.read_json(os.path.join(workdir, "config.json"), "workdir config")
    cfg = configlib.from_json(stored)  # the checkpoint's own config, never the caller's
    s = runtime.build(cfg)
    state, _ = checkpointer.restore(k, s.abstract)
    results.append(report(s, state["params"], _batches(cfg, eval_batches), k))
    _write(outdir, f"step_{k}.json", results[-1])
  if jax.process_index() == 0:
    summary = _read_optional(os.path.join(workdir, "summary.json"))
    plots.loss_curves(wd.read_jsonl(os.path.join(workdir, "metrics.jsonl")), summary.get("spike_steps"),
                      os.path.join(outdir, "loss.png"), f"{results[-1]['residual']} L={results[-1]['num_layers']}")
    plots.depth_figures(results[-1], outdir)
    if all_steps and len(results) > 1:
      plots.evolution(results, outdir)
  return 0


def _read_optional(path):
  try:
    return wd.read_json(path, "summary")
  except InputError:
    return {}


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
