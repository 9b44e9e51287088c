"""Residual / normalization-placement variants, one registry (see `base.py` for the interface).

Importing this package registers every variant; `get(name)` returns one.
"""
from resnorm.model.residual import (admin, attn_res, classic, ddl, denseformer, frac, hybrid_norm, hyper,  # noqa: F401
                                    keel, kromhc, laurel, mhc, mhc_lite, mudd, ngpt, resi_dual,  # (registration)
                                    resid_lambdas, value_residual)
from resnorm.model.residual.base import REGISTRY, Variant, get, sublayer_classes, unit_normalize  # noqa: F401
