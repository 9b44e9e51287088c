"""Runs under XLA_FLAGS=--xla_force_host_platform_device_count=8 (set by the test before jax is imported):
the same 4 train steps on several meshes, shardings against the rules, dry-run bytes against real arrays, and a
checkpoint written on one mesh restored onto another. Prints one JSON object."""
import json
import os
import sys

import jax
import numpy as np

from configs import tiny
from resnorm.io import ckpt
from resnorm.plan import dryrun
from resnorm.step import runtime

MESHES = ((1, 1, 1), (8, 1, 1), (1, 8, 1), (2, 2, 2), (1, 2, 4))


def config(residual, mesh, accum=1):
  c = tiny.get_config(residual)
  c.model.num_heads = 4
  c.train.batch_size, c.train.steps, c.train.warmup_steps, c.train.grad_accum = 8, 4, 0, accum
  c.mesh.data, c.mesh.fsdp, c.mesh.tensor = mesh
  return c


def batches(c):
  rng = np.random.default_rng(0)
  tok = rng.integers(0, 256, (4, 8, 17)).astype(np.int32)
  return [{"inputs": t[:, :-1], "targets": t[:, 1:], "mask": np.ones((8, 16), np.float32)} for t in tok]


def run(residual, mesh, accum=1):
  c = config(residual, mesh, accum)
  devices = jax.devices()[: int(np.prod(mesh))]
  s = runtime.build(c, devices)
  state = s.init_state()
  out = {"bytes_predicted": dryrun.per_device_bytes(s.abstract), "bytes_actual": dryrun.actual_device_bytes(state)}
  spec_q = state["params"]["blocks"]["attn"]["q"].sharding.spec
  spec_e = state["params"]["embed"].sharding.spec
  embed_shape = state["params"]["embed"].shape
  spec_mu = next(x.sharding.spec for x in jax.tree.leaves(state["opt_state"]) if x.shape == embed_shape)
  out["spec_q"], out["spec_embed"], out["spec_mu"] = str(spec_q), str(spec_e), str(spec_mu)
  fn = None
  losses = []
  for b in batches(c):
    b = s.device_batch(b)
    if fn is None:
      fn, _ = s.compile_train_step(state, b)
    with s.mesh_context():
      state, m = fn(state, b)
    losses.append(float(m["loss"]))
  out["losses"] = losses
  return out, s, state


def main():
  results = {}
  for residual in ("pre_norm", "hc"):
    for mesh in MESHES:
      results[f"{residual}:{mesh}"], s, state = run(residual, mesh)
      if residual == "pre_norm" and mesh in ((8, 1, 1), (2, 2, 2)):
        path = os.path.join(sys.argv[1], f"ck_{'x'.join(map(str, mesh))}")
        cp = ckpt.Checkpointer(path)
        cp.save(4, state, None, {})
        cp.close()
  # two micro-batches of 4, one sequence per device of the (data, fsdp) axes
  results["hc:(2, 2, 2):accum2"] = run("hc", (2, 2, 2), accum=2)[0]
  # restore each checkpoint onto the other mesh shape and onto one device
  for src in ("8x1x1", "2x2x2"):
    for dst in ((2, 2, 2), (8, 1, 1), (1, 1, 1)):
      s = runtime.build(config("pre_norm", dst), jax.devices()[: int(np.prod(dst))])
      restored, _ = ckpt.Checkpointer(os.path.join(sys.argv[1], f"ck_{src}"), read_only=True).restore(4, s.abstract)
      ref, _ = ckpt.Checkpointer(os.path.join(sys.argv[1], f"ck_{src}"), read_only=True).restore(
          4, runtime.build(config("pre_norm", (1, 1, 1)), jax.devices()[:1]).abstract)
      same = all(np.array_equal(np.asarray(a), np.asarray(b))
                 for a, b in zip(jax.tree.leaves(restored["params"]), jax.tree.leaves(ref["params"])))
      results[f"restore:{src}->{dst}"] = {"equal": same,
                                          "sharding": str(restored["params"]["blocks"]["mlp"]["wi"].sharding.spec)}
  print(json.dumps(results))


if __name__ == "__main__":
  main()
