"""mhc_lite, 12 layers. """
from configs import base

get_config = base.experiment("mhc_lite", 12)
