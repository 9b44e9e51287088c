"""laurel: LAuReL (arXiv 2411.07501), Eq. 6 on every Pre-Norm sublayer: learned softmax weights on the two paths
(RW), a rank-16 term on the residual (LR), and the inputs of the two sublayers before (PA), 12 layers."""
from configs import base

get_config = base.experiment("laurel", 12)
