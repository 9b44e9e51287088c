"""resnorm/results/engine/: one driver for every report. The README block's splice and its refusal; the ledger's
checks and the records' own cost; which reports a command names; where a plan reads records and whether it writes
the README; the waves of a grid that grows with its records; the README's markers checked before anything is
written; a failed run still leaves a page and the sweep's exit code; a new report is a spec and nothing else (a toy
spec, registered here, runs through the unchanged engine); and no engine code knows a report by name."""
import ast
import os
import types

import pytest

from resnorm.core.errors import InputError
from resnorm.results import records
from resnorm.results.engine import driver, ledger as lg
from resnorm.results.engine import paths
from resnorm.results.engine.readme import Block
from resnorm.results.engine.spec import Built, Plan, Spec
from resnorm.results.registry import REGISTRY
from resnorm.results.v5 import grid as grid_v5
from test_cli import ROOT

COMMITTED_V5 = os.path.join(ROOT, "tests", "data", "records_v5_test")
B = Block("<!-- b -->", "<!-- /b -->", "toy findings")


class Flags(types.SimpleNamespace):
  """absl's FLAGS as the driver reads them, with no --slurm.* flags given and --report present where set."""
  __iter__ = lambda self: iter(())

  def __getitem__(self, name):
    return types.SimpleNamespace(present=name == "report" and self.report is not None, value=getattr(self, name))


def flags(**kw):
  base = dict(quick=False, scale="cpu", records=None, from_records=True, root=None, jobs=2, launcher="local",
              out=None, accept_fingerprints=False, page=True, report=None)
  return Flags(**{**base, **kw})


def _tree(root):
  """Every file under root with its bytes."""
  return {os.path.relpath(os.path.join(d, f), root): open(os.path.join(d, f), "rb").read()
          for d, _, files in os.walk(root) for f in files}


def test_a_block_is_spliced_whole_and_a_readme_without_its_markers_is_refused_in_one_line():
  text = f"a\n{B.begin}\nold\n{B.end}\nb"
  assert B.splice(text, ["new", "two"]) == f"a\n{B.begin}\nnew\ntwo\n{B.end}\nb"
  assert B.lines(B.splice(text, ["x"])) == ["x"] and B.lines("none") == []
  # a marker edited away, or the two out of order (the start's loss once read as offset -1)
  for broken in (f"a\n{B.begin}\nold\nb", f"a\nold\n{B.end}\nb", f"a\n{B.end}\n{B.begin}\nb"):
    with pytest.raises(InputError) as e:
      B.splice(broken, ["x"])
    assert str(e.value).startswith("README.md has no toy findings block") and "\n" not in str(e.value)


def _rec(tmp_path, name, digest="d", fp="f", design=None, kind="run"):
  path = str(tmp_path / name)
  return path, {"digest": digest, "fingerprint": fp, "kind": kind, **({"design_sha256": design} if design else {})}


def test_the_ledger_refuses_one_record_under_two_names_two_fingerprints_two_designs_or_none(tmp_path):
  L = lg.Ledger(str(tmp_path))
  with pytest.raises(InputError, match="holds no record of the toy's runs"):
    L.check(False, "the toy's runs")
  L.add("a", *_rec(tmp_path, "a.json", "d1", design="x"))
  L.add(None, *_rec(tmp_path, "i.json", "d0", kind="init"))  # an init record names no design
  L.check(False, "the toy's runs")
  assert L.recs.keys() == {"a"} and L.designs.keys() == {"x"}
  L.add("b", *_rec(tmp_path, "b.json", "d2", design="y"))
  with pytest.raises(InputError, match="name 2 designs"):
    L.check(False, "the toy's runs")
  L = lg.Ledger(str(tmp_path))
  L.add("a", *_rec(tmp_path, "a.json", "d1", fp="f1"))
  L.add("b", *_rec(tmp_path, "b.json", "d2", fp="f2"))
  with pytest.raises(InputError, match="2 fingerprints"):
    L.check(False, "the toy's runs")
  L.check(True, "the toy's runs")  # accepted: listed, not refused
  L.add("c", *_rec(tmp_path, "c.json", "d1"))
  with pytest.raises(InputError, match="same record under two names"):
    L.check(True, "the toy's runs")


def test_the_cost_is_the_records_own_run_time_and_the_wall_time_with_a_run_going():
  rec = lambda start, secs: {"timing": {"started_at": start, "finished_at": start + secs}}
  recs = [rec(100.0, 10), rec(105.0, 20), rec(1000.0, 5), {"timing": {}}]
  assert lg.run_seconds(recs) == 10 + 20 + 5
  # two runs overlapping over [100, 125], then a pause of the grid with no run going, then [1000, 1005]
  assert lg.active_seconds(recs) == 25 + 5
  assert lg.active_seconds([rec(0.0, 100), rec(10.0, 5)]) == 100  # a run inside another adds nothing
  assert lg.active_seconds([rec(0.0, 100), rec(10.0, 5), rec(50.0, 10)]) == 100  # nor one after it, inside


def test_which_reports_a_command_names():
  first = next(iter(REGISTRY.values()))
  assert driver.select(REGISTRY, None, False, False) == [first]
  assert driver.select(REGISTRY, None, False, True) == [first] == driver.select(REGISTRY, None, True, True)
  # all: every report whose records the repository holds, in the registry's order
  assert driver.select(REGISTRY, None, True, False) == [s for s in REGISTRY.values() if s.has_records()]
  assert driver.select(REGISTRY, "v5", True, True) == [REGISTRY["v5"]]
  with pytest.raises(InputError, match="names one report's records"):
    driver.select(REGISTRY, "all", True, True)
  with pytest.raises(InputError, match="one of v4, v5, transfer or all"):
    driver.select(REGISTRY, "v6", True, False)


def test_a_plan_reads_the_records_named_and_writes_the_readme_only_from_this_checkouts_docs(tmp_path, monkeypatch):
  spec = REGISTRY["v5"]
  monkeypatch.setenv(paths.SIZE_ENV, "full")
  docs = os.path.join(ROOT, "docs")
  p = driver.plan(spec, flags(out=docs), records_given=False)
  assert (p.records, p.readme) == (os.path.join(ROOT, grid_v5.DEFAULT_RECORDS), os.path.join(ROOT, "README.md"))
  p = driver.plan(spec, flags(out=str(tmp_path), records=COMMITTED_V5), records_given=True)
  assert (p.records, p.readme, p.out) == (COMMITTED_V5, None, str(tmp_path))
  monkeypatch.setenv(paths.SIZE_ENV, "test")  # not the committed design: no records of its own, never docs/
  with pytest.raises(InputError, match="--from_records needs --records"):
    driver.plan(spec, flags(out=str(tmp_path)), records_given=False)
  with pytest.raises(InputError, match="docs/ holds the full CPU design's report"):
    driver.plan(spec, flags(out=docs, records=COMMITTED_V5), records_given=True)
  with pytest.raises(InputError, match="no --quick"):
    driver.plan(spec, flags(quick=True), records_given=False)


class Toy(Spec):
  """A new report declared in a test: records <corpus>/<name>.json of runs named by the grid, a one-line page."""
  name, title, page, records, runs_root, sweep, blocks = "toy", "the toy report", "toy.md", "nowhere", "runs/toy", \
      "configs/sweeps/smoke.py", (B,)
  waves = True

  def __init__(self, waves=()):
    self.waves_left = list(waves)

  def design(self, flags):
    return {"size": "test"}

  def runs(self, d, records_dir):
    return self.waves_left.pop(0) if self.waves_left else []

  def read(self, plan):
    L = lg.Ledger(plan.records)
    for n in sorted(os.listdir(plan.records)):
      L.read(n, os.path.join(plan.records, n), {"kind": "run"})
    return L, sorted(L.recs)

  def build(self, plan, ledger, names, wall_s):
    return Built([f"# {len(names)} records: {', '.join(names)}"], {B: [f"{len(names)} records"]}, " (toy)")


def _toy_records(tmp_path, n=2):
  recs = tmp_path / "recs"
  for i in range(n):
    rec = {"schema": records.SCHEMA, "kind": "run", "fingerprint": "f", "timing": {}}
    rec["digest"] = records._digest(rec | {"i": i})  # noqa: SLF001 (distinct records)
    rec["i"] = i
    records.write(str(recs / f"r{i}.json"), {**rec, "digest": records._digest(rec)})  # noqa: SLF001
  return str(recs)


def test_a_new_report_is_a_spec_the_engine_runs_unchanged(tmp_path, capsys):
  """A toy spec: the engine reads and checks its records, writes its page whole and splices its README block."""
  readme = tmp_path / "README.md"
  readme.write_text(f"top\n{B.begin}\nold\n{B.end}\nend\n")
  p = Plan({"size": "test"}, _toy_records(tmp_path), str(tmp_path / "out"), str(tmp_path / "runs"), str(readme))
  path = driver.write(Toy(), p, False, 0.0)
  assert open(path).read() == "# 2 records: r0.json, r1.json\n"
  assert readme.read_text() == f"top\n{B.begin}\n2 records\n{B.end}\nend\n"
  assert capsys.readouterr().out.strip() == f"wrote {path} (toy)"


def test_the_readmes_markers_are_checked_before_anything_is_written(tmp_path):
  readme = tmp_path / "README.md"
  readme.write_text(f"top\n{B.begin}\nold\nend\n")  # the end marker edited away
  p = Plan({"size": "test"}, _toy_records(tmp_path), str(tmp_path / "out"), str(tmp_path / "runs"), str(readme))
  before = _tree(tmp_path)
  with pytest.raises(InputError, match="README.md has no toy findings block"):
    driver.write(Toy(), p, False, 0.0)
  assert _tree(tmp_path) == before and not (tmp_path / "out").exists()


def test_a_damaged_record_writes_nothing(tmp_path):
  recs = _toy_records(tmp_path)
  with open(os.path.join(recs, "r1.json"), "a") as f:
    f.write(" ")
  open(os.path.join(recs, "r1.json"), "w").write(open(os.path.join(recs, "r1.json")).read()[:-20])
  p = Plan({"size": "test"}, recs, str(tmp_path / "out"), str(tmp_path / "runs"), None)
  with pytest.raises(InputError, match="r1.json cannot be read"):
    driver.write(Toy(), p, False, 0.0)
  assert not (tmp_path / "out").exists()


class _Recorder:
  """records.Recorder's stand-in: each wave writes what the test says."""
  written_by_wave: list = []

  def __init__(self, root, records_dir, runs, fp, extra=None):
    self.written = _Recorder.written_by_wave.pop(0)

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    return False


@pytest.mark.parametrize("waves, written, rcs, launcher, want, sweeps", [
    ([["a", "b"], ["c"]], [2, 1], [0, 0], "local", 0, 2),   # the records grow the grid once, then it is whole
    ([["a"], ["a"]], [0], [0], "local", 1, 1),              # a wave that records nothing: stop, not loop
    ([["a"], ["b"]], [1], [1], "local", 1, 1),              # a failing wave's exit code
    ([["a"], ["b"]], [0], [0], "slurm", 0, 1),              # submitted: the next wave is the next command's
    ([], [], [], "local", 0, 0),                            # nothing without a record: no sweep at all
])
def test_a_grid_that_grows_with_its_records_runs_in_waves(tmp_path, monkeypatch, waves, written, rcs, launcher,
                                                          want, sweeps):
  ran = []
  monkeypatch.setattr(driver.subprocess, "run", lambda cmd, **kw: ran.append(cmd) or
                      types.SimpleNamespace(returncode=rcs[len(ran) - 1]))
  monkeypatch.setattr(driver.records, "Recorder", _Recorder)
  monkeypatch.setattr(driver.records, "fingerprint", lambda: "f")
  _Recorder.written_by_wave = list(written)
  p = Plan({"size": "test"}, str(tmp_path), str(tmp_path / "out"), str(tmp_path / "runs"), None)
  assert driver.run_grid(Toy(waves), p, 2, launcher) == want
  assert len(ran) == sweeps


def test_a_failed_run_still_leaves_a_page_of_the_others_and_the_sweeps_exit_code(tmp_path, monkeypatch):
  monkeypatch.setenv(paths.SIZE_ENV, "test")
  monkeypatch.delenv("JAX_DISABLE_MOST_OPTIMIZATIONS", raising=False)  # main sets it: restored after
  monkeypatch.setattr(driver, "run_grid", lambda *a, **k: 1)  # one run of the sweep failed; the rest recorded
  f = flags(records=COMMITTED_V5, from_records=False, out=str(tmp_path), report="v5")
  assert driver.main(REGISTRY, f) == 1
  assert "Runs: 16 of 16 finished" in (tmp_path / "results_v5.md").read_text()
  written = []  # from here the page itself is not built again: what matters is whether it is written
  monkeypatch.setattr(driver, "write", lambda spec, p, *a: written.append(spec.name))
  monkeypatch.setattr(driver, "run_grid", lambda *a, **k: 2)  # the sweep refused its input: nothing written
  assert driver.main(REGISTRY, f) == 2 and written == []
  # submitted to SLURM, the grid's runs still queued: the page of what has finished, and exit 0
  monkeypatch.setattr(driver, "run_grid", lambda *a, **k: 1)
  assert driver.main(REGISTRY, flags(**{**vars(f), "launcher": "slurm"})) == 0 and written == ["v5"]
  assert driver.main(REGISTRY, flags(**{**vars(f), "page": False})) == 1 and written == ["v5"]  # --nopage


def test_each_report_that_is_not_its_committed_design_has_a_directory_of_its_own(monkeypatch):
  """A test-size or accelerator design: no records of its own, no README, and a default directory that no other
  report's shares (runs/report_<report>_<size>; v4's runs/report_<size or scale>); docs/ refused."""
  monkeypatch.setenv(paths.SIZE_ENV, "test")
  outs = {name: driver.plan(REGISTRY[name], flags(from_records=False), records_given=False)
          for name in ("v5", "transfer")}
  assert {n: p.out for n, p in outs.items()} == {"v5": "runs/report_v5_test", "transfer": "runs/report_transfer_test"}
  assert all(p.records is None and p.readme is None for p in outs.values())
  v4 = REGISTRY["v4"]
  tpu = {"size": "full", "scale": "tpu"}
  assert not v4.full(tpu) and v4.tag(tpu) == "tpu" and v4.full({"size": "full", "scale": "cpu"})
  monkeypatch.setenv(paths.SIZE_ENV, "full")
  p = driver.plan(v4, flags(from_records=False, scale="tpu", data_paths="c4/*.json.gz"), records_given=False)
  assert (p.out, p.records, p.readme) == ("runs/report_tpu", None, None)
  with pytest.raises(InputError, match="docs/ holds the full CPU design's report"):
    driver.plan(v4, flags(from_records=False, scale="tpu", data_paths="c4/*.json.gz", out="docs"), records_given=False)


def test_no_engine_code_knows_a_report_by_name():
  """Every report is a spec: no string of the engine's code names one (a branch on a name would need one)."""
  names = set(REGISTRY)
  engine = os.path.join(ROOT, "resnorm", "results", "engine")
  for f in os.listdir(engine):
    if f.endswith(".py"):
      tree = ast.parse(open(os.path.join(engine, f)).read())
      strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
      assert not strings & names, (f, strings & names)
