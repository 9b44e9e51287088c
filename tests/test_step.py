"""The jitted train step against hand-written NumPy: the clipped AdamW update (schedule, moments, decay mask), the
non-finite guard (state bitwise unchanged), and the masked loss on padded rows (PAD never counts), and gradient accumulation == one pass over the whole batch."""
import functools

import flax
import jax
import numpy as np
import pytest

from conftest import short_config, tiny_config
from resnorm.config import configlib
from resnorm.data import data
from resnorm.model import diagnostics
from resnorm.step import optim, runtime, step
from resnorm.model.model import LM

# Hand-written, not read from optim: the list of decayed weights in docs/usage.md (Optimizer), plus HC's dynamic W.
DECAYED = {"q", "k", "v", "o", "wi", "wo", "head", "w_alpha", "w_beta"}
TRAIN = {"train.grad_clip": 0.05, "train.eps": 1e-3, "train.weight_decay": 0.1, "train.lr": 1e-2,
         "train.warmup_steps": 0, "train.steps": 10, "train.schedule": "cosine", "train.min_lr_ratio": 0.1,
         "train.b1": 0.8, "train.b2": 0.9}


@pytest.fixture(scope="module")
def setup():
  """A 1-layer HC model (dynamic: decayed variant weights) and its train step, jitted without donation."""
  cfg = tiny_config("hc", 1, **TRAIN)
  mcfg, tx = configlib.model_config(cfg), optim.make(cfg)
  state = jax.jit(lambda: flax.linen.unbox(step.init_state(cfg, mcfg, tx, jax.random.key(0), 16)))()
  train = jax.jit(functools.partial(step.train_step, cfg=cfg, mcfg=mcfg, tx=tx))
  grad = jax.jit(jax.grad(step.make_loss_fn(mcfg)))
  return cfg, mcfg, state, train, grad


def _batch(seed, b=4, t=16):
  tok = np.array(jax.random.randint(jax.random.key(seed), (b, t + 1), 0, 256))
  return {"inputs": tok[:, :-1], "targets": tok[:, 1:], "mask": np.ones((b, t), np.float32)}


def _flat(tree):
  return {k: np.asarray(v, np.float64) for k, v in flax.traverse_util.flatten_dict(tree).items()}


def test_train_step_is_the_hand_written_clipped_adamw_update(setup):
  """Two steps: global-norm clip to 0.05 (the gradient norm is far above it), Adam moments with bias correction,
  decoupled weight decay on weight matrices only, lr from the cosine schedule. eps=1e-3 makes the update depend
  on the gradient's scale, so an unclipped update differs by ~10x the tolerance."""
  cfg, _, state, train, grad = setup
  t = cfg.train
  p = _flat(state["params"])
  m = {k: np.zeros_like(v) for k, v in p.items()}
  v = {k: np.zeros_like(x) for k, x in p.items()}
  assert {k[-1] for k in p} & DECAYED and {k[-1] for k in p} - DECAYED  # both kinds present
  for i in range(2):
    b = _batch(i)
    g = _flat(grad(state["params"], b))
    norm = np.sqrt(sum(np.sum(x ** 2) for x in g.values()))
    assert norm > 5 * t.grad_clip
    scale = min(1.0, t.grad_clip / norm)
    lr = t.lr * (t.min_lr_ratio + (1 - t.min_lr_ratio) * 0.5 * (1 + np.cos(np.pi * i / t.steps)))
    for k in p:
      gk = g[k] * scale
      m[k] = t.b1 * m[k] + (1 - t.b1) * gk
      v[k] = t.b2 * v[k] + (1 - t.b2) * gk ** 2
      mhat, vhat = m[k] / (1 - t.b1 ** (i + 1)), v[k] / (1 - t.b2 ** (i + 1))
      p[k] = p[k] - lr * (mhat / (np.sqrt(vhat) + t.eps) + (t.weight_decay * p[k] if k[-1] in DECAYED else 0.0))
    state, metrics = train(state, b)
    assert bool(metrics["finite"])
    np.testing.assert_allclose(float(metrics["grad_norm"]), norm, rtol=1e-5)  # reported before clipping
    np.testing.assert_allclose(float(metrics["lr"]), lr, rtol=1e-6)
    got = _flat(state["params"])
    for k in p:
      np.testing.assert_allclose(got[k], p[k], rtol=1e-5, atol=2e-7, err_msg=f"step {i + 1} {'/'.join(k)}")


def _assert_bitwise_equal(a, b):
  la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
  assert len(la) == len(lb)
  for x, y in zip(la, lb):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("case", ["token_out_of_vocab", "logits_overflow", "gradient_overflow"])
def test_nonfinite_step_leaves_params_and_optimizer_state_bitwise(setup, case):
  """A real non-finite step: a corrupt batch (a token id past the vocabulary: the embedding gather yields NaN),
  params whose logits overflow to inf, or params whose loss stays finite (~1e30) while the gradient norm overflows.
  The update is dropped inside the jitted step; a good step after it trains."""
  cfg, _, state, train, _ = setup
  state, _ = train(state, _batch(0))  # non-zero Adam moments, so a kept update would show
  b = _batch(1)
  if case == "token_out_of_vocab":
    b["inputs"][1, 5] = 100_000
  else:
    factor = 3e38 if case == "logits_overflow" else 1e30
    state = {**state, "params": {**state["params"], "head": state["params"]["head"] * factor}}
  before = jax.device_get(state)
  new, m = train(state, b)
  assert not bool(m["finite"]) and int(m["skipped"]) == 1
  assert np.isfinite(float(m["loss"])) == (case == "gradient_overflow"), float(m["loss"])
  # the sublayer named is one whose gradient is non-finite (computed only on a non-finite step)
  where = int(m["nonfinite_sublayer"])
  if case == "gradient_overflow":
    g = jax.jit(lambda p: step.loss_and_grads(p, b, setup[1], 1)[1])(state["params"])
    sq = np.asarray(diagnostics.sublayer_grad_sumsq(g, cfg))
    assert where >= 0 and not np.isfinite(sq[where]) and np.all(np.isfinite(sq[:where])), (where, sq)
  _assert_bitwise_equal(new["params"], before["params"])
  _assert_bitwise_equal(new["opt_state"], before["opt_state"])
  if case == "token_out_of_vocab":
    after, m = train(new, _batch(2))
    assert bool(m["finite"]) and int(m["skipped"]) == 0 and int(m["nonfinite_sublayer"]) == -1
    assert not np.array_equal(np.asarray(after["params"]["head"]), before["params"]["head"])


def _np_masked_loss(logits, targets, mask_ref):
  x = np.asarray(logits, np.float64)
  logp = x - x.max(-1, keepdims=True)
  logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
  ce = -np.take_along_axis(logp, targets[..., None], -1)[..., 0]
  return float((ce * mask_ref).sum()), float(mask_ref.sum())


def test_loss_and_eval_loss_are_means_over_real_targets_only(setup, short_docs):
  """Unpacked rows of short documents end in PAD; the loss is the mean cross-entropy over non-PAD targets (computed
  here from the logits in float64), and eval_loss pools every eval batch's targets (not a mean of batch means)."""
  _, mcfg, state, _, _ = setup
  cfg = short_config(short_docs, "hc", 1, **{"data.pack": False, "data.eval_batches": 3})
  params = state["params"]
  apply = jax.jit(lambda p, x: LM(mcfg).apply({"params": p}, x)[0])
  loss_fn = jax.jit(step.make_loss_fn(mcfg))
  b = next(data.train_iterator(cfg))
  real = b["targets"] != data.PAD
  assert 0 < real.sum() < real.size  # padded rows are in the batch
  total, count = _np_masked_loss(apply(params, b["inputs"]), b["targets"], real)
  np.testing.assert_allclose(float(loss_fn(params, b)), total / count, rtol=1e-5)

  s = runtime.build(cfg)
  batches = data.eval_batches(cfg)
  sums = [_np_masked_loss(apply(params, e["inputs"]), e["targets"], e["targets"] != data.PAD) for e in batches]
  assert len({c for _, c in sums}) > 1 and all(c < e["mask"].size for (_, c), e in zip(sums, batches))
  want = sum(t for t, _ in sums) / sum(c for _, c in sums)
  got = s.evaluate(params, batches)
  np.testing.assert_allclose(got["eval_loss"], want, rtol=1e-5)
  np.testing.assert_allclose(got["bits_per_byte"], want / np.log(2), rtol=1e-5)


# ---- gradient accumulation: equal to one pass over the whole batch ----------------------------------------------

def _accum_batch(b=8, t=16, seed=0):
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
  batch = _accum_batch()
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
  batch = _accum_batch()
  mb = jax.device_get(step.micro_batches(batch, 4))
  assert mb["inputs"].shape == (4, 2, 16)
  rows = sorted(map(tuple, mb["inputs"].reshape(8, 16).tolist()))
  assert rows == sorted(map(tuple, batch["inputs"].tolist()))
