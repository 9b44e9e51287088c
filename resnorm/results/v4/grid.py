"""The run grid behind docs/results.md: one design (seeds, depths, learning rates, warmups) -> named sweep points.

configs/sweeps/results.py holds the full design and its budget; QUICK and TEST below shrink it for
`python -m resnorm.results --quick` and for the test. The size is read from $RESNORM_RESULTS_SIZE, which
resnorm.results sets for the sweep it starts, so the sweep file and the report build the same grid.
Every recipe runs on every corpus of CORPORA; a run's name carries its corpus unless that is pystdlib (so the
runs of report v2, all on pystdlib, keep their names and are reused).
Imports nothing heavy: the sweep file imports this module.
"""
import os
from typing import NamedTuple

from resnorm.core.errors import check
from resnorm.results.engine.paths import RECORDS_ENV, SIZE_ENV, add_points as _add, base_config

SCALE_ENV = "RESNORM_RESULTS_SCALE"   # cpu | tpu: the configs' scale, and the design sized for it
TPU_DATA_ENV = "RESNORM_RESULTS_TPU_DATA"  # --scale=tpu: the corpus shards (data.name=files; C4, FineWeb, ...)
DATA_ENV = "RESNORM_RESULTS_DATA"     # text files (a glob) instead of the default corpus: the test's
SHAKESPEARE_ENV = "RESNORM_RESULTS_SHAKESPEARE_DIR"  # a data_dir holding the prepared shakespeare corpus: the test's
SIZES = ("full", "quick", "test")
SCALES = ("cpu", "tpu")
CORPORA = ("pystdlib", "shakespeare")
TPU_CORPUS = "web"                     # --scale=tpu's one corpus: the user's shards, read by data.name=files
MAIN = ("pre_norm", "post_norm")
# Extra config per tagged recipe (C8 and C9's ablations; `c3`: the optimizer of the warmup regime).
TAGS = {"": {}, "nofinal": {"model.final_norm": False}, "bf16": {"model.dtype": "bfloat16"},
        "bf16stats": {"model.dtype": "bfloat16", "model.norm_stats_dtype": "compute"}, "c3": {}}

_TINY = {"model.d_model": 32, "model.num_heads": 2, "model.mlp_dim": 64, "data.seq_len": 16,
         "train.batch_size": 4, "data.eval_bytes": 2048, "data.eval_batch_size": 32, "model.remat": "none"}
# --quick: the same pipeline on a d-32 model, 2 seeds, a one-depth map, 2 learning rates, on both corpora: 128 short
# runs. A run is mostly process start and compilation (about 10 s of its 13), so the cost goes with the number of
# runs. With depths (2, 4, 6) and init depths up to 16 it was 136 runs: measured 15.3 minutes (2026-12-01, evening)
# and 15.5 (2026-12-02, compilation cache warm) at --jobs=2 on 2 idle cores, over the 15-minute target; C4's depth
# sweep and C1-C2's init depths lost their largest depth for that.
TWO = {"init": 2, "map": 2, "c3": 2, "depth": 2, "long": 2, "ablation": 2}  # --quick's and the test's seeds per block
QUICK = {"steps": 60, "block_seeds": TWO, "map_depths": (2,), "map_variant_depths": {}, "lrs": (3e-3, 3e-2), "ref_lr": 3e-3,
         "depths": (2, 4), "horizon": 120, "pair_layers": 2, "init_depths": (2, 4, 8),
         "long": {"layers": 2, "lr": 3e-3, "steps": 150},
         "c3": {"layers": 2, "lr": 3e-2, "steps": 120, "warmup_frac": 0.3},
         "common": {**_TINY, "data.seq_len": 32, "train.batch_size": 8, "data.eval_bytes": 32768}}
# The test: every claim but C9 computed from real (3-step, 1-2 layer) runs, as few of them as that takes: 18 runs
# per corpus, 36 in all. The map is one column; its warmup-0 cells for Pre- and Post-Norm come from the C3 regime. C9's
# bfloat16 runs (1.5x the cost on this CPU) are left out; its computation is tested on hand-made runs.
TEST = {"steps": 4, "block_seeds": TWO, "map_depths": (2,), "map_variant_depths": {}, "lrs": (1e-2,), "warmup_fracs": (0.5,),
        "ref_lr": 1e-2, "ref_warmup_frac": 0.5, "depths": (1, 2), "horizon": 4, "pair_layers": 2, "init_depths": (1, 2),
        "long": {"layers": 2, "lr": 1e-2, "steps": 4}, "c3": {"layers": 2, "lr": 1e-2, "steps": 4, "warmup_frac": 0.5},
        "bf16_tags": (), "common": _TINY}


# The test of --scale=tpu (through a real SLURM): the :tpu configs shrunk to a tiny float32 model, and the fewest
# runs that still give C4-C8 a value: Pre- and Post-Norm at 1 layer (map = depth sweep = C7), Pre-Norm without its
# final norm; 2 seeds: 6 runs.
TEST_TPU = {**TEST, "variants": MAIN, "depths": (1,), "pair_layers": 1, "init_depths": (1,),
            "map_depths": (1,), "long": {"layers": 1, "lr": 1e-2, "steps": 4}, "c3": None,
            "common": {**_TINY, "model.dtype": "float32", "train.grad_accum": 1, "train.diag_batch": 2,
                       "data.eval_batches": 1, "data.val_fraction": 0.2}}


class Recipe(NamedTuple):
  """One point of the grid, before the seed."""
  variant: str
  layers: int
  lr: float
  warmup_frac: float
  steps: int
  tag: str = ""


def design(full: dict, size: str | None = None, scale: str | None = None, tpu: dict | None = None) -> dict:
  """The full design, or its quick/test shrink; $RESNORM_RESULTS_DATA swaps the corpus for text files.
  scale="tpu": the accelerator design `tpu` (fewer cells) over the :tpu configs, on one corpus, the user's shards
  ($RESNORM_RESULTS_TPU_DATA); its test shrink is TEST_TPU."""
  size = size or os.environ.get(SIZE_ENV) or "full"
  scale = scale or os.environ.get(SCALE_ENV) or "cpu"
  check(size in SIZES, f"${SIZE_ENV}={size!r} is unknown; known: {', '.join(SIZES)}")
  check(scale in SCALES, f"--scale={scale!r} is unknown; known: {', '.join(SCALES)}")
  if scale == "tpu":
    check(size != "quick", "--quick is the CPU pipeline on a tiny model; --scale=tpu has no quick size")
    check(tpu is not None, "this sweep file has no design for --scale=tpu")
    base = {**full, **tpu, "long": {**full["long"], **tpu.get("long", {})}}
    shrink = {"full": {}, "test": TEST_TPU}[size]
  else:
    base, shrink = full, {"full": {}, "quick": QUICK, "test": TEST}[size]
  d = {**base, **shrink, "size": size, "scale": scale,
       "config": "configs/base.py" + (":tpu" if scale == "tpu" else "")}
  d["seeds"] = tuple(range(max(d["block_seeds"].values())))  # every seed some block runs
  d["long"] = {**base["long"], **d["long"]}
  if d["c3"] and size != "full":
    d["c3"] = {**(base["c3"] or {}), **d["c3"]}
  if scale == "tpu":
    paths = os.environ.get(TPU_DATA_ENV, "")
    check(paths, f"--scale=tpu needs --data_paths (${TPU_DATA_ENV}): the corpus shards, e.g. "
          "'gs://BUCKET/c4/en/c4-train.*.json.gz'")
    d["corpora"] = {TPU_CORPUS: {"data.name": "files", "data.paths": paths}}
    return d
  d["corpora"] = {c: {"data.name": c} for c in CORPORA}
  if os.environ.get(DATA_ENV):
    d["corpora"]["pystdlib"] = {"data.name": "text_files", "data.paths": os.environ[DATA_ENV]}
  if os.environ.get(SHAKESPEARE_ENV):
    d["corpora"]["shakespeare"]["data.data_dir"] = os.environ[SHAKESPEARE_ENV]
  return d


def warmup_steps(steps: int, frac: float) -> int:
  return int(round(frac * steps))


def ref(d, variant: str, layers: int, lr: float | None = None, tag: str = "", steps: int | None = None) -> Recipe:
  """The reference recipe (one learning rate, about 10% warmup) at a depth, over the map's steps by default."""
  return Recipe(variant, layers, d["ref_lr"] if lr is None else lr, d["ref_warmup_frac"], steps or d["steps"], tag)


def ref_long(d, variant: str, layers: int) -> Recipe:
  """The reference recipe at the horizon of the training-outcome claims (C2b, C4, C5)."""
  return ref(d, variant, layers, steps=d["horizon"])


def c3_recipes(d) -> list[Recipe]:
  """C3's warmup regime: Post- and Pre-Norm with and without a long warmup, at a high lr (None: not in design).
  Tagged only when it changes the optimizer, so that otherwise it shares runs with the map where they coincide."""
  c = d["c3"]
  if not c:
    return []
  tag = "c3" if c.get("train") else ""
  return [Recipe(v, c["layers"], c["lr"], f, c["steps"], tag) for v in MAIN for f in (0.0, c["warmup_frac"])]


def blocks(d) -> dict:
  """Every recipe the claims read -> the blocks of runs it belongs to (design.BLOCK_SEEDS), in order. The map
  (C3a-b/d, C6, C10; C8-C9's base arm) runs every variant at every map depth but those d["map_variant_depths"]
  restricts (Post-Norm only where it trains at all)."""
  out: dict = {}
  add = lambda r, b: out.setdefault(r, set()).add(b)
  only = d.get("map_variant_depths", {})
  for L in d["map_depths"]:
    for v in d["variants"]:
      if L in only.get(v, (L,)):
        for lr in d["lrs"]:
          for f in d["warmup_fracs"]:
            add(Recipe(v, L, lr, f, d["steps"]), "map")
  for L in d["depths"]:
    for v in MAIN:
      add(ref_long(d, v, L), "depth")                                       # C4; its pair_layers pair: C2b, C5
  for v in MAIN:
    add(ref_long(d, v, d["pair_layers"]), "depth")
  lg = d["long"]
  for v in MAIN:
    for s in (d["steps"], lg["steps"]):
      add(Recipe(v, lg["layers"], lg["lr"], d["ref_warmup_frac"], s), "long")  # C7
  deep = max(d["map_depths"])
  for lr in ablation_lrs(d):
    for tag in ("", "nofinal", *d["bf16_tags"]):
      add(ref(d, "pre_norm", deep, lr, tag), "ablation")                    # C8, C9
  for r in c3_recipes(d):
    add(r, "c3")
  return out


def recipes(d) -> list[Recipe]:
  """Every recipe the claims read, in order, without duplicates."""
  return list(blocks(d))


def ablation_lrs(d) -> tuple:
  """C8 and C9 at the reference lr and at the highest lr of the map (the one most likely to destabilize)."""
  return tuple(dict.fromkeys((d["ref_lr"], max(d["lrs"]))))


def block_seeds(d, block: str) -> tuple:
  return tuple(range(d["block_seeds"][block]))


def seeds_of(d, r: Recipe) -> tuple:
  """A recipe's seeds: 0..n-1, n the largest of its blocks' (design.BLOCK_SEEDS)."""
  return tuple(range(max(d["block_seeds"][b] for b in blocks(d)[r])))


def diagnosed(d, r: Recipe) -> bool:
  """Per-sublayer diagnostics (at step 0 and at the end) only where a claim reads them: the reference recipe, and
  its long-horizon pair (C2b, C5)."""
  return r.tag == "" and r.lr == d["ref_lr"] and r.warmup_frac == d["ref_warmup_frac"] and \
      (r.steps == d["steps"] or (r.steps == d["horizon"] and r.layers == d["pair_layers"]))


def run_name(r: Recipe, seed: int, corpus: str = "pystdlib") -> str:
  parts = [r.variant, f"{r.layers}l", f"lr{r.lr:g}", f"wu{warmup_steps(r.steps, r.warmup_frac)}", f"{r.steps}st"]
  return "-".join(parts + ([r.tag] if r.tag else []) + ([corpus] if corpus != "pystdlib" else []) + [f"s{seed}"])


def overrides(d, r: Recipe, seed: int, corpus: str = "pystdlib") -> dict:
  o = {"seed": seed, "model.residual": r.variant, "model.num_layers": r.layers, "train.lr": r.lr,
       "train.warmup_steps": warmup_steps(r.steps, r.warmup_frac), "train.steps": r.steps,
       # evals at 50%, 75% (the eval set's fixed subset: 1/eval_subset_every of its rows) and 100% (all rows, and
       # the subset's loss from the same sums): the regime compares 75% with 100% like with like
       "train.eval_every": max(1, r.steps // 4), "train.eval_start": r.steps // 2,
       "data.eval_subset_every": d.get("eval_subset_every", 1), "train.ckpt_every": r.steps,
       # diagnostics where a claim reads them, every quarter: the statistics built on them are read at 75% and 100%
       "train.diag_every": max(1, r.steps // 4) if diagnosed(d, r) else 0, **d["common"],
       **d["corpora"][corpus],
       **TAGS[r.tag]}
  if r.tag == "c3":
    o.update(d["c3"].get("train", {}))
  return o


def config(d, corpus: str, over: dict):
  """configs/base.py at the design's scale with its common and corpus overrides, then `over` (dotted keys)."""
  return base_config(d["scale"], {**d["common"], **d["corpora"][corpus], **over})


def points(d) -> list[tuple[str, Recipe, int]]:
  """(corpus, recipe, seed) of every run, seed-major within a corpus: a recipe's later seeds run after its first
  compiled (compilation cache)."""
  seeds = {r: seeds_of(d, r) for r in recipes(d)}
  return [(c, r, s) for c in d["corpora"] for s in d["seeds"] for r in seeds if s in seeds[r]]


def add_points(add, d) -> None:
  """The sweep's points: every run of the design but those whose record exists under $RESNORM_RESULTS_RECORDS."""
  _add(add, [(c, run_name(r, s, c), d["config"], overrides(d, r, s, c)) for c, r, s in points(d)],
       os.environ.get(RECORDS_ENV))
