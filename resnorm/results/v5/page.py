"""Report v5's page (docs/results_v5.md), its loss-against-compute figure and the README's v5 findings, from
claims.py's judged parts and multipliers. Every number is read from the records; nothing is typed in."""
import math
import os

import matplotlib.ticker
import numpy as np

from resnorm.results import post_hoc, verdicts
from resnorm.results.engine.readme import Block
from resnorm.results.v4 import design
from resnorm.results.v5 import claims as c5
from resnorm.results.v5 import compute_equiv as ce
from resnorm.results.v5 import design as v5

NAMES = {"pystdlib": "Python", "shakespeare": "Shakespeare"}
BEGIN = ("<!-- findings v5: generated from the run records by `python -m resnorm.results` "
         "(resnorm/results/v5/page.py); edits between these markers are overwritten -->")
END = "<!-- /findings v5 -->"
FINDINGS = Block(BEGIN, END, "v5 findings")
FIGURE = "figures/v5_loss_compute.png"


def _n(x, fmt=".3g") -> str:
  return "n/a" if x is None or not math.isfinite(x) else format(x, fmt)


def _x(m) -> str:
  """A multiplier and its bootstrap interval, or why there is none."""
  if isinstance(m, str):
    return m
  return f"{m.value:.2f}x [{m.lo:.2f}, {m.hi:.2f}]"


def design_lines(T) -> list[str]:
  d = T.d
  rows = ["| width d | heads | non-embedding params | steps | tokens | Pre-Norm training FLOPs |", "|---|---|---|---|---|---|"]
  for w in d["ladder"]:
    s = d["steps"][w]
    rows.append(f"| {w} | {w // v5.HEAD_DIM} | {v5.non_embedding_params(w, d['depth']):,} | {s} | "
                f"{s * v5.BATCH * v5.SEQ:,} | {c5.compute('pre_norm', w, s, d['size']):.3g} |")
  return [f"Design (resnorm/results/v5/design.py, status `{v5.STATUS}`, committed before the first record): "
          f"{', '.join(d['arms'])} at {d['depth']} layers on the ladder below, {d['seeds']} seeds (a seed gives every "
          f"arm the same base weights and data order), corpora {', '.join(d['corpora'])}; lr {v5.LR:g}, warmup "
          f"{v5.WARMUP_FRAC:.0%}, cosine; one eval at the end on {v5.EVAL_BYTES:,} bytes of the stratified eval set; "
          f"a diverged run counts at {v5.FAIL_LOSS:.3f} nats/byte (the byte-uniform loss). Compute counts each "
          "placement's own FLOPs (resnorm.model.flops).", "", *rows]


def claims_table(parts, claim_verdicts, summary) -> list[str]:
  """What each part tests (once), then its verdict per corpus beside its mean and intervals."""
  corpora = list(dict.fromkeys(p["corpus"] for p in parts))
  keys = list(dict.fromkeys((p["cid"], p["label"]) for p in parts))
  by = {(p["cid"], p["label"], p["corpus"]): p for p in parts}
  out = ["| part | arm | the paper says (where) | statistic per seed (> 0: as claimed) | effect of interest |",
         "|---|---|---|---|---|"]
  for k in keys:
    c = v5.CLAIMS[k]
    out.append(f"| {k[0]}{k[1]} | {c.arm} | {c.says} ({c.paper}, {c.where}) | {c.statistic} | "
               f"{v5.DESIGN[k].effect:.3g} |")
  out += ["", "| part | " + " | ".join(f"{NAMES.get(c, c)}: mean [FCR interval] (95%) | verdict | claim"
                                      for c in corpora) + " |", "|---|" + "---|---|---|" * len(corpora)]
  for k in keys:
    cells = []
    for c in corpora:
      p = by[(*k, c)]
      t = p["test"]
      iv = "pending" if p["pending"] else ("n/a" if t is None else
                                           f"{t['mean']:+.3g} [{p['ci'][0]:+.3g}, {p['ci'][1]:+.3g}] "
                                           f"([{p['ci95'][0]:+.3g}, {p['ci95'][1]:+.3g}])")
      cells.append(f"{iv} | {p['verdict']}" + (f" ({p['flag']})" if p.get("flag") else "") +
                   f" | {claim_verdicts[(k[0], c)]}")
    out.append(f"| {k[0]}{k[1]} | " + " | ".join(cells) + " |")
  return out


def seed_lines(parts, seeds: int) -> list[str]:
  """Every part's per-seed values (signed so that the claim predicts > 0), so that each mean re-derives; a seed whose
  statistic is undefined reads undefined*, a missing one pending."""
  out = ["| part | corpus | " + " | ".join(f"seed {s}" for s in range(seeds)) + " | failed runs read |",
         "|---|---|" + "---|" * (seeds + 1)]
  for p in parts:
    cells = ["undefined\\*" if s in p["worst_seeds"] else f"{p['values'][s]:+.4g}" if s in p["values"] else "pending"
             for s in range(seeds)]
    out.append(f"| {p['id']} | {p['corpus']} | " + " | ".join(cells) + f" | {p['failed_runs']} |")
  return out + ["", "\\* the seed's statistic is undefined (no final diagnostics, or its Pre-Norm fit does not "
                "fall): the part is judged on the other seeds, and a call stands only if it also holds with this seed "
                "at the least favourable value of the others (v4's sensitivity rule)."]


def power_lines(m: int) -> list[str]:
  rows = verdicts.power_table(v5.DESIGN, v5.BLOCK_SEEDS, m, v5.DESIGN_CALLS)
  out = [f"Power (the design's, from the pilot's per-seed sds): the a-priori minimum detectable effect at 80% power "
         f"of the two-sided t-test at the design level {rows[0]['level']:.3g} = q x {v5.DESIGN_CALLS} / {m}.", "",
         "| part | pilot sd | seeds | a-priori MDE | effect of interest | power at it | decidable |",
         "|---|---|---|---|---|---|---|"]
  for r in rows:
    dec = "n/a" if r["decidable"] is None else ("yes" if r["decidable"] else "**no**")
    out.append(f"| {r['part']} | {_n(r['pilot_sd'], '.2g')} | {r['n']} | {_n(r['mde'], '.2g')} | {r['effect']:.3g} | "
               f"{'n/a' if r['power'] is None else format(r['power'], '.0%')} | {dec} |")
  return out


def _t(iv) -> str:
  return "n/a" if iv is None else f"{iv.value:.2f}x [{iv.lo:.2f}, {iv.hi:.2f}]"


def multiplier_lines(T, mults: dict) -> list[str]:
  """Per arm and corpus the multiplier under each cost accounting (t intervals over the seeds), the pooled figure
  with its bootstrap, the misfit range and the per-width multipliers read between Pre-Norm's rungs."""
  acc = c5.ACCOUNTINGS
  out = ["| arm | corpus | " + " | ".join(f"{a} [t 95%]" for a in acc) + " | pooled [bootstrap 95%, narrower] | "
         "misfit: leave one rung out | per width, between Pre-Norm's rungs | the paper's: against each t interval |",
         "|---|---|" + "---|" * (len(acc) + 4)]
  for c in T.d["corpora"]:
    dep = c5.dependence(T, c)
    for arm in T.d["arms"][1:]:
      m, fig, dp = mults[c][arm], c5.paper_figure(arm), dep.get(arm)
      if dp is None:
        out.append(f"| {arm} | {c} | " + " | ".join([_x(m)] * len(acc)) + f" | {_x(m)} | | | |")
        continue
      per = "n/a" if dp["per_width"] is None else ", ".join(f"{x:.2f}" for x in dp["per_width"])
      misfit = "n/a" if dp["misfit"] is None else f"{dp['misfit'][0]:.2f}-{dp['misfit'][1]:.2f}x"
      paper = "" if fig is None else f"{fig:.2f}x: " + ", ".join(
          "" if dp["t"][a] is None else ce.side(fig, dp["t"][a]) for a in acc)
      beyond = "" if isinstance(m, str) or m.extrapolation < 1.005 else \
          f" (read {m.extrapolation:.2f}x beyond the ladder)"
      out.append(f"| {arm} | {c} | " + " | ".join(_t(dp["t"][a]) for a in acc) + f" | {_x(m)}{beyond} | {misfit} | "
                 f"{per} | {paper} |")
  fits = [f"{c}: L = {f.a:.3g} C^-{f.b:.3g}" if f else f"{c}: no fit yet" for c, f in
          ((c, c5.pre_fit(T, c)) for c in T.d["corpora"])]
  return out + ["", f"Pre-Norm's fit over its seed means ({'; '.join(fits)}). A multiplier is Pre-Norm's compute to "
                "reach the arm's loss over the compute charged to the arm (resnorm/results/v5/compute_equiv.py), the "
                "geometric mean over widths. What it depends on, column by column:", "",
                "- **The cost charged.** *FLOPs as computed*: the arm's training FLOPs by resnorm.model.flops, its "
                "own extra work included; at these widths that extra is a large share (the papers' 1-7% is at "
                "widths 10-100x larger), and it counts the depth store's masked slots, so it moves with "
                "`model.depth_chunks`. *Base FLOPs*: Pre-Norm's FLOPs at the same width, the papers' accounting. "
                "*Step time*: Pre-Norm's FLOPs times the arm's measured step-time ratio at that width "
                "(v5/design.py STEP_MS, the design's own bench). The verdicts of C11, C14 and C15 use the first.",
                "- **The seeds.** Each t interval is over the seeds' own multipliers, each seed's ladder against its "
                "own Pre-Norm fit (the pairing). The pooled figure's percentile bootstrap resamples the same seeds "
                "and is narrower: at 5 seeds it covers about 0.85 of the time where the t interval covers 0.95.",
                "- **The fit.** Every seed shares Pre-Norm's misfit to its power law, which no seed interval sees. "
                "*Misfit* is the range of the pooled multiplier over the four fits that leave one of Pre-Norm's "
                "rungs out. *Per width* reads Pre-Norm's compute between its own rungs (piecewise linear in log "
                "loss and log compute) instead of from the fit.",
                "", "Where the paper's figure lies against an interval describes the data at this scale; the "
                "claims table's t-tests, within the report's one correction, decide C11, C14 and C15."]


def no_fit(T, c: str) -> str:
  """Why a corpus's panel has no Pre-Norm fit."""
  if any(c5.ladder(T, c, "pre_norm", s) is not None for s in range(T.d["seeds"])):
    return "Pre-Norm's loss does not fall with compute"
  return "no complete Pre-Norm ladder yet"


def t_multipliers(T, mults: dict) -> dict:
  """corpus -> arm -> the multiplier as computed with its t interval over seeds (compute_equiv.Interval: value, lo,
  hi), or mults' string saying why there is none: what the figure and the README's findings show."""
  out = {}
  for c in T.d["corpora"]:
    dep = c5.dependence(T, c)
    out[c] = {arm: (dep[arm]["t"][c5.ACCOUNTINGS[0]] or "undefined (fewer than two seeds with a falling fit)")
              if arm in dep else mults[c][arm] for arm in T.d["arms"][1:]}
  return out


def forest(ax, T, mults: dict) -> None:
  """The multipliers side by side: a row per placement, a point with its t interval per corpus (t_multipliers),
  the paper's figure as a star, Pre-Norm's 1x as a line."""
  arms = T.d["arms"][1:]
  for j, c in enumerate(T.d["corpora"]):
    rows = [(i, mults[c][arm]) for i, arm in enumerate(arms) if not isinstance(mults[c][arm], str)]
    if rows:
      y = [i + 0.3 * (j - (len(T.d["corpora"]) - 1) / 2) for i, _ in rows]
      x = np.array([m.value for _, m in rows])
      err = [x - [m.lo for _, m in rows], [m.hi for _, m in rows] - x]
      ax.errorbar(x, y, xerr=err, fmt="o", ms=4, capsize=2, color=f"C{j}", label=NAMES.get(c, c))
  figs = [(i, c5.paper_figure(arm)) for i, arm in enumerate(arms) if c5.paper_figure(arm)]
  if figs:
    ax.scatter([f for _, f in figs], [i for i, _ in figs], marker="*", s=70, color="k", zorder=3,
               label="the paper's figure")
  ax.axvline(1.0, color="gray", lw=0.8, ls=":")
  ax.set(yticks=range(len(arms)), yticklabels=arms, ylim=(len(arms) - 0.5, -0.5),
         xlabel="compute-equivalent multiplier, FLOPs as computed [95% t interval over seeds]",
         title="Worth in Pre-Norm's compute")
  ax.legend(fontsize=7)


def figure(T, mults: dict, path: str) -> None:
  """Loss against compute, a panel per corpus: each arm's seed means, Pre-Norm's fitted power law, the multipliers
  in the legend; then every multiplier with its interval and the paper's figure (forest)."""
  from resnorm.viz.plots import plt
  n = len(T.d["corpora"])
  fig, axes = plt.subplots(1, n + 1, figsize=(5.5 * (n + 1), 4.2), squeeze=False)
  forest(axes[0][n], T, mults)
  for ax, c in zip(axes[0], T.d["corpora"]):
    for i, arm in enumerate(T.d["arms"]):
      ls = [x for x in (c5.ladder(T, c, arm, s) for s in range(T.d["seeds"])) if x is not None]
      if not ls:
        continue
      m = mults[c].get(arm)
      tag = "" if arm == "pre_norm" or m is None or isinstance(m, str) else f" ({m.value:.2f}x)"
      ax.plot(c5.computes(T, arm), np.mean(ls, axis=0), marker="os^Dv<>pP"[i % 9], ms=4, lw=1,
              ls="-" if arm == "pre_norm" else "--", color=f"C{i}", label=f"{arm}{tag}, n={len(ls)}")
    f = c5.pre_fit(T, c)
    if f is not None:
      cc = np.geomspace(f.c_lo, f.c_hi, 50)
      ax.plot(cc, f.a * cc ** -f.b, color="k", lw=0.8, label=f"Pre-Norm fit {f.a:.3g} C^-{f.b:.3f}")
      ax.set(xscale="log", yscale="log")
    ax.set(xlabel="training FLOPs", ylabel="final eval loss (nats/byte)", title=NAMES.get(c, c))
    if ax.get_yscale() == "log":  # plain losses, not 3 x 10^0
      ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%.2f"))
      ax.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%.2f"))
    else:
      ax.text(0.5, 0.5, no_fit(T, c), transform=ax.transAxes, ha="center", color="gray")
    if ax.get_legend_handles_labels()[0]:
      ax.legend(fontsize=6)
  fig.tight_layout()
  os.makedirs(os.path.dirname(path), exist_ok=True)
  fig.savefig(path, dpi=110)
  plt.close(fig)


def _on(per: dict) -> str:
  """'V on both corpora' when every corpus has V, else 'V on A, W on B'."""
  if len(set(per.values())) == 1 and len(per) > 1:
    return f"{next(iter(per.values()))} on both corpora"
  return ", ".join(f"{v} on {NAMES.get(c, c)}" for c, v in per.items())


def findings(T, parts, claim_verdicts, mults: dict) -> list[str]:
  """One line per placement for the README: its multiplier per corpus (t_multipliers: FLOPs as computed, the t
  interval over seeds), where the paper's lies against each interval (inside, above or below), and its claims'
  verdicts as worded."""
  lines = []
  for arm in T.d["arms"][1:]:
    done = [c for c in T.d["corpora"] if not isinstance(mults[c][arm], str)]
    ms = ", ".join(f"{_x(mults[c][arm]) if c in done else 'pending'} {NAMES.get(c, c)}" for c in T.d["corpora"])
    fig = c5.paper_figure(arm)
    if fig is not None and done:
      sides = {c: ce.side(fig, mults[c][arm]) for c in done}
      where = (f"{sides[done[0]]} both intervals" if len(set(sides.values())) == 1 and len(done) > 1 else
               ", ".join(f"{v} {NAMES.get(c, c)}'s" for c, v in sides.items()) + " interval" + "s" * (len(done) > 1))
      ms += f" (paper's {fig:.2f}x: {where})"
    cids = sorted({p["cid"] for p in parts if p["claim"].arm == arm}, key=lambda x: int(x[1:]))
    vs = "; ".join(f"{cid} " + _on({c: claim_verdicts[(cid, c)] for c in T.d["corpora"]}) for cid in cids)
    n = min(sum(c5.ladder(T, c, "pre_norm", s) is not None and c5.ladder(T, c, arm, s) is not None
                for s in range(T.d["seeds"])) for c in T.d["corpora"])
    so_far = f" ({n} of {T.d['seeds']} seeds so far)" if n < T.d["seeds"] else ""
    lines.append(f"- **{arm}**{so_far}: {ms}" + (f"; {vs}" if vs else "") + ".")
  return lines


def _step_cost(arm: str) -> str:
  """The arm's extra step time over Pre-Norm's across the ladder, from the design's bench (design.STEP_MS)."""
  extra = [100 * (a / p - 1) for a, p in zip(v5.STEP_MS[arm], v5.STEP_MS["pre_norm"])]
  return f"{min(extra):+.0f}% to {max(extra):+.0f}%"


def context_lines(T) -> list[str]:
  """What the claims table alone does not say: the scale, C13's Block against Full as measured, and the step-time
  cost that C16 and C17's words ("at negligible cost") name but their statistic does not test."""
  n = [v5.non_embedding_params(w) for w in (min(T.d["ladder"]), max(T.d["ladder"]))]
  lines = ["## Scale, and what the claims do not test", "",
           f"**Scale.** {n[0] / 1e3:.0f}k to {n[1] / 1e3:.0f}k non-embedding parameters at {v5.DEPTH} layers, "
           f"{v5.TOKENS_PER_PARAM:g} training tokens per parameter, and one learning rate ({v5.LR:g}) for every "
           "width and arm: the papers' models are 10^3-10^5 times larger and trained far longer, each at a tuned "
           "recipe. A multiplier here measures these placements at this scale and this lr, not the papers' claims "
           "at theirs.", ""]
  for c in T.d["corpora"]:
    gains = [(c5.gain(T, c, "attn_res_block", s), c5.gain(T, c, "attn_res", s)) for s in range(T.d["seeds"])]
    diffs = [b - f for b, f in gains if b is not None and f is not None]
    lines.append(f"- **C13 as measured, {NAMES.get(c, c)}**: Block's loss gain over Pre-Norm minus Full's, "
                 + (f"{_t95(diffs)} nats/byte (95% t, {len(diffs)} seeds)" if len(diffs) > 1 else "pending") + ".")
  lines += ["", "C13's statistic (Block's gain minus half of Full's) reads \"Block recovers most of Full's gain\"; "
            "where the interval above lies above 0, Block gains more than Full, and the claim holds because Full "
            "gains little.", "", *_c12_by_kind(T), "",
            "**Cost.** C16 (LAuReL) and C17 (DenseFormer) claim their gain \"at negligible cost\", and their "
            "statistic tests the loss only: the cost is not tested. The design's own step times put LAuReL at "
            f"{_step_cost('laurel')} a step over Pre-Norm across the ladder, and DenseFormer at "
            f"{_step_cost('denseformer')}: not negligible at this scale (the step-time column above charges it)."]
  return lines


def _t95(x) -> str:
  """'mean [95% t interval]' of two or more per-seed values."""
  t = verdicts.t_test(x)
  lo, hi = verdicts.interval(t, 0.95)
  return f"{t['mean']:+.3g} [{lo:+.3g}, {hi:+.3g}]"


def _c12_by_kind(T) -> list[str]:
  """C12's two statistics per sublayer kind (post hoc, beside the claims table's pooled ones), 95% t intervals."""
  out = ["**C12 by sublayer kind** (post hoc; Pre-Norm's coefficient of variation over the top width's sublayers "
         "minus AttnRes's, > 0: AttnRes more uniform; 95% t over seeds). C12b's gradient norm is each sublayer's "
         "whole parameter set, AttnRes's own queries included: the records keep no norm over the base parameters "
         "alone, so the two arms' norms cover different parameters.", "",
         "| statistic | sublayers | " + " | ".join(NAMES.get(c, c) for c in T.d["corpora"]) + " |",
         "|---|---|" + "---|" * len(T.d["corpora"])]
  for key, part in (("act_rms", "C12a"), ("grad_norm", "C12b")):
    for kind, name in ((None, "all (the claims table's)"), (0, "attention"), (1, "MLP")):
      cells = []
      for c in T.d["corpora"]:
        f = c5.cv_drop(key, kind)
        x = [v for v in (f(T, c, "attn_res", s) for s in range(T.d["seeds"])) if v is not None and math.isfinite(v)]
        cells.append(_t95(x) if len(x) > 1 else "n/a")
      out.append(f"| {part}: {key} | {name} | " + " | ".join(cells) + " |")
  return out


def page(T, parts, summary, claim_verdicts, mults, t_mults, header: list[str]) -> list[str]:
  m = len(v5.CLAIMS) * len(T.d["corpora"])
  return [*header, "", *design_lines(T), "", post_hoc.paragraph("v5"), "", "## Claims", "",
          *claims_table(parts, claim_verdicts, summary), "",
          verdicts.CORRECTION.format(q=verdicts.Q, m=summary["m"], level=summary["level"]) + ". " +
          design.VERDICT_RULE + " " + design.CLAIM_RULE, "", *seed_lines(parts, T.d["seeds"]), "",
          *power_lines(m), "",
          "## Compute-equivalent multipliers", "", *multiplier_lines(T, mults), "", *context_lines(T), "",
          f"![loss against compute, and the multipliers beside the papers' figures]({FIGURE})",
          "", "## Findings", "", *findings(T, parts, claim_verdicts, t_mults)]
