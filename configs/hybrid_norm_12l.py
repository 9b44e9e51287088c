"""hybrid_norm, 12 layers. """
from configs import base

get_config = base.experiment("hybrid_norm", 12)
