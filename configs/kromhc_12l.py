"""kromhc, 12 layers. """
from configs import base

get_config = base.experiment("kromhc", 12)
