"""A report's run records as read, and the checks every report makes of them before anything is written: each
record whole and the one its file name says (records.read), one record under one name, one code fingerprint
(unless accepted), one design, and at least one record. Also the cost the records themselves give."""
import os

from resnorm.core.errors import check
from resnorm.io import storage
from resnorm.results import records


class Ledger:
  """Records by key, with the fingerprints, digests and designs they carry (each -> the paths read with it)."""

  def __init__(self, records_dir: str | None):
    self.records_dir = records_dir
    self.recs: dict = {}
    self.fingerprints: dict = {}
    self.digests: dict = {}
    self.designs: dict = {}

  def read(self, key, path: str, expect: dict) -> dict | None:
    """The record at path, checked against the identity its name implies; None where there is none yet."""
    if not storage.exists(path):
      return None
    rec = records.read(path, expect)
    self.add(key, path, rec)
    return rec

  def add(self, key, path: str, rec: dict) -> None:
    if key is not None:
      self.recs[key] = rec
    self.fingerprints.setdefault(rec.get("fingerprint"), set()).add(path)
    self.digests.setdefault(rec["digest"], set()).add(path)
    if rec.get("kind", "run") == "run":  # init records run no design of their own
      self.designs.setdefault(rec.get("design_sha256"), set()).add(path)

  def check(self, accept_fingerprints: bool, what: str) -> None:
    """One line (InputError) for one record under two names, records of several code fingerprints (unless
    accepted: then listed), of several designs, or none at all."""
    records.check_unique(self.digests)
    records.check_fingerprints(self.fingerprints, accept_fingerprints)
    check(len(self.designs) <= 1, f"the records of {what} name {len(self.designs)} designs ("
          f"{', '.join(str(k) for k in self.designs)}): a design is fixed before the first record; rerun the odd "
          "ones out")
    check(self.digests, f"--records={self.records_dir} holds no record of {what}: nothing to report from")

  def where(self, root: str) -> str:
    """The records directory, relative to the checkout where it lies inside it."""
    d = self.records_dir or ""
    return os.path.relpath(d, root) if d.startswith(root + os.sep) else d


def _spans(recs) -> list[tuple[float, float]]:
  return sorted((t["started_at"], t["finished_at"]) for t in ((r.get("timing") or {}) for r in recs)
                if t.get("started_at") is not None and t.get("finished_at") is not None)


def run_seconds(recs) -> float:
  """The records' own run time: every finished run's start-to-finish seconds, summed."""
  return sum(b - a for a, b in _spans(recs))


def active_seconds(recs) -> float:
  """The wall time during which at least one run was going: the union of the runs' start-to-finish intervals (a
  pause of the whole grid, with no run going, does not count)."""
  total, end = 0.0, -float("inf")
  for a, b in _spans(recs):
    total += max(0.0, b - max(a, end))
    end = max(end, b)
  return total
