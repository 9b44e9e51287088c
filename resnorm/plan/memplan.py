"""The memory plan of `train.py --dry_run --target=NAME`: does a config fit the accelerator it is meant for?

The run's steps (train, eval, diagnostics) are compiled for the target's devices, with the kernels the target
would use, by one of two compilers (`compiler:` in the output):
- `tpu`: for a TPU slice where libtpu is installed (the `[tpu]` extra), the TPU compiler itself, for the slice's
  real topology (resnorm.scale.tpu_compiler), in a re-executed child that alone carries libtpu's environment;
- `cpu estimate`: otherwise (GPU targets, custom `NxG`, no libtpu, or --compiler=cpu), XLA:CPU on N simulated
  devices (the dry run re-executes itself with XLA_FLAGS=--xla_force_host_platform_device_count=N).
The largest
per-device peak of XLA's buffer assignment (arguments + temporaries + outputs not aliased to donated arguments;
for eval and diagnostics plus the train state left resident) is compared with the target's memory less a
margin. When it does not fit, settings that would are compiled and named: more FSDP, a smaller per-device
micro-batch through train.grad_accum (the global batch, and so the study, unchanged), remat=full.
How far the CPU's buffer assignment can be from the TPU compiler's is in docs/scaling.md (Memory plan).
"""
import copy
import dataclasses
import os
import re
import subprocess
import sys
import threading

from resnorm.scale import tpu_compiler
from resnorm.core.errors import InputError

GiB = 2**30
CHILD_ENV = "RESNORM_DRY_RUN_DEVICES"  # set in the re-executed dry run: the device count it must find
COMPILERS = ("auto", "tpu", "cpu")      # --compiler: auto is the TPU compiler for a TPU slice where libtpu is
MARGIN = 0.10  # of the usable memory, kept free for the estimate's error and the runtime's own buffers
GPU_MEM_FRACTION = 0.75  # JAX's default XLA_PYTHON_CLIENT_MEM_FRACTION: what XLA may allocate of a GPU


@dataclasses.dataclass(frozen=True)
class Target:
  name: str
  platform: str        # tpu | gpu | any (a custom target)
  devices: int         # JAX devices (TPU chips: v4 and v5p count 2 TensorCores per chip as one device)
  memory_gib: float    # per device
  what: str = ""
  generation: str = ""  # TPU: v4 | v5p | v5e | v6e
  num_slices: int = 1   # TPU: slices joined by the data-center network (multi-slice)

  @property
  def topology(self) -> "tpu_compiler.Topology | None":
    if self.platform != "tpu":
      return None
    return tpu_compiler.topology(self.generation, self.devices // self.num_slices, self.num_slices)

  @property
  def usable_gib(self) -> float:
    """What XLA may allocate: the HBM on TPU; on GPU, JAX's preallocated fraction of it."""
    if self.platform != "gpu":
      return self.memory_gib
    return self.memory_gib * float(os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION", GPU_MEM_FRACTION))


# JAX devices and memory per device. TPU slice names count TensorCores on v4 / v5p (2 per chip, one JAX device)
# and chips on v5e / v6e; all four 8-slices below are one host. GPU memory is what CUDA reports as total.
TARGETS = {t.name: t for t in (
    Target("v4-8", "tpu", 4, 32.0, "TPU v4, 4 chips of 32 GiB HBM2", "v4"),
    Target("v5e-8", "tpu", 8, 16.0, "TPU v5e (v5litepod-8), 8 chips of 16 GiB HBM2e", "v5e"),
    Target("v5p-8", "tpu", 4, 95.0, "TPU v5p, 4 chips of 95 GiB HBM2e", "v5p"),
    Target("v6e-8", "tpu", 8, 32.0, "TPU v6e (Trillium), 8 chips of 32 GiB HBM", "v6e"),
    Target("h100", "gpu", 1, 79.6, "one NVIDIA H100 SXM 80GB (CUDA reports 79.6 GiB)"),
    Target("h100x8", "gpu", 8, 79.6, "8 NVIDIA H100 SXM 80GB in one node"),
    Target("h200", "gpu", 1, 140.4, "one NVIDIA H200 141GB (CUDA reports 140.4 GiB)"),
    Target("h200x8", "gpu", 8, 140.4, "8 NVIDIA H200 141GB in one node"),
)}
_SLICE = {"v4": ("v4", 2, 32.0), "v5p": ("v5p", 2, 95.0), "v5e": ("v5e", 1, 16.0), "v5litepod": ("v5e", 1, 16.0),
          "v6e": ("v6e", 1, 32.0)}  # name -> (generation, cores per device, GiB per device)


def fmt(b: float) -> str:
  """Bytes as GiB: one decimal from 1 GiB, three significant digits below (tiny test configs)."""
  g = b / GiB
  return f"{g:.1f} GiB" if g >= 1 else f"{g:.3g} GiB"


def parse_target(name: str) -> Target:
  """A name of TARGETS; any slice `v4-N`, `v5p-N`, `v5e-N`, `v6e-N`, or K of them (`KxSLICE`, multi-slice);
  `h100xK`, `h200xK`; or `NxG` (N devices of G GiB, e.g. `8x40` for a node of A100 40GB)."""
  key = name.strip().lower()
  if key in TARGETS:
    return TARGETS[key]
  m = re.fullmatch(r"(?:(\d+)x)?(v4|v5p|v5e|v5litepod|v6e)-(\d+)", key)
  if m and int(m.group(3)) % _SLICE[m.group(2)][1] == 0 and int(m.group(3)) > 0 and int(m.group(1) or 1) > 0:
    gen, cores, mem = _SLICE[m.group(2)]
    slices, chips = int(m.group(1) or 1), int(m.group(3)) // cores
    what = f"TPU {gen}, {chips} chips" + (f", x {slices} slices" if slices > 1 else "")
    return Target(key, "tpu", slices * chips, mem, what, gen, slices)
  m = re.fullmatch(r"(h100|h200)x(\d+)", key)
  if m and int(m.group(2)) > 0:
    return dataclasses.replace(TARGETS[m.group(1)], name=key, devices=int(m.group(2)))
  m = re.fullmatch(r"(\d+)x(\d+(?:\.\d+)?)", key)
  if m and int(m.group(1)) > 0 and float(m.group(2)) > 0:
    return Target(key, "any", int(m.group(1)), float(m.group(2)), "custom")
  raise InputError(f"--target={name!r} is unknown; known: {', '.join(TARGETS)}, any TPU slice "
                   "(v4-N, v5p-N, v5e-N, v6e-N; KxSLICE for K slices), h100xK, h200xK, or NxG (N devices of G GiB)")


def compiler_for(target: Target, choice: str = "auto") -> str:
  """`tpu` or `cpu`: which compiler plans this target (--compiler, `auto` by default)."""
  if choice not in COMPILERS:
    raise InputError(f"--compiler={choice!r} is unknown; known: {', '.join(COMPILERS)}")
  if choice == "cpu" or (choice == "auto" and (target.platform != "tpu" or not tpu_compiler.libtpu_version())):
    return "cpu"
  if choice == "auto" and not _has_topology(target):
    return "cpu"  # a slice of no standard shape: the estimate, and compiler_line says why
  if target.platform != "tpu":
    raise InputError(f"--compiler=tpu compiles for TPU slices; --target={target.name} is not one")
  if not tpu_compiler.libtpu_version():
    raise InputError("--compiler=tpu needs libtpu: pip install -e '.[tpu]' (Python 3.12: "
                     "pip install -c requirements/lock-py3.12.txt -e '.[tpu]')")
  target.topology  # noqa: B018: a slice with no standard topology is refused here, before the child starts
  return "tpu"


def _has_topology(target: Target) -> bool:
  try:
    target.topology  # noqa: B018
    return True
  except InputError:
    return False


def compiler_line(target: Target, compiler: str) -> str:
  if compiler == "tpu":
    return f"compiler: tpu (libtpu {tpu_compiler.libtpu_version()}), topology {target.topology.describe()}"
  if target.platform == "tpu":
    why = ("install .[tpu] for the TPU compiler" if not tpu_compiler.libtpu_version() else
           "--compiler=cpu" if _has_topology(target) else f"{target.name} is not a standard slice shape")
    return f"compiler: cpu estimate ({why})"
  return f"compiler: cpu estimate (XLA:CPU on {target.devices} simulated devices)"


# ---- devices: compile where the target's device count is ---------------------------------------------------


def _forced_cpu_devices() -> int:
  m = re.search(r"--xla_force_host_platform_device_count=(\d+)", os.environ.get("XLA_FLAGS", ""))
  return int(m.group(1)) if m else 1


def run_here(target: Target, compiler: str = "cpu") -> bool:
  """Whether this process can compile for the target: it is the re-executed child; or, for the CPU estimate, it
  has the target's device count, on the CPU (simulated) or on the target's own platform. Decided, on a CPU-only
  machine, without starting the backend. The TPU compiler always runs in a child (its environment)."""
  from resnorm.scale import hostmem
  if os.environ.get(CHILD_ENV):
    return True
  if compiler == "tpu":
    return False
  if hostmem.backend_will_be_cpu():
    return _forced_cpu_devices() == target.devices
  import jax
  return jax.device_count() == target.devices and jax.default_backend() in (target.platform, "cpu")


def reexec(target: Target, compiler: str = "cpu", quiet: bool = False) -> int:
  """Runs this same command again in a child that compiles for the target; returns its exit code.
  cpu: on target.devices simulated CPU devices. tpu: the host side on the CPU, the steps compiled by libtpu for
  the slice's topology, with libtpu's environment in the child only and its no-TPU-here noise filtered from the
  child's stderr (everything else, an error line included, passes through)."""
  flags = re.sub(r"--xla_force_host_platform_device_count=\d+", "", os.environ.get("XLA_FLAGS", ""))
  env = {**os.environ, "JAX_PLATFORMS": "cpu", CHILD_ENV: str(target.devices)}
  say = (lambda *a: print(*a, file=sys.stderr, flush=True)) if quiet else (lambda *a: print(*a, flush=True))
  if compiler == "tpu":
    topo = target.topology
    env.update(tpu_compiler.child_env(topo))
    env["XLA_FLAGS"] = flags.strip()
    say(f"compiling for {topo.describe()} with libtpu {tpu_compiler.libtpu_version()} (a subprocess)")
    p = subprocess.Popen([sys.executable, *sys.argv], env=env, stderr=subprocess.PIPE, text=True, errors="replace")
    pump = threading.Thread(target=_forward_stderr, args=(p.stderr,), daemon=True)
    pump.start()
    rc = p.wait()
    pump.join()
    return rc
  env["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={target.devices}".strip()
  say(f"simulating {target.devices} devices on the CPU (a subprocess with "
      f"--xla_force_host_platform_device_count={target.devices})")
  return subprocess.run([sys.executable, *sys.argv], env=env).returncode


def _forward_stderr(stream) -> None:
  for line in stream:
    if not tpu_compiler.is_noise(line):
      sys.stderr.write(line)
      sys.stderr.flush()


# ---- the plan ------------------------------------------------------------------------------------------------


def for_target(cfg, target: Target):
  """A copy of cfg with the kernels the target runs: `auto` resolves to `reference` off the CPU, and the CPU's
  own forms would give the CPU's memory, not the target's."""
  cfg = copy.deepcopy(cfg)
  if cfg.model.kernels == "auto" and target.platform != "any":
    cfg.model.kernels = "reference"
  return cfg


def budget_bytes(target: Target) -> float:
  return target.usable_gib * (1.0 - MARGIN) * GiB


def _variant(cfg, **over):
  c = copy.deepcopy(cfg)
  for key, val in over.items():
    sect, name = key.split(".")
    c[sect][name] = val
  return c


def _flags(over: dict) -> str:
  return " ".join(f"--config.{k}={v}" for k, v in over.items())


def suggestions(cfg, info: dict, target: Target, measure, max_compiles: int = 6) -> list[tuple[dict, float]]:
  """Settings that fit, each compiled and measured: [(overrides, peak bytes)], the cheapest in speed first.
  Tried in order: diagnostics on one sequence per device (when that step is over), then with it all devices on
  FSDP (when some are on the data axis), and the smallest grad_accum that fits under the current remat policy
  and under remat=full, found by halving the per-device micro-batch."""
  budget, found, compiles = budget_bytes(target), [], 0
  dp = info["mesh"]["data"] * info["mesh"]["fsdp"]
  base = {}
  diag = info["memory"].get("diagnostics")
  if diag and diag["peak"] > budget and info["diag_batch"] > dp:
    base["train.diag_batch"] = dp

  # Only the steps over budget are compiled again: none of the settings tried makes another step larger.
  over_budget = tuple(k for k, m in info["memory"].items() if m["peak"] > budget)
  others = max([m["peak"] for k, m in info["memory"].items() if k not in over_budget], default=0)

  def fits(over):
    nonlocal compiles
    compiles += 1
    p = max(measure(_variant(cfg, **over), over_budget)["peak"], others)
    print(f"  tried {_flags(over)}: peak {fmt(p)} per device", flush=True)
    if p <= budget:
      found.append((over, p))
    return p <= budget

  if base and fits(base):
    return found
  if info["mesh"]["data"] > 1 and cfg.mesh.tensor != -1:
    fits({**base, "mesh.data": 1, "mesh.fsdp": -1})
  b, accum = cfg.train.batch_size, cfg.train.grad_accum
  for remat in dict.fromkeys([cfg.model.remat, "full"]):
    a = accum if remat != cfg.model.remat else accum * 2
    while compiles < max_compiles and b % (a * dp) == 0:
      over = {**base, **({"model.remat": remat} if remat != cfg.model.remat else {})}
      if a != accum:
        over["train.grad_accum"] = a
      if fits(over):
        break
      a *= 2
  return found


def verdict(target: Target, peak: float, found: list | None) -> tuple[str, int]:
  """(the last line, exit code)."""
  usable = target.usable_gib
  head = f"fits {target.name}: "
  if peak <= budget_bytes(target):
    return head + f"yes ({fmt(peak)} of {fmt(usable * GiB)} per device)", 0
  text = (f"no ({fmt(peak)} of {fmt(usable * GiB)} per device; the budget is {fmt(budget_bytes(target))}"
          f" with a {MARGIN:.0%} margin)")
  if found:
    text += "; fits with " + ", or ".join(f"{_flags(o)} ({fmt(p)})" for o, p in found)
  else:
    text += ("; no setting tried fits (more FSDP, grad_accum down to one sequence per device, remat=full): "
             "use more devices, a target with more memory, or a smaller train.batch_size or model")
  return head + text, 2


def describe(target: Target) -> str:
  gpu = (f"; XLA may allocate {target.usable_gib:.1f} GiB (XLA_PYTHON_CLIENT_MEM_FRACTION="
         f"{os.environ.get('XLA_PYTHON_CLIENT_MEM_FRACTION', GPU_MEM_FRACTION)})" if target.platform == "gpu" else "")
  return (f"target {target.name} ({target.what}): {target.devices} devices of {target.memory_gib:g} GiB{gpu}; "
          f"budget {fmt(budget_bytes(target))} per device ({MARGIN:.0%} margin)")


def plan(cfg, target: Target, compiler: str = "cpu", as_json: bool = False) -> int:
  """Prints the dry run for the target and the verdict as the last line (as_json: one JSON object instead, the
  progress on stderr); returns the exit code. The suggestions are compiled by the plan's own compiler."""
  import contextlib
  import json
  import jax
  from resnorm.plan import dryrun
  from resnorm.core.errors import check
  if compiler == "tpu":
    devices = tpu_compiler.devices(target.topology)
  else:
    devices = jax.devices()
    check(len(devices) == target.devices, f"--target={target.name} needs {target.devices} devices; found "
          f"{len(devices)} {jax.default_backend()} devices")
  measure = lambda c, steps=("train", "eval", "diagnostics"): dryrun.measure(c, steps, devices=devices)
  with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
    print(describe(target), flush=True)
    print(compiler_line(target, compiler), flush=True)
    cfg = for_target(cfg, target)
    info = dryrun.dry_run(cfg, devices=devices)
    dryrun.print_info(info)
    if info["peak"] is None:
      raise InputError(f"the {jax.default_backend()} backend gives no memory analysis; run the dry run on the CPU "
                       "(JAX_PLATFORMS=cpu) to simulate the target")
    found = None
    if info["peak"] > budget_bytes(target):
      print("does not fit: compiling settings that might", flush=True)
      found = suggestions(cfg, info, target, measure)
    line, code = verdict(target, info["peak"], found)
  if as_json:
    print(json.dumps(record(target, compiler, info, found, code)), flush=True)
  else:
    print(line, flush=True)
  return code


def record(target: Target, compiler: str, info: dict, found, code: int) -> dict:
  """The plan as `--json` prints it: bytes per device."""
  topo = target.topology if compiler == "tpu" else None
  return {"target": target.name, "devices": target.devices, "memory_gib": target.memory_gib,
          "budget_bytes": budget_bytes(target), "compiler": "tpu" if compiler == "tpu" else "cpu estimate",
          "libtpu": tpu_compiler.libtpu_version() if compiler == "tpu" else None,
          "topology": topo and {"name": topo.name, "chip_config": topo.chip_config, "num_slices": topo.num_slices,
                                "hosts": topo.hosts},
          "residual": info["residual"], "num_layers": info["num_layers"], "params": info["params"],
          "mesh": info["mesh"], "memory": info["memory"], "compile_s": info["compile_s"], "peak": info["peak"],
          "fits": code == 0, "suggestions": [{"overrides": o, "peak": p} for o, p in (found or [])]}
