"""The learning-rate transfer study (docs/transfer.md): its spec (spec.py), its design (design.py, fixed before the
first record; every record names its sha256), its grid of runs (grid.py; sweep configs/sweeps/transfer.py), the
optimum and shift statistics (fit.py, study.py), and the page built from the records (page.py)."""
