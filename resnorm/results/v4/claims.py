"""The claims C1-C10 of docs/results.md: per part the quantity it measures per seed, its predicted sign, the
condition it may place on its control arm, and which of its arms the statistic needs trained, all declared here
before any run of the grid (report v4); each part's seeds, effect of interest and regime tolerance are declared in
resnorm/results/v4/design.py, its measurement in resnorm/results/v4/parts.py, the statistics in resnorm/results/verdicts.py.

Failures are outcomes. A part may condition only on its control or reference arm (`control`: a seed whose control
failed is listed and left out, for the claim does not apply there). A stalled run keeps its loss; a diverged run has
none (nothing is imputed). A seed whose arm under test failed where the statistic needs it (diverged, or stalled
where the part reads a trained model's diagnostics: `needs`) is a failed seed: the part is judged on the others and
its verdict stands only if the worst case agrees (verdicts.sensitivity). Parts about stability count the failures
themselves: McNemar's exact test on the discordant (cell, seed) pairs, pooled over the part's declared cells.
A part that reads trained runs is in regime when the per-seed change of its own statistic over the last quarter of
training is equivalent to zero within its tolerance (verdicts.tost). The verdict rules, per part and per claim, are
design.VERDICT_RULE and design.CLAIM_RULE (resnorm/results/engine/claims.py).
"""
import math

import numpy as np

from resnorm.results import verdicts
from resnorm.results.v4 import grid
from resnorm.results.v4.design import (BLOCK_SEEDS, CLAIM_RULE, DESIGN, DESIGN_CALLS, GAIN_TOL, MARGIN,  # noqa: F401
                                    NI_MARGIN)
from resnorm.results.v4.parts import (Control, NONE, _d, _map, _mean, _ok, col, cos_spread,  # noqa: F401
                                   discordant_part, log_ratio, max_log_gain, median_cos, part, slope, trained)
from resnorm.results.v4.runs import Runs  # noqa: F401 (the report's and the tests' reader of the grid)
from resnorm.results.engine import claims as claim_rule
from resnorm.results.engine.claims import MIXED
from resnorm.results.verdicts import NOT_REPRODUCED, OPPOSITE, OUT_OF_REGIME, PENDING, REPRODUCED, UNDECIDED

VERDICTS = (REPRODUCED, NOT_REPRODUCED, OPPOSITE, MIXED, UNDECIDED, OUT_OF_REGIME, PENDING)
COMBINE_RULE = CLAIM_RULE


# ---- the claims --------------------------------------------------------------------------------------------------

def c1(R, d):
  Ls, top = d["init_depths"], max(d["init_depths"])
  last_g = lambda v, L, s: (R.init(v, L, s) or [{}])[-1].get("grad_norm")
  logs = [math.log(L) for L in Ls]
  pre_slope = lambda s: slope(logs, [math.log(g) if g else None for g in (last_g("pre_norm", L, s) for L in Ls)])
  return [part(R, d, "C1", "a", f"Post-Norm at init, L={top}: log(grad norm of the last MLP / of the first MLP)", +1,
               lambda s: log_ratio(R.init("post_norm", top, s), "grad_norm", 1)),
          part(R, d, "C1", "b", f"Pre-Norm at init: slope of log(last-sublayer grad norm) against log L, L in "
                                f"{list(Ls)}", -1, pre_slope),
          part(R, d, "C1", "c", "0.2 - |that slope + 0.5| (the slope within 0.2 of 1/sqrt(L)'s -0.5)", +1,
               lambda s: _map(pre_slope(s), lambda b: 0.2 - abs(b + 0.5)))]


def c2(R, d):
  top, L = max(d["init_depths"]), d["pair_layers"]
  growth = lambda rows: log_ratio(rows, "act_rms", 0)
  pre, post = grid.ref_long(d, "pre_norm", L), grid.ref_long(d, "post_norm", L)
  return [part(R, d, "C2", "a", f"at init, L={top}: log(input RMS last / first sublayer), Pre-Norm minus Post-Norm", +1,
               lambda s: _d(growth(R.init("pre_norm", top, s)), growth(R.init("post_norm", top, s)))),
          part(R, d, "C2", "b", f"trained (reference recipe, {d['horizon']} steps), L={L}: the same, Pre-Norm minus "
                                "Post-Norm", +1, lambda s: _d(growth(R.last(pre, s)), growth(R.last(post, s))),
               needs=lambda s: (pre, post))]


def _map_cells(d, variant="pre_norm", depths=None):
  return [grid.Recipe(variant, L, lr, f, d["steps"]) for L in (depths or d["map_depths"]) for lr in d["lrs"]
          for f in d["warmup_fracs"]]


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
  parts = [part(R, d, "C3", "a", f"L={L}: loss at lr {lrs[-1]:g} without warmup minus the best loss of the map, "
                                 "Post-Norm minus Pre-Norm", +1,
                lambda s: _d(penalty("post_norm", s), penalty("pre_norm", s)), control(lrs[-1:])),
           part(R, d, "C3", "b", f"L={L}: warmup benefit loss(warmup 0) - loss(warmup {f:.0%}) at lr "
                                 f"{', '.join(f'{x:g}' for x in hi)}, Post-Norm minus Pre-Norm", +1,
                lambda s: _d(benefit("post_norm", s), benefit("pre_norm", s)), control(hi))]
  if grid.c3_recipes(d):
    r = {(x.variant, x.warmup_frac): x for x in grid.c3_recipes(d)}
    c = d["c3"]
    gain = lambda v, s: _d(R.loss(r[(v, 0.0)], s), R.loss(r[(v, c["warmup_frac"])], s))
    parts.append(part(R, d, "C3", "c", f"long-warmup regime (L={c['layers']}, lr {c['lr']:g}, {c['steps']} steps, "
                                       f"{_opt(c)}): warmup benefit with {c['warmup_frac']:.0%} warmup, Post-Norm minus "
                                       "Pre-Norm", +1, lambda s: _d(gain("post_norm", s), gain("pre_norm", s)),
                      trained(R, r[("pre_norm", c["warmup_frac"])], text="Pre-Norm (the control) learned beyond the "
                              "unigram with the long warmup")))
  parts.append(discordant_part(R, d, "C3", "d", f"L={L}, every map cell: (cell, seed) pairs where Post-Norm failed "
                                                "(stalled or diverged) and Pre-Norm trained, against the reverse",
                               _map_cells(d, "post_norm", (L,)), "post_norm", "pre_norm"))
  return parts


def _opt(c):
  t = c.get("train", {})
  return ", ".join(f"{k.split('.')[-1]} {v}" for k, v in t.items()) or "default optimizer"


def c4(R, d):
  Ls = d["depths"]
  fit = lambda v, s: slope([math.log2(L) for L in Ls], [R.loss(grid.ref_long(d, v, L), s) for L in Ls])
  what = f"reference recipe, {d['horizon']} steps, L in {list(Ls)}: slope of final loss against log2 L"
  return [part(R, d, "C4", "a", f"{what}, Post-Norm (a stall keeps its loss: it is the outcome)", +1,
               lambda s: fit("post_norm", s)),
          part(R, d, "C4", "b", f"{what}, Pre-Norm", -1, lambda s: fit("pre_norm", s)),
          discordant_part(R, d, "C4", "c", f"reference recipe, {d['horizon']} steps, L in {list(Ls)}: (depth, seed) "
                                           "pairs where Post-Norm failed and Pre-Norm trained, against the reverse",
                          [grid.ref_long(d, "post_norm", L) for L in Ls], "post_norm", "pre_norm")]


def c5(R, d):
  """At the depth where both variants train (d["pair_layers"]), over the long horizon: a stalled model's
  representations are a byte-frequency model's, so the statistic needs both arms trained (a failed seed)."""
  L = d["pair_layers"]
  pre, post = grid.ref_long(d, "pre_norm", L), grid.ref_long(d, "post_norm", L)
  both = lambda s: (pre, post)
  return [part(R, d, "C5", "a", f"L={L}, reference recipe, {d['horizon']} steps: median adjacent cosine, Pre-Norm "
                                "minus Post-Norm", +1,
               lambda s: _d(median_cos(R.last(pre, s)), median_cos(R.last(post, s))), needs=both),
          part(R, d, "C5", "b", f"L={L}, {d['horizon']} steps: median 5-95% cosine band (spread), Post-Norm minus "
                                "Pre-Norm", +1, lambda s: _d(cos_spread(R.last(post, s)), cos_spread(R.last(pre, s))),
               needs=both)]


def _ni_cells(d):
  """C6c-d's declared cells: every cell of the deepest map (all of them, whatever trained)."""
  return _map_cells(d, "pre_norm", (max(d["map_depths"]),))


def noninferior(R, d, v, s):
  """NI_MARGIN + the mean over C6c-d's declared cells of loss_pre - loss_v. A stalled run keeps its loss; a
  diverged one has none, and its seed is a failed seed."""
  diffs = [_d(R.loss(c, s), R.loss(c._replace(variant=v), s)) for c in _ni_cells(d)]
  return NI_MARGIN + float(np.mean(diffs)) if diffs and _ok(*diffs) else None


def c6(R, d):
  L = max(d["map_depths"])
  cos = lambda v, s: median_cos(R.last(grid.ref(d, v, L), s))
  parts = [part(R, d, "C6", k, f"L={L}, reference recipe: median adjacent cosine, Pre-Norm minus {v}", +1,
                lambda s, v=v: _d(cos("pre_norm", s), cos(v, s)),
                needs=lambda s, v=v: (grid.ref(d, "pre_norm", L), grid.ref(d, v, L)))
           for k, v in (("a", "hc"), ("b", "mhc"))]
  for k, v in (("c", "hc"), ("d", "mhc")):
    p = part(R, d, "C6", k, f"every {max(d['map_depths'])}-layer map cell: {NI_MARGIN} + mean of loss_pre - loss_{v} (non-inferior within "
                            f"{NI_MARGIN})", +1, lambda s, v=v: noninferior(R, d, v, s))
    fails = discordant_part(R, d, "C6", k, "", [c._replace(variant=v) for c in _ni_cells(d)], v, "pre_norm")
    p["veto"] = verdicts.excess_failures(*fails["discordant"])
    p["note"] = (f"{fails['note']}; " + ("significantly more failures of " + v if p["veto"] else
                                         f"{v}'s failures not significantly more numerous (one-sided exact test at "
                                         f"{verdicts.Q})"))
    parts.append(p)
  return parts


def c7(R, d):
  lg = d["long"]
  rec = lambda v, steps: grid.Recipe(v, lg["layers"], lg["lr"], d["ref_warmup_frac"], steps)
  gap = lambda s, steps: _d(R.loss(rec("post_norm", steps), s), R.loss(rec("pre_norm", steps), s))
  return [part(R, d, "C7", "a", f"L={lg['layers']}, lr {lg['lr']:g}, {lg['steps']} steps: loss_pre + {MARGIN} - "
                                "loss_post", +1, lambda s: _map(gap(s, lg["steps"]), lambda g: MARGIN - g)),
          part(R, d, "C7", "b", f"gap loss_post - loss_pre at {d['steps']} steps minus at {lg['steps']} steps", +1,
               lambda s: _d(gap(s, d["steps"]), gap(s, lg["steps"])))]


def _ablation(R, d, tag, base):
  L = max(d["map_depths"])
  loss = lambda lr, t, s: R.loss(grid.ref(d, "pre_norm", L, lr, t), s)
  return lambda s: _mean([_d(loss(lr, tag, s), loss(lr, base, s)) for lr in grid.ablation_lrs(d)])


def _ablation_control(R, d, base, text):
  L = max(d["map_depths"])
  return trained(R, *(grid.ref(d, "pre_norm", L, lr, base) for lr in grid.ablation_lrs(d)), text=text)


def c8(R, d):
  lrs = ", ".join(f"{x:g}" for x in grid.ablation_lrs(d))
  return [part(R, d, "C8", "a", f"Pre-Norm, L={max(d['map_depths'])}, lr {lrs}: loss without the final norm minus "
                                "with it (mean over those lrs)", +1, _ablation(R, d, "nofinal", ""),
               _ablation_control(R, d, "", "Pre-Norm with its final norm (the control) learned beyond the unigram "
                                           "at those lrs"))]


def c9(R, d):
  lrs = ", ".join(f"{x:g}" for x in grid.ablation_lrs(d))
  return [part(R, d, "C9", "a", f"Pre-Norm bfloat16, L={max(d['map_depths'])}, lr {lrs}: loss with norm statistics in "
                                "bfloat16 minus in float32 (mean over those lrs)", +1,
               _ablation(R, d, "bf16stats", "bf16"),
               _ablation_control(R, d, "bf16", "the bfloat16 arm with float32 statistics (the control) learned "
                                               "beyond the unigram at those lrs"))]


def c10(R, d):
  L = max(d["map_depths"])
  run = lambda v, s: R.run(grid.ref(d, v, L), s) or {}
  return [part(R, d, "C10", "a", f"HC, L={L}, reference recipe: max log composite gain after training minus at "
                                 "step 0", +1,
               lambda s: _d(max_log_gain(R.last(grid.ref(d, "hc", L), s)), max_log_gain(run("hc", s).get("first"))),
               needs=lambda s: (grid.ref(d, "hc", L),)),
          part(R, d, "C10", "b", "mHC after training: log 1.1 - max |log gain| over sublayers, forward and backward",
               +1, lambda s: _map(max_log_gain(R.last(grid.ref(d, "mhc", L), s)), lambda g: GAIN_TOL - g),
               needs=lambda s: (grid.ref(d, "mhc", L),))]


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


def judge(by_corpus: dict) -> dict:
  """The verdicts of every part and claim, one correction over all parts of all corpora (engine.claims.judge)."""
  return claim_rule.judge([c for claims in by_corpus.values() for c in claims])
