"""The figures of docs/results.md: one per claim and corpus, and the stability map. Lines are the mean over seeds (the
seed count in every legend entry) with a band of +-1 std over seeds (said under every figure that has one); a run
that is missing leaves its seed out. Every variant (and depth) has its own colour, line style and marker, so no line
hides another. Each figure is drawn from one corpus's runs (R.corpus, named in its title); the report puts the
corpora's side by side."""
import math
import os
import warnings

import matplotlib.ticker
import numpy as np

from resnorm.results.v4 import claims as cl
from resnorm.results.v4 import grid
from resnorm.viz.plots import legend as _legend, plt

COLORS = {"pre_norm": "C0", "post_norm": "C3", "hc": "C2", "mhc": "C4"}
STYLES = {"pre_norm": ("-", "o"), "post_norm": ("--", "s"), "hc": ("-.", "^"), "mhc": (":", "D")}
LINES = (("-", "o"), ("--", "s"), ("-.", "^"), (":", "D"), ((0, (5, 1)), "v"), ((0, (1, 1)), "P"))
BAND_NOTE = "lines: mean over seeds (n in each legend entry); bands: +-1 standard deviation over seeds"


def style(v):
  """Colour, line style and marker of a variant."""
  ls, marker = STYLES.get(v, ("-", "o"))
  return {"color": COLORS.get(v), "ls": ls, "marker": marker, "markersize": 4}


def _save(fig, fig_dir, name):
  for ax in fig.axes:
    if not np.isfinite(ax.dataLim.get_points()).all():  # every run of the panel is missing: a partial report
      ax.set(xscale="linear", yscale="linear")  # a log axis with no data cannot place its ticks
      ax.text(0.5, 0.5, "no finished runs", transform=ax.transAxes, ha="center", va="center", color="gray")
  corpus = os.path.basename(os.path.normpath(fig_dir))  # the report draws each corpus into figures/<corpus>/
  if corpus in grid.CORPORA and fig._suptitle is None:
    fig.suptitle(corpus, fontsize=10)
  if any(getattr(ax, "_banded", False) for ax in fig.axes):
    fig.text(0.5, -0.02, BAND_NOTE, ha="center", va="top", fontsize=7, color="dimgray")
  if not fig.get_constrained_layout():
    fig.tight_layout()
  fig.savefig(os.path.join(fig_dir, name), dpi=110, bbox_inches="tight")
  plt.close(fig)
  return name


def _depth_axis(ax, depths):
  """A log x axis labelled at the depths themselves (no 2x10^0 minor labels)."""
  ax.set_xscale("log")
  ax.set_xticks(depths, [str(L) for L in depths])
  ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())


def band(ax, x, ys, label=None, **kw):
  """Mean +- std over seeds of equal-length (or NaN-padded) series ys."""
  ys = [y for y in ys if y is not None]
  if not ys:
    return
  n = max(len(y) for y in ys)
  arr = np.full((len(ys), n), np.nan)
  for i, y in enumerate(ys):
    arr[i, :len(y)] = [np.nan if v is None else v for v in y]
  x = np.asarray(x if x is not None else np.arange(n), dtype=float)[:n]
  with warnings.catch_warnings():  # a step no seed reached: NaN, drawn as a gap
    warnings.simplefilter("ignore", RuntimeWarning)
    mean, std = np.nanmean(arr, axis=0), np.nanstd(arr, axis=0)
  kw.setdefault("markersize", 4)
  line, = ax.plot(x, mean, label=None if label is None else f"{label} (n={len(ys)})", **kw)
  if len(ys) > 1:
    ax.fill_between(x, mean - std, mean + std, alpha=0.15, color=line.get_color(), lw=0)
    ax._banded = True


def _rel(rows_list):
  n = next((len(r) for r in rows_list if r), 1)
  return np.arange(n)


def _curves(R, r, seeds):
  """Eval loss against step, per seed, on the union of steps (NaN where a run stopped)."""
  runs = [R.run(r, s) for s in seeds]
  steps = sorted({st for run in runs if run for st, _, _ in run["evals"]})
  ys = [[{k: v for k, v, _ in run["evals"]}.get(st) for st in steps] for run in runs if run]
  return steps, ys


def fig_c1(R, d, fig_dir):
  top, Ls, seeds = max(d["init_depths"]), d["init_depths"], grid.block_seeds(d, "init")
  fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.4))
  for v in grid.MAIN:
    rows = [R.init(v, top, s) for s in seeds]
    band(a, _rel(rows), [cl.col(r, "grad_norm") for r in rows], v, **{**style(v), "marker": None})
    band(b, Ls, [[(R.init(v, L, s) or [{}])[-1].get("grad_norm") for L in Ls] for s in seeds], v, **style(v))
  pre0 = [(R.init("pre_norm", Ls[0], s) or [{}])[-1].get("grad_norm") for s in seeds]
  if any(pre0):
    g0 = np.mean([g for g in pre0 if g])
    b.plot(Ls, [g0 * math.sqrt(Ls[0] / L) for L in Ls], "k:", label="1/sqrt(L)")
  a.set(xlabel=f"sublayer (L={top})", ylabel="grad norm at init", yscale="log", title="per sublayer")
  b.set(xlabel="layers L", ylabel="last sublayer grad norm", yscale="log", title="against depth")
  _depth_axis(b, Ls)
  _legend(a, fontsize=8)
  _legend(b, fontsize=8)
  return [_save(fig, fig_dir, "c1_init_grad.png")]


def fig_c2(R, d, fig_dir):
  top, deep, seeds = max(d["init_depths"]), d["pair_layers"], grid.block_seeds(d, "init")
  fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.4))
  for v in grid.MAIN:
    rows = [R.init(v, top, s) for s in seeds]
    band(a, _rel(rows), [cl.col(r, "act_rms") for r in rows], v, **{**style(v), "marker": None})
    r = grid.ref_long(d, v, deep)
    rows = [R.last(r, s) for s in run_seeds(d, r)]
    band(b, _rel(rows), [cl.col(r, "act_rms") for r in rows], v, **style(v))
  a.set(xlabel=f"sublayer (L={top})", ylabel="input RMS", yscale="log", title="at init")
  b.set(xlabel=f"sublayer (L={deep})", ylabel="input RMS", yscale="log",
        title=f"after training (reference recipe, {d['horizon']} steps)")
  _legend(a, fontsize=8)
  return [_save(fig, fig_dir, "c2_act_rms.png")]


def cell_stats(R, r, seeds):
  """(mean loss over the seeds that trained: neither diverged nor stalled, std, diverged, stalled, finished); a
  stalled seed is counted, not averaged in with the trained ones."""
  runs = [R.run(r, s) for s in seeds]
  done = [x for x in runs if x]
  losses = [x["loss"] for x in done if not x["diverged"] and not x["stalled"] and x["loss"] is not None]
  mean = float(np.mean(losses)) if losses else float("nan")
  std = float(np.std(losses, ddof=1)) if len(losses) > 1 else float("nan")
  return mean, std, sum(x["diverged"] for x in done), sum(x["stalled"] for x in done), len(done)


def cell_label(mean, std, div, stall, done, n, sep="\n", with_std=False):
  """'3.07' (mean loss; '3.07 ± 0.02' with_std), then one entry per count: '1/3 div', '2/3 stall', '2/3 ran'."""
  if not done:
    return "not run"
  marks = [f"{div}/{n} div"] * bool(div) + [f"{stall}/{n} stall"] * bool(stall) + [f"{done}/{n} ran"] * (done < n)
  head = ("div" if div and not stall else "stall" if stall and not div else "no trained seed") if math.isnan(mean) else \
      f"{mean:.2f}" + (f" ± {std:.2f}" if with_std and not math.isnan(std) else "")
  return sep.join([head] + marks)


def run_seeds(d, r) -> tuple:
  """The seeds the design runs for a recipe; none for a cell the design leaves out (Post-Norm's 12-layer map)."""
  return grid.seeds_of(d, r) if r in grid.blocks(d) else ()


def fig_map(R, d, fig_dir):
  lrs, fracs, depths, variants = d["lrs"], d["warmup_fracs"], d["map_depths"], d["variants"]
  n = d["block_seeds"]["map"]
  fig, axes = plt.subplots(len(depths), len(variants), figsize=(3.3 * len(variants), 1.1 + 1.25 * len(depths) *
                                                                 len(fracs)), squeeze=False, constrained_layout=True)
  vals = [cell_stats(R, grid.Recipe(v, L, lr, f, d["steps"]), run_seeds(d, grid.Recipe(v, L, lr, f, d["steps"])))
          for L in depths for v in variants for f in fracs for lr in lrs]
  finite = [m for m, *_ in vals if not math.isnan(m)]
  lo, hi = (min(finite), max(finite)) if finite else (2.0, 4.0)
  it = iter(vals)
  cmap = plt.get_cmap("viridis_r").with_extremes(bad="lightgray")  # gray: no seed trained
  for i, L in enumerate(depths):
    for j, v in enumerate(variants):
      ax = axes[i][j]
      grid_vals = [[next(it) for _ in lrs] for _ in fracs]
      im = ax.imshow([[c[0] for c in row] for row in grid_vals], cmap=cmap, vmin=lo, vmax=max(hi, lo + 1e-3),
                     aspect="auto")
      for y, row in enumerate(grid_vals):
        for x, c in enumerate(row):
          dark = not math.isnan(c[0]) and (c[0] - lo) / max(hi - lo, 1e-9) > 0.4  # viridis_r is dark at the top
          ax.text(x, y, cell_label(*c, n), ha="center", va="center", fontsize=6.5,
                  color="white" if dark else "black")
      ax.set_xticks(range(len(lrs)), [f"{lr:g}" for lr in lrs], fontsize=7)
      ax.set_yticks(range(len(fracs)), [f"warmup {f:.0%}" for f in fracs] if j == 0 else [], fontsize=7)
      ax.set_title(f"{v}, {L} layers", fontsize=9)
      if i == len(depths) - 1:
        ax.set_xlabel("learning rate", fontsize=8)
  fig.colorbar(im, ax=axes, label="mean final eval loss over the seeds that trained", shrink=0.8)
  fig.suptitle(f"{R.corpus}: final eval loss after {d['steps']} steps: mean over the seeds that trained, and how many "
               f"of {n} seeds diverged or stalled (learned nothing beyond byte frequencies)", fontsize=9)
  return _save(fig, fig_dir, "stability_map.png")


def fig_c3(R, d, fig_dir):
  depths = d["map_depths"]
  fig, axes = plt.subplots(1, len(depths), figsize=(5 * len(depths), 3.4), squeeze=False)
  for ax, L in zip(axes[0], depths):
    for v in d["variants"]:
      for f, ls in zip(d["warmup_fracs"], ("-", "--")):
        seeds = run_seeds(d, grid.Recipe(v, L, d["lrs"][0], f, d["steps"]))
        if not seeds:
          continue
        ys = [[R.loss(grid.Recipe(v, L, lr, f, d["steps"]), s) for lr in d["lrs"]] for s in seeds]
        band(ax, d["lrs"], ys, f"{v} warmup {f:.0%}", color=COLORS[v], ls=ls, marker=style(v)["marker"])
    ax.set(xscale="log", xlabel="learning rate", ylabel="final eval loss (a diverged run has none)",
           title=f"{L} layers ({d['steps']} steps; solid: no warmup)")
  _legend(axes[0][-1], fontsize=7, ncol=2)
  out = [fig_map(R, d, fig_dir), _save(fig, fig_dir, "c3_lr.png")]
  if grid.c3_recipes(d):
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for r in grid.c3_recipes(d):
      steps, ys = _curves(R, r, run_seeds(d, r))
      band(ax, steps, ys, f"{r.variant} warmup {r.warmup_frac:.0%}", color=COLORS[r.variant],
           ls="--" if r.warmup_frac else "-", marker=style(r.variant)["marker"])
    ax.set(xlabel="step", ylabel="eval loss", title=f"long-warmup regime, L={d['c3']['layers']}, lr {d['c3']['lr']:g}")
    _legend(ax, fontsize=8)
    out.append(_save(fig, fig_dir, "c3_warmup.png"))
  return out


def fig_c4(R, d, fig_dir):
  fig, ax = plt.subplots(figsize=(6, 3.4))
  for v in grid.MAIN:
    seeds = grid.block_seeds(d, "depth")
    band(ax, d["depths"], [[R.loss(grid.ref_long(d, v, L), s) for L in d["depths"]] for s in seeds], v,
         **style(v))
  uni = [run["unigram"] for L in d["depths"] for s in grid.block_seeds(d, "depth")
         if (run := R.run(grid.ref_long(d, "pre_norm", L), s)) and run["unigram"]]
  if uni:
    ax.axhline(np.mean(uni), color="gray", ls=":", label="byte unigram")
  ax.set(xlabel="layers L", ylabel="final eval loss", title=f"reference recipe, {d['horizon']} steps")
  _depth_axis(ax, d["depths"])
  _legend(ax, fontsize=8)
  # the curves show whether each depth's loss had flattened: C4's regime condition
  shades = plt.get_cmap("viridis")(np.linspace(0, 0.85, len(d["depths"])))
  panels = [(f"{v}, reference recipe", [(f"L={L}", grid.ref_long(d, v, L), c, LINES[i % len(LINES)])
                                         for i, (L, c) in enumerate(zip(d["depths"], shades))]) for v in grid.MAIN]
  return [_save(fig, fig_dir, "c4_depth.png"), *_curve_fig(R, d, fig_dir, panels, "c4_curves.png")]


def _cos_fig(R, d, fig_dir, variants, name, L, steps):
  fig, ax = plt.subplots(figsize=(6, 3.4))
  for v in variants:
    r = grid.ref(d, v, L, steps=steps)
    rows = [R.last(r, s) for s in run_seeds(d, r)]
    band(ax, None, [cl.col(r, "cos_next_median") for r in rows], v, **style(v))
  ax.set(xlabel=f"sublayer l (L={L})", ylabel="median cos(u_l, u_l+1)",
         title=f"after training, reference recipe, {steps} steps")
  _legend(ax, fontsize=8)
  return [_save(fig, fig_dir, name)]


def fig_c5(R, d, fig_dir):
  return _cos_fig(R, d, fig_dir, grid.MAIN, "c5_cosine.png", d["pair_layers"], d["horizon"])


def fig_c6(R, d, fig_dir):
  return _cos_fig(R, d, fig_dir, ("pre_norm", "hc", "mhc"), "c6_cosine.png", max(d["map_depths"]), d["steps"])


def _curve_fig(R, d, fig_dir, panels, name):
  """panels: [(title, [(label, recipe, color, (linestyle, marker))])] -> eval loss against step."""
  fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.4), squeeze=False)
  for ax, (title, lines) in zip(axes[0], panels):
    for label, r, color, (ls, marker) in lines:
      steps, ys = _curves(R, r, run_seeds(d, r))
      band(ax, steps, ys, label, color=color, ls=ls, marker=marker)
    ax.set(xlabel="step", ylabel="eval loss", title=title)
    _legend(ax, fontsize=8)
  return [_save(fig, fig_dir, name)]


def fig_c7(R, d, fig_dir):
  lg = d["long"]
  # the long runs and their twins at the map's horizon, whose gap C7b compares with the long runs'
  lines = [(f"{v}, {steps} steps", grid.Recipe(v, lg["layers"], lg["lr"], d["ref_warmup_frac"], steps), COLORS[v],
            (STYLES[v][0], "o" if steps == lg["steps"] else "x")) for v in grid.MAIN for steps in (lg["steps"], d["steps"])]
  return _curve_fig(R, d, fig_dir, [(f"L={lg['layers']}, lr {lg['lr']:g}: {d['steps']} and {lg['steps']} steps",
                                     lines)], "c7_long.png")


def _ablation_fig(R, d, fig_dir, pairs, name):
  L = max(d["map_depths"])
  panels = [(f"pre_norm L={L}, lr {lr:g}", [(label, grid.ref(d, "pre_norm", L, lr, tag), c, ls)
                                            for label, tag, c, ls in pairs]) for lr in grid.ablation_lrs(d)]
  return _curve_fig(R, d, fig_dir, panels, name)


def fig_c8(R, d, fig_dir):
  return _ablation_fig(R, d, fig_dir, [("final norm", "", "C0", LINES[0]), ("no final norm", "nofinal", "C1",
                                                                         LINES[1])], "c8_final_norm.png")


def fig_c9(R, d, fig_dir):
  return _ablation_fig(R, d, fig_dir, [("bf16, float32 stats", "bf16", "C0", LINES[0]),
                                       ("bf16, bf16 stats", "bf16stats", "C1", LINES[1])], "c9_norm_stats.png")


def fig_c10(R, d, fig_dir):
  L = max(d["map_depths"])
  fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
  for ax, key in zip(axes, ("gain_forward", "gain_backward")):
    for v in ("hc", "mhc"):
      runs = [R.run(grid.ref(d, v, L), s) for s in run_seeds(d, grid.ref(d, v, L))]
      band(ax, None, [cl.col(r["last"], key) for r in runs if r], f"{v} trained", **style(v))
      band(ax, None, [cl.col(r["first"], key) for r in runs if r], f"{v} step 0", color=COLORS[v], ls=":",
           marker="x")
    ax.set(xlabel=f"sublayer (L={L})", ylabel=f"composite {key.split('_')[1]} Amax gain", yscale="log")
    _legend(ax, fontsize=8)
  return [_save(fig, fig_dir, "c10_gains.png")]


FIGURES = {"C1": fig_c1, "C2": fig_c2, "C3": fig_c3, "C4": fig_c4, "C5": fig_c5, "C6": fig_c6, "C7": fig_c7,
           "C8": fig_c8, "C9": fig_c9, "C10": fig_c10}
