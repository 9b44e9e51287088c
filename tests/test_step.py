"""The jitted step: gradient accumulation equals one pass over the whole batch."""
import jax
import numpy as np

from conftest import tiny_config
from resnorm import runtime, step


def _batch(b=8, t=16, seed=0):
  rng = np.random.default_rng(seed)
  tok = rng.integers(0, 256, (b, t + 1)).astype(np.int32)
  mask = np.ones((b, t), np.float32)
  mask[1, 5:] = 0.0  # uneven token counts per micro-batch: the mean must be over the whole batch's tokens
  mask[6, :11] = 0.0
  return {"inputs": tok[:, :-1], "targets": tok[:, 1:], "mask": mask}


def _one_step(cfg, batch):
  s = runtime.build(cfg)
  state = s.init_state()
  fn = step.jit_train_step(cfg, s.mcfg, s.tx)
  new, m = fn(state, batch)
  ev = step.jit_eval_step(s.mcfg, accum=cfg.train.grad_accum)(new["params"], batch)
  return jax.device_get((new, m, ev))


def test_grad_accum_equals_the_whole_batch(residual="hc"):  # hc: the 4-stream state, the generic step's paths
  batch = _batch()
  ref_state, ref, ref_ev = _one_step(tiny_config(residual, **{"train.batch_size": 8}), batch)
  state, m, ev = _one_step(tiny_config(residual, **{"train.batch_size": 8, "train.grad_accum": 4}), batch)
  np.testing.assert_allclose(m["loss"], ref["loss"], rtol=1e-6)
  np.testing.assert_allclose(m["grad_norm"], ref["grad_norm"], rtol=1e-5)
  for a, b in zip(jax.tree.leaves(state["params"]), jax.tree.leaves(ref_state["params"])):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  for a, b in zip(jax.tree.leaves(state["opt_state"]), jax.tree.leaves(ref_state["opt_state"])):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-9)
  np.testing.assert_allclose(ev, ref_ev, rtol=1e-6)  # eval in micro-batches: same loss sum and token count


def test_micro_batches_partition_the_batch():
  batch = _batch()
  mb = jax.device_get(step.micro_batches(batch, 4))
  assert mb["inputs"].shape == (4, 2, 16)
  rows = sorted(map(tuple, mb["inputs"].reshape(8, 16).tolist()))
  assert rows == sorted(map(tuple, batch["inputs"].tolist()))
