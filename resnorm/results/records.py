"""Report v4's run records: one compact JSON per finished run of the grid (completed or diverged; a stall is a
completed run), holding what the report reads and nothing else, so that the report rebuilds from a clone of the
repository with no run (`python -m resnorm.results --from_records`), and a stopped grid resumes anywhere.

A record: identity (recipe, corpus, seed, status, stalled), every eval (step, loss on all rows and on the fixed
subset, tokens, bootstrap SE) with the final eval's per-block sums (the block bootstrap's units, resnorm.core.stats),
the unigram baseline, the diagnostics rows the claims read (only their fields), the run's timings, its provenance
(commit, jax and jaxlib versions, devices, machine) and the fingerprint of the code that decides a run's numbers
(fingerprint()). `digest` is the sha256 of the rest: a record edited by hand or cut short is refused by name.
Init diagnostics (C1, C2a) are records too, under <corpus>/init/. A record is read under the name of the run it
must be (read(path, expect)): one whose recipe, corpus or seed disagrees with that name is refused, and so is the
same record read under two names (check_unique).
"""
import hashlib
import json
import os
import platform

from resnorm.core.errors import InputError, check
from resnorm.io import storage, workdir as wd
from resnorm.results.engine import paths

SCHEMA = 1
DIAG_KEYS = ("act_rms", "grad_norm", "cos_next_median", "cos_next_p05", "cos_next_p95", "gain_forward",
             "gain_backward")
EVAL_KEYS = ("eval_loss", "eval_loss_subset", "eval_tokens", "eval_loss_se", "eval_subset_every")
# The code that decides a run's numbers: the model, the steps and optimizer, the data, the config schema and its
# defaults, the statistics of an eval, the loop (when it evals and what it logs).
FINGERPRINTED = ("resnorm/model", "resnorm/step", "resnorm/data", "resnorm/config", "resnorm/core", "resnorm/train",
                 "configs/base.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fingerprint(root: str = ROOT) -> str:
  """sha256 (16 hex digits) over the FINGERPRINTED sources: each .py file's path and bytes, in sorted order."""
  h = hashlib.sha256()
  files = []
  for p in FINGERPRINTED:
    full = os.path.join(root, p)
    if os.path.isfile(full):
      files.append(p)
    for dirpath, _, names in os.walk(full):
      files += [os.path.relpath(os.path.join(dirpath, n), root) for n in names if n.endswith(".py")]
  for rel in sorted(files):
    h.update(rel.encode() + b"\0" + open(os.path.join(root, rel), "rb").read() + b"\0")
  return h.hexdigest()[:16]


def machine() -> str:
  model = platform.processor() or platform.machine()
  try:
    with open("/proc/cpuinfo") as f:
      model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), model)
  except OSError:
    pass
  return f"{model}, {os.cpu_count()} cores"


def _digest(rec: dict) -> str:
  body = {k: v for k, v in rec.items() if k != "digest"}
  return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _rows(rows):
  return [{k: r[k] for k in DIAG_KEYS if r.get(k) is not None} for r in rows] if rows is not None else None


def from_workdir(path: str, recipe, corpus: str, seed: int, fp: str, extra: dict | None = None) -> dict | None:
  """The record of a finished run's workdir; None unless it completed or diverged. extra: fields a study adds (the
  transfer study's design identity)."""
  s = wd.read_json(storage.join(path, "summary.json"), "run summary") if \
      storage.exists(storage.join(path, "summary.json")) else None
  if not s or s.get("status") not in ("completed", "diverged"):
    return None
  metrics = wd.read_jsonl(storage.join(path, "metrics.jsonl"))
  diags = wd.read_jsonl(storage.join(path, "diagnostics.jsonl"))
  prov = s.get("provenance") or {}
  rec = {"schema": SCHEMA, "kind": "run", "recipe": list(recipe), "corpus": corpus, "seed": seed,
         "status": s["status"], "learned_beyond_unigram": s.get("learned_beyond_unigram"),
         "final_eval_loss": s.get("final_eval_loss"), "unigram_eval_loss": s.get("unigram_eval_loss"),
         "evals": [{"step": m["step"], **{k: m[k] for k in EVAL_KEYS if k in m}} for m in metrics if "eval_loss" in m],
         "eval_block_sums": s.get("eval_block_sums"),
         "diags": [{"step": x["step"], "sublayers": _rows(x["sublayers"])} for x in diags],
         "timing": {k: s.get(k) for k in ("startup_s", "train_s", "eval_s", "started_at", "finished_at")},
         "provenance": {"git_commit": prov.get("git_commit"), "git_dirty": prov.get("git_dirty"),
                        "versions": {k: (prov.get("versions") or {}).get(k) for k in ("jax", "jaxlib")},
                        "devices": prov.get("devices"), "machine": machine()},
         "fingerprint": fp, **(extra or {})}
  rec["digest"] = _digest(rec)
  return rec


def from_init(res: dict, variant: str, layers: int, corpus: str, seed: int, fp: str) -> dict:
  """The record of one init-diagnostics evaluation (C1, C2a)."""
  rec = {"schema": SCHEMA, "kind": "init", "variant": variant, "layers": layers, "corpus": corpus, "seed": seed,
         "sublayers": _rows(res["sublayers"]), "fingerprint": fp}
  rec["digest"] = _digest(rec)
  return rec


def write(path: str, rec: dict) -> None:
  storage.makedirs(path.rsplit("/", 1)[0])
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(rec, f, sort_keys=True, separators=(",", ":"))
    f.write("\n")
  os.replace(tmp, path)


def read(path: str, expect: dict | None = None) -> dict:
  """A record, checked: one line naming it (InputError) if it is truncated, not JSON, of another schema, edited
  by hand (its digest no longer matches), or not the record its name says (expect: the identity fields its path
  implies, e.g. {"kind": "run", "recipe": [...], "corpus": ..., "seed": ...})."""
  try:
    with open(path) as f:
      rec = json.load(f)
  except (OSError, ValueError) as e:
    raise InputError(f"run record {path} cannot be read (truncated or not JSON: {str(e).splitlines()[0]})") from None
  check(isinstance(rec, dict) and rec.get("schema") == SCHEMA,
        f"run record {path} is not a schema-{SCHEMA} record")
  check(rec.get("digest") == _digest(rec), f"run record {path} was edited or damaged: its digest does not match "
        "its contents (restore it from git, or rerun the run)")
  wrong = [f"{k} {rec.get(k)!r} (its name says {v!r})" for k, v in (expect or {}).items() if rec.get(k) != v]
  check(not wrong, f"run record {path} is not the record its name says: {', '.join(wrong)} (a copied or renamed "
        "file; restore it from git, or rerun the run)")
  return rec


def identity(r, corpus: str, seed: int) -> dict:
  """What a run record read under run_name(r, seed, corpus) must hold."""
  return {"kind": "run", "recipe": json.loads(json.dumps(list(r))), "corpus": corpus, "seed": seed}


def init_identity(variant: str, layers: int, corpus: str, seed: int) -> dict:
  return {"kind": "init", "variant": variant, "layers": layers, "corpus": corpus, "seed": seed}


def check_unique(digests: dict) -> None:
  """digests: digest -> the paths it was read under. One record under two names is refused in one line."""
  dup = next((sorted(p) for p in digests.values() if len(p) > 1), None)
  check(dup is None, f"run records {' and '.join(dup or [])} are the same record under two names (a copied file); "
        "restore them from git, or rerun the runs")


def check_present(records_dir: str) -> None:
  """--from_records: the records directory must exist and hold at least one record, else nothing is reported."""
  check(os.path.isdir(records_dir), f"--records={records_dir} is not a directory: no run record to report from")
  check(any(n.endswith(".json") for _, _, names in os.walk(records_dir) for n in names),
        f"--records={records_dir} holds no run record (*.json): nothing to report from")


def check_fingerprints(fps: dict, accept: bool) -> None:
  """fps: fingerprint -> the records read with it. More than one (records of different code in one report) is
  refused in one line unless accepted; accepted, they are listed."""
  if len(fps) <= 1:
    return
  listed = ", ".join(f"{fp} ({len(n)} records)" for fp, n in sorted(fps.items(), key=lambda t: -len(t[1])))
  check(accept, f"the run records come from code with {len(fps)} fingerprints: {listed}; rerun the runs of the odd "
        "ones out, or pass --accept_fingerprints to report them together")
  print(f"reporting records of {len(fps)} code fingerprints together (--accept_fingerprints): {listed}", flush=True)


def record_finished(root: str, records_dir: str, runs, fp: str, extra: dict | None = None) -> int:
  """Writes the record of every run that finished under root and has none yet; returns how many. runs: (corpus,
  recipe, seed, run name) of every run of a grid (Spec.runs)."""
  n = 0
  for c, r, s, name in runs:
    path = paths.record_path(records_dir, c, name)
    if os.path.exists(path):
      continue
    rec = from_workdir(storage.join(root, name), r, c, s, fp, extra)
    if rec is not None:
      write(path, rec)
      n += 1
  return n


class Recorder:
  """While a grid runs: every `period` seconds, the records of the runs finished since (a stopped grid loses no
  finished run's record)."""

  def __init__(self, root: str, records_dir: str, runs, fp: str, period: float = 30.0, extra: dict | None = None):
    import threading
    self.args, self.period, self.written = (root, records_dir, runs, fp, extra), period, 0
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._loop, daemon=True)

  def _loop(self):
    while not self._stop.wait(self.period):
      self.written += record_finished(*self.args)

  def __enter__(self):
    self._thread.start()
    return self

  def __exit__(self, *exc):
    self._stop.set()
    self._thread.join()
    self.written += record_finished(*self.args)
