"""The training loop against its bare steps, for `python -m resnorm.bench --loop`.

One process, per point (residual x depth), rounds alternating A B / B A:
- A, the loop: `train.py`'s Trainer on the config as configured (its evals, checkpoints, diagnostics, logs,
  TensorBoard, the data pipeline) in a fresh temporary workdir; `train_s` and its parts come from its summary.json.
- B, the bare steps: the same config's compiled train step, run `train.steps` times on one synthetic batch, with
  nothing else; the time from the first dispatch to the last result.
Compilation is outside both (the trainer compiles at start-up; its compile times are in summary.json).

`other_s` is what the loop spends that none of its named parts accounts for: train_s - bare_s - eval_s - diag_s
- ckpt_s - tb_draw_s (data, metrics fetched one step behind, logging, the progress line, and any step slowed by
the work around it). `ratio` = train_s / bare_s; `ratio_without_evals` = (train_s - eval_s) / bare_s: the evals
are forward passes over data.eval_bytes, work the config asks for, not overhead.
"""
import contextlib
import io
import shutil
import statistics
import tempfile
import time

import jax
import numpy as np

from resnorm.io import workdir as wd
from resnorm.step import runtime
from resnorm.train import trainer

PARTS = ("eval_s", "diag_s", "ckpt_s", "tb_draw_s")


def bare_steps(cfg) -> float:
  """Seconds for cfg.train.steps calls of the compiled train step on one synthetic batch (compile excluded)."""
  s = runtime.build(cfg)
  state = s.init_state()
  b, t = cfg.train.batch_size, cfg.data.seq_len
  tok = np.random.default_rng(0).integers(0, 256, (b, t + 1)).astype(np.int32)
  batch = s.device_batch({"inputs": tok[:, :-1], "targets": tok[:, 1:], "mask": np.ones((b, t), np.float32)})
  fn, _ = s.compile_train_step(state, batch)
  state, m = fn(state, batch)  # one untimed step: first-call allocations
  jax.block_until_ready(m)
  t0 = time.perf_counter()
  with s.mesh_context():
    for _ in range(cfg.train.steps):
      state, m = fn(state, batch)
  jax.block_until_ready((state, m))
  return time.perf_counter() - t0


def loop_run(cfg) -> dict:
  """One Trainer run of cfg in a fresh temporary workdir (its output kept off the terminal): summary.json."""
  tmp = tempfile.mkdtemp(prefix="resnorm_bench_loop_")
  try:
    with contextlib.redirect_stdout(io.StringIO()):
      code = trainer.train(cfg.copy_and_resolve_references(), tmp)
    summary = wd.read_json(f"{tmp}/summary.json", "summary")
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  if code != 0:
    raise RuntimeError(f"the loop run of {cfg.model.residual} L={cfg.model.num_layers} ended {summary['status']}")
  return summary


def run(base_cfg, residuals, depths, rounds: int) -> dict:
  rows = []
  for r in residuals:
    for d in depths:
      cfg = base_cfg.copy_and_resolve_references()
      cfg.model.residual, cfg.model.num_layers = r, d
      loops, bares = [], []
      for i in range(rounds):  # A B, then B A: drift hits both alike
        order = (loop_run, bare_steps) if i % 2 == 0 else (bare_steps, loop_run)
        for f in order:
          (loops.append(f(cfg)) if f is loop_run else bares.append(f(cfg)))
      med = lambda k: statistics.median(x[k] for x in loops)
      train_s, bare_s = med("train_s"), statistics.median(bares)
      row = {"residual": r, "num_layers": d, "steps": cfg.train.steps, "rounds": rounds, "train_s": train_s,
             "bare_s": bare_s, **{k: med(k) for k in PARTS}, "train_s_all": [x["train_s"] for x in loops],
             "bare_s_all": bares}
      row["other_s"] = train_s - bare_s - sum(row[k] for k in PARTS)
      row["ratio"] = train_s / bare_s
      row["ratio_without_evals"] = (train_s - row["eval_s"]) / bare_s
      rows.append(row)
  return {"device": jax.devices()[0].device_kind, "loop": rows}


def print_loop(res: dict) -> None:
  print(f"{'residual':<11}{'L':>4}{'steps':>6}{'train s':>9}{'bare s':>8}{'ratio':>7}{'no-eval':>8}{'eval s':>8}"
        f"{'diag s':>8}{'ckpt s':>8}{'tb s':>7}{'other s':>8}")
  for r in res["loop"]:
    print(f"{r['residual']:<11}{r['num_layers']:>4}{r['steps']:>6}{r['train_s']:>9.2f}{r['bare_s']:>8.2f}"
          f"{r['ratio']:>6.2f}x{r['ratio_without_evals']:>7.2f}x{r['eval_s']:>8.2f}{r['diag_s']:>8.2f}"
          f"{r['ckpt_s']:>8.2f}{r['tb_draw_s']:>7.2f}{r['other_s']:>8.2f}")
