"""attn_res: Full Attention Residuals (arXiv 2603.15031): each sublayer's input a softmax over the
embedding and every earlier sublayer's output, 12 layers."""
from configs import base

get_config = base.experiment("attn_res", 12)
