"""eval.py's work: evaluate a checkpoint with its own config (or a fresh init) and write the diagnostics JSON."""
import sys

import jax

from resnorm.config import configlib
from resnorm.data import data, unigram
from resnorm.evaluation import generate
from resnorm.io import ckpt, progress, storage, workdir as wd
from resnorm.model import diagnostics
from resnorm.step import runtime, step as step_lib
from resnorm.viz import plots
from resnorm.core.errors import InputError, check


def report(s: runtime.Setup, params, batches, step: int, cache_dir: str | None = None) -> dict:
  """eval_loss, the byte-unigram baseline on the same batches (cached counts; text_files: in cache_dir) and the
  per-sublayer diagnostics."""
  cfg = s.cfg
  result = {"step": step, "residual": cfg.model.residual, "num_layers": cfg.model.num_layers,
            **s.evaluate(params, batches)}
  result["unigram_eval_loss"] = unigram.eval_loss(s, batches, cache_dir, write=jax.process_index() == 0)
  result["learned_beyond_unigram"] = unigram.learned_beyond(result["eval_loss"], result["unigram_eval_loss"])
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
  result = report(s, s.init_state()["params"], batches, 0, outdir)
  _write(outdir, "init.json", result)
  if jax.process_index() == 0:
    plots.depth_figures(result, outdir, prefix="init_")
  return 0


def _checkpoints(workdir: str, step: int | None):
  """(read-only checkpointer, its steps, the step asked for or the newest)."""
  ckpt_dir = storage.join(storage.absolute(workdir), "checkpoints")
  check(storage.isdir(ckpt_dir), f"--workdir={workdir!r} has no checkpoints/ directory")
  checkpointer = ckpt.Checkpointer(ckpt_dir, read_only=True)
  steps = checkpointer.steps()
  check(steps, f"--workdir={workdir!r} has no checkpoint")
  step = steps[-1] if step is None else step
  check(step in steps, f"--step={step} has no checkpoint; available: {', '.join(map(str, steps))}")
  return checkpointer, steps, step


def _restore(workdir: str, checkpointer, k: int):
  """The checkpoint's own config (never the caller's), its runtime, and its state."""
  stored = checkpointer.config(k) or wd.read_json(storage.join(workdir, "config.json"), "workdir config")
  cfg = configlib.from_json(stored)
  s = runtime.build(cfg)
  state, _ = checkpointer.restore(k, s.abstract)
  return cfg, s, state


def generate_workdir(workdir, step, prompt, max_new_tokens, temperature, top_k, seed, num_samples) -> int:
  """eval.py --generate: samples printed and appended to DIR/eval/samples_step_K.jsonl with their settings."""
  generate.check_settings(temperature, top_k, num_samples, seed)
  mode = "newest" if step is None else "step"
  checkpointer, _, step = _checkpoints(workdir, step)
  cfg = configlib.from_json(checkpointer.config(step) or wd.read_json(storage.join(workdir, "config.json"),
                                                                      "workdir config"))
  tokens = generate.encode(prompt)
  generate.check_lengths(cfg, len(tokens), max_new_tokens)
  step, (cfg, s, state) = _restore_live(checkpointer, workdir, step, mode)
  samples = generate.generate(s.mcfg, state["params"], tokens, max_new_tokens, temperature, top_k, seed, num_samples)
  if jax.process_index() != 0:
    return 0
  settings = {"max_new_tokens": max_new_tokens, "temperature": temperature, "top_k": top_k, "seed": seed}
  storage.makedirs(storage.join(workdir, "eval"))
  log = wd.JsonlLog(storage.join(workdir, "eval", f"samples_step_{step}.jsonl"), keep_all=True)
  for i, toks in enumerate(samples):
    text = generate.decode_bytes(toks)
    print(f"--- sample {i} (step {step}) ---\n{prompt}{text}", flush=True)
    log.write({"step": step, "prompt": prompt, "sample": text, "tokens": [int(t) for t in toks], "index": i,
               **settings})
  log.close()
  return 0


def eval_workdir(workdir: str, step: int | None, eval_batches=None, all_steps: bool = False) -> int:
  mode = "all" if all_steps else "newest" if step is None else "step"
  checkpointer, steps, step = _checkpoints(workdir, step)
  outdir = storage.join(workdir, "eval")  # the only place eval writes: a live run may own the rest
  results = []
  todo = steps if all_steps else [step]
  bar = progress.Progress(len(todo), desc="eval", enabled=None if len(todo) > 1 else False)
  for k in todo:
    k, loaded = _restore_live(checkpointer, workdir, k, mode)
    bar.advance()
    if loaded is None:
      continue
    cfg, s, state = loaded
    results.append(report(s, state["params"], _batches(cfg, eval_batches), k, workdir))
    _write(outdir, f"step_{k}.json", results[-1], bar.write)
  bar.close()
  check(results, f"--workdir={workdir!r}: every checkpoint was removed while loading")
  if jax.process_index() == 0:
    summary = _read_optional(storage.join(workdir, "summary.json"))
    metrics = wd.read_jsonl(storage.join(workdir, "metrics.jsonl"))
    # the baseline on the batches the plotted eval losses used (training's eval), else on this eval's
    base = next((m["unigram_eval_loss"] for m in metrics if "unigram_eval_loss" in m),
                summary.get("unigram_eval_loss", results[-1]["unigram_eval_loss"]))
    plots.loss_curves(metrics, summary.get("spike_steps"), storage.join(outdir, "loss.png"),
                      f"{results[-1]['residual']} L={results[-1]['num_layers']}", unigram=base)
    plots.depth_figures(results[-1], outdir)
    if all_steps and len(results) > 1:
      plots.evolution(results, outdir)
  return 0


def _restore_live(checkpointer, workdir: str, k: int, mode: str):
  """(step, (config, Setup, state)) on a workdir a live run may be pruning (it keeps ckpt.keep steps): a step removed
  between listing and loading is replaced by the newest one (mode 'newest'), skipped ('all': None) or refused."""
  while True:
    try:
      return k, _restore(workdir, checkpointer, k)
    except InputError:
      raise
    except Exception as e:  # noqa: BLE001: unreadable, unless the step is gone
      checkpointer.reload()
      now = checkpointer.steps()
      if k in now or not now:  # eval reads, never sets a checkpoint aside: train.py's resume does that
        raise InputError(f"checkpoint step {k} of {workdir} cannot be restored ({ckpt.reason(e)}); "
                         f"available: {', '.join(map(str, now)) or 'none'}") from None
      check(mode != "step", f"--step={k} was removed while loading it (the run is live); available: "
            f"{', '.join(map(str, now))}")
      print(f"warning: checkpoint step {k} was removed while loading it (the run is live); "
            f"{'using the newest, ' + str(now[-1]) if mode == 'newest' else 'skipping it'}", file=sys.stderr,
            flush=True)
      if mode == "all":
        return k, None
      k = now[-1]


def _read_optional(path):
  try:
    return wd.read_json(path, "summary")
  except InputError:
    return {}


def _write(outdir, name, result, log=print):
  if jax.process_index() != 0:
    return
  try:
    storage.makedirs(outdir)
  except OSError as e:
    raise InputError(f"cannot create {outdir!r}: {e.strerror}") from None
  path = storage.join(outdir, name)
  wd.write_json(path, result)
  log(f"eval_loss {result['eval_loss']:.4f} | bits_per_byte {result['bits_per_byte']:.4f} | byte-unigram "
      f"{result['unigram_eval_loss']:.4f} -> {path}")
