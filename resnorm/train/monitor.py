"""What the loop measures besides the loss, and when: the cadence (Cadence: which steps log, eval, run the
diagnostics, checkpoint, fetch metrics), and Monitor, which compiles the eval and diagnostics steps beside the train
step, runs them at the cadence's steps, logs them and times them (summary.json's eval_s, diag_s, ...)."""
import time

import jax

from resnorm.data import data, unigram
from resnorm.model import diagnostics
from resnorm.step import step as step_lib
from resnorm.train.run_files import RunFiles
from resnorm.train.tb_figures import DepthFigures


class Cadence:
  """train.log_every / eval_every / diag_every / ckpt_every as predicates of a step; the last step does all."""

  def __init__(self, t):
    self.t = t

  def log(self, step: int) -> bool:
    return step % self.t.log_every == 0 or step == self.t.steps

  def eval(self, step: int) -> bool:
    return (step % self.t.eval_every == 0 and step >= self.t.get("eval_start", 0)) or step == self.t.steps

  def diag(self, step: int) -> bool:
    return bool(self.t.diag_every) and (step % self.t.diag_every == 0 or step == self.t.steps)

  def ckpt(self, step: int, stopping=None) -> bool:
    return step % self.t.ckpt_every == 0 or step == self.t.steps or bool(stopping)

  def sync(self, step: int, stopping=None) -> bool:
    """Whether this step's metrics are fetched now rather than one step behind: before an eval, a checkpoint or a
    stop, so what they record is the step's own."""
    return self.eval(step) or self.ckpt(step, stopping)


class Monitor:

  def __init__(self, s, cfg, eval_data, files: RunFiles, workdir: str):
    self.s, self.cfg, self.eval_data, self.files, self.workdir = s, cfg, eval_data, files, workdir
    # the subset needs the stratified set's row indices (a head eval set scores all its rows every time)
    self.every = cfg.data.get("eval_subset_every", 1) if "_row" in eval_data[0] else 1
    self.subset_data = data.subset_batches(eval_data, self.every)  # what the evals before the last score
    self.last_eval: dict = {}
    self.eval_s = self.diag_s = self.eval_compile_s = self.diag_compile_s = 0.0
    self._eval_fn = self._diag_fn = None
    self.unigram = None
    # what the kept lines already hold (files opened at the resumed step): the unigram baseline is logged once per
    # run, and the TensorBoard depth profiles draw the earlier diagnostics steps too
    self.unigram_logged = any("unigram_eval_loss" in r for r in files.kept_metrics())
    m = cfg.model
    self.figures = DepthFigures(files.tb, f"{m.residual} L={m.num_layers}", files.kept_diagnostics())

  def baseline(self) -> None:
    """The byte-unigram baseline on the eval batches (resnorm/data/unigram.py)."""
    self.unigram = unigram.eval_loss(self.s, self.eval_data, self.workdir, write=self.files.lead)
    print(f"byte-unigram baseline: {self.unigram:.4f} nats/byte on the eval batches (a model must get below "
          f"{self.unigram - unigram.MARGIN:.4f} to have learned more than byte frequencies)", flush=True)

  def compile(self, state, batch) -> None:
    """The eval and diagnostics steps, compiled with the train step at start-up (so `train_s` times the loop, and
    `eval_compile_s` / `diag_compile_s` say what compiling them cost); matplotlib imported where figures will be
    drawn."""
    t0 = time.perf_counter()
    with self.s.mesh_context():
      self._eval_fn = self.s.eval_step.lower(state["params"], self.s.device_batch(self.eval_data[0])).compile()
    self.eval_compile_s = time.perf_counter() - t0
    if self.cfg.train.diag_every:
      if self.files.lead:
        from resnorm.viz import plots  # noqa: F401  matplotlib's import (0.5-0.8 s), for the figures drawn later
      t0 = time.perf_counter()
      with self.s.mesh_context():
        self._diag_fn = step_lib.make_diag_fn(self.cfg, self.s.mcfg).lower(state["params"], batch).compile()
      self.diag_compile_s = time.perf_counter() - t0

  def eval(self, params, step: int) -> dict:
    """One eval -> metrics.jsonl (with the unigram baseline on the run's first eval line): before the last step of
    the subset (data.eval_subset_every; eval_loss_subset = eval_loss), at it of every row (eval_loss_subset from the
    same per-row sums)."""
    t0 = time.perf_counter()
    if step < self.cfg.train.steps and self.every > 1:
      ev = self.s.evaluate(params, self.subset_data, self._eval_fn)
      self.last_eval = {**ev, "eval_loss_subset": ev["eval_loss"], "eval_subset_every": self.every}
    else:
      self.last_eval = self.s.evaluate(params, self.eval_data, self._eval_fn, self.every,
                                       blocks=step >= self.cfg.train.steps)
    self.eval_s += time.perf_counter() - t0
    extra = {} if self.unigram_logged else {"unigram_eval_loss": self.unigram}
    self.files.log({"step": step, **self.last_eval, **extra})
    self.unigram_logged = True
    return self.last_eval

  def diagnostics(self, params, batch, step: int, elapsed_s: float) -> None:
    """Per-sublayer diagnostics on one training batch -> diagnostics.jsonl and TensorBoard (its depth figures
    within the drawing budget)."""
    t0 = time.perf_counter()
    with self.s.mesh_context():
      out = jax.device_get(self._diag_fn(params, batch))
    self.diag_s += time.perf_counter() - t0
    if not self.files.lead:
      return
    res = diagnostics.summarize(self.cfg, out, full=False)
    rows, m = res["sublayers"], self.cfg.model
    self.files.log_diagnostics({"step": step, "residual": m.residual, "num_layers": m.num_layers, "sublayers": rows})
    self.figures.add(step, rows, last=step >= self.cfg.train.steps, elapsed_s=elapsed_s, mixing=res["depth_mixing"])

  def draw_pending(self) -> None:
    if self.files.lead:
      self.figures.draw_pending()

  def stall_line(self) -> str:
    final = self.last_eval.get("eval_loss")
    if unigram.learned_beyond(final, self.unigram) is not False:
      return ""
    return (f"\nstalled: final eval loss {final:.4f} is not {unigram.MARGIN} nats/byte below the byte-unigram "
            f"baseline {self.unigram:.4f}: the model has learned nothing beyond byte frequencies")

  def timings(self) -> dict:
    """summary.json's time fields of the evals, diagnostics and figures (all of the run's, summed)."""
    return {"diag_s": round(self.diag_s, 3), "diag_compile_s": round(self.diag_compile_s, 3),
            "tb_draw_s": round(self.figures.draw_s, 3), "eval_s": round(self.eval_s, 3),
            "eval_compile_s": round(self.eval_compile_s, 3)}
