"""value_residual: value residual learning (ResFormer, arXiv 2410.17897): Pre-Norm, each attention layer after the
first mixes its values with the first layer's, V_n <- lambda_n V_1 + (1 - lambda_n) V_n, lambda_n learned (init
1/2, modded-nanogpt's form), 12 layers."""
from configs import base

get_config = base.experiment("value_residual", 12)
