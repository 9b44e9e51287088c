"""Workdir files (the contracts of docs/design.md): config.json, metrics.jsonl, diagnostics.jsonl, summary.json, tb/.

Every path goes through resnorm/io/storage.py, so a workdir may be local or in a bucket (gs://). Only process 0 writes
(callers construct these only there).

JSONL logs, two layouts read as one log by read_jsonl (docs/buckets.md):
- local: PATH, appended and flushed line by line, so a killed run leaves only whole lines;
- bucket (no append there): lines are buffered and each flush() writes them as a new object,
  PATH.parts/NNNNNN.jsonl (numbered in log order); the trainer flushes at every eval, checkpoint and exit, so the
  lines a killed run loses are those past its last checkpoint, which the resume recomputes anyway.
On resume, lines past the restored step are dropped in both layouts (they will be recomputed), so no step is
logged twice; a run that restores nothing starts over and drops every old line (step 0's diagnostics included).
summary.json and config.json are replaced whole (atomically on a local disk; an object upload is whole).
"""
import json
import math
import os
import struct
import tempfile
import time

from resnorm.io import storage
from resnorm.core.errors import InputError

PARTS = ".parts"  # PATH.parts/: a log's pieces in a bucket


def _clean(obj):
  """JSON-safe: NaN/Inf -> their string names (strict JSON has no NaN)."""
  if isinstance(obj, float) and not math.isfinite(obj):
    return str(obj)
  if isinstance(obj, dict):
    return {k: _clean(v) for k, v in obj.items()}
  if isinstance(obj, (list, tuple)):
    return [_clean(v) for v in obj]
  return obj


def write_json(path: str, obj) -> None:
  storage.write_text(path, json.dumps(_clean(obj), indent=1) + "\n")


def read_json(path: str, what: str):
  try:
    return json.loads(storage.read_text(path))
  except FileNotFoundError:
    raise InputError(f"{what}: {path} does not exist") from None
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise InputError(f"{what}: {path} is not valid JSON ({e})") from None


def _parse(text: str) -> list[tuple[str, dict]]:
  """(line, record) of every whole JSON line; a partial last line from a killed run is skipped."""
  out = []
  for line in text.split("\n"):
    try:
      out.append((line, json.loads(line)))
    except json.JSONDecodeError:
      continue
  return out


def _pieces(path: str) -> list[str]:
  try:
    return [storage.join(path + PARTS, n) for n in storage.listdir(path + PARTS) if n.endswith(".jsonl")]
  except FileNotFoundError:
    return []


def _sources(path: str) -> list[str]:
  """The files that hold a log, in log order: PATH (local layout), then its pieces (bucket layout)."""
  return ([path] if storage.isfile(path) else []) + _pieces(path)


def remove_log(path: str) -> None:
  storage.remove(path)
  storage.rmtree(path + PARTS)


def truncate_log(path: str, keep_through: int) -> None:
  """Drops the records whose step is past `keep_through`; rewrites only the files that held such records."""
  for src in _sources(path):
    recs = _parse(storage.read_text(src))
    kept = [line for line, rec in recs if rec.get("step", 0) <= keep_through]
    if len(kept) == len(recs) and src != path:
      continue  # a piece is whole lines only: nothing to drop
    if not kept and src != path:
      storage.remove(src)
    else:
      storage.write_text(src, "".join(l + "\n" for l in kept))


class JsonlLog:
  """A log of JSON lines with a `step` field: appended locally, written in pieces in a bucket (module docstring)."""

  def __init__(self, path: str, resume_step: int | None = None, keep_all: bool = False):
    self.path, self.remote = path, storage.is_remote(path)
    if not keep_all:  # keep_all: a log of records, not of training steps
      truncate_log(path, resume_step if resume_step else -1)  # a start from 0 logs step 0 again
    if self.remote:
      self.lines, names = [], [storage.basename(p) for p in _pieces(path)]
      self.next_piece = max((int(n.split(".")[0]) for n in names if n.split(".")[0].isdigit()), default=0) + 1
    else:
      self.f = open(path, "a")

  def write(self, rec: dict) -> None:
    line = json.dumps(_clean(rec)) + "\n"
    if self.remote:
      self.lines.append(line)
    else:
      self.f.write(line)
      self.f.flush()

  def flush(self) -> None:
    """Bucket: the buffered lines become the next piece (one upload). Local: every line is already written."""
    if self.remote and self.lines:
      storage.write_text(storage.join(self.path + PARTS, f"{self.next_piece:06d}.jsonl"), "".join(self.lines))
      self.lines, self.next_piece = [], self.next_piece + 1

  def close(self) -> None:
    self.flush()
    if not self.remote:
      self.f.close()


def read_jsonl(path: str) -> list[dict]:
  """Every record of a log in either layout (none if it does not exist)."""
  return [rec for src in _sources(path) for _, rec in _parse(storage.read_text(src))]


class TensorBoard:
  """Event files in DIR/tb (scalars and PNG images), written with tensorboard's own writer (no TensorFlow).

  In a bucket the writer writes a local temporary file, and each publish() uploads it whole as the next event file
  of DIR/tb (names sort in the order written, as TensorBoard reads them) and starts a new one: no object is ever
  rewritten or appended to. Locally publish() only flushes."""

  def __init__(self, logdir: str):
    from tensorboard.compat.proto import event_pb2, summary_pb2
    self._event, self._summary = event_pb2, summary_pb2
    self.logdir, self.remote = logdir, storage.is_remote(logdir)
    self._stamp, self._piece = f"{int(time.time()):010d}", 0
    self._tmp = tempfile.mkdtemp(prefix="resnorm-tb-") if self.remote else None
    self.w, self._events = self._writer(), 0

  def _writer(self):
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    return EventFileWriter(self._tmp if self.remote else self.logdir)

  def _add(self, event) -> None:
    self.w.add_event(event)
    self._events += 1

  def scalars(self, step: int, values: dict) -> None:
    vals = [self._summary.Summary.Value(tag=k, simple_value=float(v)) for k, v in values.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if vals:
      self._add(self._event.Event(wall_time=time.time(), step=int(step), summary=self._summary.Summary(value=vals)))

  def image(self, step: int, tag: str, png: bytes) -> None:
    """One PNG-encoded image (TensorBoard's Images tab; a step slider per tag)."""
    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk of a PNG
    img = self._summary.Summary.Image(height=height, width=width, colorspace=4, encoded_image_string=png)
    self._add(self._event.Event(wall_time=time.time(), step=int(step),
                                summary=self._summary.Summary(value=[self._summary.Summary.Value(
                                    tag=tag, image=img)])))

  def flush(self) -> None:
    self.w.flush()

  def publish(self) -> None:
    """Makes what was written visible in DIR/tb (in a bucket: uploads the current event file)."""
    if not self.remote:
      self.w.flush()
      return
    if not self._events:
      return
    self.w.close()
    local = self.w.get_logdir()
    for name in os.listdir(local):
      self._piece += 1
      host = os.uname().nodename.replace(".", "_")
      dest = f"events.out.tfevents.{self._stamp}.{host}.{os.getpid()}.{self._piece:06d}"
      storage.write_bytes(storage.join(self.logdir, dest), storage.read_bytes(os.path.join(local, name)))
      os.remove(os.path.join(local, name))
    self.w, self._events = self._writer(), 0

  def close(self) -> None:
    self.publish()
    self.w.close()
    if self._tmp:
      import shutil
      shutil.rmtree(self._tmp, ignore_errors=True)
