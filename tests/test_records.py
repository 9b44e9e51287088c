"""resnorm/results/records.py: the report rebuilt from run records alone (a committed set from real test-size runs,
every kind of part), identical apart from the line that says when it was generated; records of differing code
fingerprints refused unless accepted; a truncated or hand-edited record refused by name; a finished run's record
written from its workdir, and points that have one left out of the sweep."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from resnorm.results import records
from resnorm.results.engine import paths
from resnorm.results.v4 import grid
from resnorm.results.v4.spec import SPEC as V4
from test_cli import ENV, ROOT

sys.path.insert(0, ROOT)
from configs.sweeps import results as sweep_file  # noqa: E402

COMMITTED = os.path.join(ROOT, "tests", "data", "records_test")


def _report(records_dir, out, *more):
  env = {**ENV, paths.SIZE_ENV: "test"}
  return subprocess.run([sys.executable, "-m", "resnorm.results", "--from_records", f"--records={records_dir}",
                         f"--out={out}", *more], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.integration  # the whole report from the records, as a subprocess
def test_report_rebuilds_from_records_alone(tmp_path):
  """No run and no init diagnostics: every claim of both corpora, every figure, and the same page twice but for its
  first line."""
  pages = []
  for k in range(2):
    out = tmp_path / f"out{k}"
    r = _report(COMMITTED, out)
    assert r.returncode == 0 and r.stderr == "", r.stderr[-2000:]
    assert not (tmp_path / "runs").exists()
    pages.append((out / "results.md").read_text())
  a, b = (p.split("\n", 3) for p in pages)
  assert a[2].startswith("Generated ") and a[3] == b[3]
  text = pages[0]
  assert "Read from the run records in" in text and "| part | block | pilot sd |" in text
  for cid in range(1, 11):
    assert f"### C{cid}" in text
  assert "no record yet" not in text  # the committed set is the whole test design
  d = grid.design(sweep_file.FULL, "test")
  names = {grid.run_name(r_, s, c) + ".json" for c, r_, s in grid.points(d)}
  assert names == {f for c in grid.CORPORA for f in os.listdir(os.path.join(COMMITTED, c)) if f.endswith(".json")}
  size = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(COMMITTED) for f in fs)
  assert size < 2_000_000


def _copy(tmp_path):
  dst = tmp_path / "records"
  shutil.copytree(COMMITTED, dst)
  return dst, sorted((dst / "pystdlib").glob("*.json"))[0]


def _of_another_code(tmp_path):
  dst, path = _copy(tmp_path)
  rec = json.loads(path.read_text())
  rec["fingerprint"] = "0" * 16
  rec["digest"] = records._digest(rec)
  path.write_text(json.dumps(rec))
  return dst


def test_records_of_another_code_are_refused(tmp_path):
  r = _report(_of_another_code(tmp_path), tmp_path / "out")
  assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
  assert "2 fingerprints" in r.stderr and "0000000000000000 (1 records)" in r.stderr
  assert not (tmp_path / "out" / "results.md").exists()


@pytest.mark.integration  # the whole report, as a subprocess
def test_records_of_another_code_are_accepted_when_asked(tmp_path):
  r = _report(_of_another_code(tmp_path), tmp_path / "out", "--accept_fingerprints")
  assert r.returncode == 0 and "0000000000000000 (1 records)" in r.stdout


@pytest.mark.parametrize("damage", ["truncated", "edited"])
def test_a_damaged_record_is_refused_by_name(tmp_path, damage):
  dst, path = _copy(tmp_path)
  text = path.read_text()
  if damage == "truncated":
    path.write_text(text[: len(text) // 2])
  else:
    rec = json.loads(text)
    rec["final_eval_loss"] = (rec["final_eval_loss"] or 3.0) - 0.5
    path.write_text(json.dumps(rec))
  r = _report(dst, tmp_path / "out")
  assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
  assert path.name in r.stderr and ("truncated" if damage == "truncated" else "edited") in r.stderr


def test_finished_runs_get_records_and_are_not_run_again(tmp_path, monkeypatch):
  from test_results import _fake_run
  d = grid.design(sweep_file.FULL, "test")
  (c, r, s), (c2, r2, s2), (c3, r3, s3), (c4, r4, s4) = grid.points(d)[:4]
  _fake_run(tmp_path / "runs", r, s, 3.0, cos=[0.9, 0.8], corpus=c)
  _fake_run(tmp_path / "runs", r2, s2, None, status="running", corpus=c2)
  _fake_run(tmp_path / "runs", r3, s3, None, status="diverged", corpus=c3)  # an outcome: recorded
  _fake_run(tmp_path / "runs", r4, s4, 3.0, status="preempted", corpus=c4)  # to be resumed: not recorded
  recs = str(tmp_path / "records")
  assert records.record_finished(str(tmp_path / "runs"), recs, V4.runs(d, recs), "f" * 16) == 2  # the running one waits
  assert records.read(paths.record_path(recs, c3, grid.run_name(r3, s3, c3)))["status"] == "diverged"
  assert not os.path.exists(paths.record_path(recs, c4, grid.run_name(r4, s4, c4)))
  rec = records.read(paths.record_path(recs, c, grid.run_name(r, s, c)))
  assert rec["recipe"] == list(r) and rec["seed"] == s and rec["final_eval_loss"] == 3.0
  assert rec["diags"][0]["sublayers"][0]["cos_next_median"] == 0.9 and rec["fingerprint"] == "f" * 16
  assert records.record_finished(str(tmp_path / "runs"), recs, V4.runs(d, recs), "f" * 16) == 0  # written once
  monkeypatch.setenv(paths.RECORDS_ENV, recs)
  added = []
  grid.add_points(lambda **kw: added.append(kw["name"]), d)
  assert grid.run_name(r, s, c) not in added and len(added) == len(grid.points(d)) - 2


def test_a_record_reads_the_same_numbers_as_its_run(tmp_path):
  """A run whose evals score the full set and the subset differently, and its record: Runs reads the same loss from
  both at every fraction, on either set (the subset's loss included, which the regime compares), and the same
  diagnostics rows."""
  from resnorm.results.v4 import runs
  from test_runs import EVALS, R100, design, write_run
  corpus = "shakespeare"
  path = write_run(tmp_path / "runs", R100, 0, corpus=corpus)
  recs = tmp_path / "records"
  d = design()
  from_runs, from_recs = runs.Runs(str(tmp_path / "runs"), d, corpus), runs.Runs("", d, corpus, str(recs))
  records.write(from_recs.record_path(grid.run_name(R100, 0, corpus)),
                records.from_workdir(path, R100, corpus, 0, "f" * 16))
  for frac in (0.25, 0.5, 0.75, 1.0):
    for subset in (False, True):
      with from_runs.at(frac, subset), from_recs.at(frac, subset):
        want = from_runs.loss(R100, 0)
        assert from_recs.loss(R100, 0) == want, (frac, subset)
        assert from_recs.last(R100, 0) == from_runs.last(R100, 0), frac
  with from_recs.at(1.0, subset=True):
    assert from_recs.loss(R100, 0) == EVALS[100][1]  # the subset's, which differs from the full set's here
  assert from_recs.run(R100, 0)["first"] == from_runs.run(R100, 0)["first"]


def test_fingerprint_follows_the_code_that_decides_a_run(tmp_path):
  for p in ("resnorm/model", "resnorm/results", "configs"):
    shutil.copytree(os.path.join(ROOT, p), tmp_path / p, ignore=shutil.ignore_patterns("__pycache__"))
  fp = records.fingerprint(str(tmp_path))
  with open(tmp_path / "resnorm" / "results" / "claims.py", "a") as f:
    f.write("# the report's code does not decide a run's numbers\n")
  assert records.fingerprint(str(tmp_path)) == fp
  with open(tmp_path / "resnorm" / "model" / "norms.py", "a") as f:
    f.write("# the model's does\n")
  assert records.fingerprint(str(tmp_path)) != fp


@pytest.mark.integration  # the whole report from the records, as a subprocess
def test_parts_without_their_runs_read_pending(tmp_path):
  """A partial grid: the parts that read a run whose record is missing say `pending` (no test enters the correction
  for them), the others are judged; the missing run is listed."""
  dst, _ = _copy(tmp_path)
  d = grid.design(sweep_file.FULL, "test")
  r = grid.ref_long(d, "post_norm", max(d["depths"]))
  gone = grid.run_name(r, 0, "pystdlib")
  os.remove(dst / "pystdlib" / f"{gone}.json")
  out = tmp_path / "out"
  res = _report(dst, out)
  assert res.returncode == 0, res.stderr[-2000:]
  text = (out / "results.md").read_text()
  c4 = next(l for l in text.splitlines() if l.startswith("| [C4]"))
  assert c4.split("|")[3].strip().startswith("**pending**") and not c4.split("|")[4].strip().startswith("**pending")
  assert f"`{gone}` (no record yet: pending)" in text


def _misnamed(dst, case):
  """A record copied over another's name: (the file now misnamed, what its name says)."""
  py, sh = dst / "pystdlib", dst / "shakespeare"
  if case == "seed":
    src, to = py / "hc-2l-lr0.01-wu2-4st-s0.json", py / "hc-2l-lr0.01-wu2-4st-s1.json"
  elif case == "recipe":
    src, to = py / "hc-2l-lr0.01-wu2-4st-s0.json", py / "mhc-2l-lr0.01-wu2-4st-s0.json"
  elif case == "corpus":
    src, to = py / "hc-2l-lr0.01-wu2-4st-s0.json", sh / "hc-2l-lr0.01-wu2-4st-shakespeare-s0.json"
  else:  # an init record
    src, to = py / "init" / "post_norm-1l-s0.json", py / "init" / "post_norm-1l-s1.json"
  assert src.exists() and to.exists(), (src, to)
  shutil.copyfile(src, to)
  return to


@pytest.mark.parametrize("case", ["seed", pytest.param("recipe", marks=pytest.mark.integration), pytest.param("corpus", marks=pytest.mark.integration),
                                  "init"])
def test_a_record_under_another_runs_name_is_refused(tmp_path, case):
  """Seed 0's record copied over seed 1's name (the audit's case: it counted seed 0 twice), over another variant's,
  into the other corpus, or an init record over another seed's: one line naming the file and the field, exit 2,
  nothing written."""
  dst, _ = _copy(tmp_path)
  to = _misnamed(dst, case)
  r = _report(dst, tmp_path / "out")
  assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
  assert to.name in r.stderr and "is not the record its name says" in r.stderr
  want = {"seed": "seed 0", "recipe": "recipe", "corpus": "corpus 'pystdlib'", "init": "seed 0"}[case]
  assert want in r.stderr
  assert not (tmp_path / "out").exists()


def test_one_record_under_two_names_is_refused():
  """The same digest read under two paths (a copy whose identity fields still match its name) is refused."""
  records.check_unique({"a": {"x.json"}, "b": {"y.json"}})
  with pytest.raises(records.InputError, match="the same record under two names"):
    records.check_unique({"a": {"x.json", "y.json"}})


@pytest.mark.parametrize("where", ["missing", pytest.param("empty", marks=pytest.mark.integration), "not this design"])
def test_no_records_is_refused_and_the_default_report_is_kept(tmp_path, where):
  """A mistyped, empty or foreign --records with the default --out=docs: one line, exit 2, and the docs/results.md
  already there is left as it was (run from a directory whose docs/ is a stand-in)."""
  recs = tmp_path / "recs"
  if where == "empty":
    recs.mkdir()
  elif where == "not this design":
    (recs / "pystdlib").mkdir(parents=True)
    (recs / "pystdlib" / "other.json").write_text("{}")
  (tmp_path / "docs").mkdir()
  page = tmp_path / "docs" / "results.md"
  page.write_text("the report\n")
  env = {**ENV, paths.SIZE_ENV: "test"}
  r = subprocess.run([sys.executable, "-m", "resnorm.results", "--from_records", f"--records={recs}"], cwd=tmp_path,
                     env=env, capture_output=True, text=True, timeout=600)
  assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
  assert str(recs) in r.stderr and "Traceback" not in r.stderr
  assert {"missing": "is not a directory", "empty": "holds no run record",
          "not this design": "holds no record of report v4's runs"}[where] in r.stderr
  assert page.read_text() == "the report\n" and sorted(os.listdir(tmp_path / "docs")) == ["results.md"]
