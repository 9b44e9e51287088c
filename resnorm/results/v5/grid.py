"""Report v5's grid (resnorm/results/v5/design.py): one run per corpus, seed, arm and ladder width, named
<arm>-d<width>-<steps>st[-<corpus>]-s<seed>, each run's record under results/v5/<corpus>/<name>.json.

The size is read from $RESNORM_RESULTS_SIZE (resnorm.results.engine.paths.SIZE_ENV) as for report v4, so that the sweep file
(configs/sweeps/v5.py) and the report build the same grid: `full` is the design, `test` a two-width ladder of tiny
models on one corpus for the end-to-end test. Imports nothing heavy: the sweep file imports this module.
"""
import os
from typing import NamedTuple

from resnorm.core.errors import check
from resnorm.results.engine import paths
from resnorm.results.v5 import design as v5

DEFAULT_RECORDS = "results/v5"
SWEEP = os.path.join("configs", "sweeps", "v5.py")


class Point(NamedTuple):
  """One run before its seed and corpus: the arm, the ladder width and its steps."""
  arm: str
  d: int
  steps: int


# The test's size: 2 layers, widths 8 and 16, 3 and 4 steps, the arms of C11-C13 and C15 (C14, C16 and C17 stay
# pending: the report's handling of unfinished runs is part of what it tests), 2 seeds, one corpus.
TEST = {"ladder": (8, 16), "depth": 2, "steps": {8: 3, 16: 4}, "seeds": 2, "corpora": ("pystdlib",),
        "arms": ("pre_norm", "attn_res_block", "attn_res", "value_residual"),
        "common": {"model.attn_res.num_blocks": 2, "data.seq_len": 16, "train.batch_size": 4,
                   "data.eval_bytes": 2048, "data.eval_batch_size": 32, "model.remat": "none"}}


def design(size: str | None = None) -> dict:
  """The v5 grid at a size: its ladder, depth, steps per width, seeds, corpora, arms and common overrides."""
  size = size or os.environ.get(paths.SIZE_ENV) or "full"
  check(size in ("full", "test"), f"report v5 has sizes full and test, not {size!r}")
  full = {"ladder": v5.LADDER_D, "depth": v5.DEPTH, "steps": {d: v5.steps(d) for d in v5.LADDER_D},
          "seeds": v5.SEEDS, "corpora": v5.CORPORA, "arms": v5.ARMS,
          "common": {"data.seq_len": v5.SEQ, "train.batch_size": v5.BATCH, "data.eval_bytes": v5.EVAL_BYTES}}
  d = {**full, **(TEST if size == "test" else {}), "size": size}
  d["common"] = {**full["common"], **d["common"]}
  return d


def points(d) -> list[tuple[str, Point, int]]:
  """(corpus, point, seed) of every run, seed-major across the corpora (a grid stopped early leaves whole seeds
  on both), the widths in ladder order."""
  return [(c, Point(a, w, d["steps"][w]), s) for s in range(d["seeds"]) for c in d["corpora"]
          for w in d["ladder"] for a in d["arms"]]


def run_name(p: Point, seed: int, corpus: str) -> str:
  return f"{p.arm}-d{p.d}-{p.steps}st" + ("" if corpus == "pystdlib" else f"-{corpus}") + f"-s{seed}"


def diagnosed(d, p: Point) -> bool:
  """Per-sublayer diagnostics at the end of training only where a claim reads them: C12 at the top width."""
  return p.d == max(d["ladder"]) and p.arm in {v5.CLAIMS[k].arm for k in v5.CLAIMS if k[0] == "C12"} | {"pre_norm"}


def overrides(d, p: Point, seed: int, corpus: str) -> dict:
  return {"seed": seed, "data.name": corpus, "model.num_layers": d["depth"], "model.d_model": p.d,
          "model.num_heads": p.d // v5.HEAD_DIM, "model.mlp_dim": 4 * p.d, "model.laurel.rank": v5.laurel_rank(p.d),
          "train.steps": p.steps, "train.warmup_steps": max(1, round(v5.WARMUP_FRAC * p.steps)), "train.lr": v5.LR,
          "train.eval_every": p.steps, "train.ckpt_every": p.steps,
          "train.diag_every": p.steps if diagnosed(d, p) else 0, **d["common"]}


def config_path(p: Point) -> str:
  return f"configs/{p.arm}_12l.py"


def add_points(add, d, records_dir: str | None = None) -> None:
  """The sweep's points: every run of the grid but those with a record under records_dir."""
  paths.add_points(add, [(c, run_name(p, s, c), config_path(p), overrides(d, p, s, c)) for c, p, s in points(d)],
                   records_dir)
