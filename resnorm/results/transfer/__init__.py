"""The learning-rate transfer study (docs/transfer.md): its design (design.py, fixed before the first record), its
grid of runs (grid.py), the optimum and shift statistics (fit.py), and the page built from the records (page.py)."""
