"""The TPU compiler on a machine without a TPU: a slice's topology from libtpu, for the memory plan.

libtpu (the `[tpu]` extra) carries XLA:TPU. `jax.experimental.topologies.get_topology_desc` describes a slice's
devices from its topology name alone, and jit lowers and compiles for those devices with no TPU attached: the
compiled step's `memory_analysis()` is the TPU compiler's own buffer assignment (MaxText's train_compile.py works
the same way). libtpu wants to know which accelerator it is for ($TPU_ACCELERATOR_TYPE, $TPU_WORKER_HOSTNAMES);
`child_env` sets them for a re-executed child only, so they never reach a real TPU run, and `is_noise` names the
lines libtpu prints on a machine without a TPU, which the parent keeps off the terminal.

Topologies are Cloud TPU's standard slice shapes: v4 and v5p are 3D tori of megacore chips (one JAX device per
chip, 2 TensorCores; hosts of 2x2x1 chips); v5e and v6e are 2D (one TensorCore per chip; 8-chip single-host
slices up to 2x4, hosts of 2x2 chips beyond). Several slices (`2xv5e-256`) add `num_slices`.
"""
import dataclasses
import importlib.metadata
import importlib.util
import math
import re

from resnorm.core.errors import InputError

GENERATIONS = {  # generation -> (dims, chip config, GCE accelerator-type prefix)
    "v4": (3, "megacore", "v4"), "v5p": (3, "megacore", "v5p"),
    "v5e": (2, "default", "v5litepod"), "v6e": (2, "default", "v6e")}
# libtpu on a machine without a TPU (seen with libtpu 0.0.50.1 when its environment is missing): what the parent
# filters from the child's stderr. Anything else, an error included, reaches the terminal.
_NOISE = (r"could not determine TPU (accelerator type|worker hostnames)", r"Logging before InitGoogle\(\)",
          r"unexpected worker hostname", r"Failed to find host bounds for accelerator type",
          r"^=== Source Location Trace: ===\s*$", r"^learning/\S+\.cc:\d+\s*$",
          r"^WARNING: All log messages before absl::InitializeLog")
NOISE_RE = re.compile("|".join(f"(?:{p})" for p in _NOISE))


@dataclasses.dataclass(frozen=True)
class Topology:
  generation: str
  chips: int                     # per slice
  shape: tuple                   # chips along each axis
  chips_per_host: tuple          # a host's chips along each axis (3 numbers)
  num_slices: int = 1

  @property
  def name(self) -> str:
    return f"{self.generation}:{'x'.join(map(str, self.shape))}"

  @property
  def chip_config(self) -> str:
    return GENERATIONS[self.generation][1]

  @property
  def accelerator_type(self) -> str:
    """The slice as GCE names it (TensorCores for v4 and v5p, chips for v5e and v6e)."""
    cores = self.chips * (2 if GENERATIONS[self.generation][1] == "megacore" else 1)
    return f"{GENERATIONS[self.generation][2]}-{cores}"

  @property
  def hosts(self) -> int:
    return self.num_slices * self.chips // math.prod(self.chips_per_host)

  @property
  def devices(self) -> int:
    return self.num_slices * self.chips

  def describe(self) -> str:
    slices = f"{self.num_slices} slices of " if self.num_slices > 1 else ""
    return (f"{slices}{self.name} ({self.chip_config}, {self.chips} chips, "
            f"{self.hosts // self.num_slices} host{'s' if self.hosts // self.num_slices > 1 else ''})")


def libtpu_version() -> str | None:
  """The installed libtpu's version, or None (without importing it: that starts its runtime)."""
  if importlib.util.find_spec("libtpu") is None:
    return None
  try:
    return importlib.metadata.version("libtpu")
  except importlib.metadata.PackageNotFoundError:
    return "unknown version"


def _shape(chips: int, dims: int) -> tuple | None:
  """The standard slice shape: from the smallest (1 chip, or 2x2[x1]), double the smallest axis, the last of equals."""
  if dims == 2 and chips == 1:
    return (1, 1)
  shape = [2, 2] + [1] * (dims - 2)
  while math.prod(shape) < chips:
    i = max(j for j in range(dims) if shape[j] == min(shape))
    shape[i] *= 2
  return tuple(shape) if math.prod(shape) == chips else None


def topology(generation: str, chips: int, num_slices: int = 1) -> Topology:
  if generation not in GENERATIONS:
    raise InputError(f"no TPU topology for generation {generation!r}; known: {', '.join(GENERATIONS)}")
  dims = GENERATIONS[generation][0]
  shape = _shape(chips, dims)
  if shape is None:
    raise InputError(f"{generation} with {chips} chips is not a standard slice shape (1 chip on v5e/v6e, else 4 "
                     "chips or a power of 2 above): the TPU compiler has no topology for it")
  if dims == 3:
    host = (2, 2, 1)
  elif chips <= 8:
    host = (*shape, 1)          # single-host slices: v5litepod-1, -4, -8
  else:
    host = (2, 2, 1)
  return Topology(generation, chips, shape, host, num_slices)


def child_env(topo: Topology) -> dict:
  """What libtpu reads to compile for this slice without it, set only in the dry run's own child."""
  # ALLOW_MULTIPLE_LIBTPU_LOAD: no /tmp/libtpu_lockfile, which would refuse a second dry run (a parallel test, a
  # memory table) while one holds it; nothing here owns a TPU
  return {"TPU_ACCELERATOR_TYPE": topo.accelerator_type, "TPU_WORKER_HOSTNAMES": "localhost",
          "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
          "TPU_SKIP_MDS_QUERY": "1", "TPU_STDERR_LOG_LEVEL": "3", "TPU_MIN_LOG_LEVEL": "3",
          "TF_CPP_MIN_LOG_LEVEL": "3", "GRPC_VERBOSITY": "ERROR"}


def devices(topo: Topology) -> list:
  """The slice's JAX devices, described by the TPU compiler (nothing runs on them: lower and compile only)."""
  from jax.experimental import topologies
  kwargs = {"chips_per_host_bounds": topo.chips_per_host}
  if topo.num_slices > 1:
    kwargs["num_slices"] = topo.num_slices
  try:
    desc = topologies.get_topology_desc(topology_name=topo.name, platform="tpu", chip_config_name=topo.chip_config,
                                        **kwargs)
  except Exception as e:  # libtpu's errors are RuntimeError / XlaRuntimeError with a multi-line status
    raise InputError(f"libtpu could not describe {topo.describe()}: {str(e).strip().splitlines()[0]}") from None
  devs = list(desc.devices)
  if len(devs) != topo.devices:
    raise InputError(f"libtpu describes {len(devs)} devices for {topo.describe()}; expected {topo.devices}")
  return devs


def is_noise(line: str) -> bool:
  return bool(NOISE_RE.search(line))
