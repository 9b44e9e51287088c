"""Sweep definitions: each module defines `sweep(add)`; run one with `python -m resnorm.sweep configs/sweeps/NAME.py`."""
