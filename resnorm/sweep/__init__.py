"""Sweeps: one train.py per point, run here, as a SLURM array or on a multi-host TPU slice; the preflight that
checks every point first; the status table. `python -m resnorm.sweep`.
Imports core, config, io, data and scale: a sweep runs train.py as a process, never the loop in-process."""
