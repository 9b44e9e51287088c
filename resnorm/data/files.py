"""data.name='files': documents from text shards as researchers have them (the hub copies of C4 and FineWeb, or
one's own), local or on a bucket, read with pyarrow's file systems (local, gs://, s3://; no TensorFlow).

Formats, by suffix: `.txt` (the whole file is one document), `.jsonl` / `.json` / `.jsonl.gz` / `.json.gz` (JSON
lines, gzip by suffix; one document per line, its `data.text_key` field) and `.parquet` (one document per row, the
`data.text_key` column).

Order. `data.paths` (comma-separated files or globs) lists the shards, sorted. Each epoch reads them in an order
shuffled with (seed, epoch) (validation: sorted), each shard's records in file order; training documents are then
shuffled within windows of `data.shuffle_window`. The iterator's state is (epoch, shard, records read in it): a
resumed run reopens the shard and skips what it had read, so it continues exactly (cheap for parquet, which skips
whole row groups; gzip is decompressed from the shard's start).

Validation split, so that train and validation never overlap: the last `data.val_fraction` of a `.txt` file (as
`text_files`), and the JSON or parquet documents whose crc32 falls in the lowest `data.val_fraction` of its range.
A hash of the text, not of a position: a document and every exact copy of it fall on the same side, whatever the
shard, the order of the paths or the machine.
"""
import fnmatch
import glob
import io
import json
import os
import zlib

import grain
import numpy as np
from grain.experimental import WindowShuffleIterDataset

from resnorm.core.errors import InputError, check

PLACEHOLDER = "SET_ME"  # the :tpu configs' data.paths until the user names their shards
SUFFIXES = {".txt": "text", ".parquet": "parquet", ".jsonl": "json", ".json": "json", ".jsonl.gz": "json",
            ".json.gz": "json"}
_HASH_RANGE = 10_000


def _format(path: str) -> str:
  for suffix, fmt in SUFFIXES.items():
    if path.endswith(suffix):
      return fmt
  raise InputError(f"data.paths: {path!r} has an unknown format; known: {', '.join(SUFFIXES)}")


def _filesystem(path: str):
  """(pyarrow file system, path inside it) of a local path or a URI (gs://bucket/..., file:///...)."""
  import pyarrow.fs as pafs
  if "://" not in path:
    return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(path))
  try:
    return pafs.FileSystem.from_uri(path)
  except Exception as e:  # noqa: BLE001: an unknown scheme, or no credentials for it
    raise InputError(f"data.paths: {path!r} cannot be opened: {str(e).splitlines()[0][:200]}") from None


def _glob(pattern: str) -> list[str]:
  import pyarrow.fs as pafs
  if "://" not in pattern:
    return sorted(p for p in glob.glob(os.path.expanduser(pattern), recursive=True) if os.path.isfile(p))
  scheme = pattern.split("://", 1)[0]
  wild = [pattern.find(c) for c in "*?[" if c in pattern]
  try:
    if not wild:
      fs, path = _filesystem(pattern)
      return [pattern] if fs.get_file_info(path).type == pafs.FileType.File else []
    base_uri, _, rest = pattern[: min(wild)].rpartition("/")
    fs, base = _filesystem(base_uri + "/")  # a URI cannot hold glob characters: list the folder above them
    base = base.rstrip("/")
    want = f"{base}/{rest}{pattern[min(wild):]}"
    infos = fs.get_file_info(pafs.FileSelector(base, recursive="/" in want[len(base) + 1:], allow_not_found=True))
  except OSError as e:
    raise InputError(f"data.paths: cannot list {pattern!r}: {str(e).splitlines()[0][:200]}") from None
  return sorted(f"{scheme}://{i.path}" for i in infos if i.type == pafs.FileType.File and fnmatch.fnmatch(i.path, want))


def list_files(paths: str) -> list[str]:
  """The shards data.paths names, sorted; InputError for a placeholder, an empty list or a glob matching nothing."""
  paths = str(paths).strip()
  check(not paths.startswith(PLACEHOLDER),
        f"data.paths={paths!r} is a placeholder: name your shards, e.g. "
        "--config.data.paths='gs://BUCKET/c4/en/c4-train.*-of-01024.json.gz' (docs/scaling.md: Cloud TPU runbook)")
  patterns = [p.strip() for p in paths.split(",") if p.strip()]
  check(patterns, "data.paths is empty; data.name='files' needs files or globs (comma-separated)")
  out = []
  for pat in patterns:
    matches = _glob(pat)
    check(matches, f"data.paths: {pat!r} matches no file")
    for m in matches:
      _format(m)
    out.extend(matches)
  return sorted(set(out))


def _is_validation(text: bytes, val_fraction: float) -> bool:
  return zlib.crc32(text) % _HASH_RANGE < round(val_fraction * _HASH_RANGE)


def _json_text(line: bytes, key: str, where: str):
  try:
    rec = json.loads(line)
  except ValueError:
    raise InputError(f"data.paths: {where} is not JSON") from None
  if not isinstance(rec, dict) or key not in rec:
    fields = ", ".join(map(str, rec)) if isinstance(rec, dict) else type(rec).__name__
    raise InputError(f"data.text_key={key!r}: {where} has no such field (it has: {fields})")
  val = rec[key]
  if val is not None and not isinstance(val, str):
    raise InputError(f"data.text_key={key!r}: {where} holds a {type(val).__name__}, not text")
  return val


def _records(uri: str, key: str, start: int):
  """(index, text or None) of one JSON lines or parquet shard, from record `start` on. A shard that cannot be read
  (missing, corrupt gzip, bytes that are not parquet, a damaged row group) is an InputError naming it, whether it
  is the first record checked up front or a shard first met mid-run."""
  import pyarrow as pa
  fs, path = _filesystem(uri)
  try:
    if _format(uri) == "parquet":
      import pyarrow.parquet as pq
      pf = pq.ParquetFile(fs.open_input_file(path))
      check(key in pf.schema_arrow.names,
            f"data.text_key={key!r}: {uri} has no such column (it has: {', '.join(pf.schema_arrow.names)})")
      first = 0
      for g in range(pf.num_row_groups):
        n = pf.metadata.row_group(g).num_rows
        if first + n > start:  # whole row groups before `start` are skipped unread
          col = pf.read_row_group(g, columns=[key]).column(0).to_pylist()
          for j in range(max(0, start - first), n):
            yield first + j, col[j]
        first += n
      return
    with io.BufferedReader(fs.open_input_stream(path, compression="gzip" if uri.endswith(".gz") else None)) as f:
      for i, line in enumerate(f):
        if i >= start:
          yield i, (_json_text(line, key, f"line {i + 1} of {uri}") if line.strip() else None)
  except (OSError, pa.ArrowException) as e:  # pyarrow: ArrowInvalid (a ValueError) for bytes that are not parquet
    raise InputError(f"data.paths: cannot read {uri!r}: {str(e).splitlines()[0][:200]}") from None


def _documents(uri: str, split: str, text_key: str, val_fraction: float, start: int):
  """(record index, document bytes or None when the record belongs to the other split) of one shard."""
  if _format(uri) == "text":
    if start == 0:
      fs, path = _filesystem(uri)
      try:
        with fs.open_input_stream(path) as f:
          raw = f.read()
      except OSError as e:
        raise InputError(f"data.paths: cannot read {uri!r}: {str(e).splitlines()[0][:200]}") from None
      cut = int(len(raw) * (1.0 - val_fraction))
      yield 0, raw[:cut] if split == "train" else raw[cut:]
    return
  for i, text in _records(uri, text_key, start):
    doc = text.encode("utf-8") if text else None
    if doc is not None and _is_validation(doc, val_fraction) != (split == "validation"):
      doc = None
    yield i, doc


class FileDocs(grain.IterDataset):
  """The documents (uint8 arrays) of one split of the shards, repeated epoch after epoch."""

  def __init__(self, files: list[str], dcfg, split: str, seed: int, shuffle: bool):
    super().__init__()
    self.files, self.split, self.seed, self.shuffle = list(files), split, seed, shuffle
    self.text_key, self.val_fraction = str(dcfg.text_key), float(dcfg.val_fraction)

  def set_slice(self, sl: slice, sequential_slice: bool = False):
    """grain worker processes (data.worker_count) each read a slice of the shards."""
    del sequential_slice
    self.files = self.files[sl]

  def __iter__(self):
    return _FileDocsIterator(self)

  def __str__(self):
    return f"FileDocs({len(self.files)} files, {self.split})"


class _FileDocsIterator(grain.DatasetIterator):

  def __init__(self, ds: FileDocs):
    super().__init__()
    self.ds = ds
    self.epoch, self.pos, self.record = 0, 0, 0
    self._docs, self._order, self._found = None, None, False

  def _shard(self) -> str:
    if self._order is None:
      n = len(self.ds.files)
      self._order = (np.random.default_rng([self.ds.seed, self.epoch]).permutation(n) if self.ds.shuffle
                     else np.arange(n))
    return self.ds.files[int(self._order[self.pos])]

  def __next__(self):
    while True:
      if self._docs is None:
        if self.pos >= len(self.ds.files):
          check(self._found, f"data.paths: no {self.ds.split} documents in {len(self.ds.files)} file(s) "
                             f"(data.val_fraction={self.ds.val_fraction}, data.text_key={self.ds.text_key!r})")
          self.epoch, self.pos, self.record, self._order, self._found = self.epoch + 1, 0, 0, None, False
          continue
        self._docs = _documents(self._shard(), self.ds.split, self.ds.text_key, self.ds.val_fraction, self.record)
      try:
        i, doc = next(self._docs)
      except StopIteration:
        self._docs, self.pos, self.record = None, self.pos + 1, 0
        continue
      self.record = i + 1
      if doc:
        self._found = True
        return np.frombuffer(doc, dtype=np.uint8)

  def get_state(self):
    return {"epoch": self.epoch, "file": self.pos, "record": self.record}

  def set_state(self, state):
    self.epoch, self.pos, self.record = int(state["epoch"]), int(state["file"]), int(state["record"])
    self._docs, self._order, self._found = None, None, True  # mid-epoch: earlier shards may have had documents


def documents(dcfg, split: str, seed: int, shuffle: bool) -> grain.IterDataset:
  """The documents of one split; the first record of the first shard of each format is checked up front (text
  key present), so a wrong key fails before anything is written."""
  files = list_files(dcfg.paths)
  for fmt in {_format(f) for f in files} - {"text"}:
    first = next(f for f in files if _format(f) == fmt)
    next(iter(_records(first, dcfg.text_key, 0)), None)
  ds = FileDocs(files, dcfg, split, seed, shuffle)
  if shuffle and dcfg.shuffle_window > 1:
    ds = WindowShuffleIterDataset(ds, window_size=dcfg.shuffle_window, seed=seed)
  return ds


def one_pass(dcfg, split: str):
  """Every document of one split once, shards in sorted order, unshuffled (the byte-unigram counts)."""
  for uri in list_files(dcfg.paths):
    for _, doc in _documents(uri, split, str(dcfg.text_key), float(dcfg.val_fraction), 0):
      if doc:
        yield np.frombuffer(doc, dtype=np.uint8)


def fingerprint(paths: str) -> list[list]:
  """[[uri, size, mtime_ns]] of the shards data.paths names: a cache key that changes when any shard does."""
  out = []
  for uri in list_files(paths):
    fs, path = _filesystem(uri)
    info = fs.get_file_info(path)
    out.append([uri if "://" in uri else path, info.size, info.mtime_ns])
  return out
