"""ddl (Deep Delta Learning), 12 layers. """
from configs import base

get_config = base.experiment("ddl", 12)
