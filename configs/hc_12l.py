"""hc, 12 layers. """
from configs import base

get_config = base.experiment("hc", 12)
