"""Report v5's claims C11-C17 and its compute-equivalent table, from the grid's records alone (design.py declares
both; grid.py names the runs).

Per part and corpus, x_s is the per-seed statistic, signed so that the claim predicts x_s > 0 (design.CLAIMS):
- the multiplier parts (C11, C14, C15): mean_k log(C_pre,s(L_k,s) / C_k), C_pre,s the power law
  (compute_equiv.fit_power_law) fitted to Pre-Norm's ladder of seed s and L_k,s the arm's final loss at width k;
- C12a/b: Pre-Norm's coefficient of variation over sublayers of act_rms / grad_norm at the end of training at the
  top width, minus AttnRes's;
- C13: G_block - G_full / 2, G_arm = mean_k (L_pre,k,s - L_arm,k,s);
- C16, C17: G_arm.
A diverged run's loss is design.FAIL_LOSS; a seed whose statistic is still undefined takes the least favourable
value among the other seeds. A part with a run not finished is pending. The parts of both corpora are judged
together by verdicts.finalize (one Benjamini-Hochberg family, v4's four-outcome rule) and claims by engine.claims.combine.

The compute-equivalent table is compute_equiv.multiplier per arm and corpus over the seeds whose ladder is complete
for the arm and Pre-Norm, with compute = resnorm.model.flops' training FLOPs per token (the placement's own
included) x the tokens trained, and whether the paper's multiplier lies inside the bootstrap interval.
"""
import functools
import math

import numpy as np

from resnorm.results import post_hoc, records, verdicts
from resnorm.results.engine import claims as claim_rule
from resnorm.results.engine import paths
from resnorm.results.engine.ledger import Ledger
from resnorm.results.v5 import compute_equiv as ce
from resnorm.results.v5 import design as v5
from resnorm.results.v5 import grid as grid_v5


class Table:
  """The grid's records, by (corpus, arm, width, seed): read and checked (records.read) once."""

  def __init__(self, d, records_dir: str):
    self.d, self.records_dir, self.ledger = d, records_dir, Ledger(records_dir)
    for c, p, s in grid_v5.points(d):
      path = paths.record_path(records_dir, c, grid_v5.run_name(p, s, c))
      self.ledger.read((c, p.arm, p.d, s), path, records.identity(p, c, s))
    self.recs, self.fingerprints = self.ledger.recs, self.ledger.fingerprints

  def loss(self, c, arm, w, s) -> float | None:
    """The final eval loss; FAIL_LOSS for a diverged run (or a non-finite loss); None while it has no record."""
    rec = self.recs.get((c, arm, w, s))
    if rec is None:
      return None
    x = rec.get("final_eval_loss")
    return float(x) if rec["status"] == "completed" and x is not None and math.isfinite(x) else v5.FAIL_LOSS

  def failed(self, c, arm, w, s) -> bool:
    return self.loss(c, arm, w, s) == v5.FAIL_LOSS

  def final_diag(self, c, arm, w, s) -> list | None:
    """The sublayer rows of the diagnostics at the run's last step; None if it has none (diverged, or no record)."""
    rec = self.recs.get((c, arm, w, s))
    steps = self.d["steps"][w]
    last = [x for x in (rec or {}).get("diags", []) if x["step"] == steps and x["sublayers"]]
    return last[-1]["sublayers"] if last else None


@functools.lru_cache(maxsize=None)
def compute(arm: str, w: int, steps: int, size: str = "full") -> float:
  """Training FLOPs of a run: flops.train_flops_per_token of its model (the placement's own terms included) x the
  tokens it trained."""
  from resnorm.config import configlib
  from resnorm.model import flops
  d = grid_v5.design(size)
  p = grid_v5.Point(arm, w, steps)
  cfg = _config(p, grid_v5.overrides(d, p, 0, d["corpora"][0]))
  return float(flops.train_flops_per_token(configlib.model_config(cfg), cfg.data.seq_len) *
               steps * cfg.train.batch_size * cfg.data.seq_len)


def _config(p, over: dict):
  """The validated config the sweep runs for a point (its arm's config file, then the overrides)."""
  from resnorm.sweep import preflight
  return preflight.point_config({"config": grid_v5.config_path(p), "overrides": over}, paths.ROOT)


def ladder(T: Table, c, arm, s) -> np.ndarray | None:
  """[K] final losses of one seed's ladder, None while any is missing."""
  xs = [T.loss(c, arm, w, s) for w in T.d["ladder"]]
  return None if any(x is None for x in xs) else np.asarray(xs)


def computes(T: Table, arm) -> np.ndarray:
  return np.asarray([compute(arm, w, T.d["steps"][w], T.d["size"]) for w in T.d["ladder"]])


def seed_log_multiplier(T: Table, c, arm, s):
  """mean_k log(C_pre,s(L_k,s) / C_k) (None: a run missing; nan: seed s's Pre-Norm fit does not fall)."""
  pre, place = ladder(T, c, "pre_norm", s), ladder(T, c, arm, s)
  if pre is None or place is None:
    return None
  fit = ce.fit_power_law(computes(T, "pre_norm"), pre)
  if fit is None:
    return math.nan
  return float(np.mean(np.log(ce.compute_to_reach(fit, place)) - np.log(computes(T, arm))))


def gain(T: Table, c, arm, s):
  """G = mean_k (L_pre - L_arm) over the ladder."""
  pre, place = ladder(T, c, "pre_norm", s), ladder(T, c, arm, s)
  return None if pre is None or place is None else float(np.mean(pre - place))


def _cv(rows, key):
  x = np.asarray([r[key] for r in rows], float)
  return float(x.std() / x.mean())


def cv_drop(key, kind: int | None = None):
  """Per seed: Pre-Norm's coefficient of variation of `key` over the top width's sublayers minus the arm's; over
  every sublayer, or one kind only (kind 0: attention, 1: MLP; the diagnostics list a layer's attention first)."""
  def f(T: Table, c, arm, s):
    top = max(T.d["ladder"])
    if T.recs.get((c, "pre_norm", top, s)) is None or T.recs.get((c, arm, top, s)) is None:
      return None
    pre, place = T.final_diag(c, "pre_norm", top, s), T.final_diag(c, arm, top, s)
    if pre is None or place is None:
      return math.nan
    if kind is not None:
      pre, place = pre[kind::2], place[kind::2]
    return _cv(pre, key) - _cv(place, key)
  return f


def c13(T: Table, c, arm, s):
  b, f = gain(T, c, arm, s), gain(T, c, "attn_res", s)
  return None if b is None or f is None else b - f / 2


STATISTIC = {("C11", "a"): seed_log_multiplier, ("C12", "a"): cv_drop("act_rms"), ("C12", "b"): cv_drop("grad_norm"),
             ("C13", "a"): c13, ("C14", "a"): seed_log_multiplier, ("C15", "a"): seed_log_multiplier,
             ("C16", "a"): gain, ("C17", "a"): gain}


def part(T: Table, c: str, key) -> dict:
  """One part on one corpus: its per-seed values, its test (None while pending), failures read."""
  claim = v5.CLAIMS[key]
  raw = {s: STATISTIC[key](T, c, claim.arm, s) for s in range(T.d["seeds"])}
  pending = any(x is None for x in raw.values())
  values = {s: x for s, x in raw.items() if x is not None and math.isfinite(x)}
  worst_seeds = [s for s, x in raw.items() if x is not None and not math.isfinite(x)]
  arms = {"pre_norm", claim.arm} | ({"attn_res"} if key[0] == "C13" else set())
  widths = [max(T.d["ladder"])] if key[0] == "C12" else T.d["ladder"]  # C12 reads the top width alone
  failed = sum(T.failed(c, a, w, s) for a in arms for w in widths for s in range(T.d["seeds"])
               if T.recs.get((c, a, w, s)))
  # v4's sensitivity rule: judged on the defined seeds; the verdict stands only if it holds with each undefined
  # seed at the least favourable value of the others too (verdicts.finalize)
  test = None if pending else verdicts.t_test(list(values.values()))
  return {"id": f"{key[0]}{key[1]}", "cid": key[0], "label": key[1], "corpus": c, "claim": claim,
          "design": v5.DESIGN[key], "values": values, "worst_seeds": worst_seeds, "undefined": len(worst_seeds),
          "worst": verdicts.sensitivity(values, worst_seeds),
          "worst_high": verdicts.sensitivity(values, worst_seeds, high=True),
          "failed_runs": failed, "pending": pending, "test": test, "kind": post_hoc.kind("v5", *key)}


def judge(T: Table) -> tuple[list, dict, dict]:
  """Every part on every corpus, judged as one family; the claims' verdicts per corpus, as worded (engine.claims.worded:
  the verdict with its parts' qualifiers)."""
  parts = [part(T, c, key) for c in T.d["corpora"] for key in v5.CLAIMS]
  claims: dict = {}
  for p in parts:
    claims.setdefault((p["cid"], p["corpus"]), {"parts": []})["parts"].append(p)
  summary = claim_rule.judge(list(claims.values()))
  claim_verdicts = {k: c["worded"] for k, c in claims.items()}
  return parts, summary, claim_verdicts


def multipliers(T: Table, c: str, resamples: int = 2000) -> dict:
  """arm -> compute_equiv.Multiplier (or a string saying why there is none yet), over the seeds whose ladder is
  complete for the arm and Pre-Norm."""
  out = {}
  c_pre = computes(T, "pre_norm")
  for arm in T.d["arms"][1:]:
    seeds = [s for s in range(T.d["seeds"]) if ladder(T, c, "pre_norm", s) is not None
             and ladder(T, c, arm, s) is not None]
    if len(seeds) < 2:
      out[arm] = f"pending ({len(seeds)} complete seed{'' if len(seeds) == 1 else 's'})"
      continue
    pre = np.stack([ladder(T, c, "pre_norm", s) for s in seeds], axis=1)
    place = np.stack([ladder(T, c, arm, s) for s in seeds], axis=1)
    try:
      out[arm] = ce.multiplier(pre, place, c_pre, computes(T, arm), fill=v5.FAIL_LOSS, resamples=resamples)
    except ValueError as e:
      out[arm] = f"undefined ({e})"
  return out


def pre_fit(T: Table, c: str):
  """Pre-Norm's power law over the seed means of its complete ladders (None: fewer than one, or not falling)."""
  ls = [ladder(T, c, "pre_norm", s) for s in range(T.d["seeds"])]
  ls = [x for x in ls if x is not None]
  return ce.fit_power_law(computes(T, "pre_norm"), np.mean(ls, axis=0)) if ls else None


def paper_figure(arm: str) -> float | None:
  return next((c.figure for c in v5.CLAIMS.values() if c.arm == arm and c.figure), None)


# The costs a multiplier can charge an arm: its FLOPs as resnorm.model.flops computes them (the depth store's masked
# slots included, so they move with model.depth_chunks), the base model's FLOPs alone (Pre-Norm's at the same width:
# the papers' accounting, whose extra FLOPs are 1-7% at their scale), and the design's measured step time
# (design.STEP_MS: Pre-Norm's FLOPs times the arm's step-time ratio at that width).
ACCOUNTINGS = ("FLOPs as computed", "base FLOPs", "step time")


def charged(T: Table, arm: str, accounting: str) -> np.ndarray | None:
  """[K] the compute charged to the arm at each width under an accounting (ACCOUNTINGS); None for step time at a
  width the design did not time (a --quick ladder)."""
  if accounting == ACCOUNTINGS[0]:
    return computes(T, arm)
  if accounting == ACCOUNTINGS[2] and not set(T.d["ladder"]) <= set(v5.LADDER_D):
    return None
  ratio = 1.0 if accounting == ACCOUNTINGS[1] else np.asarray(
      [v5.STEP_MS[arm][v5.LADDER_D.index(w)] / v5.STEP_MS["pre_norm"][v5.LADDER_D.index(w)] for w in T.d["ladder"]])
  return computes(T, "pre_norm") * ratio


def dependence(T: Table, c: str) -> dict:
  """arm -> what its multiplier depends on, over the seeds whose ladders are complete: per accounting the t interval
  over per-seed multipliers (compute_equiv.t_interval), the range over leave-one-rung-out fits and the per-width
  multipliers read between Pre-Norm's rungs (both as computed). An arm with fewer than two complete seeds is absent."""
  out = {}
  for arm in T.d["arms"][1:]:
    seeds = [s for s in range(T.d["seeds"]) if ladder(T, c, "pre_norm", s) is not None
             and ladder(T, c, arm, s) is not None]
    if len(seeds) < 2:
      continue
    pre = np.stack([ladder(T, c, "pre_norm", s) for s in seeds], axis=1)
    place = np.stack([ladder(T, c, arm, s) for s in seeds], axis=1)
    args = (pre, place, computes(T, "pre_norm"))
    costs = {a: charged(T, arm, a) for a in ACCOUNTINGS}
    out[arm] = {"t": {a: None if k is None else ce.t_interval(ce.seed_log_multipliers(*args, k, fill=v5.FAIL_LOSS))
                      for a, k in costs.items()},
                "misfit": ce.leave_one_rung_out(*args, computes(T, arm), fill=v5.FAIL_LOSS),
                "per_width": ce.interpolated(*args, computes(T, arm), fill=v5.FAIL_LOSS)}
  return out
