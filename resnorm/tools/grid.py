"""The run grid behind docs/results.md: one design (seeds, depths, learning rates, warmups) -> named sweep points.

configs/sweeps/results.py holds the full design and its budget; QUICK and TEST below shrink it for
`python -m resnorm.results --quick` and for the test. The size is read from $RESNORM_RESULTS_SIZE, which
resnorm.results sets for the sweep it starts, so the sweep file and the report build the same grid.
Imports nothing heavy: the sweep file imports this module.
"""
import os
from typing import NamedTuple

from resnorm.errors import check

SIZE_ENV = "RESNORM_RESULTS_SIZE"     # full | quick | test
DATA_ENV = "RESNORM_RESULTS_DATA"     # text files (a glob) instead of the default corpus: the test's
SIZES = ("full", "quick", "test")
MAIN = ("pre_norm", "post_norm")
# Extra config per tagged recipe (C8 and C9's ablations; `c3`: the optimizer of the warmup regime).
TAGS = {"": {}, "nofinal": {"model.final_norm": False}, "bf16": {"model.dtype": "bfloat16"},
        "bf16stats": {"model.dtype": "bfloat16", "model.norm_stats_dtype": "compute"}, "c3": {}}

_TINY = {"model.d_model": 32, "model.num_heads": 2, "model.mlp_dim": 64, "data.seq_len": 16,
         "train.batch_size": 4, "data.eval_batches": 2, "model.remat": "none"}
# --quick: the same pipeline on a d-32 model, 2 seeds, 2 depths, 2 learning rates: 92 short runs, 10.5 CPU-minutes
# measured (about 6 minutes with --jobs=2 on 2 idle cores; 21 on the shared machine).
QUICK = {"steps": 60, "seeds": (0, 1), "map_depths": (2, 6), "lrs": (3e-3, 3e-2), "ref_lr": 3e-3,
         "depths": (2, 4, 6), "init_depths": (2, 4, 8, 16), "long": {"layers": 2, "lr": 3e-3, "steps": 150},
         "c3": {"layers": 2, "lr": 3e-2, "steps": 120, "warmup_frac": 0.3},
         "common": {**_TINY, "data.seq_len": 32, "train.batch_size": 8, "data.eval_batches": 4}}
# The test: every claim but C9 computed from real (3-step, 1-2 layer) runs, as few of them as that takes: 18 runs,
# under 3 CPU-minutes. The map is one column; its warmup-0 cells for Pre- and Post-Norm come from the C3 regime. C9's
# bfloat16 runs (1.5x the cost on this CPU) are left out; its computation is tested on hand-made runs.
TEST = {"steps": 3, "seeds": (0, 1), "map_depths": (2,), "lrs": (1e-2,), "warmup_fracs": (0.5,),
        "ref_lr": 1e-2, "ref_warmup_frac": 0.5, "depths": (1, 2), "init_depths": (1, 2),
        "long": {"layers": 2, "lr": 1e-2, "steps": 3}, "c3": {"layers": 2, "lr": 1e-2, "steps": 3, "warmup_frac": 0.5},
        "bf16_tags": (), "evals": 1, "common": _TINY}


class Recipe(NamedTuple):
  """One point of the grid, before the seed."""
  variant: str
  layers: int
  lr: float
  warmup_frac: float
  steps: int
  tag: str = ""


def design(full: dict, size: str | None = None) -> dict:
  """The full design, or its quick/test shrink; $RESNORM_RESULTS_DATA swaps the corpus for text files."""
  size = size or os.environ.get(SIZE_ENV) or "full"
  check(size in SIZES, f"${SIZE_ENV}={size!r} is unknown; known: {', '.join(SIZES)}")
  d = {**full, **{"full": {}, "quick": QUICK, "test": TEST}[size], "size": size}
  d["long"] = {**full["long"], **d["long"]}
  if d["c3"] and size != "full":
    d["c3"] = {**(full["c3"] or {}), **d["c3"]}
  if os.environ.get(DATA_ENV):
    d["common"] = {**d["common"], "data.name": "text_files", "data.paths": os.environ[DATA_ENV]}
  return d


def warmup_steps(steps: int, frac: float) -> int:
  return int(round(frac * steps))


def ref(d, variant: str, layers: int, lr: float | None = None, tag: str = "") -> Recipe:
  """The reference recipe (one learning rate, about 10% warmup) at a depth."""
  return Recipe(variant, layers, d["ref_lr"] if lr is None else lr, d["ref_warmup_frac"], d["steps"], tag)


def c3_recipes(d) -> list[Recipe]:
  """C3's warmup regime: Post- and Pre-Norm with and without a long warmup, at a high lr (None: not in design).
  Tagged only when it changes the optimizer, so that otherwise it shares runs with the map where they coincide."""
  c = d["c3"]
  if not c:
    return []
  tag = "c3" if c.get("train") else ""
  return [Recipe(v, c["layers"], c["lr"], f, c["steps"], tag) for v in MAIN for f in (0.0, c["warmup_frac"])]


def recipes(d) -> list[Recipe]:
  """Every recipe the claims read, in order, without duplicates."""
  out = [Recipe(v, L, lr, f, d["steps"]) for L in d["map_depths"] for v in d["variants"] for lr in d["lrs"]
         for f in d["warmup_fracs"]]                                        # stability map (C3, C5, C6, C10)
  out += [ref(d, v, L) for L in d["depths"] for v in MAIN]                                # C4
  lg = d["long"]
  out += [Recipe(v, lg["layers"], lg["lr"], d["ref_warmup_frac"], s) for v in MAIN
          for s in (d["steps"], lg["steps"])]                                             # C7
  deep = max(d["map_depths"])
  for lr in ablation_lrs(d):
    out += [ref(d, "pre_norm", deep, lr, tag) for tag in ("", "nofinal", *d["bf16_tags"])]  # C8, C9
  out += c3_recipes(d)
  return list(dict.fromkeys(out))


def ablation_lrs(d) -> tuple:
  """C8 and C9 at the reference lr and at the highest lr of the map (the one most likely to destabilize)."""
  return tuple(dict.fromkeys((d["ref_lr"], max(d["lrs"]))))


def diagnosed(d, r: Recipe) -> bool:
  """Per-sublayer diagnostics (at step 0 and at the end) only where a claim reads them: the reference recipe."""
  return r.tag == "" and r.lr == d["ref_lr"] and r.warmup_frac == d["ref_warmup_frac"] and r.steps == d["steps"]


def run_name(r: Recipe, seed: int) -> str:
  parts = [r.variant, f"{r.layers}l", f"lr{r.lr:g}", f"wu{warmup_steps(r.steps, r.warmup_frac)}", f"{r.steps}st"]
  return "-".join(parts + ([r.tag] if r.tag else []) + [f"s{seed}"])


def overrides(d, r: Recipe, seed: int) -> dict:
  o = {"seed": seed, "model.residual": r.variant, "model.num_layers": r.layers, "train.lr": r.lr,
       "train.warmup_steps": warmup_steps(r.steps, r.warmup_frac), "train.steps": r.steps,
       "train.eval_every": max(1, r.steps // d["evals"]), "train.ckpt_every": r.steps,
       "train.diag_every": r.steps if diagnosed(d, r) else 0, **d["common"], **TAGS[r.tag]}
  if r.tag == "c3":
    o.update(d["c3"].get("train", {}))
  return o


def add_points(add, d) -> None:
  """Seed-major order: a recipe's second and third seeds run after its first compiled (compilation cache)."""
  for seed in d["seeds"]:
    for r in recipes(d):
      add(config="configs/base.py", name=run_name(r, seed), **overrides(d, r, seed))
