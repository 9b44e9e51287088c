"""Residual / normalization-placement variants, one registry (see `base.py` for the interface).

Importing this package registers every variant; `get(name)` returns one.
"""
from resnorm.residual import classic, hyper, mhc  # noqa: F401  (registration)
from resnorm.residual.base import REGISTRY, Variant, get  # noqa: F401
