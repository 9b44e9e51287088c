"""Report v4's init-time and gain claims (resnorm/results/v4/claims.py: C1, C2, C10) on hand-made init diagnostics and
runs with known answers."""
import json
import math
import os

import pytest

from resnorm.results.v4 import claims as cl
from resnorm.results.v4 import grid
from test_results import _fake_run, judged, sweep_file


def _diag_run(root, r, seed, first, last):
  """A completed run whose diagnostics.jsonl holds `first` (step 0) and `last` (at each eval) sublayer rows."""
  _fake_run(root, r, seed, 3.0)
  with open(os.path.join(root, grid.run_name(r, seed), "diagnostics.jsonl"), "w") as f:
    f.write(json.dumps({"step": 0, "sublayers": first}) + "\n" + "".join(
        json.dumps({"step": k * r.steps // 4, "sublayers": last}) + "\n" for k in range(1, 5)))


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
    # C1a: Post-Norm's grad norm at the last MLP is 4^e times the first MLP's (rows[1], not the first attention's
    # 7 k); log ratio e * log 4
    _init_file(R, "post_norm", top, s, [{"grad_norm": g, "act_rms": 1.0}
                                         for g in (7.0 * k, k, 2.0 ** e * k, 4.0 ** e * k)][:2 * top])
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
  want = cl.REPRODUCED if holds else cl.OPPOSITE
  log = math.log
  expect = {
      "C1": [e * log(4), -e / 2, 0.2 if holds else 0.2 - 1.0],
      "C2": [e * log(3), e * log(2)],
      "C10": [log(1.2) if holds else -log(1.44), log(1.1) - log(1.05) if holds else log(1.1) - log(1.25)],
  }
  for cid, fn in (("C1", cl.c1), ("C2", cl.c2), ("C10", cl.c10)):
    parts = judged(fn(R, d))
    for p, x in zip(parts, expect[cid]):
      assert p["values"] == pytest.approx({s: x for s in d["seeds"]}), (cid, p["label"], p["values"])
      assert p["verdict"] == want, (cid, p["label"], p["values"])
    assert len(parts) == len(expect[cid])
