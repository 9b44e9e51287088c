"""The report engine: one driver for every report (resnorm/results/registry.py). A report is a spec (spec.Spec) that
declares its design, its grid, how its records are read and its page; the engine runs the grid through
resnorm.sweep with a recorder, reads and checks the records (ledger.Ledger), and writes the page, its figures and
its README block (readme.Block) whole, or nothing. Nothing here knows a report by name."""
