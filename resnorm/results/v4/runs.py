"""The grid's finished runs, read for the claims (resnorm/results/v4/claims.py): losses, diagnostics and stall flags by
recipe and seed, at the run's end or, inside at(frac), at that fraction of its steps. A diverged run has no loss
(nothing is imputed for it); a stalled run keeps its own. Read from the runs' workdirs, or from their records
(resnorm/results/records.py), which hold the same for the report."""
import contextlib

from resnorm.io import storage, workdir as wd
from resnorm.results import records
from resnorm.results.engine.ledger import Ledger
from resnorm.results.v4 import grid


class Runs:
  """The grid's runs (root/<run name>/) and init diagnostics (root/init/), by recipe and seed; with `records`, the
  records under records/<corpus>/ instead (root is then unused)."""

  def __init__(self, root: str, d: dict, corpus: str = "pystdlib", records_dir: str | None = None, ledger=None):
    self.root, self.d, self.corpus, self._cache = root, d, corpus, {}
    self.records_dir = records_dir
    self.ledger = ledger or Ledger(records_dir)  # every record read, with its fingerprint and digest (records only)
    self.frac = 1.0       # where in its run each run is read (at()): its end by default
    self.subset = False   # at(subset=True): losses on the eval set's fixed subset, at every fraction (like with like)
    self.touched = None   # part() records here the runs a statistic reads

  @contextlib.contextmanager
  def at(self, frac: float, subset: bool = False):
    """Every run read at `frac` of its steps: its last eval, and diagnostics, at or before that step. subset: the
    eval loss on the fixed subset of the eval set's rows that the evals before the last score (the last eval
    records it beside the full loss), so that readings at 75% and 100% compare like with like."""
    old, self.frac, self.subset = (self.frac, self.subset), frac, subset
    try:
      yield self
    finally:
      self.frac, self.subset = old

  def run(self, r: grid.Recipe, seed: int) -> dict | None:
    """None unless the run finished (completed or diverged)."""
    key = (r, seed)
    if self.touched is not None:
      self.touched.add(key)
    if key not in self._cache:
      name = grid.run_name(r, seed, self.corpus)
      self._cache[key] = self._read_record(self.record_path(name), records.identity(r, self.corpus, seed)) \
          if self.records_dir else self._read(storage.join(self.root, name))
    return self._cache[key]

  def record_path(self, name: str) -> str:
    return storage.join(self.records_dir, self.corpus, f"{name}.json")

  @property
  def fingerprints(self) -> dict:
    return self.ledger.fingerprints

  @property
  def digests(self) -> dict:
    return self.ledger.digests

  def _checked(self, path: str, expect: dict) -> dict:
    rec = records.read(path, expect)
    self.ledger.add(None, path, rec)
    return rec

  def _read_record(self, path: str, expect: dict) -> dict | None:
    if not storage.exists(path):
      return None
    rec = self._checked(path, expect)
    diags = rec["diags"]
    diverged = rec["status"] == "diverged"
    summary = {**rec["timing"], "provenance": rec["provenance"], "status": rec["status"],
               "learned_beyond_unigram": rec["learned_beyond_unigram"]}
    return {"diverged": diverged, "stalled": not diverged and rec["learned_beyond_unigram"] is False,
            "loss": None if diverged else rec["final_eval_loss"], "unigram": rec["unigram_eval_loss"],
            "first": diags[0]["sublayers"] if diags and diags[0]["step"] == 0 else None,
            "last": diags[-1]["sublayers"] if diags else None, "summary": summary,
            "diags": [(x["step"], x["sublayers"]) for x in diags],
            "evals": [(e["step"], e["eval_loss"], e.get("eval_loss_subset", e["eval_loss"])) for e in rec["evals"]]}

  @staticmethod
  def _read(path: str) -> dict | None:
    if not storage.exists(storage.join(path, "summary.json")):
      return None
    s = wd.read_json(storage.join(path, "summary.json"), "run summary")
    if s.get("status") not in ("completed", "diverged"):
      return None
    diags = wd.read_jsonl(storage.join(path, "diagnostics.jsonl"))
    metrics = wd.read_jsonl(storage.join(path, "metrics.jsonl"))
    diverged = s["status"] == "diverged"
    return {"diverged": diverged, "stalled": not diverged and s.get("learned_beyond_unigram") is False,
            "loss": None if diverged else s.get("final_eval_loss"), "unigram": s.get("unigram_eval_loss"),
            "first": diags[0]["sublayers"] if diags and diags[0]["step"] == 0 else None,
            "last": diags[-1]["sublayers"] if diags else None, "summary": s,
            "diags": [(x["step"], x["sublayers"]) for x in diags],
            "evals": [(m["step"], m["eval_loss"], m.get("eval_loss_subset", m["eval_loss"])) for m in metrics
                      if "eval_loss" in m]}

  def _upto(self, r) -> int:
    return int(round(self.frac * r.steps))

  def loss(self, r, seed):
    run = self.run(r, seed)
    if not run or run["diverged"]:
      return None
    if self.frac >= 1.0 and not self.subset:
      return run["loss"]
    evals = [(st, sub if self.subset else full) for st, full, sub in run["evals"] if st <= self._upto(r)]
    return max(evals)[1] if evals else None

  def trained(self, r, seed) -> bool:
    run = self.run(r, seed)
    return bool(run) and not run["diverged"] and not run["stalled"]

  def last(self, r, seed):
    run = self.run(r, seed)
    if not run or self.frac >= 1.0:
      return run and run["last"]
    diags = [(st, x) for st, x in run["diags"] if 0 < st <= self._upto(r)]
    return max(diags, key=lambda t: t[0])[1] if diags else None

  def init_path(self, variant: str, layers: int, seed: int) -> str:
    if self.records_dir:
      return storage.join(self.records_dir, self.corpus, "init", f"{variant}-{layers}l-s{seed}.json")
    sub = [] if self.corpus == "pystdlib" else [self.corpus]  # report v2's pystdlib files keep their place
    return storage.join(self.root, "init", *sub, f"{variant}-{layers}l-s{seed}.json")

  def init(self, variant: str, layers: int, seed: int):
    path = self.init_path(variant, layers, seed)
    if not storage.exists(path):
      return None
    if self.records_dir:
      return self._checked(path, records.init_identity(variant, layers, self.corpus, seed))["sublayers"]
    return wd.read_json(path, "init diagnostics")["sublayers"]
