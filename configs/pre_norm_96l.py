"""pre_norm, 96 layers. """
from configs import base

get_config = base.experiment("pre_norm", 96)
