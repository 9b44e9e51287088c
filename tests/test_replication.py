"""resnorm/results/v4/replication.py: replication across the corpora as its own test. The interaction pairs the corpora
by seed (a seed gives identical initial weights on both), its p-values form a second Benjamini-Hochberg family, and
"replicated" / "did not replicate" come from the interaction's interval alone, never from the two corpora's
significance."""
import numpy as np
import pytest
from scipy import stats as st

from resnorm.results import verdicts
from resnorm.results.v4 import replication as rp


class _D:
  def __init__(self, effect):
    self.effect = effect


def _part(label, x, effect=0.05, sign=1):
  return {"label": label, "x": dict(enumerate(x)), "sign": sign, "design": _D(effect)}


def _report(pairs):
  """pairs: [(x on corpus a, x on corpus b, effect)] -> by_corpus of one claim with one part per pair."""
  a = [{"id": "C9", "parts": [_part(chr(97 + i), xa, e) for i, (xa, _, e) in enumerate(pairs)]}]
  b = [{"id": "C9", "parts": [_part(chr(97 + i), xb, e) for i, (_, xb, e) in enumerate(pairs)]}]
  return {"pystdlib": a, "shakespeare": b}


def test_the_interaction_is_paired_by_seed():
  """Seed-level noise shared by the corpora cancels in the paired difference: the paired test is scipy's
  ttest_rel, and its interval is far narrower than Welch's on the same numbers."""
  rng = np.random.default_rng(0)
  shared = rng.normal(0, 1.0, 5)
  xa, xb = list(0.30 + shared + rng.normal(0, 0.01, 5)), list(0.10 + shared + rng.normal(0, 0.01, 5))
  rep = rp.judge(_report([(xa, xb, 0.05)]))
  r = rep["rows"][0]
  assert r["test"]["p"] == pytest.approx(st.ttest_rel(xa, xb).pvalue)
  assert r["test"]["mean"] == pytest.approx(np.mean(xa) - np.mean(xb))
  welch = st.ttest_ind(xa, xb, equal_var=False).confidence_interval(0.95)
  assert r["ci"][1] - r["ci"][0] < (welch.high - welch.low) / 10
  assert r["verdict"] in (rp.DID_NOT_REPLICATE, rp.SAME_SIGN) and not r["within"]
  # only the seeds with a value on both corpora are paired
  pa, pb = _part("a", xa), _part("a", xb[:3])
  assert rp.paired(pa, pb) == pytest.approx([x - y for x, y in zip(xa[:3], xb[:3])])
  # by seed, not by position: seed 1 missing on one corpus pairs seed 2 with seed 2
  pb = {**pb, "x": {s: xb[s] for s in (0, 2, 4)}}
  assert rp.paired(pa, pb) == pytest.approx([xa[s] - xb[s] for s in (0, 2, 4)])


@pytest.mark.parametrize("ci, selected, want", [
    ((0.10, 0.30), True, (rp.DID_NOT_REPLICATE, False)),
    ((-0.30, -0.10), True, (rp.DID_NOT_REPLICATE, False)),
    ((0.001, 0.02), True, (rp.DID_NOT_REPLICATE, True)),   # the corpora differ, by less than the effect of interest
    ((-0.02, 0.03), False, (rp.REPLICATED, False)),        # within +-delta: an effect of the claim's size excluded
    ((-0.02, 0.30), False, (rp.UNDECIDED, False)),
    ((0.10, 0.30), False, (rp.UNDECIDED, False)),         # not selected by the family's correction
])
def test_replication_rule(ci, selected, want):
  assert rp.classify(ci, 0.05, selected) == want
  same = rp.classify(ci, 0.05, selected, same_sign=True)  # the same interval where the sign holds on both corpora
  assert same == ((rp.SAME_SIGN, want[1]) if want[0] == rp.DID_NOT_REPLICATE else want)


def test_a_difference_in_size_is_not_a_failure_to_replicate():
  """Both corpora positive, one twice the other (the interaction excludes 0): same sign, different size. Only a sign
  that flips is 'did not replicate'."""
  rng = np.random.default_rng(2)
  noise = rng.normal(0, 0.005, (2, 5))
  for xb_mean, want in ((0.1, rp.SAME_SIGN), (-0.1, rp.DID_NOT_REPLICATE)):
    xa, xb = list(0.2 + noise[0]), list(xb_mean + noise[1])
    assert rp.judge(_report([(xa, xb, 0.05)]))["rows"][0]["verdict"] == want


def test_significance_on_one_corpus_only_is_not_a_failure_to_replicate():
  """C6c's pattern: a clear effect on one corpus, the same sign but noisier on the other. The two corpora's own
  verdicts differ, yet the interaction test decides nothing, and the report says undecided."""
  xa = [0.18, 0.20, 0.16]
  xb = [0.26, -0.02, 0.00]
  parts = [{"test": verdicts.t_test(x), "design": _D(0.02)} for x in (xa, xb)]
  verdicts.finalize(parts)
  assert parts[0]["verdict"] == verdicts.REPRODUCED and parts[1]["verdict"] != verdicts.REPRODUCED
  r = rp.judge(_report([(xa, xb, 0.02)]))["rows"][0]
  assert r["verdict"] == rp.UNDECIDED


def test_interactions_are_one_family_with_its_own_correction():
  """BH over the interactions only: the adjusted p-values are BH's over this family, its FCR level counts its own
  calls, and a part that counts failures (no per-seed pairing) has no test."""
  rng = np.random.default_rng(1)
  pairs = [(list(rng.normal(0, 0.1, 4) + d), list(rng.normal(0, 0.1, 4)), 0.05) for d in (0.0, 0.0, 1.0, 0.02)]
  by_corpus = _report(pairs)
  disc = {"label": "z", "x": {}, "sign": 1, "discordant": (3, 0), "design": _D(0.25)}
  for c in by_corpus.values():
    c[0]["parts"].append(dict(disc))
  rep = rp.judge(by_corpus)
  tested = [r for r in rep["rows"] if r["test"] is not None]
  assert rep["m"] == len(tested) == 4 and rep["rows"][-1]["verdict"] == rp.NO_TEST
  want = verdicts.bh([st.ttest_rel(a, b).pvalue for a, b, _ in pairs])
  assert [r["p_adj"] for r in tested] == pytest.approx(want)
  assert rep["calls"] == sum(p < 0.05 for p in want)
  assert rep["level"] == pytest.approx(1 - max(rep["calls"], 1) * 0.05 / 4)
  assert rep["rows"][2]["verdict"] == (rp.SAME_SIGN if np.mean(pairs[2][1]) > 0 else rp.DID_NOT_REPLICATE)
  lines = rp.table(rep, lambda p: "x")
  assert "second family" in lines[2] and "| C9z |" in lines[-1] and "no per-seed pairing" in lines[-1]


def test_one_corpus_has_no_replication_section():
  rep = rp.judge({"pystdlib": [{"id": "C1", "parts": []}]})
  assert rep["rows"] == [] and rp.table(rep, str) == []
