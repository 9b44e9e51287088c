"""What train, eval and bench share: the mesh, the sharded initial state, and the compiled steps."""
import contextlib
import dataclasses
import functools
import math
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from resnorm.config import configlib
from resnorm.core import stats
from resnorm.scale import sharding
from resnorm.step import optim, step
from resnorm.core.errors import check


@dataclasses.dataclass
class Setup:
  cfg: object
  mcfg: object
  mesh: object
  tx: object
  state_sh: object
  batch_sh: object
  repl: object
  abstract: object  # ShapeDtypeStructs of the unboxed state, with shardings

  @property
  def params_sh(self):
    return self.state_sh["params"]

  def init_state(self):
    """The initial state, created already sharded (never materialized whole on one device)."""
    with self.rules():
      fn = jax.jit(lambda rng: nn.unbox(step.init_state(self.cfg, self.mcfg, self.tx, rng, self.cfg.data.seq_len)),
                   out_shardings=self.state_sh)
      return fn(jax.random.key(self.cfg.seed))

  def rules(self):
    return nn.logical_axis_rules(sharding.RULES)

  def mesh_context(self):
    stack = contextlib.ExitStack()
    stack.enter_context(jax.set_mesh(self.mesh))
    stack.enter_context(self.rules())
    return stack

  def device_batch(self, global_batch: dict):
    """Global arrays from a global batch every process holds whole: each process places the rows of its own devices
    (all of them on one process)."""
    out = {}
    for k, v in global_batch.items():
      if k.startswith("_"):  # host-side metadata (data._batched's _row, _doc)
        continue
      v = np.asarray(v)
      out[k] = jax.make_array_from_process_local_data(self.batch_sh, v, v.shape)
    return out

  def compile_train_step(self, state, batch, compiler_options: dict | None = None):
    """(compiled step, seconds spent lowering + compiling); compiler_options: XLA debug options for this compile
    (the bench's --xla)."""
    t0 = time.perf_counter()
    with self.mesh_context():
      fn = step.jit_train_step(self.cfg, self.mcfg, self.tx, self.state_sh, self.batch_sh, self.repl)
      compiled = fn.lower(state, batch).compile(compiler_options=compiler_options)
    return compiled, time.perf_counter() - t0

  @functools.cached_property
  def eval_step(self):
    with self.mesh_context():
      return step.jit_eval_step(self.mcfg, self.params_sh, self.batch_sh, self.repl, self.cfg.train.grad_accum)

  def evaluate(self, params, batches, step_fn=None, subset_every: int = 1, blocks: bool = False) -> dict:
    """eval_loss (nats per predicted byte), bits_per_byte, eval_tokens (the targets scored) and eval_loss_se (its
    block-bootstrap standard error over the eval rows, resnorm.core.stats) over fixed batches; step_fn: eval_step
    compiled ahead for these batches (the trainer's), else eval_step. subset_every > 1: also eval_loss_subset, the
    loss of every subset_every-th row (data.subset_batches' rows) from the same per-row sums. blocks: also
    eval_block_sums, [target loss, targets] per bootstrap block."""
    step_fn = step_fn or self.eval_step
    with self.mesh_context():
      outs = [step_fn(params, self.device_batch(b)) for b in batches]
    outs = jax.device_get(outs)
    sums = np.concatenate([np.asarray(t, np.float64).reshape(-1) for t, _ in outs])
    counts = np.concatenate([np.asarray(c, np.float64).reshape(-1) for _, c in outs])
    docs = np.concatenate([b["_doc"] for b in batches]) if "_doc" in batches[0] else None
    loss = float(sums.sum() / max(counts.sum(), 1.0))
    out = {"eval_loss": loss, "bits_per_byte": loss / math.log(2), "eval_tokens": int(counts.sum()),
           "eval_loss_se": stats.bootstrap_se(sums, counts, docs)}
    if blocks:  # the block bootstrap's units (a run record keeps them: resnorm/results/records.py)
      out["eval_block_sums"] = [[round(float(a), 4), int(c)] for a, c in zip(*stats.block_sums(sums, counts, docs))]
    if subset_every > 1 and "_row" in batches[0]:
      rows = np.concatenate([b["_row"] for b in batches])
      keep = (rows >= 0) & (rows % subset_every == 0)
      out["eval_loss_subset"] = float(sums[keep].sum() / max(counts[keep].sum(), 1.0))
    return out

  def evaluate_table(self, nll_V, batches) -> float:
    """Mean of nll_V[target] over the masked targets of `batches`: a context-free model (the unigram baseline)
    scored on exactly the targets, mask and sharding `evaluate` uses. nll_V is baked in as a constant."""
    table = np.asarray(nll_V, np.float32)

    def fn(batch):
      m = batch["mask"]
      nll = jnp.where(m > 0, jnp.asarray(table)[batch["targets"]], 0.0)
      return jnp.sum(nll * m), jnp.sum(m)
    with self.mesh_context():
      step_fn = jax.jit(fn, in_shardings=(self.batch_sh,), out_shardings=(self.repl, self.repl))
      outs = [step_fn(self.device_batch(b)) for b in batches]
    total, count = (sum(float(x[i]) for x in jax.device_get(outs)) for i in (0, 1))
    return total / max(count, 1.0)


def build(cfg, devices=None) -> Setup:
  configlib.validate(cfg)
  mesh = sharding.make_mesh(cfg.mesh, devices)
  dp = sharding.data_parallel_size(mesh)
  check(cfg.train.batch_size % jax.process_count() == 0,
        f"train.batch_size={cfg.train.batch_size} is not divisible by the {jax.process_count()} processes")
  check(cfg.train.batch_size % dp == 0,
        f"train.batch_size={cfg.train.batch_size} is not divisible by the data-parallel size {dp} (mesh.data*mesh.fsdp)")
  accum = cfg.train.grad_accum
  check(cfg.train.batch_size % (dp * accum) == 0,
        f"train.batch_size={cfg.train.batch_size} is not divisible by train.grad_accum={accum} x the data-parallel "
        f"size {dp}: every device needs the same whole number of sequences in each micro-batch")
  rows = cfg.data.get("eval_batch_size", 0) or cfg.train.batch_size
  check(rows % (dp * accum) == 0, f"data.eval_batch_size={rows} (rows per eval batch; 0: train.batch_size) is not "
        f"divisible by train.grad_accum={accum} x the data-parallel size {dp}")
  diag = step.diag_rows(cfg)
  check(diag % dp == 0, f"train.diag_batch={cfg.train.diag_batch} (the sequences diagnostics use; 0: one "
        f"micro-batch, {cfg.train.batch_size // accum}) is not divisible by the data-parallel size {dp}")
  mcfg = configlib.model_config(cfg)
  tx = optim.make(cfg)
  with nn.logical_axis_rules(sharding.RULES):
    boxed = jax.eval_shape(lambda rng: step.init_state(cfg, mcfg, tx, rng, cfg.data.seq_len), jax.random.key(0))
    state_sh = sharding.logical_shardings(boxed, mesh)
  abstract = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), nn.unbox(boxed), state_sh)
  return Setup(cfg, mcfg, mesh, tx, state_sh, sharding.batch_sharding(mesh), sharding.replicated(mesh), abstract)
