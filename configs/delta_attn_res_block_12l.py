"""delta_attn_res_block (Delta Attention Residuals, Delta Block), 12 layers. """
from configs import base

get_config = base.experiment("delta_attn_res_block", 12)
