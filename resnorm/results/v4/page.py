"""The markdown of docs/results.md: the claims table, each claim's per-part rows (test, intervals at the correction's
level and at 95%, the a-priori and the observed minimum detectable effect, failures, condition, regime, verdict), the
power table and the rule; the stability maps, the run counts and the design in words. The comparison of the two
corpora is resnorm/results/v4/replication.py's."""

import numpy as np

from resnorm.results import post_hoc as post_hoc_rules
from resnorm.results import records, verdicts
from resnorm.results.engine import paths
from resnorm.results.v4 import claims as cl
from resnorm.results.v4 import design, grid


def _sd(values):
  """mean ± std (labelled) of the measured per-seed values."""
  x = np.array(values, dtype=float)
  if not len(x):
    return "n/a"
  return f"{x.mean():+.3g} ± {x.std(ddof=1):.2g} (std)" if len(x) > 1 else f"{x.mean():+.3g}"


def _iv(p, key) -> str:
  """An interval in the measured statistic's units (sign-adjusted intervals turned back by the part's sign)."""
  ci = p.get(key)
  if ci is None:
    return "n/a"
  if p["test"]["kind"] == "discordant":
    return f"[{ci[0]:+.2f}, {ci[1]:+.2f}]"
  lo, hi = sorted((p["sign"] * ci[0], p["sign"] * ci[1]))
  return f"[{lo:+.3g}, {hi:+.3g}]"


def _effect(p) -> str:
  t = p["test"]
  if t is None:
    return "n/a"
  if t["kind"] == "discordant":
    return f"{t['worse']} vs {t['better']} {_iv(p, 'ci')}"
  return f"{p['sign'] * t['mean']:+.3g} {_iv(p, 'ci')}"


def _pv(x) -> str:
  return "n/a" if x is None else (f"{x:.2g}" if x >= 1e-4 else "<1e-4")


def _shown(p) -> str:
  """The verdict as printed: with the values' verdict beside "out of regime", its size flag (verdicts.flag, with the
  effect of interest), and the worst case where it decided."""
  if p["verdict"] == cl.OUT_OF_REGIME:
    return f"out of regime (values: {p['values_verdict']}{_small(p)})"
  extra = ""
  if p.get("worst_verdict") and p["worst_verdict"] != p["values_verdict"]:
    extra = " (the worst case for its failed seeds disagrees)"
  return p["verdict"] + _small(p) + extra


SIDE = {verdicts.SMALLER: "below {:g}", verdicts.LARGER: "above {:g}", verdicts.SMALL_OPPOSITE: "above -{:g}"}


def _small(p) -> str:
  return f", {p['flag']}: {SIDE[p['flag']].format(verdicts.effect_of(p))}" if p.get("flag") else ""


def _seeds(c) -> str:
  """Seeds with a value in the claim's parts: 'n' or 'n of N', per part when they differ."""
  counts = []
  for p in c["parts"]:
    planned = len(p["planned"])
    have = planned if "discordant" in p else len(p["values"])  # a discordant part counts pairs, over every seed
    counts.append(str(have) if have == planned else f"{have} of {planned}")
  return counts[0] if len(set(counts)) == 1 else ", ".join(f"{p['label']}: {n}" for p, n in zip(c["parts"], counts))


def _cell(c) -> str:
  effect = "; ".join(f"{p['label']}: {_effect(p)} ({_shown(p)})" for p in c["parts"])
  by = ", ".join(c.get("deciding") or []) or "none"
  return f"**{c['worded']}** (decided by {by})<br>{effect}<br>seeds {_seeds(c)}"


def claims_table(by_corpus, level: float) -> list[str]:
  """One row per claim, one verdict column per corpus: the verdict, each part's mean with its FCR-adjusted interval,
  the seeds."""
  corpora = list(by_corpus)
  lines = [f"Each part: its mean, with the {level:.2%} FCR-adjusted interval (the decision's), and its verdict; "
           "discordant-pair parts: failures of the arm under test vs the reverse, with the interval of their share "
           "minus 1/2. \"decided by\" names the parts whose verdict set the claim's.", "",
           "| claim | source | " + " | ".join(corpora) + " |", "|---|---|" + "---|" * len(corpora)]
  for i, c in enumerate(by_corpus[corpora[0]]):
    lines.append(f"| [{c['id']}](#{c['id'].lower()}) {c['claim']} | {c['source']} | " +
                 " | ".join(_cell(by_corpus[k][i]) for k in corpora) + " |")
  return lines


def _mde(p, key) -> str:
  return "n/a" if p.get(key) is None else f"{p[key]:.2g}"


def _failures(p) -> str:
  """Per arm: runs read that diverged or stalled; the seeds that failed and the control's seeds left out."""
  parts = [f"{v}: {c['diverged']} diverged, {c['stalled']} stalled" for v, c in p["failures"].items()
           if c["diverged"] or c["stalled"]]
  if p["failed"]:
    parts.append(f"**failed seed {', '.join(map(str, p['failed']))}**")
  if p["left_out"]:
    parts.append(f"control not met, left out: seed {', '.join(map(str, p['left_out']))}")
  return "; ".join(parts) or "none"


def _regime_cell(p) -> str:
  text = p["control"]
  reg = p.get("regime")
  if p["design"].tol is None:
    return text + "; regime: reads no trajectory"
  traj = ", ".join(f"{f:.0%}: " + ("n/a" if v is None else f"{p['sign'] * v:+.3g}")
                   for f, v in p["trajectory"].items())
  if reg is None:
    if p.get("settled") is None:
      return text + "; regime: nothing to test (no values)"
    return text + f"; **not shown settled** (trajectory incomplete: {traj})"
  verdict = "settled" if reg["settled"] else "**not settled**"
  return (text + f"; {verdict}: change over the last quarter {p['sign'] * reg['mean_change']:+.3g} within "
          f"±{reg['tol']:g}? TOST p {_pv(reg['p'])} (trajectory {traj})")


def claim_section(c, corpus, fig_names) -> list[str]:
  seeds = sorted({s for p in c["parts"] for s in p["planned"]})
  lines = [f"#### {corpus}: **{c['worded']}**", "",
           "| part | measured per seed (paired) | predicted | " + " | ".join(f"seed {s}" for s in seeds) +
           " | mean ± std | mean, FCR interval | 95% CI | p (BH) | effect of interest | a-priori MDE (design, pilot sd) | "
           "observed MDE (post hoc, observed sd) | failures | condition; regime | verdict |",
           "|---|---|---|" + "---|" * len(seeds) + "---|---|---|---|---|---|---|---|---|---|"]
  notes = []
  for p in c["parts"]:
    vals = " | ".join(_seed_cell(p, s) for s in seeds)
    lines.append(f"| {p['label']} | {p['what']} | {'> 0' if p['sign'] > 0 else '< 0'} | {vals} | "
                 f"{_sd(list(p['values'].values()))} | {_effect(p)} | {_iv(p, 'ci95')} | {_pv(p.get('p_adj'))} | "
                 f"{verdicts.effect_of(p):g} | {_mde(p, 'mde_design')} | {_mde(p, 'mde_observed')} | {_failures(p)} | "
                 f"{_regime_cell(p)} | {_shown(p)} |")
    if p.get("note"):
      notes.append(f"Part {p['label']}: {p['note']}.")
    if p.get("worst"):
      w = p["worst"]
      notes.append(f"Part {p['label']}, worst case (failed seed{'s' if len(p['failed']) > 1 else ''} "
                   f"{', '.join(map(str, p['failed']))} at the least favourable observed value): mean "
                   f"{p['sign'] * w['mean']:+.3g}, p {_pv(w['p'])}, verdict {p.get('worst_verdict', 'n/a')}.")
  return lines + [""] + ([" ".join(notes), ""] if notes else []) + \
      [f"![{corpus} {n}](figures/{corpus}/{n})" for n in fig_names] + [""]


def _seed_cell(p, s) -> str:
  if s not in p["planned"]:
    return ""
  if s in p["values"]:
    return f"{p['values'][s]:+.4g}"
  if s in p["failed"]:
    return "failed"
  if s in p["left_out"]:
    return "control failed"
  return "—" if p["test"] and p["test"]["kind"] == "discordant" else "missing"


def unsettled(by_corpus) -> list[str]:
  """The parts whose own statistic was not shown settled by the end of their runs, per corpus (empty: none)."""
  out = []
  for corpus, claims in by_corpus.items():
    bad = [f"{c['id']}{p['label']}" for c in claims for p in c["parts"] if p.get("settled") is False]
    if bad:
      out.append(f"{corpus}: {', '.join(bad)}")
  return out


def design_mdes(by_corpus, d, design_m: int) -> None:
  """Sets each part's a-priori MDE (the power table's, from the pilot sd) as p["mde_design"]."""
  rows = verdicts.power_table(cl.DESIGN, d["block_seeds"], design_m, cl.DESIGN_CALLS)
  mdes = {r["part"]: r["mde"] for r in rows}
  for claims in by_corpus.values():
    for c in claims:
      for p in c["parts"]:
        p["mde_design"] = mdes.get(f"{c['id']}{p['label']}")


def power_table(d, summary) -> list[str]:
  """The design's power table (verdicts.power_table), as declared before the grid."""
  rows = verdicts.power_table(cl.DESIGN, d["block_seeds"], summary["design_m"], cl.DESIGN_CALLS)
  level = rows[0]["level"] if rows else 0.0
  t_rows = [r for r in rows if r["decidable"] is not None]
  out = [post_hoc_rules.paragraph("v4"), "",
         f"**Design** (resnorm/results/v4/design.py, fixed before the grid): per part its pilot standard deviation per "
         f"seed (report v3's tables), its seeds, and the a-priori minimum detectable effect at 80% power of the two-sided "
         f"t-test at the design level {level:.3g} = q x {cl.DESIGN_CALLS} / {summary['design_m']} (BH's threshold "
         f"once the {cl.DESIGN_CALLS} parts whose pilot effect exceeded 8 standard deviations are called), beside "
         "the effect of interest declared in the part's units: what each part could have detected. "
         f"{sum(not r['decidable'] for r in t_rows)} of {len(t_rows)} t-test parts cannot detect their effect of "
         "interest at these seeds. Discordant-pair parts have no per-seed sd.", "",
         "| part | block | pilot sd | seeds | a-priori MDE (80%) | effect of interest | power at it | decidable |",
         "|---|---|---|---|---|---|---|---|"]
  for r, (k, dz) in zip(rows, cl.DESIGN.items()):
    f = lambda x, fmt: "n/a" if x is None else format(x, fmt)
    out.append(f"| {r['part']} | {dz.block} | {f(r['pilot_sd'], '.2g')} | {r['n']} | {f(r['mde'], '.2g')} | "
               f"{r['effect']:g} | {f(r['power'], '.0%')} | "
               f"{'n/a' if r['decidable'] is None else ('yes' if r['decidable'] else '**no**')} |")
  return out


def rule_text(summary, d) -> str:
  return ("Verdict per part (resnorm/results/verdicts.py), from the paired per-seed values x (sign-adjusted so the "
          "claim predicts x > 0) of the seeds the design fixed for it: a two-sided paired t-test (parts that count "
          "failures: McNemar's exact test on the discordant pairs), with "
          f"{verdicts.CORRECTION.format(q=verdicts.Q, m=summary['m'], level=summary['level'])}. "
          f"{design.VERDICT_RULE} Only a part the correction selects can be reproduced or opposite. "
          "\"a-priori MDE\" is the design's (the pilot sd, the power table below): what a part could have detected. "
          "\"observed MDE\" is post hoc, from the part's own std on its few degrees of freedom at the report's BH "
          "level, and says nothing about what the design could detect. No seed is "
          "dropped for an outcome of an arm under test: a part may condition only on its control arm (declared in "
          "resnorm/results/v4/claims.py); a stalled run keeps its loss, a diverged run has none (nothing is imputed), "
          "and a seed whose arm under test failed where the statistic needs it is judged by the worst case (that "
          "seed at the least favourable value observed), which must agree for the verdict to stand. A part that "
          "reads trained runs must have settled: TOST at 0.05 shows the per-seed change of its statistic over the "
          "last quarter of training within its declared tolerance; otherwise it is **out of regime**, and the row "
          f"gives what the values alone say. {cl.COMBINE_RULE}")


def values_cell(p) -> str:
  """A part's values verdict and effect, for the table of both corpora."""
  return f"{p['values_verdict']}{_small(p)} ({_effect(p)})"


def map_tables(R, d) -> list[str]:
  from resnorm.results.v4 import figs  # matplotlib: only where a page is built
  cols = [(lr, f) for lr in d["lrs"] for f in d["warmup_fracs"]]
  out = []
  for L in d["map_depths"]:
    out += [f"**{R.corpus}, {L} layers** (final eval loss, mean ± std over the seeds that trained, neither diverged "
            "nor stalled; then how many seeds diverged or stalled)", "",
            "| variant | " + " | ".join(f"lr {lr:g} warmup {f:.0%}" for lr, f in cols) + " |",
            "|---|" + "---|" * len(cols)]
    for v in d["variants"]:
      cells = []
      for lr, f in cols:
        r = grid.Recipe(v, L, lr, f, d["steps"])
        if r not in grid.blocks(d):
          cells.append("not run")
          continue
        seeds = grid.seeds_of(d, r)
        mean, std, div, stall, done = figs.cell_stats(R, r, seeds)
        cells.append(figs.cell_label(mean, std, div, stall, done, len(seeds), sep=", ", with_std=True))
      out.append(f"| {v} | " + " | ".join(cells) + " |")
    out.append("")
  return out


def run_counts(Rs, d) -> dict:
  names = grid.points(d)
  runs = [Rs[c].run(r, s) for c, r, s in names]
  done = [x["summary"] for x in runs if x]
  secs = sum(sum(x.get(k) or 0 for k in ("startup_s", "train_s")) for x in done)
  starts = [x["started_at"] for x in done if x.get("started_at")]
  ends = [x["finished_at"] for x in done if x.get("finished_at")]
  commits = sorted({(x.get("provenance") or {}).get("git_commit") or "unknown" for x in done})
  return {"runs": len(names), "finished": len(done), "diverged": sum(bool(x) and x["diverged"] for x in runs),
          "stalled": sum(bool(x) and x["stalled"] for x in runs), "run_minutes": secs / 60,
          "flagged": sum("learned_beyond_unigram" in x for x in done),
          "wall_minutes": (max(ends) - min(starts)) / 60 if starts and ends else None,
          "first": min(starts) if starts else None, "last": max(ends) if ends else None, "commits": commits,
          "dirty": any((x.get("provenance") or {}).get("git_dirty") for x in done)}


def machine() -> str:
  """This machine, in words: CPU model and cores (as a run record names them), OS, Python and jax versions."""
  import platform
  import jax
  return (f"{records.machine()}, {platform.system()} {platform.release()}, Python {platform.python_version()}, "
          f"jax {jax.__version__}")


def when(ts) -> str:
  import datetime
  return "n/a" if ts is None else datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime(
      "%Y-%m-%d %H:%M UTC")


def flags_note(k) -> str:
  if k["flagged"] == k["finished"]:
    return ""
  return f"; {k['finished'] - k['flagged']} runs predate summary.json's learned_beyond_unigram and count as not stalled"


CORPUS_TEXT = {"pystdlib": "Python source bytes", "shakespeare": "the complete works, English verse and prose",
               grid.TPU_CORPUS: "the shards given by --data_paths"}


def design_text(d) -> str:
  lg = d["long"]
  cfg = grid.config(d, next(iter(d["corpora"])), {})
  seeds = ", ".join(f"{b} {n}" for b, n in d["block_seeds"].items())
  return (f"Corpora: {', '.join(f'`{c}` ({CORPUS_TEXT.get(c, c)})' for c in d['corpora'])}, every recipe on each. "
          f"Model (`{d['config']}`): d {cfg.model.d_model}, {cfg.model.num_heads} heads, MLP {cfg.model.mlp_dim}, "
          f"{cfg.model.dtype}, {d['steps']} steps, batch {cfg.train.batch_size} x {cfg.data.seq_len} bytes, seeds "
          f"per block of runs ({seeds}; fixed by the power table below) (paired: a seed gives every variant the same base weights and data order). "
          f"Stability map: {', '.join(d['variants'])} at {' and '.join(map(str, d['map_depths']))} layers, lr "
          f"{', '.join(f'{x:g}' for x in d['lrs'])}, warmup "
          f"{', '.join(_warmup(d, f) for f in d['warmup_fracs'])}. "
          f"Reference recipe: lr {d['ref_lr']:g}, warmup {d['ref_warmup_frac']:.0%}. Depth sweep (C4): "
          f"{list(d['depths'])} layers at {d['horizon']} steps; C2b and C5 compare the {d['pair_layers']}-layer pair "
          f"of it (where both variants train). Init diagnostics (C1, C2): {list(d['init_depths'])} layers, Xavier "
          f"init. Eval: {_eval_text(cfg)}. Longer training (C7): {lg['layers']} layers, lr {lg['lr']:g}, "
          f"{lg['steps']} steps.")


def _warmup(d, f) -> str:
  return f"{f:.0%} ({grid.warmup_steps(d['steps'], f)} steps)"


def _eval_text(cfg) -> str:
  dc = cfg.data
  if dc.get("eval_set", "head") == "stratified":
    return (f"{dc.eval_bytes:,} target bytes drawn across every validation document by a fixed stratified rule (the "
            f"same bytes for every run and seed), at 25, 50, 75 and 100% of each run's steps; training reads pieces "
            f"of at most {dc.piece_bytes:,} bytes, shuffled across the training split by the seed")
  return f"the first {dc.eval_batches} batches of the validation split"


def source(Rs) -> str:
  """Where the runs were read from: their records (with the code's fingerprint) or their workdirs."""
  R = next(iter(Rs.values()))
  if not R.records_dir:
    return ""
  fps = sorted({fp for R in Rs.values() for fp in R.fingerprints})
  return (f"Read from the run records in `{R.ledger.where(paths.ROOT)}` "
          f"(code fingerprint{'s' if len(fps) > 1 else ''} "
          f"{', '.join(f'`{f}`' for f in fps) or 'n/a'}; resnorm/results/records.py). ")


def unfinished(Rs, d) -> list[str]:
  """One line per run of the design that has not finished (neither completed nor diverged), with its state."""
  from resnorm.sweep import sweep
  out = []
  for c, r, s in grid.points(d):
    if Rs[c].run(r, s) is None:
      name = grid.run_name(r, s, c)
      state = "no record yet: pending" if Rs[c].records_dir else \
          sweep.status(Rs[c].root, name) or "no summary yet: pending or running"
      out.append(f"`{name}` ({state})")
  return out
