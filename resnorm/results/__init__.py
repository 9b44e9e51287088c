"""The reports: the results report's design (grid, claims), statistics (verdicts), reading of runs, pages and figures,
the --scale=tpu budget, and the sweep table of eval.py --sweep. `python -m resnorm.results`.
Imports any group but train and bench: the report reads runs, it never imports the training loop."""
