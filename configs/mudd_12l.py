"""mudd: MUDDFormer (arXiv 2502.12170): each block's query, key, value and residual inputs are separate per-token
weightings of the embedding and every earlier block's output (multiway dynamic dense connections), 12 layers."""
from configs import base

get_config = base.experiment("mudd", 12)
