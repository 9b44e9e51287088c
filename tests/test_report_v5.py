"""resnorm/results/v5/grid.py and specs/v5.py: the grid names every run once with a valid config; points with a
record are left out of the sweep; the page rebuilds from committed records alone (real test-size runs), the same
twice but for the line that says when; a damaged record stops it in one line; and, in the integration suite, the
test-size grid runs, records each run and reports end to end."""
import os
import subprocess
import sys

import pytest

from resnorm.config import configlib
from resnorm.results.engine import paths
from resnorm.results.v5 import claims as c5
from resnorm.results.v5 import design as v5
from resnorm.results.v5 import grid as grid_v5
from test_cli import ENV, ROOT

COMMITTED = os.path.join(ROOT, "tests", "data", "records_v5_test")


def _results(*args, size="test", timeout=600):
  return subprocess.run([sys.executable, "-m", "resnorm.results", "--report=v5", *args], cwd=ROOT,
                        env={**ENV, paths.SIZE_ENV: size}, capture_output=True, text=True, timeout=timeout)


def test_the_grid_names_every_run_once_and_each_config_is_the_designs():
  d = grid_v5.design("full")
  pts = grid_v5.points(d)
  names = [grid_v5.run_name(p, s, c) for c, p, s in pts]
  assert len(pts) == len(v5.ARMS) * len(v5.LADDER_D) * v5.SEEDS * len(v5.CORPORA) == len(set(names))
  assert [s for _, _, s in pts] == sorted(s for _, _, s in pts)  # seed-major: a stopped grid leaves whole seeds
  for c, p, s in pts[:len(v5.ARMS) * len(v5.LADDER_D)]:
    cfg = c5._config(p, grid_v5.overrides(d, p, s, c))  # noqa: SLF001
    configlib.validate(cfg)
    m = cfg.model
    assert (m.residual, m.num_layers, m.d_model, m.mlp_dim, m.d_model // m.num_heads) == \
        (p.arm, v5.DEPTH, p.d, 4 * p.d, v5.HEAD_DIM)
    assert (cfg.train.steps, cfg.train.lr, cfg.train.batch_size, cfg.data.seq_len) == \
        (v5.steps(p.d), v5.LR, v5.BATCH, v5.SEQ)
    assert cfg.train.eval_every == cfg.train.steps and m.laurel.rank == v5.laurel_rank(p.d)
    assert bool(cfg.train.diag_every) == (p.d == max(v5.LADDER_D) and p.arm in ("pre_norm", "attn_res"))


def test_points_with_a_record_are_left_out_of_the_sweep(tmp_path):
  d = grid_v5.design("test")
  c, p, s = grid_v5.points(d)[3]
  path = paths.record_path(str(tmp_path), c, grid_v5.run_name(p, s, c))
  os.makedirs(os.path.dirname(path))
  open(path, "w").write("{}")
  added = []
  grid_v5.add_points(lambda **kw: added.append(kw["name"]), d, str(tmp_path))
  assert len(added) == len(grid_v5.points(d)) - 1 and grid_v5.run_name(p, s, c) not in added


def test_the_page_rebuilds_from_committed_records_alone(tmp_path):
  """The command's page, and the engine's again in this process: the same but for the Generated line."""
  out = tmp_path / "out0"
  r = _results("--from_records", f"--records={COMMITTED}", f"--out={out}")
  assert r.returncode == 0, r.stderr[-2000:]
  assert (out / "figures" / "v5_loss_compute.png").stat().st_size > 10_000
  pages = [(out / "results_v5.md").read_text(), _page(grid_v5.design("test"), COMMITTED, tmp_path / "out1")]
  a, b = (p.split("\n", 3) for p in pages)
  assert a[2].startswith("Generated ") and a[3] == b[3]
  assert "Runs: 16 of 16 finished" in a[3] and "| C11a | attn_res_block |" in a[3] and "pending" in a[3]
  assert not (tmp_path / "runs").exists()


def test_a_damaged_record_stops_the_page_in_one_line(tmp_path):
  import shutil
  recs = tmp_path / "records"
  shutil.copytree(COMMITTED, recs)
  victim = recs / "pystdlib" / "attn_res-d8-3st-s1.json"
  victim.write_text(victim.read_text().replace('"seed":1', '"seed":0'))
  r = _results("--from_records", f"--records={recs}", f"--out={tmp_path / 'out'}")
  assert r.returncode == 2 and "attn_res-d8-3st-s1.json" in r.stderr and "Traceback" not in r.stderr
  assert not (tmp_path / "out" / "results_v5.md").exists()


@pytest.mark.integration  # the ledger's check is test_engine's; v4's command refuses the same in test_records
def test_records_of_other_code_are_refused_unless_accepted(tmp_path):
  import json
  import shutil
  from resnorm.results import records
  recs = tmp_path / "records"
  shutil.copytree(COMMITTED, recs)
  path = recs / "pystdlib" / "pre_norm-d16-4st-s1.json"
  rec = json.loads(path.read_text())
  rec["fingerprint"] = "0" * 16
  rec["digest"] = records._digest(rec)  # noqa: SLF001
  records.write(str(path), rec)
  r = _results("--from_records", f"--records={recs}", f"--out={tmp_path / 'out'}")
  assert r.returncode == 2 and "2 fingerprints" in r.stderr and not (tmp_path / "out" / "results_v5.md").exists()
  r = _results("--from_records", f"--records={recs}", f"--out={tmp_path / 'out'}", "--accept_fingerprints")
  assert r.returncode == 0 and "`0000000000000000`" in (tmp_path / "out" / "results_v5.md").read_text()


@pytest.mark.parametrize("args, size, says", [
    (["--quick"], "full", "report v5 has no --quick or --scale=tpu design"),
    (["--from_records", "--records=/nonexistent/v5"], "full", "is not a directory"),
    (["--from_records"], "quick", "report v5 has sizes full and test, not 'quick'"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, size, says):
  r = _results(*args, f"--out={tmp_path}", size=size, timeout=120)
  assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr[-1500:]
  assert not list(tmp_path.iterdir())


@pytest.mark.integration  # 16 real runs through resnorm.sweep, then the page
def test_the_test_grid_runs_records_and_reports(tmp_path):
  recs, out = tmp_path / "records", tmp_path / "out"
  r = _results(f"--records={recs}", f"--root={tmp_path / 'runs'}", "--jobs=2", f"--out={out}", timeout=900)
  assert r.returncode == 0, r.stderr[-2000:]
  assert len(list((recs / "pystdlib").glob("*.json"))) == len(grid_v5.points(grid_v5.design("test")))
  first = (out / "results_v5.md").read_text().split("\n", 3)[3]
  r = _results("--from_records", f"--records={recs}", f"--out={out}")
  assert r.returncode == 0 and (out / "results_v5.md").read_text().split("\n", 3)[3] == first


@pytest.mark.integration  # both full reports from the repository's records (~25 s); the page at test size stays
def test_from_records_alone_rebuilds_both_reports_from_the_repositorys_records(tmp_path):
  r = subprocess.run([sys.executable, "-m", "resnorm.results", "--from_records", f"--out={tmp_path}"], cwd=ROOT,
                     env=ENV, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-2000:]
  v5_page = (tmp_path / "results_v5.md").read_text()
  assert (tmp_path / "results.md").exists() and "| C11a | attn_res_block |" in v5_page
  assert f"from the run records in `{grid_v5.DEFAULT_RECORDS}`" in v5_page.replace("From", "from")


def _page(d, recs, out, readme=None) -> str:
  """Report v5's page as the engine writes it from the records in recs (and the README's block, where given)."""
  from resnorm.results.engine import driver
  from resnorm.results.engine.spec import Plan
  from resnorm.results.v5 import spec
  return open(driver.write(spec.SPEC, Plan(d, recs, str(out), "", str(readme) if readme else None), False, 0.0)).read()


def _tree(root):
  """Every file under root (a file: itself) with its bytes."""
  if os.path.isfile(root):
    return {"": open(root, "rb").read()}
  return {os.path.relpath(os.path.join(d, f), root): open(os.path.join(d, f), "rb").read()
          for d, _, files in os.walk(root) for f in files}


def test_the_readme_given_gets_the_pages_findings_between_its_markers(tmp_path):
  """The engine puts the page's own findings lines between the README's v5 markers, the rest as it was."""
  from resnorm.results.v5 import page as md
  readme = tmp_path / "README.md"
  readme.write_text(f"a\n{md.BEGIN}\nold\n{md.END}\nb\n")
  page = _page(grid_v5.design("test"), COMMITTED, tmp_path / "out", readme)
  found = page.split("## Findings\n\n", 1)[1].rstrip("\n")
  assert found.startswith("- **attn_res_block**")
  assert readme.read_text() == f"a\n{md.BEGIN}\n{found}\n{md.END}\nb\n"


def test_from_records_with_the_readmes_v5_markers_removed_writes_nothing(tmp_path):
  """`python -m resnorm.results --from_records` (both reports, into docs/, the README's findings too) in a copy of
  this checkout whose README lost its v5 markers: exit 2 with the one line, and docs/ and the README as they were:
  report v5's check of the README runs before report v4 writes its page, and before v5 writes its own."""
  import shutil
  from resnorm.results.v5 import page as md
  copy = tmp_path / "checkout"
  for name in ("resnorm", "configs", "docs", "results", "README.md", "pyproject.toml"):
    (shutil.copytree if os.path.isdir(os.path.join(ROOT, name)) else shutil.copy)(os.path.join(ROOT, name),
                                                                                   copy / name)
  readme = copy / "README.md"
  readme.write_text(readme.read_text().replace(md.BEGIN, "").replace(md.END, ""))
  before = {"docs": _tree(copy / "docs"), "README.md": _tree(readme)}
  r = subprocess.run([sys.executable, "-m", "resnorm.results", "--from_records"], cwd=copy,
                     env={**ENV, "PYTHONPATH": str(copy)}, capture_output=True, text=True, timeout=600)
  assert r.returncode == 2 and r.stderr.startswith("error: README.md has no v5 findings block"), r.stderr[-2000:]
  assert len(r.stderr.splitlines()) == 1, r.stderr[-2000:]
  assert {"docs": _tree(copy / "docs"), "README.md": _tree(readme)} == before


def test_the_header_counts_diverged_and_stalled_runs_apart(tmp_path):
  from resnorm.results import records
  d = grid_v5.design("full")
  recs = tmp_path / "records"
  for (arm, status, learned, loss) in (("pre_norm", "completed", True, 3.0), ("hc", "diverged", None, None),
                                       ("mhc", "completed", False, 3.4)):
    p = grid_v5.Point(arm, 24, d["steps"][24])
    rec = {"schema": records.SCHEMA, "kind": "run", "recipe": list(p), "corpus": "pystdlib", "seed": 0,
           "status": status, "final_eval_loss": loss, "learned_beyond_unigram": learned, "diags": [],
           "fingerprint": "f" * 16, "provenance": {"git_commit": "0" * 40}, "timing": {}}
    rec["digest"] = records._digest(rec)  # noqa: SLF001
    records.write(paths.record_path(str(recs), "pystdlib", grid_v5.run_name(p, 0, "pystdlib")), rec)
  page = _page(d, str(recs), tmp_path / "out")
  assert "Runs: 3 of 360 finished (1 diverged, 1 learned nothing beyond byte frequencies)" in page


def test_the_recorder_watches_the_runs_by_their_record_names():
  """The spec's runs are named as the grid's records are: every committed test-size record is one of them, in
  its corpus, and every run has one (the recorder writes each finished run's record under that name)."""
  from resnorm.results.registry import REGISTRY
  runs = REGISTRY["v5"].runs(grid_v5.design("test"), COMMITTED)
  on_disk = {(c, n[:-5]) for c in os.listdir(COMMITTED) for n in os.listdir(os.path.join(COMMITTED, c))}
  assert {(c, name) for c, _, _, name in runs} == on_disk and len(runs) == len(on_disk)
