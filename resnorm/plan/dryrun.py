"""train.py --dry_run: sizes, per-device bytes, FLOPs and the compiled steps' memory for the configured mesh,
without training (`--target` adds the memory plan of resnorm.plan.memplan)."""
import math
import re
import time

import jax
import numpy as np

from resnorm.model import flops
from resnorm.step import runtime, step

GiB = 2**30


def per_device_bytes(abstract_tree) -> int:
  """Bytes one device holds for a tree of ShapeDtypeStructs with shardings (evenly divided shards)."""
  total = 0
  for leaf in jax.tree.leaves(abstract_tree):
    shape = leaf.sharding.shard_shape(leaf.shape) if leaf.sharding is not None else leaf.shape
    total += math.prod(shape) * np.dtype(leaf.dtype).itemsize
  return total


def actual_device_bytes(tree, device=None) -> int:
  """Bytes actually placed on `device` (default: the first) by a tree of jax.Arrays."""
  device = device or jax.devices()[0]
  return sum(s.data.nbytes for x in jax.tree.leaves(tree) for s in x.addressable_shards if s.device == device)


def compiled_memory(compiled) -> dict | None:
  """One device's buffers of a compiled step (XLA's buffer assignment): arguments, outputs (less those aliased
  to donated arguments), temporaries, and their sum `peak`, everything the step needs alive at once. None where
  the backend gives no analysis."""
  mem = compiled.memory_analysis()
  if mem is None:
    return None
  get = lambda k: int(getattr(mem, f"{k}_size_in_bytes", 0) or 0)
  out = {k: get(k) for k in ("argument", "output", "alias", "temp")}
  out["peak"] = out["argument"] + out["temp"] + out["output"] - out["alias"]
  return out


_OOM_RE = re.compile(r"RESOURCE_EXHAUSTED.*?required for HLO temporaries \(([\d.]+)([KMGT]?)\)"
                     r"(?:.*?available HBM \(([\d.]+)([KMGT]?)\))?", re.S)
_UNIT = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def refused_memory(error: Exception, argument_bytes: int) -> dict | None:
  """The TPU compiler refuses a program that cannot fit the chip's HBM (RESOURCE_EXHAUSTED: CompileTimeHbmOom) and
  names the temporaries it needed. That is the memory plan's answer too: the step as compiled_memory would give it,
  with `refused` (the compiler's figure of the HBM available). None for any other error."""
  m = _OOM_RE.search(str(error))
  if not m:
    return None
  temp = int(float(m.group(1)) * _UNIT[m.group(2)])
  available = int(float(m.group(3)) * _UNIT[m.group(4)]) if m.group(3) else None
  return {"argument": argument_bytes, "output": 0, "alias": 0, "temp": temp, "peak": argument_bytes + temp,
          "refused": available}


def _batch(s, size: int, seq_len: int):
  return {k: jax.ShapeDtypeStruct((size, seq_len), dt, sharding=s.batch_sh)
          for k, dt in (("inputs", np.int32), ("targets", np.int32), ("mask", np.float32))}


def measure(cfg, steps=("train", "eval", "diagnostics"), s=None, devices=None) -> dict:
  """Builds the run's steps for these devices (default: those present; a TPU topology's compile-only devices for
  the TPU compiler) and compiles them (nothing runs). memory[name] is the
  compiled_memory of each step; for eval and diagnostics, which run between train steps, the rest of the train
  state (optimizer moments, ...) is still resident and is added to their peak. peak: the largest."""
  s = s or runtime.build(cfg, devices)
  batch = _batch(s, cfg.train.batch_size, cfg.data.seq_len)
  state_bytes = per_device_bytes(s.abstract)
  params_bytes = per_device_bytes(s.abstract["params"])
  info = {"state_bytes": state_bytes, "params_bytes": params_bytes,
          "opt_state_bytes": per_device_bytes(s.abstract["opt_state"]), "memory": {}, "compile_s": {}}
  for name in steps:
    if name == "diagnostics" and not cfg.train.diag_every:
      continue
    t0 = time.perf_counter()
    args = (state_bytes if name == "train" else params_bytes) + per_device_bytes(batch)
    try:
      with s.mesh_context():
        if name == "train":
          compiled, _ = s.compile_train_step(s.abstract, batch)
        elif name == "eval":
          compiled = s.eval_step.lower(s.abstract["params"], batch).compile()
        else:
          compiled = step.make_diag_fn(cfg, s.mcfg).lower(s.abstract["params"], batch).compile()
      mem = compiled_memory(compiled)
    except Exception as e:  # noqa: BLE001: only the compiler's out-of-memory refusal is an answer; re-raised else
      mem = refused_memory(e, args)
      if mem is None:
        raise
    info["compile_s"][name] = time.perf_counter() - t0
    if mem is None:
      continue
    if name != "train":
      mem["resident"] = state_bytes - params_bytes  # the params are among the step's own arguments
      mem["peak"] += mem["resident"]
    info["memory"][name] = mem
  peaks = [m["peak"] for m in info["memory"].values()]
  info["peak"] = max(peaks) if peaks else None
  return info


def dry_run(cfg, devices=None) -> dict:
  s = runtime.build(cfg, devices)
  m, t = s.mcfg, cfg.train
  tokens = t.batch_size * cfg.data.seq_len
  info = {
      "residual": m.residual, "num_layers": m.num_layers, "params": flops.param_count(m),
      "mesh": dict(s.mesh.shape), "devices": s.mesh.size,
      "flops_per_token": flops.train_flops_per_token(m, cfg.data.seq_len),
      "flops_per_step": flops.train_flops_per_token(m, cfg.data.seq_len) * tokens,
      "micro_batch_per_device": t.batch_size // t.grad_accum // (s.mesh.shape["data"] * s.mesh.shape["fsdp"]),
      "diag_batch": step.diag_rows(cfg),
  }
  info.update(measure(cfg, s=s))
  info["params_bytes_per_device"] = info["params_bytes"]
  info["opt_state_bytes_per_device"] = info["opt_state_bytes"]
  return info


def gib(b) -> str:
  return f"{b / GiB:.2f} GiB" if b >= GiB / 100 or b == 0 else f"{b / 2**20:.2f} MiB"


def print_info(info: dict) -> None:
  print(f"{info['residual']}, {info['num_layers']} layers: {info['params']:,} params; mesh {info['mesh']} "
        f"on {info['devices']} devices; {info['micro_batch_per_device']} sequences per device per micro-batch")
  print(f"per device: params {gib(info['params_bytes'])}, optimizer state {gib(info['opt_state_bytes'])}")
  print(f"FLOPs: {info['flops_per_token'] / 1e6:.2f} MFLOP/token, {info['flops_per_step'] / 1e12:.4f} TFLOP/step")
  for name, mem in info["memory"].items():
    extra = f" + resident train state {gib(mem['resident'])}" if "resident" in mem else ""
    if mem.get("refused") is not None:
      print(f"{name} step: the compiler refused it, out of memory: temporaries {gib(mem['temp'])} of "
            f"{gib(mem['refused'])} available; with arguments {gib(mem['argument'])}{extra}, peak at least "
            f"{gib(mem['peak'])}")
      continue
    print(f"{name} step (compiled in {info['compile_s'][name]:.1f}s), per device: arguments {gib(mem['argument'])}"
          f" + temporaries {gib(mem['temp'])} + outputs {gib(mem['output'] - mem['alias'])} (not aliased)"
          f"{extra} = peak {gib(mem['peak'])}")
  if not info["memory"]:
    print("the backend gives no memory analysis of the compiled steps")
