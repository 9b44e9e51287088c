"""mhc, 24 layers. """
from configs import base

get_config = base.experiment("mhc", 24)
