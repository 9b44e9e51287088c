"""The learning-rate transfer study (resnorm/results/transfer/), but for its statistics (test_transfer_stats.py)
and its grid (test_transfer_grid.py): its design (design.py): final, within its budget, every arm registered and
every refusal the registry's; the page (page.py) rebuilt from committed test-size records alone, and docs/transfer.md
equal to its rebuild from the repository's records but for the Generated line; a damaged record refused in one line;
in the integration suite the test-size grid runs end to end."""
import json
import os
import re
import shutil
import subprocess
import sys
import types

import numpy as np
import pytest

from resnorm.core.errors import InputError
from resnorm.model import residual
from resnorm.results import records
from resnorm.results.engine import ledger as lg
from resnorm.results.engine import paths
from resnorm.results.transfer import design as D
from resnorm.results.transfer import fit, grid, page, study
from test_cli import ENV, ROOT
from test_docs import README_BYTES, README_LINES

COMMITTED = os.path.join(ROOT, "tests", "data", "records_transfer_test")


def _results(*args, size="test", timeout=900):
  return subprocess.run([sys.executable, "-m", "resnorm.results", "--report=transfer", *args], cwd=ROOT,
                        env={**ENV, paths.SIZE_ENV: size}, capture_output=True, text=True, timeout=timeout)


# --- design.py ------------------------------------------------------------------------------------------------------


def test_the_design_is_final_within_budget_and_names_real_arms_and_refusals():
  assert D.STATUS == "final"
  assert D.budget_s() <= D.ALLOWED_S * (1 - D.MARGIN) and D.ALLOWED_S <= 2.5 * D.BUDGET_S
  for arm in set(D.DEPTH_ARMS) | set(D.WIDTH_ARMS):
    assert arm in residual.REGISTRY and arm in D.STEP_MS
  for arm in D.DEPTH_ARMS:
    for p in D.DEPTH_PARAMS:
      assert ((arm, p) in D.REFUSED) == (p in residual.get(arm).refuses), (arm, p)
  assert len(set(D.DEPTH_ARMS) - {"keel"}) >= 8 and D.DEPTHS == (12, 24, 48, 96) and D.WIDTHS[-1] >= 4 * D.WIDTHS[0]
  assert D.BASE_POINTS >= 6


def test_the_power_table_widens_as_seeds_fall_and_centers_follow_the_pilot():
  h3, n3 = D.power(3)
  h6, n6 = D.power(6)
  assert h3 > h6 > 0 and n3 > n6 > D.EFFECT
  assert D.center("completep", 96, D.WIDTH) == D.center("standard", 12, D.WIDTH) == round(D.PILOT_K[12])
  assert D.center("standard", 96, D.WIDTH) == round(D.PILOT_K[96])
  assert study.law_shift(grid.design("full")) == pytest.approx(-9.0)


# --- the page -------------------------------------------------------------------------------------------------------


def _without_generated(text):
  return [l for l in text.splitlines() if not l.startswith("Generated ")]


def test_the_page_rebuilds_from_committed_records_alone(tmp_path):
  """The page and its figures from the test-size records alone (that a rebuild is the same page: the committed-page
  test below, on the repository's records)."""
  r = _results("--from_records", f"--records={COMMITTED}", f"--out={tmp_path}")
  assert r.returncode == 0, r.stderr[-2000:]
  assert (tmp_path / "figures" / "transfer" / "transfer_depth.png").stat().st_size > 5_000
  page = (tmp_path / "transfer.md").read_text()
  assert "## Depth: the shift from 12 to 96 layers" in page and "| `pre_norm` | `completep` |" in page
  assert "### Coordinate checks" in page  # the hand-written checks appended


def test_each_panel_frames_its_own_curves(committed):
  """Every panel spans page.SPAN from its own lowest loss: a placement stalled far above the others is still drawn."""
  d, _, stats, _ = committed
  for arm, param, axis in study.axes(d):
    cells = page.panel_cells(d, stats, arm, param, axis)
    assert [c.cell.layers if axis == "depth" else c.cell.width for c in cells] == \
        list(d["depths"] if axis == "depth" else d["widths"])
    lo, hi = page.ylim(cells)
    assert hi - lo == pytest.approx(page.SPAN + 0.02)
    assert lo < min(np.nanmin(cs.losses) for cs in cells) < hi
  high = [c._replace(losses=c.losses + 5.0) for c in cells]
  assert page.ylim(high)[0] == pytest.approx(lo + 5.0)


@pytest.fixture(scope="module")
def committed():
  """The test-size records' study, cells and shifts, computed once (the bootstrap refits every cell)."""
  d = grid.design("test")
  S = study.Study(d, COMMITTED)
  stats = S.cells()
  return d, S, stats, S.shifts(stats)


def test_the_tables_are_the_statistics_of_the_records(committed):
  d, S, stats, shifts = committed
  for s in shifts:
    assert s.value == pytest.approx(s.top.opt.k - s.base.opt.k)
    if s.verdict not in ("pending", "failed (edge)"):
      assert s.verdict == fit.verdict(fit.hull(s.boot, s.t), D.EFFECT)
  cs = stats[grid.Cell("pre_norm", "completep", d["depths"][0], d["width"])]
  assert np.array_equal(cs.losses, stats[grid.Cell("pre_norm", "standard", d["depths"][0], d["width"])].losses)
  mean = cs.losses.mean(axis=1)
  assert cs.opt == fit.optimum(cs.ks, mean, cs.failed.any(axis=1))


def test_a_damaged_record_stops_the_page_in_one_line(tmp_path):
  recs = tmp_path / "recs"
  shutil.copytree(COMMITTED, recs)
  path = next(p for p in sorted((recs / "pystdlib").iterdir()))
  rec = json.loads(path.read_text())
  rec["final_eval_loss"] = 1.0
  path.write_text(json.dumps(rec))
  r = _results("--from_records", f"--records={recs}", f"--out={tmp_path / 'out'}")
  assert r.returncode == 2 and "edited or damaged" in r.stderr and "Traceback" not in r.stderr
  assert not (tmp_path / "out" / "transfer.md").exists()


def test_a_record_outside_the_grid_is_checked_listed_and_counted_in_the_cost_but_read_by_no_statistic(tmp_path):
  recs = tmp_path / "recs"
  shutil.copytree(COMMITTED, recs)
  d = grid.design("test")
  src = next(p for p in sorted((recs / "pystdlib").iterdir()))
  p, s = grid.parse_name(src.name[:-len(".json")])
  src_learned = json.loads(src.read_text())["learned_beyond_unigram"]
  far = p._replace(k=p.k + 40)
  rec = json.loads(src.read_text())
  rec["recipe"] = list(far)
  spans = [(r["timing"]["started_at"], r["timing"]["finished_at"]) for r in study.Study(d, COMMITTED).recs.values()]
  first, last = min(a for a, _ in spans), max(b for _, b in spans)
  rec["timing"] = {**rec["timing"], "started_at": first, "finished_at": last}  # beside every other run
  rec["digest"] = records._digest(rec)  # noqa: SLF001
  (recs / "pystdlib" / f"{grid.run_name(far, s)}.json").write_text(json.dumps(rec))
  flagless = recs / "pystdlib" / src.name  # a grid record without the stalled flag counts as not stalled
  r0 = json.loads(flagless.read_text())
  r0["learned_beyond_unigram"] = None
  r0["digest"] = records._digest(r0)  # noqa: SLF001
  flagless.write_text(json.dumps(r0))
  S = study.Study(d, str(recs))
  base = study.Study(d, COMMITTED)
  assert list(S.outside) == [(far, s)] and S.recs.keys() == base.recs.keys() and S.total == base.total
  text = "\n".join(page.header(d, S))
  stalled = sum(r["learned_beyond_unigram"] is False for r in base.recs.values()) - (src_learned is False)
  assert f"{len(S.recs)} of {S.total} finished (0 diverged, {stalled} stalled), and 1 records outside the grid" in text
  assert f"`{far.arm}`/`{far.param}` {far.layers} layers width {far.width}: k {far.k} (seed {s})" in text
  hours = (lg.run_seconds(list(base.recs.values())) + last - first) / 3600
  assert f"{hours:.2f} run-hours" in text and f"{(last - first) / 3600:.2f} h of wall time with a run going" in text
  moved = far._replace(k=far.k + 1)  # a record renamed to another run's name: refused like any record
  (recs / "pystdlib" / f"{grid.run_name(far, s)}.json").rename(recs / "pystdlib" / f"{grid.run_name(moved, s)}.json")
  with pytest.raises(InputError, match="is not the record its name says"):
    study.Study(d, str(recs))
  rec["final_eval_loss"] = 1.0  # damaged: refused like any record
  (recs / "pystdlib" / f"{grid.run_name(moved, s)}.json").unlink()
  (recs / "pystdlib" / f"{grid.run_name(far, s)}.json").write_text(json.dumps(rec))
  with pytest.raises(InputError, match="edited or damaged"):
    study.Study(d, str(recs))


def test_records_name_one_design(tmp_path):
  recs = tmp_path / "recs"
  shutil.copytree(COMMITTED, recs)
  path = next(p for p in sorted((recs / "pystdlib").iterdir()))
  rec = json.loads(path.read_text())
  rec["design_sha256"] = "0" * 16
  rec["digest"] = records._digest(rec)  # noqa: SLF001
  path.write_text(json.dumps(rec))
  r = _results("--from_records", f"--records={recs}", f"--out={tmp_path / 'out'}")
  assert r.returncode == 2 and "2 designs" in r.stderr


@pytest.mark.integration  # the test-size grid through resnorm.sweep: real runs, records, growth, the page
def test_the_test_grid_runs_records_grows_and_reports(tmp_path):
  r = _results(f"--root={tmp_path / 'runs'}", f"--records={tmp_path / 'recs'}", f"--out={tmp_path / 'out'}",
               "--jobs=2", timeout=1800)
  assert r.returncode == 0, r.stderr[-3000:]
  d = grid.design("test")
  S = study.Study(d, str(tmp_path / "recs"))
  assert len(S.recs) == S.total and S.designs.keys() == {records_design_sha()}
  assert all(rec["recipe"][1] in ("standard", "completep", "mup") for rec in S.recs.values())
  assert (tmp_path / "out" / "transfer.md").exists()


def records_design_sha():
  from resnorm.results.transfer import spec as transfer
  return transfer.design_identity()["design_sha256"]


def test_the_repositorys_records_name_this_design():
  """The design is fixed before the first record: every committed record names the design file's bytes as they are
  (an edit to the design after the grid started fails here)."""
  from resnorm.results.transfer import spec as transfer
  recs = os.path.join(ROOT, grid.DEFAULT_RECORDS, D.CORPUS)
  names = sorted(os.listdir(recs)) if os.path.isdir(recs) else []
  want = transfer.design_identity()
  for n in names:
    rec = json.load(open(os.path.join(recs, n)))
    assert (rec["design"], rec["design_sha256"]) == (want["design"], want["design_sha256"]), n


# every verdict in the rule's order, spelled here rather than read from page.py
_VERDICTS = ("transfers", "does not transfer", "undecided", "failed (edge)", "pending")


def _check_findings(d, shifts):
  """Each placement a finding names is under its verdict in the shifts table, with its shift and hull as the table
  has them; only the pending are counted, and every shift is named or counted once."""
  lines = page.findings(d, shifts)
  assert len(lines) == len(d["depth_params"]) + len(d["width_params"])
  for line, (axis, param) in zip(lines, [("depth", p) for p in d["depth_params"]] +
                                 [("width", p) for p in d["width_params"]]):
    span = (f"{d['depths'][0]} to {d['depths'][-1]} layers" if axis == "depth"
            else f"width {d['widths'][0]} to {d['widths'][-1]}")
    assert line.startswith(f"- `{param}`, {span}: "), line
    rows = [s for s in shifts if s.axis == axis and s.param == param]
    body = line.split(": ", 1)[1].rstrip(".")
    checked = 0
    for part in body.split("; "):
      verdict, _, listed = part.partition(": ")
      for arm, value, lo, hi, which in re.findall(
          r"`(\w+)` ([-+][\d.]+) \[([-+][\d.]+), ([-+][\d.]+)\](?: \(stalled: (\w+)\))?", listed):
        s = next(r for r in rows if r.arm == arm)
        assert s.verdict == verdict and f"{s.value:+.1f}" == value and s.stalled == which
        assert (f"{s.hull[0]:+.1f}", f"{s.hull[1]:+.1f}") == (lo, hi)
        checked += 1
      unbounded = r"`(\w+)` ([-+][\d.]+) unbounded \(t \[([-+][\d.]+), ([-+][\d.]+)\]\)"
      for arm, value, lo, hi in re.findall(unbounded, listed):
        s = next(r for r in rows if r.arm == arm)
        assert s.verdict == verdict and f"{s.value:+.1f}" == value and not np.isfinite(s.hull).all()
        assert (f"{s.t[0]:+.1f}", f"{s.t[1]:+.1f}") == (lo, hi)
        checked += 1
    named = len(re.findall(r"`\w+` [-+]", line))
    assert checked == named, line
    counted = sum(int(n) for n in re.findall(r"(\d+) (?:undecided|failed|pending)", line))
    assert named + counted == len(rows), line
    assert counted == sum(s.verdict == "pending" for s in rows), line
    assert not re.search(r"\d+ (?:undecided|failed)", line), line
    heads = re.findall(r"(transfers|does not transfer|undecided|failed \(edge\)): ", line)
    assert heads == sorted(heads, key=_VERDICTS.index), line


def _check_readme(d, shifts):
  """Each placement the README lists is its verdict under its parametrization with the table's hull; the rest of
  its axis counted."""
  labels = (f"- {d['depths'][0]} -> {d['depths'][-1]} layers: ", f"- width x{d['widths'][-1] // d['widths'][0]}: ")
  for line, axis, label in zip(page.readme_lines(d, shifts), ("depth", "width"), labels, strict=True):
    assert line.startswith(label), (label, line)
    rows = [s for s in shifts if s.axis == axis]
    named = 0
    for verdict, param, listed in re.findall(r"(transfers|does not transfer) under `(\w+)`: ([^;]+)", line):
      for arm, lo, hi in re.findall(r"(\w+) \[([-+][\d.]+), ([-+][\d.]+)\]", listed):
        s = next(r for r in rows if (r.arm, r.param) == (arm, param))
        assert s.verdict == verdict and (f"{s.hull[0]:+.1f}", f"{s.hull[1]:+.1f}") == (lo, hi) and not s.stalled
        named += 1
    counted = sum(int(n) for n in re.findall(r"(\d+) (?:on a stalled cell|undecided|failed \(edge\)|pending)", line))
    assert named + counted == len(rows), line
    for v in _VERDICTS[2:]:
      n = sum(s.verdict == v and not s.stalled for s in rows)
      assert (f" {n} {v}" in line) == bool(n), (v, line)
    assert f"{sum(bool(s.stalled) for s in rows)} on a stalled cell" in line or not any(s.stalled for s in rows)


_CELL = types.SimpleNamespace(stalled=False)
_BLANK = study.Shift(*[None] * len(study.Shift._fields))._replace(base=_CELL, top=_CELL)


def test_the_findings_and_the_readme_lines_quote_the_tables(committed):
  """On the test records, and on the full design with every verdict in every parametrization."""
  d, _, _, shifts = committed
  _check_findings(d, shifts)
  _check_readme(d, shifts)
  full = grid.design("full")
  stalled = types.SimpleNamespace(stalled=True)
  mixed = [_BLANK._replace(arm=a, param=p, axis=ax, value=0.1 * i, t=(0.1 * i - 2, 0.1 * i + 2),
                           hull={2: (np.nan, 0.1 * i), 12: (-np.inf, 0.1 * i)}.get(i % 20, (0.1 * i - 1, 0.1 * i + 1)),
                           verdict=_VERDICTS[i % len(_VERDICTS)], top=stalled if i % 7 == 3 else _CELL)
           for i, (a, p, ax) in enumerate(study.axes(full))]
  assert any(s.stalled and s.verdict == "transfers" for s in mixed)
  # an undefined hull, and one unbounded at one end only: either is quoted by its t interval
  assert any(np.isnan(s.hull[0]) for s in mixed) and any(np.isneginf(s.hull[0]) for s in mixed)
  _check_findings(full, mixed)
  _check_readme(full, mixed)


def test_the_tables_mark_a_stalled_cell_and_which_cell_of_a_shift_stalled(committed):
  _, _, stats, shifts = committed
  cs = next(c for c in stats.values() if c.complete)
  assert "stalled" not in page.opt_cell(cs._replace(stalled=False))
  assert page.opt_cell(cs._replace(stalled=True)).endswith(" stalled")
  s = next(x for x in shifts if x.axis == "depth")
  learned = s._replace(top=s.top._replace(stalled=False), base=s.base._replace(stalled=False))
  assert "stalled" not in page.shift_rows([learned], "depth")[-1]
  top = learned._replace(top=s.top._replace(stalled=True))
  assert f"**{s.verdict}** (stalled: top) |" in page.shift_rows([top], "depth")[-1]


def test_the_readme_lines_fit_the_readme_with_every_cell_listed():
  full = grid.design("full")
  worst = [_BLANK._replace(arm=a, param=p, axis=ax, hull=(-10.55, -10.05), verdict="does not transfer")
           for a, p, ax in study.axes(full)]
  readme = page.FINDINGS.splice(open(os.path.join(ROOT, "README.md")).read(), page.readme_lines(full, worst))
  assert len(readme.encode()) <= README_BYTES and len(readme.splitlines()) <= README_LINES


def test_the_committed_page_is_the_rebuild_from_the_repositorys_records(tmp_path):
  """docs/transfer.md equals what `--from_records` builds from results/transfer/ (but for its Generated line): a
  record committed without the page rebuilt, or a page edited by hand, fails here."""
  if not os.path.isdir(os.path.join(ROOT, grid.DEFAULT_RECORDS)):
    pytest.skip("no transfer records in this checkout")
  r = _results("--from_records", f"--out={tmp_path}", size="full")
  assert r.returncode == 0, r.stderr[-2000:]
  want = open(os.path.join(ROOT, "docs", "transfer.md")).read()
  assert _without_generated((tmp_path / "transfer.md").read_text()) == _without_generated(want)


def test_the_waves_run_what_the_records_lack_and_stop_when_none_is_missing(tmp_path):
  """The spec's runs are the grid's missing runs: every base point of the lowest seed for an empty records
  directory, and none once every point the records grow has a record (the engine's wave loop then ends, exit 0)."""
  from resnorm.results.registry import REGISTRY
  spec, d = REGISTRY["transfer"], grid.design("test")
  assert [(p, s, name) for _, p, s, name in spec.runs(d, str(tmp_path))] == \
      [(p, s, grid.run_name(p, s)) for p, s in grid.missing(d, str(tmp_path))] != []
  assert {s for _, _, s, _ in spec.runs(d, str(tmp_path))} == {0}
  assert spec.runs(d, COMMITTED) == [] and grid.points(d, COMMITTED)


def test_a_t_interval_reading_a_seeds_edge_bound_says_so(committed):
  d, _, _, shifts = committed
  s = next(x for x in shifts if x.axis == "depth" and x.verdict != "pending")
  plain = [o._replace(flag="") for o in s.top.seed_opts]
  clean = s._replace(top=s.top._replace(seed_opts=plain), base=s.base._replace(seed_opts=plain))
  assert "(edge:" not in page.shift_rows([clean], "depth")[-1]
  one = clean._replace(top=clean.top._replace(seed_opts=[plain[0]._replace(flag="edge"), *plain[1:]]))
  both = one._replace(base=one.top)  # a seed on its edge at both ends is one seed
  for x in (one, both):
    assert f"{page.iv(x.t)} (edge: 1 seed) | **{x.verdict}**" in page.shift_rows([x], "depth")[-1]
  every = clean._replace(top=clean.top._replace(seed_opts=[o._replace(flag="edge") for o in plain]))
  assert f"(edge: {len(plain)} seeds) |" in page.shift_rows([every], "depth")[-1]
  assert "1/27 of them expected at 3 seeds" in page.edge_paragraph({**d, "seeds": 3})  # seeds^seeds one-seed draws
