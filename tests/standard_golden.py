"""Digests of every placement's init params, logits and params after one train step under `model.param=standard`,
at the tiny size: `tests/data/standard_golden.json` holds the ones the code computed before the parametrization
axis existed, so test_param.py can show that `standard` is still that code, bit for bit.

Regenerate only when a change is meant to move `standard` (it never should):
  .venv/bin/python tests/standard_golden.py tests/data/standard_golden.json
(and the same with .venv-py3.12: one entry per jax version)."""
import functools
import hashlib
import json
import os
import platform
import sys

import flax
import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from configs import tiny  # noqa: E402
from resnorm.config import configlib  # noqa: E402
from resnorm.model import residual  # noqa: E402
from resnorm.model.model import LM  # noqa: E402
from resnorm.step import optim, step  # noqa: E402

NAMES = sorted({v.name for v in residual.REGISTRY.values()})


def cpu() -> str:
  try:
    with open("/proc/cpuinfo") as f:
      return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), platform.machine())
  except OSError:
    return platform.machine()


def _leaves(tree):
  flat = flax.traverse_util.flatten_dict(flax.core.unfreeze(tree))
  return [np.asarray(flat[k]) for k in sorted(flat)]


def _digest(arrays) -> dict:
  h = hashlib.sha256()
  for a in arrays:
    h.update(np.ascontiguousarray(a, np.float32).tobytes())
  return {"sha256": h.hexdigest(), "abs_sum": float(sum(np.abs(a.astype(np.float64)).sum() for a in arrays)),
          "sum": float(sum(a.astype(np.float64).sum() for a in arrays))}


def compute(name: str, **over) -> dict:
  """{init, logits, step}: digests for placement `name` at configs/tiny.py (2 layers), weight decay on."""
  c = tiny.get_config(name)
  c.train.weight_decay = 0.1
  for key, val in over.items():
    section, _, field = key.rpartition(".")
    node = c
    for part in section.split("."):
      node = node[part]
    node[field] = val
  mcfg, tx = configlib.model_config(c), optim.make(c)
  state = jax.jit(lambda: flax.linen.unbox(step.init_state(c, mcfg, tx, jax.random.key(3), 16)))()
  tok = np.array(jax.random.randint(jax.random.key(7), (4, 17), 0, 256))
  batch = {"inputs": tok[:, :-1], "targets": tok[:, 1:], "mask": np.ones((4, 16), np.float32)}
  logits, _ = jax.jit(lambda p: LM(mcfg).apply({"params": p}, batch["inputs"]))(state["params"])
  init = _digest(_leaves(state["params"]))
  new, _ = jax.jit(functools.partial(step.train_step, cfg=c, mcfg=mcfg, tx=tx))(state, batch)
  return {"init": init, "logits": _digest([np.asarray(logits)]), "step": _digest(_leaves(new["params"]))}


def setup_jax():
  """The test suite's jax settings (tests/conftest.py), so the digests are of the programs the tests compile."""
  jax.config.update("jax_numpy_rank_promotion", "raise")
  jax.config.update("jax_disable_most_optimizations", True)


if __name__ == "__main__":
  setup_jax()
  path = sys.argv[1]
  data = json.load(open(path)) if os.path.exists(path) else {}
  data[jax.__version__] = {"cpu": cpu(), "placements": {n: compute(n) for n in NAMES}}
  with open(path, "w") as f:
    json.dump(data, f, indent=1, sort_keys=True)
  print(f"{len(NAMES)} placements for jax {jax.__version__} on {cpu()} -> {path}")
