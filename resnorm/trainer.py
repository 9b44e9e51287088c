"""The training loop: resume, step, log one step behind, eval, checkpoint, stop on divergence or preemption."""
import os
import signal
import sys
import time

import jax
import numpy as np

from resnorm import ckpt, configlib, data, diagnostics, distributed, flops, runtime, step as step_lib, workdir as wd
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


def _prepare_workdir(path: str, cfg) -> ckpt.Checkpointer:
  """Checks an existing workdir against the config (before writing anything), then creates what is missing."""
  cfg_path = os.path.join(path, "config.json")
  ckpt_dir = os.path.join(os.path.abspath(path), "checkpoints")
  if os.path.exists(cfg_path):
    configlib.check_compatible(wd.read_json(cfg_path, "workdir config"), cfg, path)
  try:
    os.makedirs(path, exist_ok=True)
    probe = os.path.join(path, f".write_test.{jax.process_index()}")  # one per process: they probe at once
    open(probe, "w").close()
    os.remove(probe)
  except OSError as e:
    raise InputError(f"--workdir={path!r} is not writable: {e.strerror}") from None
  checkpointer = ckpt.Checkpointer(ckpt_dir, keep=cfg.ckpt.keep)
  for s in reversed(checkpointer.steps()):
    stored = checkpointer.config(s)
    if stored:
      configlib.check_compatible(stored, cfg, path)
      break
  return checkpointer


class Trainer:

  def __init__(self, cfg, workdir: str):
    self.t_created = time.perf_counter()
    self.cfg, self.workdir = cfg, workdir
    self.s = runtime.build(cfg)
    self.lead = jax.process_index() == 0
    self.train_it = data.train_iterator(cfg)
    self.eval_data = data.eval_batches(cfg)
    self.ckpt = _prepare_workdir(workdir, cfg)
    self.spikes = diagnostics.SpikeDetector()
    self.params = flops.param_count(self.s.mcfg)
    self.flops_per_token = flops.train_flops_per_token(self.s.mcfg, cfg.data.seq_len)
    self.last = {"loss": None, "eval": {}}
    self.diag_s, self.diag_compile_s, self._diag_fn = 0.0, 0.0, None

  # ---- files (process 0 only) ----------------------------------------------------------------------------

  def _open_logs(self, resume_step: int):
    if not self.lead:
      self.metrics = self.diag = self.tb = None
      return
    self.metrics = wd.JsonlLog(os.path.join(self.workdir, "metrics.jsonl"), resume_step)
    self.diag = wd.JsonlLog(os.path.join(self.workdir, "diagnostics.jsonl"), resume_step)
    self.tb = wd.TensorBoard(os.path.join(self.workdir, "tb"))
    wd.write_json(os.path.join(self.workdir, "config.json"), configlib.to_json(self.cfg))

  def _summary(self, status: str, step: int, **extra):
    if not self.lead:
      return
    m = self.cfg.model
    wd.write_json(os.path.join(self.workdir, "summary.json"), {
        "status": status, "step": step, "final_train_loss": self.last["loss"],
        "final_eval_loss": self.last["eval"].get("eval_loss"), "bits_per_byte": self.last["eval"].get("bits_per_byte"),
        "residual": m.residual, "num_layers": m.num_layers, "params": self.params,
        "flops_per_token": self.flops_per_token, "spikes": len(self.spikes.events),
        "spike_steps": [e["step"] for e in self.spikes.events], "diag_s": round(self.diag_s, 3),
        "diag_compile_s": round(self.diag_compile_s, 3), **extra})

  def _log(self, rec: dict):
    if self.lead:
      self.metrics.write(rec)
      self.tb.scalars(rec["step"], {k: v for k, v in rec.items() if k != "step"})

  # ---- loop ------------------------------------------------------------------------------------------------

  def _restore(self):
    step, out = self.ckpt.restore_latest(self.s.abstract, self.train_it)
    if step is None:
      return self.s.init_state(), 0
    state, host = out
    if host.get("spikes"):
      self.spikes.load(host["spikes"])
    self.last["loss"] = host.get("loss")
    self.last["eval"] = host.get("eval", {})
    print(f"resumed from checkpoint step {step}", flush=True)
    return state, step

  def _save(self, state, step: int):
    host = {"spikes": self.spikes.state(), "loss": self.last["loss"], "eval": self.last["eval"]}
    self.ckpt.save(step, state, self.train_it, configlib.to_json(self.cfg), host)

  def _eval(self, state, step: int):
    self.last["eval"] = self.s.evaluate(state["params"], self.eval_data)
    self._log({"step": step, **self.last["eval"]})
    print(f"step {step} | eval_loss {self.last['eval']['eval_loss']:.4f} | "
          f"bpb {self.last['eval']['bits_per_byte']:.4f}", flush=True)

  def _diagnostics(self, state, batch, step: int):
    """Per-sublayer diagnostics on one training batch -> diagnostics.jsonl and TensorBoard."""
    if self._diag_fn is None:
      t0 = time.perf_counter()
      with self.s.mesh_context():
        self._diag_fn = step_lib.make_diag_fn(self.cfg, self.s.mcfg).lower(state["params"], batch).compile()
      self.diag_compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    with self.s.mesh_context():
      out = jax.device_get(self._diag_fn(state["params"], batch))
    self.diag_s += time.perf_counter() - t0
    if not self.lead:
      return
    rows = diagnostics.summarize(self.cfg, out, full=False)["sublayers"]
    m = self.cfg.model
    self.diag.write({"step": step, "residual": m.residual, "num_layers": m.num_layers, "sublayers": rows})
    scalars = {}
    for key in ("grad_norm", "act_rms", "cos_next_median", "update_ratio", "gain_forward", "gain_backward",
                "stream_spread"):
      for r in rows:
        if r.get(key) is not None:
          scalars[f"diag/{key}/{r['index']:03d}_{r['kind']}"] = r[key]
    self.tb.scalars(step, scalars)

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
    state, start = self._restore()
    self._open_logs(start)
    print(f"{cfg.model.residual}, {cfg.model.num_layers} layers: {self.params:,} params, "
          f"{self.flops_per_token / 1e6:.2f} MFLOP/token (train), mesh {dict(self.s.mesh.shape)}", flush=True)
    if start >= t.steps:
      self._summary("completed", start)
      return 0
    self._summary("running", start)
    batch = self.s.device_batch(next(self.train_it))
    train_step, compile_s = self.s.compile_train_step(state, batch)
    t_start = time.perf_counter()
    # startup: data pipeline, init or restore, and compilation (a cache hit on a second run of one config)
    self.startup_s = t_start - self.t_created
    print(f"compiled train step in {compile_s:.1f}s (start-up {self.startup_s:.1f}s)", flush=True)
    if t.diag_every and start == 0:
      self._diagnostics(state, batch, 0)
    preempt, vote = _Preemption(), distributed.StopVote()
    tokens_per_step = t.batch_size * cfg.data.seq_len
    pending, step, t_log, s_log, skipped_total = None, start, time.perf_counter(), start, 0
    try:
      while True:
        with self.s.mesh_context():
          state, metrics = train_step(state, batch)
        step += 1
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
            self._summary("diverged", s_i, diverged_step=s_i, reason=reason, skipped_steps=skipped_total)
            return EXIT_DIVERGED
          if s_i % t.log_every == 0 or s_i == t.steps:
            now = time.perf_counter()
            tps = tokens_per_step * (s_i - s_log) / max(now - t_log, 1e-9)
            t_log, s_log = now, s_i
            self._log({"step": s_i, "loss": float(m["loss"]), "lr": float(m["lr"]),
                       "grad_norm": float(m["grad_norm"]), "tokens_per_s": tps})
            print(f"step {s_i}/{t.steps} | loss {float(m['loss']):.4f} | lr {float(m['lr']):.2e} | "
                  f"{tps:,.0f} tok/s", flush=True)
        if step % t.eval_every == 0 or step == t.steps:
          self._eval(state, step)
        if t.diag_every and (step % t.diag_every == 0 or step == t.steps):
          self._diagnostics(state, batch, step)
        if step % t.ckpt_every == 0 or step == t.steps or stopping:
          self._save(state, step)
        if stopping:
          self.ckpt.wait()
          print(f"{stopping}: checkpointed step {step}; rerun the same command to resume",
                file=sys.stderr, flush=True)
          self._summary("preempted", step, signal=stopping)
          return EXIT_PREEMPTED
        if step >= t.steps:
          break
        # after the checkpoint, so the saved iterator state is exactly `step` batches in; the device is still
        # busy with this step while the host prepares the next batch
        batch = self.s.device_batch(next(self.train_it))
      self.ckpt.wait()
      train_s = time.perf_counter() - t_start
      self._summary("completed", step, compile_s=round(compile_s, 3), startup_s=round(self.startup_s, 3),
                    skipped_steps=skipped_total, train_s=round(train_s, 3))
      print(f"done: {step - start} steps in {train_s:.1f}s; diagnostics {self.diag_s:.1f}s "
            f"({100 * self.diag_s / max(train_s, 1e-9):.1f}%) + {self.diag_compile_s:.1f}s compile", flush=True)
      return 0
    finally:
      preempt.restore()
      self.ckpt.close()
      for log in (self.metrics, self.diag, self.tb):
        if log is not None:
          log.close()


def train(cfg, workdir: str) -> int:
  return Trainer(cfg, workdir).run()
