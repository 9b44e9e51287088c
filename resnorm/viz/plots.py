"""Figures (matplotlib, Agg): per-run diagnostics against depth, loss curves with spikes, heatmaps, sweeps."""
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from resnorm.io import storage  # noqa: E402

DEPTH_KEYS = (("grad_norm", "gradient norm ||dL/dW||", True), ("act_rms", "input RMS", True),
              ("update_ratio", "||F|| / ||input||", True))


def legend(ax, **kw):
  """ax.legend, unless nothing on the panel is labelled (runs with nothing to draw): matplotlib would warn."""
  if ax.get_legend_handles_labels()[0]:
    ax.legend(**kw)


def _col(rows, key):
  return np.array([np.nan if r.get(key) is None else r[key] for r in rows], dtype=float)


def _save(fig, path):
  """Writes a PNG through resnorm/io/storage.py (local or a bucket)."""
  fig.tight_layout()
  buf = io.BytesIO()
  fig.savefig(buf, format="png", dpi=110)
  plt.close(fig)
  storage.write_bytes(path, buf.getvalue())
  return path


def loss_curves(metrics: list[dict], spike_steps, path, title="", unigram=None):
  """Train and eval loss; spikes as red lines; the byte-unigram baseline (resnorm/data/unigram.py) dashed."""
  fig, ax = plt.subplots(figsize=(6, 3.5))
  tr = [(m["step"], m["loss"]) for m in metrics if "loss" in m]
  ev = [(m["step"], m["eval_loss"]) for m in metrics if "eval_loss" in m]
  if tr:
    ax.plot(*zip(*tr), label="train", lw=1)
  if ev:
    ax.plot(*zip(*ev), "o-", label="eval", ms=3)
  for s in spike_steps or []:
    ax.axvline(s, color="red", alpha=0.3, lw=1)
  if unigram is not None:
    ax.axhline(unigram, color="gray", ls="--", lw=1, label=f"byte unigram {unigram:.3f}")
  ax.set(xlabel="step", ylabel="loss (nats / byte)", title=title or "loss (red: spikes)")
  ax.legend()
  return _save(fig, path)


def _draw_depth(ax, rows, key, label, log, title):
  idx = np.arange(len(rows))
  for kind, marker in (("attn", "o"), ("mlp", "s")):
    sel = [i for i, r in enumerate(rows) if r["kind"] == kind]
    ax.plot(idx[sel], _col(rows, key)[sel], marker, ms=3, label=kind)
  ax.set(xlabel="sublayer (depth)", ylabel=label, title=title, yscale="log" if log else "linear")


def _draw_cosine(ax, rows, title):
  idx = np.arange(len(rows))
  med, lo, hi = (_col(rows, k) for k in ("cos_next_median", "cos_next_p05", "cos_next_p95"))
  ax.fill_between(idx, lo, hi, alpha=0.3, label="5-95%")
  ax.plot(idx, med, label="median")
  ax.set(xlabel="sublayer l", ylabel="cos(u_l, u_l+1)", title=title, ylim=(min(0.0, np.nanmin(lo)), 1.02))


def _draw_gains(ax, rows, title):
  idx = np.arange(len(rows))
  ax.plot(idx, _col(rows, "gain_forward"), label="forward (max row sum)")
  ax.plot(idx, _col(rows, "gain_backward"), label="backward (max col sum)")
  ax.set(xlabel="sublayer", ylabel="composite Amax gain", yscale="log", title=title)


def _draw_spread(ax, rows, title):
  ax.plot(np.arange(len(rows)), _col(rows, "stream_spread"), ".-", ms=3, label="stream spread")
  ax.set(xlabel="sublayer", ylabel="||h_k - mean h|| / ||mean h||", title=title)


def _draw_depth_entropy(ax, rows, title):
  idx = np.arange(len(rows))
  ax.plot(idx, _col(rows, "depth_entropy"), ".-", ms=3, label="entropy of the depth softmax")
  ax.plot(idx, np.log(idx + 1.0), ":", color="gray", label="uniform over l + 1 sources")
  ax.set(xlabel="sublayer l", ylabel="nats", title=title)


LEARNED_KEYS = ("laurel_alpha", "laurel_beta", "lr_ratio", "pa_gain_", "value_lambda", "resid_lambda", "x0_lambda", "ddl_beta")  # pa_gain_: every j


DENSE_KEYS = tuple(f"dense_entropy_{w}" for w in "qkvr")


def _draw_keys(ax, rows, keys, ylabel, title):
  idx = np.arange(len(rows))
  for key in keys:
    col = _col(rows, key)
    ok = ~np.isnan(col)
    ax.plot(idx[ok], col[ok], ".-", ms=3, label=key)
  ax.set(xlabel="sublayer l", ylabel=ylabel, title=title)


def _profiles(rows):
  """(name, key of the line drawn for earlier steps, drawer) per per-sublayer field present in rows."""
  out = [(key, key, lambda ax, r, t, key=key, label=label, log=log: _draw_depth(ax, r, key, label, log, t))
         for key, label, log in DEPTH_KEYS]
  out.append(("cosine", "cos_next_median", _draw_cosine))
  if rows and rows[0].get("gain_forward") is not None:
    out.append(("gains", "gain_forward", _draw_gains))
  if rows and rows[0].get("stream_spread") is not None:
    out.append(("stream_spread", "stream_spread", _draw_spread))
  if rows and rows[0].get("depth_entropy") is not None:
    out.append(("depth_entropy", "depth_entropy", _draw_depth_entropy))
  for name, keys, ylabel in (("learned_weights", LEARNED_KEYS, "learned weight"),
                             ("dense_entropy", DENSE_KEYS, "entropy of |A| over the sources (nats)")):
    present = [k for k in (rows[0] if rows else {})
               if k.startswith(keys) and any(r.get(k) is not None for r in rows)]
    if present:
      out.append((name, present[0], lambda ax, r, t, keys=present, ylabel=ylabel: _draw_keys(ax, r, keys, ylabel, t)))
  return out


def depth_figures(result: dict, outdir: str, prefix: str = "") -> list[str]:
  """grad_norm, act_rms, update_ratio, cosine (median + 5-95% band) against sublayer index; angular-distance
  heatmap; for multi-stream variants the composite gains, the stream spread and the mixing matrices; for AttnRes the
  depth-attention weights and their entropy."""
  rows, title = result["sublayers"], f"{result['residual']} L={result['num_layers']} step {result['step']}"
  paths = []
  for name, _, draw in _profiles(rows):
    fig, ax = plt.subplots(figsize=(6, 3.2))
    draw(ax, rows, title)
    ax.legend()
    paths.append(_save(fig, storage.join(outdir, f"{prefix}{name}.png")))
  if "angular_distance" in result:
    fig, ax = plt.subplots(figsize=(4.5, 4))
    im = ax.imshow(np.array(result["angular_distance"]), cmap="viridis", vmin=0, vmax=0.5, origin="lower")
    fig.colorbar(im, ax=ax, label="angular distance / pi")
    ax.set(xlabel="sublayer m", ylabel="sublayer l", title="last-token angular distance")
    paths.append(_save(fig, storage.join(outdir, f"{prefix}angular_distance.png")))
  if "mixing" in result:
    mats = np.array(result["mixing"])
    pick = np.unique(np.linspace(0, len(mats) - 1, min(8, len(mats))).astype(int))
    fig, axes = plt.subplots(1, len(pick), figsize=(1.6 * len(pick), 2))
    for ax, i in zip(np.atleast_1d(axes), pick):
      ax.imshow(mats[i], cmap="RdBu_r", vmin=-1.5, vmax=1.5)
      ax.set(title=f"l={i}", xticks=[], yticks=[])
    fig.suptitle("mean H_res per sublayer")
    paths.append(_save(fig, storage.join(outdir, f"{prefix}mixing.png")))
  if "depth_mixing" in result:
    fig = depth_mixing_figure(result["depth_mixing"], _col(rows, "mixing_r2"), title)
    paths.append(_save(fig, storage.join(outdir, f"{prefix}depth_mixing.png")))
  if "depth_weights" in result:  # AttnRes: row l, the token-averaged softmax over the sources sublayer l reads
    fig, ax = plt.subplots(figsize=(4.5, 4))
    w = np.array(result["depth_weights"])
    im = ax.imshow(w, cmap="viridis", vmin=0, vmax=max(float(w.max()), 1e-6), origin="lower", aspect="auto")
    fig.colorbar(im, ax=ax, label="mean weight")
    ax.set(xlabel="source j (0: embedding; then blocks)", ylabel="sublayer l", title=f"depth attention, {title}")
    paths.append(_save(fig, storage.join(outdir, f"{prefix}depth_weights.png")))
  if "dense_weights" in result:  # MUDDFormer: row l, block l's token-averaged DA weights per way
    w = np.array([[[np.nan] * len(result["dense_weights"])] * 4 if m is None else m
                  for m in result["dense_weights"]], dtype=float)                          # [L, 4, L]
    fig, axes = plt.subplots(1, 4, figsize=(10, 2.8), sharey=True)
    vmax = max(float(np.nanmax(np.abs(w))) if np.isfinite(w).any() else 1.0, 1e-6)
    for c, (ax, way) in enumerate(zip(axes, "QKVR")):
      im = ax.imshow(w[:, c], cmap="RdBu_r", vmin=-vmax, vmax=vmax, origin="lower", aspect="auto")
      ax.set(title=f"{way} way", xlabel="source j (0: embedding)")
    axes[0].set(ylabel="block l")
    fig.colorbar(im, ax=axes[-1], label="mean A[l, j]")
    fig.suptitle(f"dense weights, {title}")
    paths.append(_save(fig, storage.join(outdir, f"{prefix}dense_weights.png")))
  return paths


def depth_mixing_figure(mix, r2, title: str):
  """M[l, j] (resnorm.model.depth_mixing) as a heatmap, sources on x, sublayers on y, on a symmetric colour scale
  (Pre-Norm: ones below the diagonal), and each row's fit R^2 beside it (1: the connection is linear there)."""
  m = np.array(mix, dtype=float)
  s = m.shape[0]
  m[np.triu_indices(s, k=1, m=s + 1)] = np.nan                    # sources a sublayer cannot read
  vmax = max(float(np.nanmax(np.abs(m))), 1e-6)
  fig, (ax, ax_r2) = plt.subplots(1, 2, figsize=(5.6, 4), gridspec_kw={"width_ratios": [5, 1]}, sharey=True)
  im = ax.imshow(m, cmap="RdBu_r", vmin=-vmax, vmax=vmax, origin="lower", aspect="auto")
  fig.colorbar(im, ax=ax, label="M[l, j]")
  ax.set(xlabel="source j (0: embedding; j: sublayer j-1)", ylabel="sublayer l", title=f"depth mixing, {title}")
  r2 = np.array([np.nan if v is None else v for v in r2], dtype=float)
  ax_r2.plot(r2, np.arange(len(r2)), ".-", ms=3)
  ax_r2.set(xlabel="fit R^2", xlim=(min(0.9, float(np.nanmin(r2)) if len(r2) else 0.9), 1.005))
  ax_r2.tick_params(axis="x", labelsize=6)
  fig.tight_layout()
  return fig


def depth_mixing_png(mix, r2, title: str) -> bytes:
  """The depth-mixing figure as a PNG (TensorBoard's depth/mixing_matrix)."""
  fig = depth_mixing_figure(mix, r2, title)
  buf = io.BytesIO()
  fig.savefig(buf, format="png", dpi=80)
  plt.close(fig)
  return buf.getvalue()


def profile_pngs(history: list[tuple[int, list[dict]]], title: str, earlier: int = 6) -> dict[str, bytes]:
  """TensorBoard's depth profiles: {field: PNG}. The newest diagnostics step drawn as eval's figure, over thin
  lines of up to `earlier` earlier steps (evenly spaced, the first included) coloured by step, so one picture
  shows the profile against depth and how it moved during training."""
  step, rows = history[-1]
  old = history[:-1]
  old = [old[i] for i in np.unique(np.linspace(0, len(old) - 1, min(earlier, len(old))).astype(int))] if old else []
  cmap, out = plt.get_cmap("viridis"), {}
  for name, key, draw in _profiles(rows):
    fig, ax = plt.subplots(figsize=(6, 3.2))
    for i, (s, r) in enumerate(old):
      ax.plot(_col(r, key), color=cmap(i / max(len(old), 1)), lw=0.8, alpha=0.7, label=f"step {s}")
    draw(ax, rows, "")
    fig.text(0.55, 0.98, f"{title} step {step}", ha="center", va="top")  # an axes title costs a 2nd tick layout
    ax.legend(fontsize=6, ncol=2)
    fig.subplots_adjust(left=0.14, right=0.98, bottom=0.15, top=0.9)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    plt.close(fig)
    out[name] = buf.getvalue()
  return out


def evolution(results: list[dict], outdir: str) -> list[str]:
  """How per-depth curves change over training (one line per checkpoint step)."""
  paths = []
  for key in ("grad_norm", "act_rms", "cos_next_median"):
    fig, ax = plt.subplots(figsize=(6, 3.2))
    cmap = plt.get_cmap("viridis")
    for i, res in enumerate(results):
      ax.plot(_col(res["sublayers"], key), color=cmap(i / max(len(results) - 1, 1)), label=f"step {res['step']}")
    ax.set(xlabel="sublayer", ylabel=key, yscale="log" if key != "cos_next_median" else "linear")
    ax.legend(fontsize=7)
    paths.append(_save(fig, storage.join(outdir, f"evolution_{key}.png")))
  return paths


def overlay(runs: list[tuple[str, dict, list]], outdir: str) -> list[str]:
  """Across runs: loss curves and per-depth curves. runs: (name, eval result or None, metrics)."""
  paths = []
  fig, ax = plt.subplots(figsize=(7, 4))
  for name, _, metrics in runs:
    tr = [(m["step"], m["loss"]) for m in metrics if "loss" in m]
    if tr:
      ax.plot(*zip(*tr), lw=1, label=name)
  ax.set(xlabel="step", ylabel="train loss", title="loss")
  legend(ax, fontsize=6)
  paths.append(_save(fig, storage.join(outdir, "sweep_loss.png")))
  for key, label in (("cos_next_median", "median cos(u_l, u_l+1)"), ("grad_norm", "grad norm"),
                     ("act_rms", "input RMS")):
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, res, _ in runs:
      if res:
        rows = res["sublayers"]
        ax.plot(np.arange(len(rows)) / max(len(rows) - 1, 1), _col(rows, key), lw=1, label=name)
    ax.set(xlabel="relative depth", ylabel=label, yscale="linear" if key.startswith("cos") else "log")
    legend(ax, fontsize=6)
    paths.append(_save(fig, storage.join(outdir, f"sweep_{key}.png")))
  return paths


def paired_figure(rows: list[dict], base: str, path: str) -> str:
  """eval.py --sweep --paired's figure: per condition (one panel each), every arm's paired loss difference to `base`
  with its 95% t interval (resnorm.results.paired's rows); an arm with no interval is a bare point, an arm a
  condition lacks is left out of that panel (each arm keeps one row across the panels)."""
  conds = list(dict.fromkeys(r["cond"] for r in rows))
  arms = list(dict.fromkeys(r["arm"] for r in rows if r["arm"] != base))
  fig, axes = plt.subplots(1, len(conds), figsize=(4.5 * len(conds), 0.35 * len(arms) + 1.5), squeeze=False,
                           sharey=True)
  for ax, cond in zip(axes[0], conds):
    by_arm = {r["arm"]: r for r in rows if r["cond"] == cond}
    mine = [(y, by_arm[a]) for y, a in enumerate(arms) if a in by_arm]
    y = np.array([i for i, _ in mine], float)
    mean = np.array([r["loss_diff"] for _, r in mine], float)
    lo, hi = np.array([r["loss_lo"] for _, r in mine], float), np.array([r["loss_hi"] for _, r in mine], float)
    err = np.where(np.isnan(lo), 0.0, np.vstack([mean - lo, hi - mean]))
    ax.errorbar(mean, y, xerr=err, fmt="o", ms=4, capsize=3)
    ax.axvline(0.0, color="gray", lw=0.8, ls="--")
    ax.set(xlabel=f"final eval loss - {base} (paired, 95% t)", title=cond or "all")
  axes[0][0].set_yticks(np.arange(len(arms)), arms)
  axes[0][0].invert_yaxis()
  return _save(fig, path)
