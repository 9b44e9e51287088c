"""pre_norm, 48 layers. """
from configs import base

get_config = base.experiment("pre_norm", 48)
