"""resi_dual, 12 layers. """
from configs import base

get_config = base.experiment("resi_dual", 12)
