"""post_norm, 96 layers. Post-Norm needs a long warmup (Xiong et al. 2020: 4000 steps)."""
from configs import base

get_config = base.experiment("post_norm", 96, cpu_warmup=50, tpu_warmup=4000)
