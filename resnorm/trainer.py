"""The training loop: resume, step, log one step behind, eval, checkpoint, stop on divergence or preemption."""
import signal
import sys
import time

import jax
import numpy as np

from resnorm import (ckpt, configlib, data, diagnostics, distributed, flops, lock, progress, provenance,
                     runtime, step as step_lib, storage, unigram, upcycle, workdir as wd)
from resnorm.errors import EXIT_DIVERGED, EXIT_PREEMPTED, InputError


class _Preemption:
  """SIGTERM / SIGINT: finish the current step, checkpoint, exit non-zero."""

  def __init__(self):
    self.signal = None
    self._old = {s: signal.signal(s, self._handle) for s in (signal.SIGTERM, signal.SIGINT)}

  def _handle(self, signum, frame):
    self.signal = signal.Signals(signum).name

  def restore(self):
    for s, h in self._old.items():
      signal.signal(s, h)


def _prepare_workdir(path: str, cfg, allow_config_change: bool = False) -> ckpt.Checkpointer:
  """Checks an existing workdir against the config (before writing anything), then creates what is missing.
  A model that differs is refused; so is a change of trajectory since the newest checkpoint, unless allowed."""
  cfg_path = storage.join(path, "config.json")
  ckpt_dir = storage.join(storage.absolute(path), "checkpoints")
  if storage.exists(cfg_path):
    configlib.check_compatible(wd.read_json(cfg_path, "workdir config"), cfg, path)
  try:
    storage.makedirs(path)
    probe = storage.join(path, f".write_test.{jax.process_index()}")  # one per process: they probe at once
    storage.write_bytes(probe, b"")
    storage.remove(probe)
  except OSError as e:
    raise InputError(f"--workdir={path!r} is not writable: {e.strerror or e}") from None
  if jax.process_index() == 0:
    ckpt.remove_unfinished(ckpt_dir)  # a dead writer's; the caller holds the workdir lock
  checkpointer = ckpt.Checkpointer(ckpt_dir, keep=cfg.ckpt.keep)
  for s in reversed(checkpointer.steps()):
    stored = checkpointer.config(s)
    if stored:
      configlib.check_compatible(stored, cfg, path)
      if not allow_config_change:
        configlib.refuse_trajectory_changes(configlib.config_changes(stored, cfg), path, s)
      break
  return checkpointer


def tb_diagnostics(tb: wd.TensorBoard, history: list[tuple[int, list[dict]]], title: str) -> None:
  """TensorBoard's view of the newest diagnostics step in `history` [(step, sublayer rows)]: a few scalars whose
  number does not grow with depth (diag/*), and one depth-profile image per per-sublayer field (depth/*)."""
  from resnorm.tools import plots  # matplotlib: imported only by runs that draw
  step, rows = history[-1]
  tb.scalars(step, {f"diag/{k}": v for k, v in diagnostics.depth_summary(rows).items()})
  for field, png in plots.profile_pngs(history, title).items():
    tb.image(step, f"depth/{field}", png)
  tb.flush()


TB_DRAW_BUDGET = 0.02  # share of the training time TensorBoard's depth figures may take before the last step
TB_DRAW_GUESS_S = 1.0  # what a first drawing is assumed to cost (matplotlib's import included)


def should_draw(drawn_s: float, next_s: float, elapsed_s: float) -> bool:
  """Whether a diagnostics step before the last draws its depth figures: only while the figures, this one
  included (`next_s`: the last drawing's cost), stay within TB_DRAW_BUDGET of the time trained so far. A short CPU
  run then draws at its end only (each picture shows up to six earlier steps as thin lines); a long run draws at
  every diagnostics step. The last step always draws (Trainer._draw_pending)."""
  return drawn_s + next_s <= TB_DRAW_BUDGET * elapsed_s


def _thin(history: list, keep: int = 64) -> list:
  """Bounds the diagnostics steps kept for TensorBoard's profiles (they draw a few, evenly spaced): past `keep`,
  every other earlier step is dropped; the first and the newest stay."""
  return history if len(history) <= keep else history[:-1:2] + history[-1:]


class Trainer:

  def __init__(self, cfg, workdir: str, owner: lock.WorkdirLock | None = None, allow_config_change: bool = False):
    self.t_created = time.perf_counter()
    self.started_at = time.time()  # wall clock: a grid's wall time is read from its runs' started_at/finished_at
    self.cfg, self.workdir, self.owner = cfg, workdir, owner
    self.allow_config_change = allow_config_change
    self.s = runtime.build(cfg)
    self.lead = jax.process_index() == 0
    self.train_it = data.train_iterator(cfg)
    self.eval_data = data.eval_batches(cfg)
    # train.init_from: checked before the workdir is touched; a workdir with its own checkpoint resumes from it
    self.source = upcycle.resolve(cfg) if cfg.train.init_from and not upcycle.has_checkpoint(workdir) else None
    self.ckpt = _prepare_workdir(workdir, cfg, allow_config_change)
    self.provenance = provenance.collect()
    self.spikes = diagnostics.SpikeDetector()
    self.params = flops.param_count(self.s.mcfg)
    self.flops_per_token = flops.train_flops_per_token(self.s.mcfg, cfg.data.seq_len)
    self.last = {"loss": None, "eval": {}, "init_from": str(self.source) if self.source else None}
    self.diag_s, self.diag_compile_s, self._diag_fn = 0.0, 0.0, None
    self.eval_s, self.ckpt_s, self.eval_compile_s, self._eval_fn = 0.0, 0.0, 0.0, None
    self.tb_draw_s, self.diag_history, self.unigram, self.unigram_logged = 0.0, [], None, False
    self.tb_last_draw_s, self.tb_drawn_step, self.t_start = TB_DRAW_GUESS_S, None, None

  # ---- files (process 0 only) ----------------------------------------------------------------------------

  def _open_logs(self, resume_step: int, changes: list | None):
    """changes: None for a fresh start (config.json is (re)written), else the accepted config changes."""
    if not self.lead:
      self.metrics = self.diag = self.tb = None
      return
    self.metrics = wd.JsonlLog(storage.join(self.workdir, "metrics.jsonl"), resume_step)
    self.diag = wd.JsonlLog(storage.join(self.workdir, "diagnostics.jsonl"), resume_step)
    # what the kept lines already hold: the unigram baseline is logged once per run, and the TensorBoard depth
    # profiles draw the earlier diagnostics steps too
    self.unigram_logged = any("unigram_eval_loss" in r for r in wd.read_jsonl(self.metrics.path))
    self.diag_history = _thin([(r["step"], r["sublayers"]) for r in wd.read_jsonl(self.diag.path)])
    self.tb = wd.TensorBoard(storage.join(self.workdir, "tb"))
    changes_path = storage.join(self.workdir, "config_changes.jsonl")
    if changes is None:
      wd.write_json(storage.join(self.workdir, "config.json"), configlib.to_json(self.cfg))
      wd.remove_log(changes_path)  # left by an attempt that never checkpointed: config.json is the start again
      return
    # config.json stays the config the run started with; config_changes.jsonl says what changed from which step
    # (lines past the restored step are dropped like the metrics': those steps are recomputed)
    if changes or wd.read_jsonl(changes_path):
      log = wd.JsonlLog(changes_path, resume_step)
      for c in changes:
        log.write({"step": resume_step, **c})
        print(f"config change from step {resume_step}: {c['field']} {c['old']!r} -> {c['new']!r}", flush=True)
      log.close()

  def _summary(self, status: str, step: int, **extra):
    if not self.lead:
      return
    m, final_eval = self.cfg.model, self.last["eval"].get("eval_loss")
    wd.write_json(storage.join(self.workdir, "summary.json"), {
        "status": status, "step": step, "final_train_loss": self.last["loss"],
        "final_eval_loss": final_eval, "bits_per_byte": self.last["eval"].get("bits_per_byte"),
        "eval_tokens": self.last["eval"].get("eval_tokens"), "eval_loss_se": self.last["eval"].get("eval_loss_se"),
        "unigram_eval_loss": self.unigram, "learned_beyond_unigram": unigram.learned_beyond(final_eval, self.unigram),
        "residual": m.residual, "num_layers": m.num_layers, "params": self.params,
        "flops_per_token": self.flops_per_token, "spikes": len(self.spikes.events),
        "spike_steps": [e["step"] for e in self.spikes.events], "diag_s": round(self.diag_s, 3),
        "diag_compile_s": round(self.diag_compile_s, 3), "tb_draw_s": round(self.tb_draw_s, 3),
        "eval_s": round(self.eval_s, 3), "eval_compile_s": round(self.eval_compile_s, 3),
        "ckpt_s": round(self.ckpt_s, 3),
        **({"init_from": self.last["init_from"]} if self.last.get("init_from") else {}), **extra,
        "started_at": round(self.started_at, 3), "finished_at": round(time.time(), 3), "provenance": self.provenance})

  def _log(self, rec: dict):
    if self.lead:
      self.metrics.write(rec)
      self.tb.scalars(rec["step"], {k: v for k, v in rec.items() if k != "step"})

  def _publish(self):
    """In a bucket, the logs' buffered lines and events become objects (at evals, checkpoints and exit: a killed
    run loses only lines past its last checkpoint, which its resume recomputes); locally every line is written."""
    if self.lead:
      for log in (self.metrics, self.diag, self.tb):
        log.publish() if log is self.tb else log.flush()

  # ---- loop ------------------------------------------------------------------------------------------------

  def _restore(self):
    """(state, step, accepted config changes or None for a fresh start)."""
    step, out = self.ckpt.restore_latest(self.s.abstract, self.train_it)
    if step is None:
      if self.source is None:
        return self.s.init_state(), 0, None
      print(f"starting from {self.source} (train.init_from; optimizer state fresh)", flush=True)
      return upcycle.load(self.source, self.s, self.s.init_state()), 0, None
    state, host = out
    if host.get("spikes"):
      self.spikes.load(host["spikes"])
    self.last["loss"] = host.get("loss")
    self.last["eval"] = host.get("eval", {})
    self.last["init_from"] = host.get("init_from")
    print(f"resumed from checkpoint step {step}", flush=True)
    # against the config the restored checkpoint was trained with (the newest one unless it failed to load)
    changes = configlib.config_changes(self.ckpt.config(step) or configlib.to_json(self.cfg), self.cfg)
    if not self.allow_config_change:
      configlib.refuse_trajectory_changes(changes, self.workdir, step)
    return state, step, changes

  def _save(self, state, step: int):
    t0 = time.perf_counter()
    host = {"spikes": self.spikes.state(), "loss": self.last["loss"], "eval": self.last["eval"],
            "init_from": self.last["init_from"]}
    self.ckpt.save(step, state, self.train_it, configlib.to_json(self.cfg), host)
    self.ckpt_s += time.perf_counter() - t0

  def _wait_ckpt(self):
    t0 = time.perf_counter()
    self.ckpt.wait()
    self.ckpt_s += time.perf_counter() - t0

  def _compile_side_steps(self, state, batch):
    """The eval and diagnostics steps, compiled with the train step at start-up (so `train_s` times the loop, and
    `eval_compile_s` / `diag_compile_s` say what compiling them cost); matplotlib imported where figures will be
    drawn."""
    t0 = time.perf_counter()
    with self.s.mesh_context():
      self._eval_fn = self.s.eval_step.lower(state["params"], self.s.device_batch(self.eval_data[0])).compile()
    self.eval_compile_s = time.perf_counter() - t0
    if self.cfg.train.diag_every:
      if self.lead:
        from resnorm.tools import plots  # noqa: F401  matplotlib's import (0.5-0.8 s), for the figures drawn later
      t0 = time.perf_counter()
      with self.s.mesh_context():
        self._diag_fn = step_lib.make_diag_fn(self.cfg, self.s.mcfg).lower(state["params"], batch).compile()
      self.diag_compile_s = time.perf_counter() - t0

  def _eval(self, state, step: int):
    t0 = time.perf_counter()
    self.last["eval"] = self.s.evaluate(state["params"], self.eval_data, self._eval_fn)
    self.eval_s += time.perf_counter() - t0
    # the unigram baseline (a constant of the run) joins the run's first eval event, once
    extra = {} if self.unigram_logged else {"unigram_eval_loss": self.unigram}
    self._log({"step": step, **self.last["eval"], **extra})
    self.unigram_logged = True
    self.progress.write(f"step {step} | eval_loss {self.last['eval']['eval_loss']:.4f} | "
                        f"bpb {self.last['eval']['bits_per_byte']:.4f}")

  def _unigram(self):
    """The byte-unigram baseline on the eval batches (resnorm/unigram.py)."""
    self.unigram = unigram.eval_loss(self.s, self.eval_data, self.workdir, write=self.lead)
    print(f"byte-unigram baseline: {self.unigram:.4f} nats/byte on the eval batches (a model must get below "
          f"{self.unigram - unigram.MARGIN:.4f} to have learned more than byte frequencies)", flush=True)

  def _stall_line(self) -> str:
    final = self.last["eval"].get("eval_loss")
    if unigram.learned_beyond(final, self.unigram) is not False:
      return ""
    return (f"\nstalled: final eval loss {final:.4f} is not {unigram.MARGIN} nats/byte below the byte-unigram "
            f"baseline {self.unigram:.4f}: the model has learned nothing beyond byte frequencies")

  def _diagnostics(self, state, batch, step: int):
    """Per-sublayer diagnostics on one training batch -> diagnostics.jsonl and TensorBoard (its depth figures
    within the drawing budget, should_draw)."""
    t0 = time.perf_counter()
    with self.s.mesh_context():
      out = jax.device_get(self._diag_fn(state["params"], batch))
    self.diag_s += time.perf_counter() - t0
    if not self.lead:
      return
    rows = diagnostics.summarize(self.cfg, out, full=False)["sublayers"]
    m = self.cfg.model
    self.diag.write({"step": step, "residual": m.residual, "num_layers": m.num_layers, "sublayers": rows})
    self.diag_history = _thin([h for h in self.diag_history if h[0] < step] + [(step, rows)])
    if step < self.cfg.train.steps and not should_draw(self.tb_draw_s, self.tb_last_draw_s,
                                                       time.perf_counter() - self.t_start):
      return
    self._draw()

  def _draw(self):
    t0 = time.perf_counter()
    m = self.cfg.model
    tb_diagnostics(self.tb, self.diag_history, f"{m.residual} L={m.num_layers}")
    self.tb_last_draw_s = time.perf_counter() - t0
    self.tb_draw_s += self.tb_last_draw_s
    self.tb_drawn_step = self.diag_history[-1][0]

  def _draw_pending(self):
    """At a stop before the last step: the newest diagnostics step's figures, if the budget skipped them."""
    if self.lead and self.diag_history and self.tb_drawn_step != self.diag_history[-1][0]:
      self._draw()

  def _check(self, step: int, m: dict) -> str | None:
    """Handles one step's fetched metrics; returns a divergence reason or None."""
    loss = float(m["loss"])
    if not bool(m["finite"]):
      which = "loss" if not np.isfinite(loss) else "gradient norm"
      where = int(m["nonfinite_sublayer"])
      reason = f"non-finite {which} at step {step}" + (f" (first non-finite sublayer {where})" if where >= 0 else "")
      if not self.cfg.train.skip_nonfinite:
        return reason
      if int(m["skipped"]) >= self.cfg.train.max_skipped:
        return f"{reason}; {int(m['skipped'])} non-finite steps in a row (train.max_skipped)"
      return None
    self.last["loss"] = loss
    self.spikes.update(step, loss)
    return None

  def run(self) -> int:
    cfg, t = self.cfg, self.cfg.train
    state, start, changes = self._restore()
    self._open_logs(start, changes)
    print(f"{cfg.model.residual}, {cfg.model.num_layers} layers: {self.params:,} params, "
          f"{self.flops_per_token / 1e6:.2f} MFLOP/token (train), mesh {dict(self.s.mesh.shape)}", flush=True)
    self._unigram()
    if start >= t.steps:
      self._summary("completed", start)
      return 0
    self._summary("running", start)
    batch = self.s.device_batch(next(self.train_it))
    train_step, compile_s = self.s.compile_train_step(state, batch)
    self._compile_side_steps(state, batch)
    t_start = self.t_start = time.perf_counter()
    # startup: data pipeline, init or restore, and compilation (a cache hit on a second run of one config)
    self.startup_s = t_start - self.t_created
    print(f"compiled train step in {compile_s:.1f}s (start-up {self.startup_s:.1f}s)", flush=True)
    if t.diag_every and start == 0:
      self._diagnostics(state, batch, 0)
    preempt, vote = _Preemption(), distributed.StopVote()
    self.progress = progress.Progress(t.steps, start)
    if start == 0 and self.source is not None:
      self._eval(state, 0)  # the source's function, before any step: equals its final eval_loss (same eval data)
    tokens_per_step = t.batch_size * cfg.data.seq_len
    pending, step, t_log, s_log, skipped_total = None, start, time.perf_counter(), start, 0
    try:
      while True:
        if self.owner is not None and self.owner.lost:
          raise lock.LockLost(self.owner.lost)
        with self.s.mesh_context():
          state, metrics = train_step(state, batch)
        step += 1
        self.progress.advance()
        prev, pending = pending, (step, metrics)
        todo = [prev] if prev else []
        asked = preempt.signal  # read once: a signal landing mid-iteration is handled at the next step
        # several processes stop after one agreed step, whichever of them was signalled
        stopping = (asked or "stop asked on another process") if vote.should_stop(step, asked is not None) else None
        sync = step % t.eval_every == 0 or step % t.ckpt_every == 0 or step == t.steps or stopping
        if sync:
          todo.append(pending)
          pending = None
        for s_i, m in todo:
          m = jax.device_get(m)
          skipped_total += int(not m["finite"])
          reason = self._check(s_i, m)
          if reason is not None:
            print(f"diverged: {reason}", file=sys.stderr, flush=True)
            self._draw_pending()
            self._summary("diverged", s_i, diverged_step=s_i, reason=reason, skipped_steps=skipped_total)
            return EXIT_DIVERGED
          if s_i % t.log_every == 0 or s_i == t.steps:
            now = time.perf_counter()
            tps = tokens_per_step * (s_i - s_log) / max(now - t_log, 1e-9)
            t_log, s_log = now, s_i
            self._log({"step": s_i, "loss": float(m["loss"]), "lr": float(m["lr"]),
                       "grad_norm": float(m["grad_norm"]), "tokens_per_s": tps})
            self.progress.metrics(f"step {s_i}/{t.steps} | loss {float(m['loss']):.4f} | lr {float(m['lr']):.2e} | "
                                  f"{tps:,.0f} tok/s", loss=f"{float(m['loss']):.4f}", lr=f"{float(m['lr']):.2e}",
                                  tok_s=f"{tps:,.0f}")
        if step % t.eval_every == 0 or step == t.steps:
          self._eval(state, step)
        if t.diag_every and (step % t.diag_every == 0 or step == t.steps):
          self._diagnostics(state, batch, step)
        if step % t.ckpt_every == 0 or step == t.steps or stopping:
          self._save(state, step)
        if sync:
          self._publish()
        if stopping:
          self._draw_pending()
          self._wait_ckpt()
          print(f"{stopping}: checkpointed step {step}; rerun the same command to resume",
                file=sys.stderr, flush=True)
          self._summary("preempted", step, signal=stopping)
          return EXIT_PREEMPTED
        if step >= t.steps:
          break
        # after the checkpoint, so the saved iterator state is exactly `step` batches in; the device is still
        # busy with this step while the host prepares the next batch
        batch = self.s.device_batch(next(self.train_it))
      self._draw_pending()
      self._wait_ckpt()
      train_s = time.perf_counter() - t_start
      self._summary("completed", step, compile_s=round(compile_s, 3), startup_s=round(self.startup_s, 3),
                    skipped_steps=skipped_total, train_s=round(train_s, 3))
      self.progress.close()
      print(f"done: {step - start} steps in {train_s:.1f}s; evals {self.eval_s:.1f}s, diagnostics {self.diag_s:.1f}s "
            f"({100 * self.diag_s / max(train_s, 1e-9):.1f}%), checkpoints {self.ckpt_s:.1f}s, TensorBoard figures "
            f"{self.tb_draw_s:.1f}s; compiled eval {self.eval_compile_s:.1f}s, diagnostics "
            f"{self.diag_compile_s:.1f}s{self._stall_line()}", flush=True)
      return 0
    finally:
      self.progress.close()
      preempt.restore()
      self.ckpt.close()
      for log in (self.metrics, self.diag, self.tb):
        if log is not None:
          log.close()


def train(cfg, workdir: str, allow_config_change: bool = False, force_unlock: bool = False) -> int:
  with lock.hold(workdir, force_unlock) as owner:
    return Trainer(cfg, workdir, owner, allow_config_change).run()
