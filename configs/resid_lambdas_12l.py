"""resid_lambdas (the speedrun residual scalars, nanochat preset), 12 layers. """
from configs import base

get_config = base.experiment("resid_lambdas", 12)
