"""Report v4 (docs/results.md): the claims C1-C10 of the source articles on two corpora. Its spec (spec.py), its
design (design.py, fixed before its grid), its grid (grid.py; sweep configs/sweeps/results.py), its statistics
(claims.py, parts.py, runs.py, replication.py), its page, figures and README findings (page.py, figs.py,
findings.py) and the --scale=tpu budget (tpu_budget.py)."""
