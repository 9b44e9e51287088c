"""delta_attn_res (Delta Attention Residuals), 12 layers. """
from configs import base

get_config = base.experiment("delta_attn_res", 12)
