"""Every report resnorm builds, each a spec of the engine (resnorm/results/engine/) in a package of its own
(v4/, v5/, transfer/): REGISTRY, in the order `--report=all` builds them; the first is the default report."""
from resnorm.results.transfer import spec as transfer
from resnorm.results.v4 import spec as v4
from resnorm.results.v5 import spec as v5

REGISTRY = {s.name: s for s in (v4.SPEC, v5.SPEC, transfer.SPEC)}
