"""pre_norm, 24 layers. """
from configs import base

get_config = base.experiment("pre_norm", 24)
