"""Regenerates docs/results.md and docs/figures/: python -m resnorm.results [--root=runs/results] [--jobs=1]

1. Init-time shapes (Xiong et al.): fresh xavier-init models, Pre- vs Post-Norm, gradient norm and input RMS
   against depth, and the last sublayer's gradient norm against L.
2. After training (configs/sweeps/results.py, run through resnorm.sweep): adjacent-layer cosine for pre_norm,
   post_norm and hc; the stability map over lr x warmup; HC versus mHC composite gains.
Every number in the report is read from the runs; nothing is typed in.
"""
import os
import subprocess
import sys

from absl import flags

from resnorm import workdir as wd
from resnorm.errors import run_app
from resnorm.tools import plots
from resnorm.tools.report import run_row
from resnorm.unigram import MARGIN

FLAGS = flags.FLAGS
flags.DEFINE_string("root", "runs/results", "Where the sweep runs go (reused: finished runs are skipped).")
flags.DEFINE_integer("jobs", 1, "Sweep runs at once.")
flags.DEFINE_string("out", "docs", "Report directory (results.md, figures/).")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout
DEPTHS = (12, 24, 48, 96)
plt = plots.plt


def _init_diag(residual: str, layers: int, outdir: str) -> dict:
  path = os.path.join(outdir, "init.json")
  if not os.path.exists(path):
    subprocess.run([sys.executable, os.path.join(ROOT, "eval.py"), f"--config=configs/{residual}_{layers}l.py",
                    "--init", f"--outdir={outdir}", "--config.model.init=xavier", "--eval_batches=2"],
                   cwd=ROOT, check=True, capture_output=True)
  return wd.read_json(path, "init diagnostics")


def _col(res, key):
  return [r[key] for r in res["sublayers"]]


def init_section(fig_dir: str, root: str) -> list[str]:
  res = {(v, L): _init_diag(v, L, os.path.join(root, "init", f"{v}_{L}l")) for v in ("pre_norm", "post_norm")
         for L in DEPTHS}
  lines = ["## 1. At initialization (Xiong et al. 2020, docs/variants.md section 6 claims 1-2)", "",
           "Fresh models, `model.init=xavier` (Glorot-normal matrices, unit-variance embedding), d=64, one validation "
           "batch of 8 x 64 bytes. `grad_norm` is the Frobenius norm of the gradient of all of a sublayer's params; "
           "`act_rms` is the RMS of the sublayer's input (the residual stream for Pre-Norm).", ""]
  for key, ylabel, name in (("grad_norm", "sublayer grad norm", "init_grad_norm"),
                            ("act_rms", "input RMS", "init_act_rms")):
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for v in ("pre_norm", "post_norm"):
      ax.plot(_col(res[(v, 48)], key), label=f"{v} (48 layers)")
    ax.set(xlabel="sublayer (depth)", ylabel=ylabel, yscale="log")
    ax.legend()
    plots._save(fig, os.path.join(fig_dir, f"{name}.png"))
    lines.append(f"![{name}](figures/{name}.png)")
  g = {k: _col(r, "grad_norm") for k, r in res.items()}
  rms = {k: _col(r, "act_rms") for k, r in res.items()}
  lines += ["", "| model | grad norm, last / first sublayer | last sublayer grad norm | input RMS, last / first |",
            "|---|---|---|---|"]
  for (v, L) in sorted(res):
    lines.append(f"| {v} {L}L | {g[(v, L)][-1] / g[(v, L)][0]:.3g} | {g[(v, L)][-1]:.3g} | "
                 f"{rms[(v, L)][-1] / rms[(v, L)][0]:.3g} |")
  fig, ax = plt.subplots(figsize=(5, 3.3))
  for v in ("pre_norm", "post_norm"):
    ax.plot(DEPTHS, [g[(v, L)][-1] for L in DEPTHS], "o-", label=v)
  ax.set(xlabel="layers L", ylabel="last sublayer grad norm", xscale="log", yscale="log")
  ax.legend()
  plots._save(fig, os.path.join(fig_dir, "init_last_grad_vs_depth.png"))
  post_up = g[("post_norm", 48)][-1] / g[("pre_norm", 48)][-1]
  pre_growth = rms[("pre_norm", 48)][-1] / rms[("pre_norm", 48)][0]
  post_growth = rms[("post_norm", 48)][-1] / rms[("post_norm", 48)][0]
  pre_fall = g[("pre_norm", 12)][-1] / g[("pre_norm", 96)][-1]
  post_fall = g[("post_norm", 12)][-1] / g[("post_norm", 96)][-1]
  lines += ["", "![init_last_grad_vs_depth](figures/init_last_grad_vs_depth.png)", "",
            f"- Claim 1 (gradients grow toward the output under Post-Norm): at 48 layers the last sublayer's gradient "
            f"norm is {post_up:.2f}x Pre-Norm's. From 12 to 96 layers Pre-Norm's last-sublayer gradient falls "
            f"{pre_fall:.2f}x (theory: sqrt(8) = 2.83x) and Post-Norm's {post_fall:.2f}x (theory: constant).",
            f"- Claim 2 (Pre-Norm's stream grows with depth, Post-Norm's does not): input RMS grows {pre_growth:.2f}x "
            f"from the first to the last sublayer under Pre-Norm and {post_growth:.2f}x under Post-Norm (48 layers).",
            ""]
  return lines


def _runs(root):
  out = {}
  for name in sorted(os.listdir(root)):
    if os.path.isfile(os.path.join(root, name, "config.json")):
      out[name] = run_row(os.path.join(root, name))
  return out


def trained_section(fig_dir: str, root: str) -> list[str]:
  runs = _runs(root)
  ref = "lr0.001-wu15"
  lines = ["## 2. After training (configs/sweeps/results.py: 24 layers, d=64, 150 steps, batch 8 x 64 bytes)", ""]
  fig, ax = plt.subplots(figsize=(6, 3.5))
  cos_rows = []
  for v in ("pre_norm", "post_norm", "hc", "mhc"):
    row, last, _ = runs.get(f"{v}-{ref}", (None, None, None))
    if last:
      med = [r["cos_next_median"] for r in last["sublayers"]][:-1]
      lo = [r["cos_next_p05"] for r in last["sublayers"]][:-1]
      hi = [r["cos_next_p95"] for r in last["sublayers"]][:-1]
      line, = ax.plot(med, label=v)
      ax.fill_between(range(len(med)), lo, hi, alpha=0.15, color=line.get_color())
      cos_rows.append(f"| {v} | {row['cos_last_quarter']:.3f} | {sorted(med)[len(med) // 2]:.3f} | "
                      f"{row['final_eval_loss']:.3f} | {row['status']} |")
  ax.set(xlabel="sublayer l", ylabel="cos(u_l, u_l+1): median, 5-95%", title="after training, lr 1e-3, warmup 15")
  ax.legend()
  plots._save(fig, os.path.join(fig_dir, "trained_cosine.png"))
  lines += ["### Adjacent-layer cosine similarity (HC paper Fig. 3)", "", "![trained_cosine](figures/trained_cosine.png)",
            "", "| variant | median cos, last quarter | median cos, all | eval loss | status |", "|---|---|---|---|---|",
            *cos_rows, ""]
  variants, lrs, warmups = ("pre_norm", "post_norm", "hc", "mhc"), ("0.0003", "0.001", "0.003"), ("0", "15")
  fig, axes = plt.subplots(1, 4, figsize=(12, 2.8))
  table = ["| variant | " + " | ".join(f"lr {lr} wu {w}" for lr in lrs for w in warmups) + " |",
           "|---|" + "---|" * 6]
  for ax, v in zip(axes, variants):
    grid = [[None] * len(lrs) for _ in warmups]
    cells = []
    for j, lr in enumerate(lrs):
      for i, w in enumerate(warmups):
        row = runs.get(f"{v}-lr{float(lr):g}-wu{w}", (None,))[0]
        if row is None:
          cells.append("not run")
          continue
        grid[i][j] = row["final_eval_loss"] if row["status"] == "completed" else float("nan")
        cells.append(f"{row['final_eval_loss']:.3f}" + (" stalled" if row["stalled"] else "")
                     if row["status"] == "completed" else f"{row['status']} @ {row['diverged_step']}")
        if row["stalled"] or row["status"] == "diverged":  # stalled (learned no more than byte frequencies) apart
          ax.text(j, i, "stalled" if row["stalled"] else "diverged", ha="center", va="center", fontsize=6,
                  color="white" if row["stalled"] else "black")
    table.append(f"| {v} | " + " | ".join(cells) + " |")
    arr = [[float("nan") if x is None else x for x in r] for r in grid]
    im = ax.imshow(arr, cmap="viridis_r", vmin=2.0, vmax=4.5)
    ax.set(title=v, xticks=range(3), xticklabels=lrs, yticks=range(2), yticklabels=[f"wu {w}" for w in warmups])
  fig.colorbar(im, ax=axes, label="final eval loss")
  fig.savefig(os.path.join(fig_dir, "stability_map.png"), dpi=110)
  plt.close(fig)
  lines += ["### Stability map: final eval loss over lr x warmup", "", "![stability_map](figures/stability_map.png)",
            "", "Diverged runs are blank; `stalled` marks runs that completed but whose final eval loss is not "
            f"{MARGIN} nats/byte below the byte-unigram baseline (they learned no more than byte frequencies).", "",
            *table, ""]
  fig, ax = plt.subplots(figsize=(6, 3.5))
  gain_rows = []
  for v in ("hc", "mhc"):
    row, last, _ = runs.get(f"{v}-{ref}", (None, None, None))
    if last:
      gf, gb = _col(last, "gain_forward"), _col(last, "gain_backward")
      ax.plot(gf, label=f"{v} forward")
      ax.plot(gb, "--", label=f"{v} backward")
      gain_rows.append(f"| {v} | {max(gf):.4f} | {max(gb):.4f} | {min(gf):.4f} | {min(gb):.4f} |")
  ax.set(xlabel="sublayer", ylabel="composite Amax gain", yscale="log", title="after training, lr 1e-3, warmup 15")
  ax.legend()
  plots._save(fig, os.path.join(fig_dir, "hc_mhc_gains.png"))
  lines += ["### HC versus mHC composite gains (mHC Fig. 7)", "", "![hc_mhc_gains](figures/hc_mhc_gains.png)", "",
            "| variant | max forward | max backward | min forward | min backward |", "|---|---|---|---|---|",
            *gain_rows, ""]
  return lines


def main(argv):
  del argv
  fig_dir = os.path.join(FLAGS.out, "figures")
  os.makedirs(fig_dir, exist_ok=True)
  subprocess.run([sys.executable, "-m", "resnorm.sweep", "configs/sweeps/results.py", f"--root={FLAGS.root}",
                  f"--jobs={FLAGS.jobs}"], cwd=ROOT, check=False)
  lines = ["# Results at CPU scale", "",
           "Regenerate with `make results` (measured 73 minutes on the 2-core CPU while other jobs shared it; the 24 training runs take about 1.5-2.5 minutes each alone). Every number below is read from "
           "the runs by `resnorm/results.py`; the discussion under each section says where it agrees with the "
           "papers and where it does not.", ""]
  lines += init_section(fig_dir, FLAGS.root)
  lines += trained_section(fig_dir, FLAGS.root)
  notes = os.path.join(FLAGS.out, "results_notes.md")
  if os.path.exists(notes):
    lines += ["", open(notes).read()]
  with open(os.path.join(FLAGS.out, "results.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
  print(f"wrote {os.path.join(FLAGS.out, 'results.md')}")


if __name__ == "__main__":
  run_app(main)
