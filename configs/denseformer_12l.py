"""denseformer, 12 layers. """
from configs import base

get_config = base.experiment("denseformer", 12)
