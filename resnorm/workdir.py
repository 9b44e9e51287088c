"""Workdir files (the contracts of docs/design.md): config.json, metrics.jsonl, diagnostics.jsonl, summary.json, tb/.

JSONL files are appended and flushed line by line, so a killed run leaves only whole lines; on resume, lines past
the restored step are dropped (they will be recomputed), so no step is logged twice; a run that restores nothing
starts over and drops every old line (step 0's diagnostics included). summary.json is replaced
atomically. Only process 0 writes (callers construct these only there).
"""
import json
import math
import os
import struct
import time

from resnorm.errors import InputError


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
  tmp = f"{path}.tmp"
  with open(tmp, "w") as f:
    json.dump(_clean(obj), f, indent=1)
    f.write("\n")
  os.replace(tmp, path)


def read_json(path: str, what: str):
  try:
    with open(path) as f:
      return json.load(f)
  except FileNotFoundError:
    raise InputError(f"{what}: {path} does not exist") from None
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise InputError(f"{what}: {path} is not valid JSON ({e})") from None


class JsonlLog:
  """Append-only JSON lines with a `step` field."""

  def __init__(self, path: str, resume_step: int | None = None, keep_all: bool = False):
    self.path = path
    if os.path.exists(path) and not keep_all:  # keep_all: a log of records, not of training steps
      self._truncate(resume_step if resume_step else -1)  # a start from 0 logs step 0 again
    self.f = open(path, "a")

  def _truncate(self, keep_through: int) -> None:
    with open(self.path) as f:
      lines = f.read().split("\n")
    kept = []
    for line in lines:
      try:
        rec = json.loads(line)
      except json.JSONDecodeError:
        continue  # a partial last line from a killed run
      if rec.get("step", 0) <= keep_through:
        kept.append(line)
    tmp = self.path + ".tmp"
    with open(tmp, "w") as f:
      f.write("".join(l + "\n" for l in kept))
    os.replace(tmp, self.path)

  def write(self, rec: dict) -> None:
    self.f.write(json.dumps(_clean(rec)) + "\n")
    self.f.flush()

  def close(self) -> None:
    self.f.close()


def read_jsonl(path: str) -> list[dict]:
  if not os.path.exists(path):
    return []
  out = []
  with open(path) as f:
    for line in f:
      try:
        out.append(json.loads(line))
      except json.JSONDecodeError:
        pass
  return out


class TensorBoard:
  """Event files in DIR/tb (scalars and PNG images), written with tensorboard's own writer (no TensorFlow)."""

  def __init__(self, logdir: str):
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    self._event, self._summary = event_pb2, summary_pb2
    self.w = EventFileWriter(logdir)

  def scalars(self, step: int, values: dict) -> None:
    vals = [self._summary.Summary.Value(tag=k, simple_value=float(v)) for k, v in values.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if vals:
      self.w.add_event(self._event.Event(wall_time=time.time(), step=int(step),
                                         summary=self._summary.Summary(value=vals)))

  def image(self, step: int, tag: str, png: bytes) -> None:
    """One PNG-encoded image (TensorBoard's Images tab; a step slider per tag)."""
    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk of a PNG
    img = self._summary.Summary.Image(height=height, width=width, colorspace=4, encoded_image_string=png)
    self.w.add_event(self._event.Event(wall_time=time.time(), step=int(step),
                                       summary=self._summary.Summary(value=[self._summary.Summary.Value(
                                           tag=tag, image=img)])))

  def flush(self) -> None:
    self.w.flush()

  def close(self) -> None:
    self.w.close()
