"""The claims C1-C10 of docs/results.md: the quantity each one measures per seed, its predicted sign, and the
condition its runs must meet for the claim to apply, all declared here before any run of the grid (report v4,
issue 37). The statistics (the paired one-sided t-test, Holm's correction over the report, the minimum detectable
effect, the stability of each part's statistic) are resnorm/results/verdicts.py's.

Conditions, per seed (Regime): NONE (at init, or where a stall is itself the outcome: a stalled run is settled), or
trained() arms (the runs compared learned beyond the byte unigram, summary.json's learned_beyond_unigram). A seed
that fails its part's condition is listed and left out. Every part that reads trained runs must also have a settled
statistic: read with every run at 50%, 75% and 100% of its steps (verdicts.CHECK_FRACS; the grid evaluates every
steps/4, and takes diagnostics there where a claim reads them), same sign at each, last change under one standard
error. A claim of several parts is not reproduced if any part is; else reproduced if every part is; else out of
regime if any part is; else inconclusive (COMBINE_RULE, printed in the report).
A diverged run scores FAIL_LOSS at every point of its run (its outcome is final); a stalled run keeps its loss.
"""
import math

import numpy as np

from resnorm.results import grid, verdicts
from resnorm.results.runs import FAIL_LOSS, Runs  # noqa: F401 (Runs: the report's and the tests' reader of the grid)
from resnorm.results.verdicts import INCONCLUSIVE, NOT_REPRODUCED, OUT_OF_REGIME, REPRODUCED

VERDICTS = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, OUT_OF_REGIME)
MARGIN = 0.02              # nats/byte: "matches" (C7a) allows this much
NI_MARGIN = 0.02           # nats/byte: C6c-d's non-inferiority margin for the mean paired loss difference over cells
GAIN_TOL = math.log(1.1)   # C10: "near 1" means within 10%
COMBINE_RULE = ("A claim is **not reproduced** if any part is; else **reproduced** if every part is; else **out of "
                "regime** if any part is; else **inconclusive**.")


def combine(vs) -> str:
  vs = list(vs)
  if NOT_REPRODUCED in vs:
    return NOT_REPRODUCED
  if vs and all(v == REPRODUCED for v in vs):
    return REPRODUCED
  return OUT_OF_REGIME if OUT_OF_REGIME in vs else INCONCLUSIVE


# ---- per-seed quantities (None when a run they need is missing) ------------------------------------------------

def _ok(*xs):
  return all(x is not None for x in xs)


def col(rows, key):
  return [r[key] for r in rows if r.get(key) is not None] if rows else None


def log_ratio(rows, key, first: int, last: int = -1):
  vals = [r[key] for r in rows] if rows else None
  return math.log(vals[last] / vals[first]) if vals and vals[first] > 0 and vals[last] > 0 else None


def median_cos(rows):
  c = col(rows, "cos_next_median")
  return float(np.median(c)) if c else None


def cos_spread(rows):
  """Median over sublayers of the 5-95% band of the per-token cosine: how concentrated it is."""
  return float(np.median([r["cos_next_p95"] - r["cos_next_p05"] for r in rows if r.get("cos_next_p95") is not None])) \
      if rows else None


def max_log_gain(rows):
  g = col(rows, "gain_forward")
  return max(abs(math.log(x)) for x in g + col(rows, "gain_backward")) if g else None


def slope(xs, ys):
  pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
  return float(np.polyfit(*zip(*pts), 1)[0]) if len(pts) >= 2 and len({x for x, _ in pts}) >= 2 else None


class Regime:
  """The condition a part's runs must meet for its claim to apply: `text` (printed in the report) and
  ok(seed) -> bool, read from that seed's runs."""

  def __init__(self, text, ok=lambda s: True):
    self.text, self.ok = text, ok


NONE = Regime("none (at init)")


def trained(R, *recipes, text=None):
  """Every one of these runs learned beyond the byte unigram (did not stall or diverge)."""
  return Regime(text or "both arms learned beyond the unigram", lambda s: all(R.trained(r, s) for r in recipes))


def part(R, label, what, sign, fn, seeds, regime: Regime = NONE, note=None):
  """One part: fn(seed) -> the paired per-seed statistic (None when a run it needs is missing), read at the runs'
  end and, where it reads trained runs, at each of verdicts.CHECK_FRACS; the seeds judged (those meeting `regime`,
  when at least verdicts.MIN_SEEDS of them, or all planned when fewer, remain); the test on them. The verdicts
  come later, from verdicts.finalize over every part of the report. note(part) -> a line for the report."""
  values, touched = {}, {}
  for s in seeds:
    R.touched = set()
    try:
      v = fn(s)
    finally:
      touched[s], R.touched = R.touched, None
    if v is not None and np.isfinite(v):
      values[s] = float(v)
  in_regime = {s: bool(regime.ok(s)) for s in values}
  judged = [s for s in values if in_regime[s]]
  enough = bool(judged) and len(judged) >= min(verdicts.MIN_SEEDS, len(seeds))
  # judged on the seeds that meet the condition; when too few do, the values verdict (printed beside "out of
  # regime") reads every seed
  x = {s: sign * values[s] for s in (judged if enough else values)}
  test = verdicts.t_test(list(x.values()))
  reads_runs = any(touched.values())
  means = {}
  if reads_runs:
    for f in verdicts.CHECK_FRACS:
      with R.at(f):
        at = [fn(s) for s in x]
      ok = [float(v) for v in at if v is not None and np.isfinite(v)]
      means[f] = float(np.mean(ok)) if ok and len(ok) == len(x) else None
  stab = verdicts.stable(means, test and test["se"]) if reads_runs and test else None
  recipes = sorted({r for keys in touched.values() for r, _ in keys}, key=repr)
  stalled = [s for s in x if any((R.run(r, k) or {}).get("stalled") for r, k in touched[s])]
  out = {"label": label, "what": what, "sign": sign, "values": values, "planned": tuple(seeds),
         "regime": regime.text, "in_regime": in_regime, "judged": judged, "x": x, "test": test, "means": means,
         "stable": stab, "reads_runs": reads_runs, "recipes": recipes, "stalled_seeds": stalled,
         "in_regime_ok": enough and stab is not False}
  out["note"] = note(out) if note else ""
  return out


def _d(a, b):
  return a - b if _ok(a, b) else None


def _map(x, f):
  return None if x is None else f(x)


def _mean(xs):
  return float(np.mean(xs)) if xs and _ok(*xs) else None


# ---- the claims --------------------------------------------------------------------------------------------------

def c1(R, d):
  Ls, top = d["init_depths"], max(d["init_depths"])
  last_g = lambda v, L, s: (R.init(v, L, s) or [{}])[-1].get("grad_norm")
  logs = [math.log(L) for L in Ls]
  pre_slope = lambda s: slope(logs, [math.log(g) if g else None for g in (last_g("pre_norm", L, s) for L in Ls)])
  return [part(R, "a", f"Post-Norm at init, L={top}: log(grad norm of the last MLP / of the first MLP)", +1,
               lambda s: log_ratio(R.init("post_norm", top, s), "grad_norm", 1), d["seeds"]),
          part(R, "b", f"Pre-Norm at init: slope of log(last-sublayer grad norm) against log L, L in {list(Ls)}", -1,
               pre_slope, d["seeds"]),
          part(R, "c", "0.2 - |that slope + 0.5| (the slope within 0.2 of 1/sqrt(L)'s -0.5)", +1,
               lambda s: _map(pre_slope(s), lambda b: 0.2 - abs(b + 0.5)), d["seeds"])]


def c2(R, d):
  top, L = max(d["init_depths"]), d["pair_layers"]
  growth = lambda rows: log_ratio(rows, "act_rms", 0)
  pre, post = grid.ref_long(d, "pre_norm", L), grid.ref_long(d, "post_norm", L)
  return [part(R, "a", f"at init, L={top}: log(input RMS last / first sublayer), Pre-Norm minus Post-Norm", +1,
               lambda s: _d(growth(R.init("pre_norm", top, s)), growth(R.init("post_norm", top, s))), d["seeds"]),
          part(R, "b", f"trained (reference recipe, {d['horizon']} steps), L={L}: the same, Pre-Norm minus Post-Norm", +1,
               lambda s: _d(growth(R.last(pre, s)), growth(R.last(post, s))), d["seeds"], trained(R, pre, post))]


def c3(R, d):
  L, lrs, f = min(d["map_depths"]), sorted(d["lrs"]), d["ref_warmup_frac"]
  rec = lambda v, lr, w: grid.Recipe(v, L, lr, w, d["steps"])
  hi = lrs[-2:]

  def penalty(v, s):  # loss at the highest lr without warmup, above the variant's best cell
    cells = [R.loss(rec(v, lr, w), s) for lr in lrs for w in d["warmup_fracs"]]
    return _d(R.loss(rec(v, lrs[-1], 0.0), s), min(cells)) if _ok(*cells) else None

  def benefit(v, s):  # what warmup buys at the highest lrs
    return _mean([_d(R.loss(rec(v, lr, 0.0), s), R.loss(rec(v, lr, f), s)) for lr in hi])

  control = lambda lrs_: trained(R, *(rec("pre_norm", lr, f) for lr in lrs_), text=(
      f"Pre-Norm (the control) learned beyond the unigram at lr {', '.join(f'{x:g}' for x in lrs_)} with warmup"))
  parts = [part(R, "a", f"L={L}: loss at lr {lrs[-1]:g} without warmup minus the best loss of the map, "
                     "Post-Norm minus Pre-Norm", +1, lambda s: _d(penalty("post_norm", s), penalty("pre_norm", s)),
                d["seeds"], control(lrs[-1:])),
           part(R, "b", f"L={L}: warmup benefit loss(warmup 0) - loss(warmup {f:.0%}) at lr "
                     f"{', '.join(f'{x:g}' for x in hi)}, Post-Norm minus Pre-Norm", +1,
                lambda s: _d(benefit("post_norm", s), benefit("pre_norm", s)), d["seeds"], control(hi))]
  if grid.c3_recipes(d):
    r = {(x.variant, x.warmup_frac): x for x in grid.c3_recipes(d)}
    c = d["c3"]
    gain = lambda v, s: _d(R.loss(r[(v, 0.0)], s), R.loss(r[(v, c["warmup_frac"])], s))
    parts.append(part(R, "c", f"long-warmup regime (L={c['layers']}, lr {c['lr']:g}, {c['steps']} steps, "
                           f"{_opt(c)}): warmup benefit with {c['warmup_frac']:.0%} warmup, Post-Norm minus Pre-Norm",
                      +1, lambda s: _d(gain("post_norm", s), gain("pre_norm", s)), d["seeds"],
                      trained(R, r[("pre_norm", c["warmup_frac"])], text="Pre-Norm (the control) learned beyond the "
                              "unigram with the long warmup")))
  return parts


def _opt(c):
  t = c.get("train", {})
  return ", ".join(f"{k.split('.')[-1]} {v}" for k, v in t.items()) or "default optimizer"


def c4(R, d):
  Ls = d["depths"]
  fit = lambda v, s: slope([math.log2(L) for L in Ls], [R.loss(grid.ref_long(d, v, L), s) for L in Ls])
  what = f"reference recipe, {d['horizon']} steps, L in {list(Ls)}: slope of final loss against log2 L"
  post, pre = ([grid.ref_long(d, v, L) for L in Ls] for v in ("post_norm", "pre_norm"))
  return [part(R, "a", f"{what}, Post-Norm", +1, lambda s: fit("post_norm", s), d["seeds"],
               Regime("none per seed (a stalled run is settled: the stall is the outcome)")),
          part(R, "b", f"{what}, Pre-Norm", -1, lambda s: fit("pre_norm", s), d["seeds"],
               trained(R, *pre, text="Pre-Norm learned beyond the unigram at every depth"))]


def c5(R, d):
  """At the depth where both variants train (d["pair_layers"]), over the long horizon: a stalled Post-Norm's
  representations are a byte-frequency model's, not Post-Norm's."""
  L = d["pair_layers"]
  pre, post = grid.ref_long(d, "pre_norm", L), grid.ref_long(d, "post_norm", L)
  last = lambda r, s: R.last(r, s)
  both = trained(R, pre, post)
  return [part(R, "a", f"L={L}, reference recipe, {d['horizon']} steps: median adjacent cosine, Pre-Norm minus "
                    "Post-Norm", +1, lambda s: _d(median_cos(last(pre, s)), median_cos(last(post, s))), d["seeds"],
               both),
          part(R, "b", f"L={L}, {d['horizon']} steps: median 5-95% cosine band (spread), Post-Norm minus Pre-Norm", +1,
               lambda s: _d(cos_spread(last(post, s)), cos_spread(last(pre, s))), d["seeds"], both)]


def _map_cells(d):
  return [grid.Recipe("pre_norm", L, lr, f, d["steps"]) for L in d["map_depths"] for lr in d["lrs"]
          for f in d["warmup_fracs"]]


def noninferior(R, d, v, s):
  """NI_MARGIN + the mean, over the map's cells where both arms trained (this seed), of loss_pre - loss_v: the
  mean paired difference against the margin (a worst cell would be biased: with 16-20 noisy cells, the minimum of
  a variant identical to Pre-Norm sits below the margin most of the time)."""
  both = [(c, c._replace(variant=v)) for c in _map_cells(d)]
  diffs = [_d(R.loss(a, s), R.loss(b, s)) for a, b in both if R.trained(a, s) and R.trained(b, s)]
  return NI_MARGIN + float(np.mean(diffs)) if diffs and _ok(*diffs) else None


def failure_counts(R, d, v, seeds) -> tuple[int, int]:
  """(cells x seeds where v stalled or diverged and Pre-Norm trained, the reverse), over finished pairs."""
  worse = better = 0
  for c in _map_cells(d):
    for s in seeds:
      a, b = R.run(c, s), R.run(c._replace(variant=v), s)
      if a and b:
        ta, tb = R.trained(c, s), R.trained(c._replace(variant=v), s)
        worse += ta and not tb
        better += tb and not ta
  return worse, better


def c6(R, d):
  L = max(d["map_depths"])
  cos = lambda v, s: median_cos(R.last(grid.ref(d, v, L), s))
  seeds = grid.seeds_of(d, grid.ref(d, "pre_norm", L))
  parts = [part(R, k, f"L={L}, reference recipe: median adjacent cosine, Pre-Norm minus {v}", +1,
                lambda s, v=v: _d(cos("pre_norm", s), cos(v, s)), seeds,
                trained(R, grid.ref(d, "pre_norm", L), grid.ref(d, v, L)))
           for k, v in (("a", "hc"), ("b", "mhc"))]
  def counts(v):
    return lambda p: ("cells x seeds where {} stalled or diverged and Pre-Norm trained: {}; the reverse: {}"
                      .format(v, *failure_counts(R, d, v, p["planned"])))
  parts += [part(R, k, f"map cells where both arms trained: {NI_MARGIN} + mean of loss_pre - loss_{v} (non-inferior "
                       f"within {NI_MARGIN})", +1, lambda s, v=v: noninferior(R, d, v, s), d["seeds"],
                 Regime("both arms learned beyond the unigram in at least one cell (the mean reads only those)"),
                 note=counts(v))
            for k, v in (("c", "hc"), ("d", "mhc"))]
  return parts


def c7(R, d):
  lg = d["long"]
  rec = lambda v, steps: grid.Recipe(v, lg["layers"], lg["lr"], d["ref_warmup_frac"], steps)
  gap = lambda s, steps: _d(R.loss(rec("post_norm", steps), s), R.loss(rec("pre_norm", steps), s))
  arms = [rec(v, lg["steps"]) for v in grid.MAIN]
  regime = trained(R, *arms, text=f"at {lg['steps']} steps both arms learned beyond the unigram")
  return [part(R, "a", f"L={lg['layers']}, lr {lg['lr']:g}, {lg['steps']} steps: loss_pre + {MARGIN} - loss_post", +1,
               lambda s: _map(gap(s, lg["steps"]), lambda g: MARGIN - g), d["seeds"], regime),
          part(R, "b", f"gap loss_post - loss_pre at {d['steps']} steps minus at {lg['steps']} steps", +1,
               lambda s: _d(gap(s, d["steps"]), gap(s, lg["steps"])), d["seeds"], regime)]


def _ablation_regime(R, d, base, text):
  L = max(d["map_depths"])
  return trained(R, *(grid.ref(d, "pre_norm", L, lr, base) for lr in grid.ablation_lrs(d)), text=text)


def _ablation_seeds(d, tag):
  return grid.seeds_of(d, grid.ref(d, "pre_norm", max(d["map_depths"]), d["ref_lr"], tag))


def _ablation(R, d, tag, base):
  L = max(d["map_depths"])
  loss = lambda lr, t, s: R.loss(grid.ref(d, "pre_norm", L, lr, t), s)
  return lambda s: _mean([_d(loss(lr, tag, s), loss(lr, base, s)) for lr in grid.ablation_lrs(d)])


def c8(R, d):
  lrs = ", ".join(f"{x:g}" for x in grid.ablation_lrs(d))
  return [part(R, "a", f"Pre-Norm, L={max(d['map_depths'])}, lr {lrs}: loss without the final norm minus with it "
                    "(mean over those lrs)", +1, _ablation(R, d, "nofinal", ""), _ablation_seeds(d, "nofinal"),
               _ablation_regime(R, d, "", "Pre-Norm with its final norm learned beyond the unigram at those lrs"))]


def c9(R, d):
  lrs = ", ".join(f"{x:g}" for x in grid.ablation_lrs(d))
  return [part(R, "a", f"Pre-Norm bfloat16, L={max(d['map_depths'])}, lr {lrs}: loss with norm statistics in bfloat16 "
                    "minus in float32 (mean over those lrs)", +1, _ablation(R, d, "bf16stats", "bf16"),
               _ablation_seeds(d, "bf16stats"),
               _ablation_regime(R, d, "bf16", "the bfloat16 arm with float32 statistics learned beyond the unigram at "
                                              "those lrs"))]


def c10(R, d):
  L = max(d["map_depths"])
  run = lambda v, s: R.run(grid.ref(d, v, L), s) or {}
  return [part(R, "a", f"HC, L={L}, reference recipe: max log composite gain after training minus at step 0", +1,
               lambda s: _d(max_log_gain(run("hc", s).get("last")), max_log_gain(run("hc", s).get("first"))),
               d["seeds"], trained(R, grid.ref(d, "hc", L), text="HC learned beyond the unigram")),
          part(R, "b", "mHC after training: log 1.1 - max |log gain| over sublayers, forward and backward", +1,
               lambda s: _map(max_log_gain(run("mhc", s).get("last")), lambda g: GAIN_TOL - g), d["seeds"],
               trained(R, grid.ref(d, "mhc", L), text="mHC learned beyond the unigram"))]


CLAIMS = (
    ("C1", "At init, Post-Norm's gradient is largest near the output; Pre-Norm's last-layer gradient shrinks "
           "about as 1/sqrt(L)", "Xiong et al. 2020, Thm 1", c1),
    ("C2", "Pre-Norm's residual stream grows with depth; Post-Norm's does not", "Xiong et al. 2020, Lemma 2", c2),
    ("C3", "Post-Norm is sensitive to lr and warmup (without warmup at high lr it diverges or ends worse; warmup "
           "rescues it); Pre-Norm is not", "source articles; Xiong et al. 2020", c3),
    ("C4", "At a fixed recipe Post-Norm gets harder to train as depth grows; Pre-Norm keeps improving",
     "source articles; Xiong et al. 2020", c4),
    ("C5", "Adjacent-sublayer cosine is higher and more concentrated under Pre-Norm than Post-Norm "
           "(representation collapse)", "HC paper (2409.19606), Fig. 3", c5),
    ("C6", "HC and mHC lower adjacent cosine below Pre-Norm's without losing its stability or loss",
     "HC paper; mHC paper (2512.24880)", c6),
    ("C7", "Trained stably, Post-Norm matches or beats Pre-Norm with longer training", "source article 001", c7),
    ("C8", "Pre-Norm needs its final norm: without it, loss is worse or training unstable",
     "Xiong et al. 2020 (Pre-LN's final norm)", c8),
    ("C9", "Norm statistics in bf16 rather than float32 hurt mixed-precision training",
     "docs/design.md (norm statistics in float32)", c9),
    ("C10", "mHC's composite residual gain stays near 1 while HC's grows", "mHC paper, Fig. 7", c10),
)


def evaluate(R, d) -> list[dict]:
  """One corpus's claims with their parts measured; the verdicts come from judge(), over every corpus."""
  return [{"id": cid, "claim": text, "source": source, "parts": fn(R, d)} for cid, text, source, fn in CLAIMS]


def judge(by_corpus: dict) -> int:
  """The verdicts of every part and claim, Holm's correction over all parts of all corpora; returns their number."""
  m = verdicts.finalize([p for claims in by_corpus.values() for c in claims for p in c["parts"]])
  for claims in by_corpus.values():
    for c in claims:
      c["verdict"] = combine(p["verdict"] for p in c["parts"])
  return m
