"""The grid's finished runs, read for the claims (resnorm/results/claims.py): losses, diagnostics and stall flags by
recipe and seed, at the run's end or, inside at(frac), at that fraction of its steps."""
import contextlib
import math

from resnorm.io import storage, workdir as wd
from resnorm.results import grid

FAIL_LOSS = math.log(256)  # nats/byte of a uniform guess over bytes: what a diverged run is scored as


class Runs:
  """The grid's runs (root/<run name>/) and init diagnostics (root/init/), by recipe and seed."""

  def __init__(self, root: str, d: dict, corpus: str = "pystdlib"):
    self.root, self.d, self.corpus, self._cache = root, d, corpus, {}
    self.frac = 1.0       # where in its run each run is read (at()): its end by default
    self.touched = None   # part() records here the runs a statistic reads

  @contextlib.contextmanager
  def at(self, frac: float):
    """Every run read at `frac` of its steps: its last eval, and diagnostics, at or before that step."""
    old, self.frac = self.frac, frac
    try:
      yield self
    finally:
      self.frac = old

  def run(self, r: grid.Recipe, seed: int) -> dict | None:
    """None unless the run finished (completed or diverged)."""
    key = (r, seed)
    if self.touched is not None:
      self.touched.add(key)
    if key not in self._cache:
      self._cache[key] = self._read(storage.join(self.root, grid.run_name(r, seed, self.corpus)))
    return self._cache[key]

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
            "loss": FAIL_LOSS if diverged else s.get("final_eval_loss"), "unigram": s.get("unigram_eval_loss"),
            "first": diags[0]["sublayers"] if diags and diags[0]["step"] == 0 else None,
            "last": diags[-1]["sublayers"] if diags else None, "summary": s,
            "diags": [(x["step"], x["sublayers"]) for x in diags],
            "evals": [(m["step"], m["eval_loss"]) for m in metrics if "eval_loss" in m]}

  def _upto(self, r) -> int:
    return int(round(self.frac * r.steps))

  def loss(self, r, seed):
    run = self.run(r, seed)
    if not run or run["diverged"] or self.frac >= 1.0:
      return run and run["loss"]
    evals = [(st, v) for st, v in run["evals"] if st <= self._upto(r)]
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
    sub = [] if self.corpus == "pystdlib" else [self.corpus]  # report v2's pystdlib files keep their place
    return storage.join(self.root, "init", *sub, f"{variant}-{layers}l-s{seed}.json")

  def init(self, variant: str, layers: int, seed: int):
    path = self.init_path(variant, layers, seed)
    return wd.read_json(path, "init diagnostics")["sublayers"] if storage.exists(path) else None
