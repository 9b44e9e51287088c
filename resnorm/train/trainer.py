"""The training loop: resume, step, log one step behind, eval, checkpoint, stop on divergence or preemption."""
import signal
import sys
import time

import jax
import numpy as np

from resnorm.config import configlib
from resnorm.core.errors import EXIT_DIVERGED, EXIT_PREEMPTED
from resnorm.data import data, unigram
from resnorm.io import lock, progress, provenance
from resnorm.model import diagnostics, flops
from resnorm.scale import distributed
from resnorm.step import runtime
from resnorm.train import run_files, upcycle
from resnorm.train.monitor import Cadence, Monitor


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


class Trainer:
  """The loop. Everything else is a piece it calls: the workdir's checks and files (run_files), the evals and
  diagnostics at their cadence (monitor), TensorBoard's depth figures (tb_figures), upcycling (upcycle)."""

  def __init__(self, cfg, workdir: str, owner: lock.WorkdirLock | None = None, allow_config_change: bool = False):
    self.t_created = time.perf_counter()
    self.started_at = time.time()  # wall clock: a grid's wall time is read from its runs' started_at/finished_at
    self.cfg, self.workdir, self.owner = cfg, workdir, owner
    self.allow_config_change = allow_config_change
    self.s = runtime.build(cfg)
    self.train_it = data.train_iterator(cfg)
    self.eval_data = data.eval_batches(cfg)
    # train.init_from: checked before the workdir is touched; a workdir with its own checkpoint resumes from it
    self.source = upcycle.resolve(cfg) if cfg.train.init_from and not upcycle.has_checkpoint(workdir) else None
    self.ckpt = run_files.prepare_workdir(workdir, cfg, allow_config_change)
    self.files = run_files.RunFiles(workdir, cfg, lead=jax.process_index() == 0)
    self.cadence = Cadence(cfg.train)
    self.monitor = None  # once the logs are open (it reads what they kept)
    self.provenance = provenance.collect()
    self.spikes = diagnostics.SpikeDetector()
    self.params = flops.param_count(self.s.mcfg)
    self.flops_per_token = flops.train_flops_per_token(self.s.mcfg, cfg.data.seq_len)
    self.last = {"loss": None, "init_from": str(self.source) if self.source else None}
    self.restored_eval: dict = {}  # the eval a resumed run's checkpoint holds: summary.json's until the next eval
    self.ckpt_s = 0.0

  def _summary(self, status: str, step: int, **extra):
    m, ev = self.cfg.model, self.monitor.last_eval
    final_eval, base = ev.get("eval_loss"), self.monitor.unigram
    self.files.summary({
        "status": status, "step": step, "final_train_loss": self.last["loss"],
        "final_eval_loss": final_eval, "bits_per_byte": ev.get("bits_per_byte"),
        "eval_tokens": ev.get("eval_tokens"), "eval_loss_se": ev.get("eval_loss_se"),
        "eval_loss_subset": ev.get("eval_loss_subset"), "eval_block_sums": ev.get("eval_block_sums"),
        "unigram_eval_loss": base, "learned_beyond_unigram": unigram.learned_beyond(final_eval, base),
        "residual": m.residual, "num_layers": m.num_layers, "params": self.params,
        "flops_per_token": self.flops_per_token, "spikes": len(self.spikes.events),
        "spike_steps": [e["step"] for e in self.spikes.events], **self.monitor.timings(),
        "ckpt_s": round(self.ckpt_s, 3),
        **({"init_from": self.last["init_from"]} if self.last.get("init_from") else {}), **extra,
        "started_at": round(self.started_at, 3), "finished_at": round(time.time(), 3), "provenance": self.provenance})

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
    self.restored_eval = host.get("eval", {})
    self.last["init_from"] = host.get("init_from")
    print(f"resumed from checkpoint step {step}", flush=True)
    # against the config the restored checkpoint was trained with (the newest one unless it failed to load)
    changes = configlib.config_changes(self.ckpt.config(step) or configlib.to_json(self.cfg), self.cfg)
    if not self.allow_config_change:
      configlib.refuse_trajectory_changes(changes, self.workdir, step)
    return state, step, changes

  def _save(self, state, step: int):
    t0 = time.perf_counter()
    host = {"spikes": self.spikes.state(), "loss": self.last["loss"], "eval": self.monitor.last_eval,
            "init_from": self.last["init_from"]}
    self.ckpt.save(step, state, self.train_it, configlib.to_json(self.cfg), host)
    self.ckpt_s += time.perf_counter() - t0

  def _wait_ckpt(self):
    t0 = time.perf_counter()
    self.ckpt.wait()
    self.ckpt_s += time.perf_counter() - t0

  def _eval(self, state, step: int):
    ev = self.monitor.eval(state["params"], step)
    self.progress.write(f"step {step} | eval_loss {ev['eval_loss']:.4f} | bpb {ev['bits_per_byte']:.4f}")

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
    self.files.open(start, changes)
    self.monitor = mon = Monitor(self.s, cfg, self.eval_data, self.files, self.workdir)
    mon.last_eval = self.restored_eval
    print(f"{cfg.model.residual}, {cfg.model.num_layers} layers: {self.params:,} params, "
          f"{self.flops_per_token / 1e6:.2f} MFLOP/token (train), mesh {dict(self.s.mesh.shape)}", flush=True)
    mon.baseline()
    if start >= t.steps:
      self._summary("completed", start)
      return 0
    self._summary("running", start)
    batch = self.s.device_batch(next(self.train_it))
    train_step, compile_s = self.s.compile_train_step(state, batch)
    mon.compile(state, batch)
    t_start = time.perf_counter()
    # startup: data pipeline, init or restore, and compilation (a cache hit on a second run of one config)
    self.startup_s = t_start - self.t_created
    print(f"compiled train step in {compile_s:.1f}s (start-up {self.startup_s:.1f}s)", flush=True)
    if t.diag_every and start == 0:
      mon.diagnostics(state["params"], batch, 0, 0.0)
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
        sync = self.cadence.sync(step, stopping)
        if sync:
          todo.append(pending)
          pending = None
        for s_i, m in todo:
          m = jax.device_get(m)
          skipped_total += int(not m["finite"])
          reason = self._check(s_i, m)
          if reason is not None:
            print(f"diverged: {reason}", file=sys.stderr, flush=True)
            mon.draw_pending()
            self._summary("diverged", s_i, diverged_step=s_i, reason=reason, skipped_steps=skipped_total)
            return EXIT_DIVERGED
          if self.cadence.log(s_i):
            now = time.perf_counter()
            tps = tokens_per_step * (s_i - s_log) / max(now - t_log, 1e-9)
            t_log, s_log = now, s_i
            self.files.log({"step": s_i, "loss": float(m["loss"]), "lr": float(m["lr"]),
                       "grad_norm": float(m["grad_norm"]), "tokens_per_s": tps})
            self.progress.metrics(f"step {s_i}/{t.steps} | loss {float(m['loss']):.4f} | lr {float(m['lr']):.2e} | "
                                  f"{tps:,.0f} tok/s", loss=f"{float(m['loss']):.4f}", lr=f"{float(m['lr']):.2e}",
                                  tok_s=f"{tps:,.0f}")
        if self.cadence.eval(step):
          self._eval(state, step)
        if self.cadence.diag(step):
          mon.diagnostics(state["params"], batch, step, time.perf_counter() - t_start)
        if self.cadence.ckpt(step, stopping):
          self._save(state, step)
        if sync:
          self.files.publish()
        if stopping:
          mon.draw_pending()
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
      mon.draw_pending()
      self._wait_ckpt()
      train_s = time.perf_counter() - t_start
      self._summary("completed", step, compile_s=round(compile_s, 3), startup_s=round(self.startup_s, 3),
                    skipped_steps=skipped_total, train_s=round(train_s, 3))
      self.progress.close()
      print(f"done: {step - start} steps in {train_s:.1f}s; evals {mon.eval_s:.1f}s, diagnostics {mon.diag_s:.1f}s "
            f"({100 * mon.diag_s / max(train_s, 1e-9):.1f}%), checkpoints {self.ckpt_s:.1f}s, TensorBoard figures "
            f"{mon.figures.draw_s:.1f}s; compiled eval {mon.eval_compile_s:.1f}s, diagnostics "
            f"{mon.diag_compile_s:.1f}s{mon.stall_line()}", flush=True)
      return 0
    finally:
      self.progress.close()
      preempt.restore()
      self.ckpt.close()
      self.files.close()


def train(cfg, workdir: str, allow_config_change: bool = False, force_unlock: bool = False) -> int:
  with lock.hold(workdir, force_unlock) as owner:
    return Trainer(cfg, workdir, owner, allow_config_change).run()
