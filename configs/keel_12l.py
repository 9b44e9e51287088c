"""keel, 12 layers. Keel (arXiv 2601.19895) trains without warmup tricks: the :cpu default."""
from configs import base

get_config = base.experiment("keel", 12)
