"""Residual / normalization-placement variants, one registry (see `base.py` for the interface).

Importing this package registers every variant; `get(name)` returns one.
"""
from resnorm.model.residual import (admin, attn_res, classic, ddl, delta_attn_res, denseformer, frac,  # noqa: F401
                                    hybrid_norm, hyper, keel, kromhc, laurel, mhc, mhc_lite, mudd, ngpt,  # (registration)
                                    resi_dual, resid_lambdas, value_residual)
from resnorm.model.residual.base import REGISTRY, Variant, get, sublayer_classes, unit_normalize  # noqa: F401
