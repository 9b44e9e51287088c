"""docs/transfer.md, its figures and the README's transfer lines, from the transfer study's records alone
(resnorm/results/transfer/study.py), then the hand-written coordinate checks and smoke sweep (docs/transfer_checks.md,
appended as they are). Every record is checked before anything is written; the page is written whole.
"""
import math
import os

import numpy as np

from resnorm.results.engine import ledger as lg
from resnorm.results.engine import page as engine_page
from resnorm.results.engine import paths
from resnorm.results.engine.readme import Block
from resnorm.results.transfer import design as D
from resnorm.results.transfer import grid, study

FIG_DEPTH = "figures/transfer/transfer_depth.png"
FIG_WIDTH = "figures/transfer/transfer_width.png"
SPAN = 0.6  # nats/byte a figure panel spans above its lowest loss
CHECKS = "transfer_checks.md"
BEGIN = ("<!-- transfer findings: generated from the run records by `python -m resnorm.results --report=transfer` "
         "(resnorm/results/transfer/page.py); edits between these markers are overwritten -->")
END = "<!-- /transfer findings -->"
FINDINGS = Block(BEGIN, END, "transfer findings")


# the verdicts the README counts instead of listing (the findings list all but pending: it has no shift yet)
UNDECIDED = ("undecided", "failed (edge)", "pending")
VERDICTS = ("transfers", "does not transfer") + UNDECIDED


def lr_of(k: float) -> str:
  return f"{D.lr(k):.1e}" if np.isfinite(k) else "-"


def iv(i, fmt="{:+.2f}") -> str:
  """[lo, hi]; an unbounded end (an undefined resample's least favourable tail) as -inf / +inf; "-" if undefined."""
  return "-" if any(np.isnan(x) for x in i) else f"[{fmt.format(i[0])}, {fmt.format(i[1])}]"


def opt_cell(cs) -> str:
  if not cs.complete:
    return "pending"
  o = cs.opt
  flag = {"": "", "coarse": " (coarse)", "edge": " **edge**", "failed": " failed"}[o.flag]
  return f"{o.k:+.2f} ({lr_of(o.k)}) {iv(cs.boot)}{flag}" + (" stalled" if cs.stalled else "")


def shift_rows(shifts, axis: str) -> list[str]:
  top = "96 layers" if axis == "depth" else "the top width"
  law = " | vs depth^-3/2 law (-9)" if axis == "depth" else ""
  rows = [f"| placement | param | shift (sqrt(2) steps) | bootstrap 95% | t 95% | verdict | penalty at {top} "
          f"(nats/byte) | effective speedup{law} |",
          "|---|---|---|---|---|---|---|---|" + ("---|" if axis == "depth" else "")]
  for s in (x for x in shifts if x.axis == axis):
    sp = f"{s.speedup:.2f}x" if np.isfinite(s.speedup) else "n/a"
    pen = f"{s.penalty_bound}{s.penalty:.4f}" if np.isfinite(s.penalty) else "-"
    value = f"{s.value:+.2f}" if np.isfinite(s.value) else "-"
    rows.append(f"| `{s.arm}` | `{s.param}` | {value} | {iv(s.boot)} | {iv(s.t)}{edge_note(s)} | "
                f"**{s.verdict}**{stalled(s)} | {pen} | {sp}" + (f" | {s.law or '-'}" if axis == "depth" else "")
                + " |")
  return rows


def edge_note(s) -> str:
  """A t interval's note where some seed's own optimum is on its edge: that value is a bound (edge_paragraph)."""
  return f" (edge: {s.edge_seeds} {'seed' if s.edge_seeds == 1 else 'seeds'})" if s.edge_seeds else ""


def edge_paragraph(d) -> str:
  n = d["seeds"]
  return (f"A t interval marked (edge: m seeds) reads m seeds' own optima that lie on their grid's edge (the best "
          f"point of that seed's curve, a bound) as values. The bootstrap counts the resamples of such a seed alone "
          f"(for each, 1/{n ** n} of them expected at {n} seeds: more than the 2.5% a tail holds) as undefined, so "
          "its interval is unbounded (-inf, +inf), and the verdict can be neither transfers nor does not transfer.")


def stalled(s) -> str:
  """A shift's note where a cell stalled: its verdict stands, but it compares plateaus."""
  return f" (stalled: {s.stalled})" if s.stalled else ""


def optima_rows(d, stats, axis: str) -> list[str]:
  rungs = d["depths"] if axis == "depth" else d["widths"]
  head = "layers" if axis == "depth" else "width"
  rows = ["| placement | param | " + " | ".join(f"{r} {head}" for r in rungs) + " |",
          "|---|---|" + "---|" * len(rungs)]
  for arm, param, ax in study.axes(d):
    if ax != axis:
      continue
    cells = panel_cells(d, stats, arm, param, axis)
    rows.append(f"| `{arm}` | `{param}` | " + " | ".join(opt_cell(c) for c in cells) + " |")
  return rows


def power_rows() -> list[str]:
  rows = ["| seeds | expected half-width of the hull | smallest shift called \"does not transfer\" at 80% |",
          "|---|---|---|"]
  for n in (2, 3, 4, 6, 8):
    half, need = D.power(n)
    rows.append(f"| {n}{' (the design)' if n == D.SEEDS else ''} | {half:.2f} | {need:.2f} |")
  return rows


def hull_words(s) -> str:
  """A shift's hull, or where its bootstrap is unbounded (a seed's optimum on its grid's edge) its t interval, named
  as such: the reader sees how far the seeds' own optima reach."""
  if np.isfinite(s.hull).all():
    return iv(s.hull, "{:+.1f}")
  return f"unbounded (t {iv(s.t, '{:+.1f}')})"


def findings(d, shifts) -> list[str]:
  """Sentences from the shifts table: per axis and parametrization, each placement under its verdict (transfers,
  does not transfer, undecided, failed) with its shift and hull, so an undecided shift shows how far its hull reaches;
  the pending ones counted."""
  out = []
  for axis in ("depth", "width"):
    span = (f"{d['depths'][0]} to {d['depths'][-1]} layers" if axis == "depth"
            else f"width {d['widths'][0]} to {d['widths'][-1]}")
    for param in (d["depth_params"] if axis == "depth" else d["width_params"]):
      rows = [s for s in shifts if s.axis == axis and s.param == param]
      by = {v: [s for s in rows if s.verdict == v] for v in VERDICTS if v != "pending"}
      words = []
      for v, ss in by.items():
        if ss:
          words.append(f"{v}: " + ", ".join(f"`{s.arm}` {s.value:+.1f} {hull_words(s)}{stalled(s)}" for s in ss))
      n_pending = sum(s.verdict == "pending" for s in rows)
      words += [f"{n_pending} pending"] * bool(n_pending)
      out.append(f"- `{param}`, {span}: " + "; ".join(words) + ".")
  return out


def panel_cells(d, stats, arm: str, param: str, axis: str) -> list:
  """A panel's cells, one per rung of the axis."""
  if axis == "depth":
    return [stats[grid.Cell(arm, param, L, d["width"])] for L in d["depths"]]
  return [stats[grid.Cell(arm, param, d["base_depth"], w)] for w in d["widths"]]


def ylim(cells) -> tuple[float, float]:
  """A panel's y range: SPAN nats/byte from just below its own lowest loss."""
  lo = min((np.nanmin(cs.losses) for cs in cells if np.isfinite(cs.losses).any()), default=0.0)
  return lo - 0.02, lo + SPAN


def figure(d, stats, axis: str, path: str) -> None:
  """Final eval loss against log2 lr, one line per rung (seed mean, each seed's points faint), a panel per
  placement and parametrization. Every panel spans the same SPAN nats from its own lowest loss, so curves compare in
  shape across panels and none sits above its frame (Post-Norm's stall at the unigram plateau did, on a shared one)."""
  from resnorm.viz.plots import plt
  panels = [(a, p) for a, p, ax in study.axes(d) if ax == axis]
  rungs = d["depths"] if axis == "depth" else d["widths"]
  cols = min(4, len(panels))
  rows = math.ceil(len(panels) / cols)
  fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3 * rows), squeeze=False)
  for ax, (arm, param) in zip(axes.flat, panels):
    cells = panel_cells(d, stats, arm, param, axis)
    for i, (r, cs) in enumerate(zip(rungs, cells)):
      x = np.log2([D.lr(k) for k in cs.ks])
      y = cs.losses
      ax.plot(np.repeat(x, y.shape[1]), y.ravel(), ".", color=f"C{i}", alpha=0.3, ms=3)
      n = np.isfinite(y).sum(axis=1)  # the mean over the seeds a point has so far
      if n.any():
        mean = np.where(np.isfinite(y), y, 0.0).sum(axis=1) / np.maximum(n, 1)
        ax.plot(x[n > 0], mean[n > 0], "-o", color=f"C{i}", ms=3, lw=1, label=f"{r}")
      if cs.complete and np.isfinite(cs.opt.k):
        ax.axvline(math.log2(D.lr(cs.opt.k)), color=f"C{i}", lw=0.6, ls=":")
    ax.set(title=f"{arm}, {param}", xlabel="log2 lr", ylabel="final eval loss")
    ax.set_ylim(*ylim(cells))
    if ax.get_legend_handles_labels()[0]:
      ax.legend(fontsize=6, title="layers" if axis == "depth" else "width", title_fontsize=6)
  for ax in list(axes.flat)[len(panels):]:
    ax.axis("off")
  fig.tight_layout()
  os.makedirs(os.path.dirname(path), exist_ok=True)
  fig.savefig(path, dpi=90)
  plt.close(fig)


def header(d, S) -> list[str]:
  recs = list(S.recs.values())
  every = recs + list(S.outside.values())  # what the grid cost: the records outside it ran too
  diverged = sum(r["status"] == "diverged" for r in recs)
  stalled_runs = sum(r.get("learned_beyond_unigram") is False for r in recs)
  return [
      "# Does the learning rate transfer? Each placement's optimal lr from 12 to 96 layers and over width", "",
      engine_page.generated("transfer"), "",
      f"From the run records in `{S.ledger.where(paths.ROOT)}` (design `{D.__name__}` sha256 "
      f"{engine_page.quoted(sorted(map(str, S.designs)))}; code fingerprint "
      f"{engine_page.quoted(sorted(map(str, S.fingerprints)))}; runs at commit "
      f"{engine_page.quoted(engine_page.commits(every))}). Runs: {len(recs)} of {S.total} finished ({diverged} "
      f"diverged, {stalled_runs} stalled), and {len(S.outside)} records outside the grid (below); "
      f"{lg.run_seconds(every) / 3600:.2f} run-hours, start to finish, summed over every record, and "
      f"{lg.active_seconds(every) / 3600:.2f} h of wall "
      f"time with a run going (the union of those intervals), against {D.budget_s() / 3600:.1f} h for the whole "
      f"grid by the design's budget model (`design.budget_s`; {D.ALLOWED_S / 3600:.0f} h allowed). Every number "
      "below is read from the records.", "", *outside_lines(S)]


def outside_lines(S) -> list[str]:
  """The records the grid no longer holds, per cell: kept, listed, read by no statistic."""
  if not S.outside:
    return []
  by = {}
  for p, s in S.outside:
    by.setdefault(p[:4], {}).setdefault(p.k, []).append(s)
  cells = "; ".join(f"`{a}`/`{pm}` {L} layers width {w}: " + ", ".join(
      f"k {k} (seed{'s' * (len(ss) > 1)} {', '.join(map(str, sorted(ss)))})" for k, ss in sorted(ks.items()))
      for (a, pm, L, w), ks in sorted(by.items()))
  return [f"Records outside the grid ({len(S.outside)}): runs that a cell's growth added while fewer seeds decided "
          "it; the mean over the seeds that now have every point of its grid no longer reaches them (the growth "
          f"rule below), so no statistic reads them. Each is checked as every record is and kept: {cells}.", ""]


def scale_lines(d) -> list[str]:
  L0, L1 = d["depths"][0], d["depths"][-1]
  n0 = 12 * d["width"] ** 2 * L0
  n1 = 12 * d["width"] ** 2 * L1
  tokens = d["steps"] * d["common"]["train.batch_size"] * d["common"]["data.seq_len"]
  return [f"Scale: width {d['width']} (heads of {d['head_dim']}), {L0}-{L1} layers: {n0:,}-{n1:,} non-embedding "
          f"params, each run {d['steps']} steps of {d['common']['train.batch_size']} x "
          f"{d['common']['data.seq_len']} bytes ({tokens:,} tokens) on `{d['corpus']}`, {d['seeds']} seeds; the "
          "papers tune at 10^8-10^10 params. An optimum here is the best lr for this short budget at this size; "
          "whether it moves is the question, not its value."]


def page(d, S, stats, shifts) -> list[str]:
  unfinished = [c for c, cs in stats.items() if not cs.complete]
  return [*header(d, S), *scale_lines(d), "",
          "## The design", "",
          f"Fixed in `resnorm/results/transfer/design.py` (status `{D.STATUS}`) before the first record: its "
          "docstring gives the recipe, the grid and its growth, the statistics and the budget. The rules:", "",
          *[f"- {k}: {v}." for k, v in D.RULES.items()], "",
          f"Learning rates are in sqrt(2) steps k: lr = {D.LR_REF:g} x 2^(k/2). Effect of interest: {D.EFFECT:g} "
          "step. Keel runs under `standard` only: " + "; ".join(D.REFUSED.values()) + ".", "",
          "Power at the pilot's per-seed scatter of an optimum "
          f"({D.PILOT_SD:.2f} steps):", "", *power_rows(), "",
          "## Depth: the shift from 12 to 96 layers", "", *shift_rows(shifts, "depth"), "",
          "Penalty: the 96-layer curve's loss at the 12-layer optimum minus its own best (a `>=` where the 12-layer "
          "optimum lies beyond the 96-layer grid). Effective speedup: Pre-Norm's optimal-loss curve over depth "
          "under the same parametrization, read at both losses (n/a where it does not fall with compute). "
          "Stalled: a cell every run of which ended above the byte-unigram baseline (each record's "
          "`learned_beyond_unigram`); its curve is a plateau and its optimum noise, so a verdict on it stands as the "
          "rule gives it but is not a finding (the README leaves it out of its lists).", "", edge_paragraph(d), "",
          "Optima per cell (sqrt(2) steps, lr, bootstrap 95%):", "", *optima_rows(d, stats, "depth"), "",
          f"![final loss against lr per depth]({FIG_DEPTH})", "",
          "## Width: the shift from the base width to 4x it, at 12 layers", "", *shift_rows(shifts, "width"), "",
          *optima_rows(d, stats, "width"), "", f"![final loss against lr per width]({FIG_WIDTH})", "",
          "## Findings", "", *findings(d, shifts), "",
          (f"**Unfinished**: {len(unfinished)} cells without every record (rerun the same command: it runs only "
           "what has none)." if unfinished else "All cells finished.")]


def readme_lines(d, shifts) -> list[str]:
  """The README's two lines, depth and width: under each parametrization, the placements that transfer and those
  that do not, each with its hull; a shift with a stalled cell (a plateau's optimum) and the rest counted by verdict
  (undecided, failed, pending). Grouped by parametrization so both lines fit the README's 15 KB whatever the verdicts
  (a test fills every cell)."""
  out = []
  for axis, what in (("depth", f"{d['depths'][0]} -> {d['depths'][-1]} layers"),
                     ("width", f"width x{d['widths'][-1] // d['widths'][0]}")):
    rows = [s for s in shifts if s.axis == axis]
    parts = []
    for v in ("transfers", "does not transfer"):
      for param in dict.fromkeys(s.param for s in rows):
        ss = [s for s in rows if s.param == param and s.verdict == v and not s.stalled]
        if ss:
          parts.append(f"{v} under `{param}`: " + ", ".join(f"{s.arm} {iv(s.hull, '{:+.1f}')}" for s in ss))
    n_stalled = sum(bool(s.stalled) for s in rows)
    rest = {v: sum(s.verdict == v and not s.stalled for s in rows) for v in UNDECIDED}
    out.append(f"- {what}: " + "; ".join(parts + [f"{n_stalled} on a stalled cell"] * bool(n_stalled) +
                                          [f"{n} {v}" for v, n in rest.items() if n]) + ".")
  return out
