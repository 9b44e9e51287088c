"""frac_hc (Frac-Connections, m = 4 fractions), 12 layers."""
from configs import base

get_config = base.experiment("frac_hc", 12)
