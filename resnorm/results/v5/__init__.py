"""Report v5 (docs/results_v5.md): the 2026 depth-aggregation claims C11-C17 and compute multipliers. Its spec
(spec.py), its design (design.py, final before its first record), its grid (grid.py; sweep configs/sweeps/v5.py),
its statistics (claims.py, compute_equiv.py) and its page, figure and README findings (page.py)."""
