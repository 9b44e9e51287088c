"""A run's workdir and what the loop writes there: the checks before anything is written (prepare_workdir), then
metrics.jsonl, diagnostics.jsonl, TensorBoard events, config.json / config_changes.jsonl and summary.json
(RunFiles). Process 0 alone writes; the other processes get a RunFiles whose writers are no-ops."""
import jax

from resnorm.config import configlib
from resnorm.core.errors import InputError
from resnorm.io import ckpt, storage, workdir as wd


def prepare_workdir(path: str, cfg, allow_config_change: bool = False) -> ckpt.Checkpointer:
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


class RunFiles:
  """The run's logs, opened at the step the run resumes from (lines past it are dropped: those steps are redone)."""

  def __init__(self, workdir: str, cfg, lead: bool):
    self.workdir, self.cfg, self.lead = workdir, cfg, lead
    self.metrics = self.diag = self.tb = None

  def open(self, resume_step: int, changes: list | None) -> None:
    """changes: None for a fresh start (config.json is (re)written), else the accepted config changes."""
    if not self.lead:
      return
    self.metrics = wd.JsonlLog(storage.join(self.workdir, "metrics.jsonl"), resume_step)
    self.diag = wd.JsonlLog(storage.join(self.workdir, "diagnostics.jsonl"), resume_step)
    self.tb = wd.TensorBoard(storage.join(self.workdir, "tb"))
    changes_path = storage.join(self.workdir, "config_changes.jsonl")
    if changes is None:
      wd.write_json(storage.join(self.workdir, "config.json"), configlib.to_json(self.cfg))
      wd.remove_log(changes_path)  # left by an attempt that never checkpointed: config.json is the start again
      return
    # config.json stays the config the run started with; config_changes.jsonl says what changed from which step.
    # Lines from the restored step on are dropped: those steps are recomputed, and a change from this step is the
    # one this resume computes against the restored checkpoint's config (an earlier resume at the same step wrote
    # it too, or a change that no longer applies)
    if changes or wd.read_jsonl(changes_path):
      log = wd.JsonlLog(changes_path, resume_step - 1)
      for c in changes:
        log.write({"step": resume_step, **c})
        print(f"config change from step {resume_step}: {c['field']} {c['old']!r} -> {c['new']!r}", flush=True)
      log.close()

  def kept_metrics(self) -> list[dict]:
    return wd.read_jsonl(self.metrics.path) if self.lead else []

  def kept_diagnostics(self) -> list[dict]:
    return wd.read_jsonl(self.diag.path) if self.lead else []

  def log(self, rec: dict) -> None:
    """One metrics line, and its scalars in TensorBoard."""
    if self.lead:
      self.metrics.write(rec)
      self.tb.scalars(rec["step"], {k: v for k, v in rec.items() if k != "step"})

  def log_diagnostics(self, rec: dict) -> None:
    if self.lead:
      self.diag.write(rec)

  def summary(self, fields: dict) -> None:
    if self.lead:
      wd.write_json(storage.join(self.workdir, "summary.json"), fields)

  def publish(self) -> None:
    """In a bucket, the logs' buffered lines and events become objects (at evals, checkpoints and exit: a killed
    run loses only lines past its last checkpoint, which its resume recomputes); locally every line is written."""
    if self.lead:
      for log in (self.metrics, self.diag, self.tb):
        log.publish() if log is self.tb else log.flush()

  def close(self) -> None:
    for log in (self.metrics, self.diag, self.tb):
      if log is not None:
        log.close()
