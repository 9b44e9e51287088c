"""The byte-unigram baseline: what a model that has learned only byte frequencies scores on the eval batches.

Estimate: counts of every byte (0..255) over the training split's documents, plus one BOS per document when
`data.pack` is on (the packed stream is BOS doc BOS doc ..., so BOS is a target; cropped documents never have BOS
as a target and it gets probability 0), with add-one (Laplace) smoothing over those 257 (or 256) symbols:
p(s) = (count(s) + 1) / (N + 257). PAD is never a target (mask 0). `unigram_eval_loss` is the mean of -ln p(target)
over the masked targets of the same validation batches as `eval_loss`.

The counts are computed once per dataset and cached as JSON beside the data: in the TFDS dataset's own version
directory (`DATA_DIR/pystdlib/py3_11_7/1.0.0/resnorm_unigram.json`, keyed by the dataset's full name), or for
`text_files` and `files` in the run's workdir (`DIR/unigram.json`, keyed by each file's path, size and mtime). At most
MAX_BYTES of training documents are counted (in split order): all of the default corpus, a prefix of C4.
"""
import json
import os
import time

import numpy as np
from etils import epath

from resnorm.data import data, files as files_lib
from resnorm.io import storage

MAX_BYTES = 1 << 26
# learned_beyond_unigram: the final eval loss must sit this far below the unigram loss (docs/usage.md, "The margin")
MARGIN = 0.1


def _files_key(dcfg) -> dict:
  """The cache key of a text_files / files dataset: every file's path, size and mtime, and the split settings."""
  if dcfg.name == "files":
    return {"name": "files", "files": files_lib.fingerprint(dcfg.paths), "text_key": dcfg.text_key,
            "val_fraction": dcfg.val_fraction, "max_bytes": MAX_BYTES}
  import glob
  files = []
  for pat in (p.strip() for p in str(dcfg.paths).split(",") if p.strip()):
    for path in sorted(glob.glob(os.path.expanduser(pat))):
      st = os.stat(path)
      files.append([os.path.abspath(path), st.st_size, st.st_mtime_ns])
  return {"name": "text_files", "files": files, "val_fraction": dcfg.val_fraction, "max_bytes": MAX_BYTES}


def _location(dcfg, fallback_dir: str | None):
  """(cache file or None, key) for the training split of dcfg."""
  if dcfg.name in ("text_files", "files"):
    return (storage.join(fallback_dir, "unigram.json") if fallback_dir else None), _files_key(dcfg)
  info = data.tfds_info(dcfg, "train")
  key = {"name": info.full_name, "split": "train", "max_bytes": MAX_BYTES}
  return epath.Path(info.data_dir) / "resnorm_unigram.json", key


def _count(dcfg) -> dict:
  t0 = time.perf_counter()
  counts, docs, total = np.zeros(256, np.int64), 0, 0
  docs_it = files_lib.one_pass(dcfg, "train") if dcfg.name == "files" else data.documents(dcfg, "train")
  for doc in docs_it:
    counts += np.bincount(doc, minlength=256)
    docs, total = docs + 1, total + doc.size
    if total >= MAX_BYTES:
      break
  return {"byte_counts": counts.tolist(), "documents": docs, "bytes": total,
          "seconds": round(time.perf_counter() - t0, 3)}


def counts(dcfg, fallback_dir: str | None = None, write: bool = True) -> dict:
  """Byte counts of the training split ({byte_counts, documents, bytes, seconds, key, cached}), from the cache
  when its key matches, else counted (and cached when `write`: process 0 only)."""
  path, key = _location(dcfg, fallback_dir)
  if path is not None:
    try:
      cached = json.loads(epath.Path(path).read_text())
      if cached.get("key") == key:
        return {**cached, "cached": True}
    except (OSError, ValueError):
      pass  # absent or unreadable: count again
  out = {**_count(dcfg), "key": key}
  if path is not None and write:
    try:
      epath.Path(path).parent.mkdir(parents=True, exist_ok=True)
      storage.write_text(str(path), json.dumps(out))  # whole: a local rename, one upload in a bucket
    except OSError as e:  # a read-only data_dir: the baseline is still computed, just not kept
      print(f"note: cannot cache the unigram counts at {path}: {e}", flush=True)
  return {**out, "cached": False}


def neg_log_probs(c: dict, pack: bool, vocab_size: int) -> np.ndarray:
  """[vocab] -ln p(symbol) of the smoothed unigram; 0 for symbols that are never targets (PAD, BOS unpacked),
  which the mask removes."""
  n = np.asarray(c["byte_counts"], np.float64)
  if pack:
    n = np.concatenate([n, [c["documents"]]])
  p = (n + 1.0) / (n.sum() + n.size)
  out = np.zeros(vocab_size, np.float64)
  out[: n.size] = -np.log(p)
  return out


def learned_beyond(eval_loss, unigram_loss) -> bool | None:
  """True when the eval loss sits at least MARGIN nats/byte below the unigram loss; None without an eval."""
  if eval_loss is None or unigram_loss is None:
    return None
  return bool(np.isfinite(eval_loss) and eval_loss < unigram_loss - MARGIN)


def eval_loss(setup, batches, fallback_dir: str | None = None, write: bool = True) -> float:
  """unigram_eval_loss of the run's eval batches (setup: a runtime.Setup)."""
  cfg = setup.cfg
  nll = neg_log_probs(counts(cfg.data, fallback_dir, write), cfg.data.pack, cfg.model.vocab_size)
  return setup.evaluate_table(nll, batches)
