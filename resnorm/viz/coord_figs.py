"""The coordinate-check figure (resnorm.coord): per quantity, its mean |coordinate| against width and against depth,
one line per training step, as Tensor Programs V (Fig. 5) and CompleteP (Fig. 3) draw them."""
import numpy as np

from resnorm.viz.plots import _save, legend, plt


def _panel(ax, per_rung: dict, kind: str, name: str, steps: list[int], xlabel: str):
  rungs = [int(r) for r in per_rung]
  cmap = plt.get_cmap("viridis")
  for i, s in enumerate(steps):
    index = s if kind == "act" else s - 1
    ys = [per_rung[str(r)][kind].get(name, [np.nan] * (index + 1))[index] for r in rungs]
    ax.plot(rungs, ys, marker="o", ms=3, color=cmap(i / max(len(steps) - 1, 1)), label=f"step {s}")
  ax.set_xscale("log", base=2)
  ax.set_yscale("log")
  ax.set_xticks(rungs, [str(r) for r in rungs])
  ax.set_xlabel(xlabel)
  what = {"act": "|x|", "delta": "|x - x0|", "update": "|update|"}[kind]
  ax.set_title(f"{what} {name}", fontsize=9)


def coord_figure(result: dict, path: str, steps: list[int] | None = None) -> str:
  """Six rows: against width, then depth, the activations' size, their change since init and each role's update;
  `steps` default: 1, every few, the last."""
  n = result["steps"]
  steps = steps or sorted({1, *range(2, n + 1, max(n // 4, 1)), n})
  first = next(iter(result["width"].values()))
  rows = [[(kind, k) for k in (first[kind] if kind != "update" else sorted(first[kind]))]
          for kind in ("act", "delta", "update")]
  width = max(len(r) for r in rows)
  fig, axes = plt.subplots(6, width, figsize=(2.6 * width, 13), squeeze=False)
  for a, (axis, label) in enumerate((("width", "d_model"), ("depth", "layers"))):
    for r, cols in enumerate(rows):
      for col in range(width):
        ax = axes[3 * a + r][col]
        if col < len(cols):
          _panel(ax, result[axis], *cols[col], steps, label)
        else:
          ax.axis("off")
  legend(axes[0][0], fontsize=6)
  fig.suptitle(f"{result['residual']} under {result['param']}: lr {result['lr']:g}, {n} steps "
               f"(top: {result['ladder']['width_depth']} layers; bottom: d {result['ladder']['depth_width']})",
               fontsize=10)
  return _save(fig, path)
