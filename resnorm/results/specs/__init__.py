"""Every report resnorm builds, each a spec of the engine (resnorm/results/engine/): REGISTRY, in the order
`--report=all` builds them; the first is the default report."""
from resnorm.results.specs import transfer, v4, v5

REGISTRY = {s.name: s for s in (v4.SPEC, v5.SPEC, transfer.SPEC)}
