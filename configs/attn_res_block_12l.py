"""attn_res_block: Block Attention Residuals (arXiv 2603.15031): each sublayer's input a softmax over block
summaries (model.attn_res.num_blocks = 8 blocks of 3 sublayers), 12 layers."""
from configs import base

get_config = base.experiment("attn_res_block", 12)
