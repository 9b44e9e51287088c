"""What each report decided after its last record: the rules and declarations added once its records were in,
each with its date and commit, and the part kinds (verdicts.EFFECT, SIZE, THRESHOLD) that the corrected rule reads.
A report's page lists its entries here as post hoc (the design modules, fixed before the grids, are left as they
were committed).

The kinds were declared on 2026-12-07, after both reports' records, from each part's own claim:
- v4's threshold parts state a claim that holds for any positive value of their statistic (a tolerance minus a
  distance: C1c, the slope within 0.2 of -0.5; C6c-d, non-inferior within the margin; C7a, within MARGIN of Pre-Norm;
  C10b, every gain within 10% of 1). Their effect of interest only sized the design.
- v5's multiplier parts (C11a, C14a, C15a) have the paper's own multiplier as their effect of interest: the claimed
  size, which an interval can lie above as well as below.
Every other part is `effect`: its effect of interest is the smallest effect worth reporting.
"""
from resnorm.results.verdicts import EFFECT, SIZE, THRESHOLD

KINDS = {
    "v4": {("C1", "c"): THRESHOLD, ("C6", "c"): THRESHOLD, ("C6", "d"): THRESHOLD, ("C7", "a"): THRESHOLD,
           ("C10", "b"): THRESHOLD},
    "v5": {("C11", "a"): SIZE, ("C14", "a"): SIZE, ("C15", "a"): SIZE},
}

CORRECTED_RULE = (
    "the corrected verdict rule: part kinds (a threshold part is a decided null only where its interval excludes "
    "every positive value; a size part can be *larger than claimed*), an opposite part within its effect of interest "
    "flagged, a claim whose parts disagree in sign called *mixed*, and replication's *same sign, different size* "
    "apart from a sign that flips")
RULES = {
    "v4": (("the four-outcome verdict rule (reproduced, not reproduced as a decided null, opposite, undecided)",
            "2026-12-05", "f4c9c25"),
           ("the replication test across the corpora", "2026-12-05", "45a5394"),
           ("the findings checker's reading of sentences about Post-Norm's map cells", "2026-12-07", "267016f"),
           (CORRECTED_RULE, "2026-12-07", "5bfbbe8")),
    "v5": (("C12a's statistic, the RMS of each sublayer's input (act_rms) in place of its output's, while the "
            "claim's words still say output magnitudes", "2026-12-05", "af57227"),
           (CORRECTED_RULE, "2026-12-07", "5bfbbe8")),
}


# What each report fixed before its records, and when its later rules came, as its page says them.
FIXED = {"v4": ("the design's blocks, seeds, pilot sds and effects of interest (resnorm/results/v4/design.py, commit "
                "eac5c17), before the grid", "after the last record"),
         "v5": ("resnorm/results/v5/design.py (commit 84c0ae1), before the first record", "after the first record")}


def kind(report: str, cid: str, label: str) -> str:
  """The part's kind (verdicts.EFFECT unless KINDS declares another)."""
  return KINDS[report].get((cid, label), EFFECT)


def paragraph(report: str) -> str:
  """The page's "Post hoc" paragraph: what was fixed before the records, then each rule added after them with its
  date and commit."""
  fixed, after = FIXED[report]
  return (f"**Post hoc.** Fixed: {fixed}. Added {after}, and so post hoc "
          "(resnorm/results/post_hoc.py): " + "; ".join(f"{what} ({day}, commit {sha})" for what, day, sha in
                                                      RULES[report]) + ".")
