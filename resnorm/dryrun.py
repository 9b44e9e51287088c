"""train.py --dry_run: sizes, per-device bytes and FLOPs for the configured mesh, without training."""
import math

import jax
import numpy as np

from resnorm import flops, runtime


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


def dry_run(cfg) -> dict:
  s = runtime.build(cfg)
  m, t = s.mcfg, cfg.train
  tokens = t.batch_size * cfg.data.seq_len
  info = {
      "residual": m.residual, "num_layers": m.num_layers, "params": flops.param_count(m),
      "mesh": dict(s.mesh.shape), "devices": jax.device_count(),
      "params_bytes_per_device": per_device_bytes(s.abstract["params"]),
      "opt_state_bytes_per_device": per_device_bytes(s.abstract["opt_state"]),
      "flops_per_token": flops.train_flops_per_token(m, cfg.data.seq_len),
      "flops_per_step": flops.train_flops_per_token(m, cfg.data.seq_len) * tokens,
  }
  batch = {k: jax.ShapeDtypeStruct((t.batch_size, cfg.data.seq_len), dt, sharding=s.batch_sh)
           for k, dt in (("inputs", np.int32), ("targets", np.int32), ("mask", np.float32))}
  compiled, info["compile_s"] = s.compile_train_step(s.abstract, batch)
  mem = compiled.memory_analysis()
  if mem is not None:
    info["compiled_memory"] = {k: int(getattr(mem, k)) for k in (
        "argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes", "generated_code_size_in_bytes")
        if hasattr(mem, k)}
  return info


def print_info(info: dict) -> None:
  gib = lambda b: f"{b / 2**30:.3f} GiB"
  print(f"{info['residual']}, {info['num_layers']} layers: {info['params']:,} params; mesh {info['mesh']} "
        f"on {info['devices']} devices")
  print(f"per device: params {gib(info['params_bytes_per_device'])}, optimizer state "
        f"{gib(info['opt_state_bytes_per_device'])}")
  print(f"FLOPs: {info['flops_per_token'] / 1e6:.2f} MFLOP/token, {info['flops_per_step'] / 1e12:.4f} TFLOP/step; "
        f"compiled in {info['compile_s']:.1f}s")
  for k, v in info.get("compiled_memory", {}).items():
    print(f"compiled {k}: {gib(v)}")
