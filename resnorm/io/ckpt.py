"""Checkpoints: the only module that imports orbax.

One Orbax `CheckpointManager` item per step: `state` (params, opt_state, step, rng, skipped; restored onto any
sharding) and `data` (the grain iterator state), with the resolved config as the step's custom metadata. Restore
walks from the newest step down and skips a checkpoint that fails to load (killed mid-save, truncated files),
saying so in one line, so a crash never costs more than one checkpoint interval.

Several processes: every process saves its shards of `state` (Orbax); the iterator state is the same on every
process (each runs the one global pipeline, resnorm/data/data.py), so `data` is written once and restores under any
process count: a checkpoint of 2 processes resumes in 1, and the other way round.
"""
import contextlib
import dataclasses
import json
import logging
import os
import re
import sys
from typing import Any

import jax
import orbax.checkpoint as ocp

from resnorm.core.errors import InputError
from resnorm.io import storage

TMP_MARK = ".orbax-checkpoint-tmp"  # orbax's suffix for a save not yet committed (STEP.orbax-checkpoint-tmp[-T])


def _path_name(path) -> str:
  """A tree path as Orbax names the array it saves ('params.blocks.attn.w')."""
  return ".".join(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path)


def remove_unfinished(directory: str) -> list[str]:
  """Deletes the uncommitted save directories a killed writer left in `directory`, saying so; returns their names.
  Only the workdir's lock owner may call this: a live writer's are in use."""
  try:
    names = [n for n in storage.listdir(directory) if TMP_MARK in n]
  except FileNotFoundError:
    return []
  for name in names:
    storage.rmtree(storage.join(directory, name))
  if names:
    print(f"removed {len(names)} unfinished checkpoint save(s) left by an earlier writer: {', '.join(names)}",
          file=sys.stderr, flush=True)
  return names


def reason(e: BaseException, limit: int = 500) -> str:
  """One line saying why a restore failed: the innermost cause (`raise ... from`) of `e`. Orbax wraps TensorStore's
  error ('Requested byte range ... is not valid for value of size 16') in one whose text ends in the repr of a
  bound method and the whole TensorStore spec; TensorStore appends its spec as [tensorstore_spec...]."""
  seen = set()
  while e.__cause__ is not None and id(e) not in seen:
    seen.add(id(e))
    e = e.__cause__
  text = re.sub(r"\s*\[tensorstore_spec.*$", "", (str(e).strip().splitlines() or [""])[0])
  if len(text) > limit:
    text = text[:limit].rsplit(" ", 1)[0] + " ..."
  return f"{type(e).__name__}: {text}" if text else type(e).__name__


_ORBAX_DIRS = tuple(os.path.dirname(m.__file__) + os.sep for m in (ocp,))


def _is_aborted_read(unraisable) -> bool:
  """What a failed read of a checkpoint (a restore, or the metadata `config` reads) leaves behind, reported through
  sys.unraisablehook after Orbax's event loop is closed: TensorStore reads still in flight when the first one failed
  complete later and call back into the closed loop ('RuntimeError: Event loop is closed', no object), and their
  Orbax coroutines, closed when collected, turn GeneratorExit into an exception ('Exception ignored in: <coroutine
  object _read_array_index_and_device_put>')."""
  exc, obj = unraisable.exc_value, unraisable.object
  if obj is None and isinstance(exc, RuntimeError) and str(exc) == "Event loop is closed":
    return True
  code = getattr(obj, "cr_code", None)
  return code is not None and code.co_filename.startswith(_ORBAX_DIRS)


class _DropAbortedReadLogs(logging.Filter):
  """The same failed read's Orbax tasks and gathers, collected with their exception unread: asyncio logs 'Task (or
  _GatheringFuture) exception was never retrieved' with a traceback. Only those whose task is an Orbax coroutine or
  whose exception was raised through Orbax's code are dropped."""

  def filter(self, record):
    msg = str(record.msg)
    if not re.match(r"\w+ exception was never retrieved", msg):
      return True
    if any(d in msg for d in _ORBAX_DIRS):
      return False
    tb = record.exc_info[2] if record.exc_info else None
    while tb is not None:
      if tb.tb_frame.f_code.co_filename.startswith(_ORBAX_DIRS):
        return False
      tb = tb.tb_next
    return True


def _silence_aborted_reads() -> None:
  """Drops _is_aborted_read's and _DropAbortedReadLogs' reports from here on; every other unraisable exception
  reaches the previous hook, every other asyncio record is logged. Installed once, by the first Checkpointer of the
  process: a read fails inside a restore or a metadata read, its stragglers arrive before or after the call returns,
  during the quarantine, the next restore, or whenever they are collected, so no narrower scope holds them all. A
  read that succeeds leaves no such reports to drop."""
  asyncio_logger = logging.getLogger("asyncio")
  if not any(isinstance(f, _DropAbortedReadLogs) for f in asyncio_logger.filters):
    asyncio_logger.addFilter(_DropAbortedReadLogs())
  if getattr(sys.unraisablehook, "_resnorm_aborted_reads", False):
    return
  previous = sys.unraisablehook

  def hook(unraisable):
    if not _is_aborted_read(unraisable):
      previous(unraisable)
  hook._resnorm_aborted_reads = True
  sys.unraisablehook = hook


class _DropReadOnlyNotice(logging.Filter):
  """Orbax's CheckpointManager logs 'Given directory is read only=DIR' (absl WARNING) whenever it is opened with
  read_only options, as eval, --generate and train.init_from open theirs on purpose; the directory is not read-only
  and nothing is wrong. Only that one message (its format string) is dropped."""

  def filter(self, record):
    return record.msg != "Given directory is read only=%s"


@contextlib.contextmanager
def _quiet_read_only_notice():
  """_DropReadOnlyNotice on absl's logger while a read-only manager is opened, and only then."""
  logger, drop = logging.getLogger("absl"), _DropReadOnlyNotice()
  logger.addFilter(drop)
  try:
    yield
  finally:
    logger.removeFilter(drop)


class _IteratorHandler(ocp.CheckpointHandler):
  """The grain iterator state as one JSON file, written by process 0. grain's own handler writes one file per
  process, named with the process count (process_0-of-2.json), which another process count cannot read; those
  files (checkpoints written before) are still read, any count's."""

  def save(self, directory, args):
    if jax.process_index() == 0:
      (directory / "iterator.json").write_text(json.dumps(args.item.get_state(), indent=1))

  def restore(self, directory, args):
    path = directory / "iterator.json"
    if not path.exists():
      found = sorted(directory.glob("process_0-of-*.json"))
      if not found:
        raise FileNotFoundError(f"no iterator state in {directory}")
      path = found[0]
    args.item.set_state(json.loads(path.read_text()))
    args.item.start_prefetch()
    return args.item

  def metadata(self, directory):
    return None


@ocp.args.register_with_handler(_IteratorHandler, for_save=True)
@dataclasses.dataclass
class IteratorSave(ocp.args.CheckpointArgs):
  item: Any


@ocp.args.register_with_handler(_IteratorHandler, for_restore=True)
@dataclasses.dataclass
class IteratorRestore(ocp.args.CheckpointArgs):
  item: Any


class Checkpointer:

  def __init__(self, directory: str, keep: int = 2, read_only: bool = False):
    self.directory, self.read_only = directory, read_only
    _silence_aborted_reads()  # before any read of this checkpoint can fail
    opts = ocp.CheckpointManagerOptions(max_to_keep=None if read_only else keep, create=not read_only,
                                        read_only=read_only, save_interval_steps=0 if read_only else 1,
                                        enable_async_checkpointing=True)
    # Naming each item's handler up front lets metadata() and a restore of some items read a checkpoint without
    # Orbax warning about the items it was not asked for.
    registry = ocp.handlers.DefaultCheckpointHandlerRegistry()
    for item, handler, save, restore in (
        ("state", ocp.StandardCheckpointHandler(), ocp.args.StandardSave, ocp.args.StandardRestore),
        ("host", ocp.JsonCheckpointHandler(), ocp.args.JsonSave, ocp.args.JsonRestore),
        ("data", _IteratorHandler(), IteratorSave, IteratorRestore)):
      registry.add(item, save, handler)
      registry.add(item, restore, handler)
    with _quiet_read_only_notice() if read_only else contextlib.nullcontext():
      self.mngr = ocp.CheckpointManager(directory, options=opts, handler_registry=registry)

  def steps(self) -> list[int]:
    return sorted(self.mngr.all_steps())

  def save(self, step: int, state, data_iter, config: dict, host: dict | None = None) -> None:
    args = {"state": ocp.args.StandardSave(state), "host": ocp.args.JsonSave(host or {})}
    if data_iter is not None:
      args["data"] = IteratorSave(data_iter)
    self.mngr.save(step, args=ocp.args.Composite(**args), custom_metadata={"config": config}, force=True)

  def config(self, step: int) -> dict | None:
    """The config stored with a step, or None when its metadata cannot be read (a truncated checkpoint, which
    restore_latest will then skip)."""
    try:
      meta = self.mngr.metadata(step)
    except Exception:  # noqa: BLE001: an unreadable checkpoint has no config to check against
      return None
    custom = getattr(meta, "custom_metadata", None) or {}
    return custom.get("config")

  def layout_mismatch(self, step: int, abstract_state) -> str | None:
    """Why a step's state cannot be this run's, read from the checkpoint's metadata before any array is: params of
    another variant or an earlier parameter layout, or optimizer state of another optimizer config (a changed
    grad_clip adds a transform; names or shapes differ). None when they agree or the metadata cannot be read (the
    restore itself then decides). A mismatch is not corruption: without this, the restore would fail like a
    truncated checkpoint, every step would be set aside and the run would silently start again from step 0."""
    try:
      meta = self.mngr.item_metadata(step)["state"]
      stored = {m.name: tuple(m.shape) for m in jax.tree.leaves(meta) if hasattr(m, "shape")}
    except Exception:  # noqa: BLE001: an unreadable checkpoint is restore_latest's to skip
      return None
    want = {_path_name(path): tuple(leaf.shape) for path, leaf in jax.tree_util.tree_leaves_with_path(abstract_state)}
    if not stored or stored == want:
      return None
    differ = [n for n in sorted(set(stored) | set(want)) if stored.get(n) != want.get(n)]
    # a params difference says more (another variant) than the optimizer's difference it implies
    name = next((n for n in differ if n.startswith("params.")), differ[0])
    shape = lambda v: "[" + ", ".join(map(str, v)) + "]"
    there, here = (shape(d[name]) if name in d else "absent" for d in (stored, want))
    if name.startswith("params."):
      return (f"checkpoint step {step} holds params of another layout: {name} is {there} there and {here} in this "
              "model (a checkpoint of another variant, or of an earlier parameter layout of this one)")
    return (f"checkpoint step {step} holds optimizer state of another layout: {name} is {there} there and {here} in "
            "this run (the optimizer's config differs, e.g. train.grad_clip or the optimizer: resume with the "
            "checkpoint's, or start a new workdir)")

  def restore(self, step: int, abstract_state, data_iter=None):
    """(state, host dict) of one step; the data iterator, if given, is restored in place. Params of another
    layout (`layout_mismatch`) raise InputError: such a checkpoint is not corrupt, and is never quarantined."""
    mismatch = self.layout_mismatch(step, abstract_state)
    if mismatch:
      raise InputError(mismatch)
    args = {"state": ocp.args.StandardRestore(abstract_state), "host": ocp.args.JsonRestore()}
    if data_iter is not None:
      args["data"] = IteratorRestore(data_iter)
    out = self.mngr.restore(step, args=ocp.args.Composite(**args))
    return out["state"], out["host"]

  def restore_latest(self, abstract_state, data_iter=None, max_step: int | None = None):
    """(step, (state, host)) of the newest checkpoint that loads, or (None, None) if there is none."""
    for step in reversed(self.steps()):
      if max_step is not None and step > max_step:
        continue
      try:
        return step, self.restore(step, abstract_state, data_iter)
      except InputError:
        raise
      except Exception as e:  # noqa: BLE001: any failure to load means this checkpoint is unusable
        print(f"warning: checkpoint step {step} cannot be restored ({reason(e)}); "
              "falling back to the previous one", file=sys.stderr, flush=True)
        self._quarantine(step)
    return None, None

  def _quarantine(self, step: int) -> None:
    """Moves an unreadable checkpoint out of the manager's way (to DIR.corrupt/STEP), never deleting it, so the
    step can be written again. Process 0 moves it; the others fail on the same files and skip it too."""
    if self.read_only:
      return
    if jax.process_index() != 0:
      self.mngr.reload()
      return
    dest = storage.join(f"{self.directory}.corrupt", str(step))
    storage.rmtree(dest)
    storage.makedirs(f"{self.directory}.corrupt")
    storage.move(storage.join(self.directory, str(step)), dest)
    self.mngr.reload()

  def reload(self) -> None:
    """Re-reads the step list (a live run adds and prunes steps under a read-only reader)."""
    self.mngr.reload()

  def wait(self) -> None:
    self.mngr.wait_until_finished()

  def close(self) -> None:
    self.mngr.wait_until_finished()
    self.mngr.close()

