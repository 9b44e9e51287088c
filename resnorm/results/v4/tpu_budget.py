"""`resnorm.results --scale=tpu`'s budget before it submits anything: per distinct model of the design, its runs,
their device-hours on --target (the sweep file's device_hours: analytic FLOPs at an assumed MFU) and the per-device
peak of its memory plan (train.py --dry_run --target, by the TPU compiler where libtpu is installed). A design
with a model that does not fit --target is refused, naming the model and the settings that would fit.

A model is what the memory plan compiles: a point's overrides less those that change only the trajectory (seed,
learning rate, warmup, steps, eval/checkpoint cadence); whether diagnostics run stays (their step is compiled).
"""
from resnorm.core.errors import InputError
from resnorm.plan import memplan
from resnorm.plan import memtable
from resnorm.results.v4 import grid
from resnorm.sweep import preflight

TRAJECTORY_ONLY = ("seed", "train.lr", "train.warmup_steps", "train.steps", "train.eval_every", "train.ckpt_every")
# bf16 dense peak per chip, FLOP/s (Cloud TPU's published figures)
CHIP_PEAK = {"v4": 275e12, "v5e": 197e12, "v5p": 459e12, "v6e": 918e12}


def peak_flops(target: memplan.Target) -> float:
  if target.platform != "tpu":
    raise InputError(f"--target={target.name}: --scale=tpu budgets TPU slices (v4-8, v5e-8, v5p-8, v6e-8, ...)")
  return target.devices * CHIP_PEAK[target.generation]


def model_key(over: dict) -> tuple:
  o = {k: v for k, v in over.items() if k not in TRAJECTORY_ONLY}
  o["train.diag_every"] = int(bool(o.get("train.diag_every")))
  return tuple(sorted(o.items()))


def models(d) -> dict:
  """model_key -> (its overrides, [(corpus, recipe, seed)])."""
  out = {}
  for c, r, s in grid.points(d):
    over = grid.overrides(d, r, s, c)
    key = model_key(over)
    out.setdefault(key, (dict(key), []))[1].append((c, r, s))
  return out


def describe(over: dict, varying: set) -> str:
  """The model by what sets it apart from the design's other models."""
  L = over["model.num_layers"]
  text = f"{over['model.residual']}, {L} layer{'s' if L != 1 else ''}"
  rest = [f"{k}={over[k]}" for k in sorted(varying - {"model.residual", "model.num_layers", "train.diag_every"})
          if k in over]
  return text + (f" ({', '.join(rest)})" if rest else "") + ("" if over["train.diag_every"] else ", no diagnostics")


def plan(d, target_name: str, compiler: str, mfu: float, device_hours) -> list[dict]:
  """One row per model: overrides, runs, hours, and its memory plan (plan_json)."""
  target = memplan.parse_target(target_name)
  peak = peak_flops(target)
  comp = memplan.compiler_for(target, compiler)
  ms = list(models(d).values())
  keys = {k for over, _ in ms for k in over}
  varying = {k for k in keys if len({repr(over.get(k)) for over, _ in ms}) > 1}
  rows = []
  for over, pts in ms:
    p = memtable.plan_json(d["config"], target.name, comp, over)
    rows.append({"model": describe(over, varying), "overrides": over, "runs": len(pts),
                 "hours": device_hours(d, peak, mfu, pts), "plan": p})
  return rows


def table(rows: list[dict], target: str) -> str:
  comp = rows[0]["plan"]["compiler"] + (f" (libtpu {rows[0]['plan']['libtpu']})" if rows[0]["plan"]["libtpu"]
                                        else "") if rows else ""
  out = [f"| model | runs | {target} hours | peak per device, {comp} | fits |", "|---|---|---|---|---|"]
  for r in rows:
    p = r["plan"]
    out.append(f"| {r['model']} | {r['runs']} | {r['hours']:.3g} | {memplan.fmt(p['peak'])} of "
               f"{p['memory_gib']:g} GiB | {'yes' if p['fits'] else '**no**'} |")
  total = sum(r["hours"] for r in rows)
  out.append(f"| all | {sum(r['runs'] for r in rows)} | {total:.3g} | | |")
  return "\n".join(out)


def refuse_unless_fits(rows: list[dict], target: str) -> None:
  bad = [r for r in rows if not r["plan"]["fits"]]
  if not bad:
    return
  r = bad[0]
  fix = r["plan"]["suggestions"]
  hint = ("; fits with " + " ".join(f"--config.{k}={v}" for k, v in fix[0]["overrides"].items())) if fix else \
      "; no setting tried fits"
  raise InputError(f"the design does not fit {target}: {len(bad)} of its {len(rows)} models, first {r['model']}: "
                   f"peak {memplan.fmt(r['plan']['peak'])} of {r['plan']['memory_gib']:g} GiB per device "
                   f"({r['plan']['compiler']}){hint} (nothing was submitted)")


def check_design(d, root: str, target: str, compiler: str, mfu: float, device_hours) -> str:
  """Preflight of every point (config and data, cheap), then the memory plan of each model: the table, printed by
  the caller; raises InputError before anything is submitted when a model does not fit."""
  pts = [{"config": d["config"], "name": grid.run_name(r, s, c), "overrides": grid.overrides(d, r, s, c)}
         for c, r, s in grid.points(d)]
  preflight.check_points(pts, root)
  rows = plan(d, target, compiler, mfu, device_hours)
  text = table(rows, target)
  print(text, flush=True)
  refuse_unless_fits(rows, target)
  return text

