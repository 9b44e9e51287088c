"""Residual / normalization-placement variants, one registry (see `base.py` for the interface).

Importing this package registers every variant; `get(name)` returns one.
"""
from resnorm.residual import (admin, classic, denseformer, hybrid_norm, hyper, mhc, mhc_lite, ngpt,  # noqa: F401
                              resi_dual)  # (registration)
from resnorm.residual.base import REGISTRY, Variant, get, sublayer_classes, unit_normalize  # noqa: F401
