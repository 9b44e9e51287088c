"""The markdown of docs/results.md: the claims table, each claim's per-part rows (test, CI, minimum detectable
effect, condition, verdict), the rule, and the comparison of the two corpora."""
import numpy as np
from scipy import stats as st

from resnorm.results import claims as cl
from resnorm.results import verdicts


def _sd(values):
  """mean ± std (labelled) of the measured per-seed values."""
  x = np.array(values, dtype=float)
  if not len(x):
    return "n/a"
  return f"{x.mean():+.3g} ± {x.std(ddof=1):.2g} (std)" if len(x) > 1 else f"{x.mean():+.3g}"


def _ci(p) -> str:
  t = p["test"]
  if t is None:
    return "n/a"
  m = p["sign"] * t["mean"]
  return f"{m:+.3g} [{m - t['half_ci']:+.3g}, {m + t['half_ci']:+.3g}]"


def _pv(x) -> str:
  return "n/a" if x is None else (f"{x:.2g}" if x >= 1e-4 else "<1e-4")


def _shown(p) -> str:
  """The verdict as printed: with the values' verdict beside "out of regime"."""
  if p["verdict"] == cl.OUT_OF_REGIME:
    return f"out of regime (values: {p['values_verdict']})"
  return p["verdict"] + (" (rests on one stalled run)" if p.get("fragile") else "")


def _seeds(c, d):
  """Seeds judged in the claim's parts: 'n' (all planned) or 'n of N', per part when they differ."""
  counts = []
  for p in c["parts"]:
    planned = len(p.get("planned", d["seeds"]))
    counts.append(str(len(p["judged"])) if len(p["judged"]) == planned else f"{len(p['judged'])} of {planned}")
  return counts[0] if len(set(counts)) == 1 else ", ".join(f"{p['label']}: {n}" for p, n in zip(c["parts"], counts))


def _cell(c, d) -> str:
  effect = "; ".join(f"{p['label']}: {_ci(p)}" + (f" ({_shown(p)})" if p["verdict"] != p["values_verdict"] or
                                                   p.get("fragile") else "") for p in c["parts"])
  return f"**{c['verdict']}**<br>{effect}<br>seeds {_seeds(c, d)}"


def claims_table(by_corpus, d) -> list[str]:
  """One row per claim, one verdict column per corpus: the verdict, each part's mean with its 95% CI, the seeds."""
  corpora = list(by_corpus)
  lines = ["| claim | source | " + " | ".join(corpora) + " |", "|---|---|" + "---|" * len(corpora)]
  for i, c in enumerate(by_corpus[corpora[0]]):
    lines.append(f"| [{c['id']}](#{c['id'].lower()}) {c['claim']} | {c['source']} | " +
                 " | ".join(_cell(by_corpus[k][i], d) for k in corpora) + " |")
  return lines


def _mde(p) -> str:
  return "n/a" if p["mde"] is None else f"{p['mde']:.2g}"


def _regime_cell(p) -> str:
  bad = [s for s, ok in p["in_regime"].items() if not ok]
  text = p["regime"] + (f"; **left out: seed {', '.join(map(str, bad))}**" if bad else "")
  if p["stable"] is False:
    means = ", ".join(f"{f:.0%}: " + ("n/a" if v is None else f"{v:+.3g}") for f, v in p["means"].items())
    text += f"; **statistic not settled** (mean at {means})"
  elif p["stable"]:
    text += "; settled"
  return text


def claim_section(c, d, corpus, fig_names) -> list[str]:
  seeds = sorted({s for p in c["parts"] for s in p["values"]} | set(d["seeds"]))
  lines = [f"#### {corpus}: **{c['verdict']}**", "",
           "| part | measured per seed (paired) | predicted | " + " | ".join(f"seed {s}" for s in seeds) +
           " | mean ± std | mean, 95% CI | p (Holm) | MDE (80%) | condition | verdict |",
           "|---|---|---|" + "---|" * len(seeds) + "---|---|---|---|---|---|"]
  notes = []
  for p in c["parts"]:
    vals = " | ".join(f"{p['values'][s]:+.4g}" if s in p["values"] else "missing" for s in seeds)
    lines.append(f"| {p['label']} | {p['what']} | {'> 0' if p['sign'] > 0 else '< 0'} | {vals} | "
                 f"{_sd([p['values'][s] for s in p['judged']])} | {_ci(p)} | {_pv(p['p_adj'])} | {_mde(p)} | "
                 f"{_regime_cell(p)} | {_shown(p)} |")
    if p.get("note"):
      notes.append(f"Part {p['label']}: {p['note']}.")
  return lines + [""] + ([" ".join(notes), ""] if notes else []) + \
      [f"![{corpus} {n}](figures/{corpus}/{n})" for n in fig_names] + [""]


def unsettled(by_corpus) -> list[str]:
  """The parts whose own statistic had not settled by the end of their runs, per corpus (empty: none)."""
  out = []
  for corpus, claims in by_corpus.items():
    bad = [f"{c['id']}{p['label']}" for c in claims for p in c["parts"] if p["stable"] is False]
    if bad:
      out.append(f"{corpus}: {', '.join(bad)}")
  return out


def rule_text(m: int, d) -> str:
  return ("Verdict per part (resnorm/results/verdicts.py), from the paired per-seed values x (sign-adjusted so the "
          "claim predicts x > 0) of the seeds that meet the part's condition: a one-sided paired t-test at alpha "
          f"{verdicts.ALPHA}, with {verdicts.CORRECTION.format(m=m)}: **reproduced** if the adjusted p in the "
          "claim's direction is below alpha, **not reproduced** if the adjusted p in the opposite direction is, "
          "**inconclusive** otherwise, and inconclusive too if leaving out one seed with a stalled run would change "
          "it. \"mean, 95% CI\" is the measured statistic's mean over those seeds with its two-sided 95% t interval; "
          "\"± (std)\" is the standard deviation over seeds. \"MDE (80%)\" is the minimum detectable effect: the "
          f"true mean a one-sided test at the Bonferroni level alpha/{m} detects with {verdicts.POWER:.0%} power, "
          "(t_{1-alpha/m, n-1} + t_{0.8, n-1}) std / sqrt(n). Each part's condition was declared before the grid "
          "ran (resnorm/results/claims.py): a seed whose runs fail it is left out and listed, and the part is judged "
          f"on the rest when at least {verdicts.MIN_SEEDS} remain. A part that reads trained runs must also have "
          "settled: its mean, with every run read at 50%, 75% and 100% of its steps, keeps its sign and last moves "
          "by less than one standard error; otherwise it is **out of regime**, and the row gives what the values "
          f"alone say. {cl.COMBINE_RULE} A diverged run scores ln 256 = {cl.FAIL_LOSS:.3f} nats/byte. Seeds "
          f"{list(d['seeds'])} run everywhere; the recipes of parts whose effect lay within "
          f"{verdicts.MORE_SEEDS_SE:g} standard errors of zero after them also run seeds "
          f"{list(d.get('more_seeds', ()))}.")


def across_corpora(by_corpus) -> list[str]:
  """Values verdicts side by side, and for every part where the corpora differ in sign or verdict, the interaction:
  the difference of the two corpora's mean paired differences with its 95% Welch interval."""
  corpora = list(by_corpus)
  if len(corpora) < 2:
    return []
  a, b = corpora[:2]
  lines = ["## Both corpora", "", f"The values verdict of every part on each corpus. Where they differ in sign or "
           f"verdict, the interaction {a} - {b}: the difference of the mean paired statistics, with its 95% Welch "
           "interval (the corpora's runs are independent). A part significant on one corpus and null on the other "
           "has not replicated.", "", f"| part | {a} | {b} | interaction {a} - {b}, 95% CI |", "|---|---|---|---|"]
  for ca, cb in zip(by_corpus[a], by_corpus[b]):
    for pa, pb in zip(ca["parts"], cb["parts"]):
      va, vb = pa["values_verdict"], pb["values_verdict"]
      ma, mb = (p["test"] and p["sign"] * p["test"]["mean"] for p in (pa, pb))
      differ = va != vb or (ma is not None and mb is not None and np.sign(ma) != np.sign(mb))
      inter = interaction(pa, pb) if differ else ""
      lines.append(f"| {ca['id']}{pa['label']} | {va} ({_ci(pa)}) | {vb} ({_ci(pb)}) | {inter} |")
  return lines


def interaction(pa, pb) -> str:
  xa = [pa["sign"] * v for v in pa["x"].values()]
  xb = [pb["sign"] * v for v in pb["x"].values()]
  if len(xa) < 2 or len(xb) < 2:
    return "n/a"
  va, vb = np.var(xa, ddof=1) / len(xa), np.var(xb, ddof=1) / len(xb)
  diff, se = float(np.mean(xa) - np.mean(xb)), float(np.sqrt(va + vb))
  if se == 0:
    return f"{diff:+.3g}"
  dof = (va + vb) ** 2 / (va ** 2 / (len(xa) - 1) + vb ** 2 / (len(xb) - 1))
  h = float(st.t.ppf(0.975, dof) * se)
  return f"{diff:+.3g} [{diff - h:+.3g}, {diff + h:+.3g}]"
