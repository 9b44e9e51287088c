"""Step-time benchmark: python -m resnorm.bench --config=configs/NAME.py [--config.*=...] [--residuals=a,b]
[--depths=12,96] [--kernels=xla_cpu,reference] [--steps=N] [--json=FILE]; --loop [--rounds=N]: the training loop's
train_s against the same number of bare steps (resnorm/bench/bench_loop.py); --decode: decoding.

Every point is the real train step (resnorm.step.runtime, the code train.py runs) on synthetic batches, in ONE process.
Repetitions are interleaved across points (A B A B ...), so drift on a noisy machine hits all points alike.
MFU = analytic training FLOPs per token (resnorm.model.flops) x tokens/s / peak. Peak: on CPU a float32 matmul measured
in this process; on GPU/TPU the datasheet dense peak for the compute dtype.
"""
import json
import os
import resource
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags
from ml_collections import config_flags

from resnorm.config import configkeys, configlib
from resnorm.io import storage
from resnorm.model import flops
from resnorm.scale import hostmem, startup
from resnorm.step import runtime
from resnorm.core.errors import InputError, check, cli_main, run_app

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "Config file.", lock_config=True)
flags.DEFINE_list("residuals", None, "Variants to compare (default: the config's).")
flags.DEFINE_list("depths", None, "Depths to compare (default: the config's).")
flags.DEFINE_list("kernels", None, "model.kernels sets to compare, e.g. xla_cpu,reference (default: the config's).")
flags.DEFINE_integer("steps", 20, "Timed steps per point.")
flags.DEFINE_bool("decode", False, "Time decoding instead: prefill, and per-token time at positions 32 and 512.")
flags.DEFINE_integer("warmup", 2, "Untimed steps per point after compilation.")
flags.DEFINE_multi_string("xla", None, "XLA compile options to compare, one set per use of the flag: 'default' or "
                          "KEY=VALUE[,KEY=VALUE], e.g. --xla=default --xla=xla_cpu_use_onednn=true (per compile, so "
                          "every set runs in this one process, interleaved).")
flags.DEFINE_bool("loop", False, "Time the training loop instead: a Trainer run of the config (train.steps, its evals, "
                  "checkpoints and diagnostics) against train.steps bare steps, alternated.")
flags.DEFINE_integer("rounds", 2, "--loop: loop/bare pairs per point (A B, B A, ...).")
flags.DEFINE_string("json", None, "Write the results here.")

# Dense peak FLOP/s by device kind (substring match) and compute dtype.
DATASHEET = {"H200": {"bfloat16": 989e12, "float32": 67e12}, "H100": {"bfloat16": 989e12, "float32": 67e12},
             "A100": {"bfloat16": 312e12, "float32": 19.5e12}, "TPU v4": {"bfloat16": 275e12, "float32": 275e12},
             "TPU v5 lite": {"bfloat16": 197e12, "float32": 197e12}, "TPU v5": {"bfloat16": 459e12, "float32": 459e12},
             "TPU v6": {"bfloat16": 918e12, "float32": 918e12}}


def measured_matmul_peak(n: int = 2048, reps: int = 10) -> float:
  a = jnp.ones((n, n), jnp.float32)
  f = jax.jit(lambda x: x @ x)
  f(a).block_until_ready()
  times = []
  for _ in range(reps):
    t = time.perf_counter()
    f(a).block_until_ready()
    times.append(time.perf_counter() - t)
  return 2 * n ** 3 / min(times)


def peak(dtype: str) -> tuple[float, str]:
  dev = jax.devices()[0]
  if dev.platform == "cpu":
    return measured_matmul_peak(), "measured_matmul"
  for kind, table in DATASHEET.items():
    if kind.lower() in dev.device_kind.lower():
      return table[dtype], f"datasheet:{dev.device_kind}"
  return measured_matmul_peak(8192), "measured_matmul"


def memory_mb() -> float:
  dev = jax.devices()[0]
  stats = dev.memory_stats() if dev.platform != "cpu" else None
  if stats and "peak_bytes_in_use" in stats:
    return stats["peak_bytes_in_use"] / 2**20
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _minor_faults() -> int:
  """Page faults served without I/O, this process so far: a step that re-faults its buffers shows them here."""
  return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def xla_option_set(text: str) -> tuple[str, dict]:
  """'default' -> ('default', {}); 'k=v,k2=v2' -> (text, {k: v}) with true/false as bools and integers as ints. An
  item without '=' continues the value before it, for list-valued options (enum names):
  'xla_cpu_experimental_ynn_fusion_type=LIBRARY_FUSION_TYPE_DOT,LIBRARY_FUSION_TYPE_ELTWISE'."""
  if text == "default":
    return text, {}
  pairs = []
  for item in text.split(","):
    k, sep, v = item.partition("=")
    if not sep and pairs:
      pairs[-1][1] += "," + item
      continue
    check(sep and k.startswith("xla_"), f"--xla={text}: {item!r} is not KEY=VALUE with an xla_ option")
    pairs.append([k, v])
  return text, {k: {"true": True, "false": False}.get(v.lower(), int(v) if v.lstrip("-").isdigit() else v)
                for k, v in pairs}


class Point:
  def __init__(self, cfg, xla=("default", {})):
    self.cfg, self.xla = cfg, xla[0]
    self.s = runtime.build(cfg)
    self.state = self.s.init_state()
    b, t = cfg.train.batch_size, cfg.data.seq_len
    tok = np.random.default_rng(0).integers(0, 256, (b, t + 1)).astype(np.int32)
    self.batch = self.s.device_batch({"inputs": tok[:, :-1], "targets": tok[:, 1:], "mask": np.ones((b, t), np.float32)})
    try:
      self.fn, self.compile_s = self.s.compile_train_step(self.state, self.batch, xla[1] or None)
    except Exception as e:  # XLA refuses an unknown option or value: one line, not a traceback
      if not xla[1]:
        raise
      raise InputError(f"--xla={xla[0]}: {str(e).splitlines()[0]}") from None
    self.times, self.faults = [], []

  def step(self, record: bool):
    f0, t0 = _minor_faults(), time.perf_counter()
    with self.s.mesh_context():
      self.state, m = self.fn(self.state, self.batch)
    jax.block_until_ready((self.state, m))
    if record:
      self.times.append(time.perf_counter() - t0)
      self.faults.append(_minor_faults() - f0)


def run(base_cfg, residuals, depths, steps: int, warmup: int, kernel_sets=None, xla_sets=None) -> dict:
  pk, source = peak(base_cfg.model.dtype)
  points = []
  grid = [(r, d, k, x) for r in residuals for d in depths for k in (kernel_sets or [base_cfg.model.kernels])
          for x in (xla_sets or [("default", {})])]
  for r, d, k, x in grid:
    cfg = base_cfg.copy_and_resolve_references()
    cfg.model.residual, cfg.model.num_layers, cfg.model.kernels = r, d, k
    p = Point(cfg, x)
    for _ in range(warmup):
      p.step(False)
    p.rss = memory_mb()
    points.append(p)
  for _ in range(steps):  # interleaved: A B C A B C ...
    for p in points:
      p.step(True)
  runs = []
  for p in points:
    m, t = p.s.mcfg, p.cfg.data.seq_len * p.cfg.train.batch_size
    med = statistics.median(p.times)
    fpt = flops.train_flops_per_token(m, p.cfg.data.seq_len)
    runs.append({"residual": m.residual, "num_layers": m.num_layers, "kernels": m.kernels, "xla": p.xla,
                 "compile_s": p.compile_s,
                 "step_s_median": med, "step_s_min": min(p.times), "tokens_per_s": t / med,
                 "flops_per_token": fpt, "achieved_flops": fpt * t / med, "mfu": fpt * t / med / pk,
                 "peak_rss_mb": p.rss, "minor_faults_per_step": statistics.median(p.faults)})
  return {"peak_flops": pk, "peak_source": source, "device": jax.devices()[0].device_kind,
          "host_malloc": hostmem.mode(), "runs": runs}


def print_table(res: dict) -> None:
  print(f"peak {res['peak_flops'] / 1e9:.1f} GFLOP/s ({res['peak_source']}, {res['device']}), "
        f"host malloc: {res['host_malloc']}")
  first = res["runs"][0]
  print(f"{'residual':<11}{'L':>4}{'kernels':>10}{'compile s':>10}{'step ms':>9}{'(min)':>8}{'x first':>8}{'tok/s':>9}"
        f"{'MFLOP/tok':>10}{'GFLOP/s':>9}{'MFU':>7}{'RSS MB':>8}{'faults':>8}")
  for r in res["runs"]:
    print(f"{r['residual']:<11}{r['num_layers']:>4}{r['kernels']:>10}{r['compile_s']:>10.2f}{r['step_s_median'] * 1e3:>9.1f}"
          f"{r['step_s_min'] * 1e3:>8.1f}{r['step_s_median'] / first['step_s_median']:>8.2f}"
          f"{r['tokens_per_s']:>9.0f}{r['flops_per_token'] / 1e6:>10.2f}{r['achieved_flops'] / 1e9:>9.2f}"
          f"{r['mfu'] * 100:>6.1f}%{r['peak_rss_mb']:>8.0f}{r['minor_faults_per_step']:>8.0f}"
          + (f"  {r['xla']}" if any(x["xla"] != "default" for x in res["runs"]) else ""))


@cli_main
def main(argv):
  check(len(argv) == 1, f"unexpected arguments: {' '.join(argv[1:])}")
  cfg = configkeys.load(FLAGS)
  check(cfg is not None, "--config is required")
  check(FLAGS.steps >= 1, f"--steps={FLAGS.steps} must be >= 1")
  if FLAGS.json:  # before the benchmark, not after it
    check(storage.isdir(os.path.dirname(storage.absolute(FLAGS.json))),
          f"--json={FLAGS.json}: its directory does not exist")
  startup.start(compilation_cache=False)  # as train.py starts, but compile_s is always a real compile
  residuals = FLAGS.residuals or [cfg.model.residual]
  try:
    depths = [int(d) for d in (FLAGS.depths or [cfg.model.num_layers])]
  except ValueError:
    raise InputError(f"--depths={','.join(FLAGS.depths)} must be integers") from None
  for k in FLAGS.kernels or []:
    check(k in configlib.CHOICES["model.kernels"], f"--kernels: {k!r} is unknown; known: auto, xla_cpu, reference")
  if FLAGS.loop:
    from resnorm.bench import bench_loop
    check(FLAGS.rounds >= 1, f"--rounds={FLAGS.rounds} must be >= 1")
    res = bench_loop.run(cfg, residuals, depths, FLAGS.rounds)
    bench_loop.print_loop(res)
  elif FLAGS.decode:
    from resnorm.bench import bench_decode
    rows = []
    for r in residuals:
      for d in depths:
        c = cfg.copy_and_resolve_references()
        c.model.residual, c.model.num_layers = r, d
        rows.append(bench_decode.decode_point(c))
    res = {"device": jax.devices()[0].device_kind, "decode": rows}
    bench_decode.print_decode(rows)
  else:
    xla_sets = [xla_option_set(x) for x in FLAGS.xla] if FLAGS.xla else None
    res = run(cfg, residuals, depths, FLAGS.steps, FLAGS.warmup, FLAGS.kernels, xla_sets)
    print_table(res)
  if FLAGS.json:
    storage.write_text(FLAGS.json, json.dumps(res, indent=1))
  return 0


if __name__ == "__main__":
  run_app(main, explain=configkeys.flag_error)
