"""eval.py --sweep: one table row per run directory (from its own files) and overlaid figures."""
import csv
import io

from resnorm.core.errors import InputError, check
from resnorm.io import storage, workdir as wd
from resnorm.model import diagnostics
from resnorm.results import paired
from resnorm.viz import plots

COLUMNS = ("run", "residual", "layers", "lr", "warmup", "seed", "status", "stalled", "diverged_step",
           "final_train_loss", "final_eval_loss", "unigram_eval_loss", "bits_per_byte", "spikes", "cos_last_quarter",
           "grad_ratio_last_first", "max_gain", "stream_spread")


def stalled(summary: dict) -> bool | None:
  """A run that did not diverge but whose final eval loss is not below the byte-unigram baseline by the margin
  (summary.json's learned_beyond_unigram is false); None when unknown (no eval yet, runs from before the flag)."""
  learned = summary.get("learned_beyond_unigram")
  if learned is None or summary.get("status") == "diverged":
    return None
  return not learned


def run_row(path: str) -> tuple[dict, dict | None, list]:
  cfg = wd.read_json(storage.join(path, "config.json"), "run config")
  summary = {}
  if storage.exists(storage.join(path, "summary.json")):
    summary = wd.read_json(storage.join(path, "summary.json"), "run summary")
  diags = wd.read_jsonl(storage.join(path, "diagnostics.jsonl"))
  last = diags[-1] if diags else None
  row = {"run": storage.basename(path), "residual": cfg["model"]["residual"],
         "layers": cfg["model"]["num_layers"], "lr": cfg["train"]["lr"], "warmup": cfg["train"]["warmup_steps"],
         "seed": cfg["seed"], "status": summary.get("status", "unknown"),
         "diverged_step": summary.get("diverged_step"), "final_train_loss": summary.get("final_train_loss"),
         "final_eval_loss": summary.get("final_eval_loss"), "bits_per_byte": summary.get("bits_per_byte"),
         "unigram_eval_loss": summary.get("unigram_eval_loss"), "stalled": stalled(summary),
         "spikes": summary.get("spikes")}
  if last:
    depth = diagnostics.depth_summary(last["sublayers"])  # stream_spread: the median over sublayers
    row.update({k: depth.get(k) for k in ("cos_last_quarter", "grad_ratio_last_first", "max_gain", "stream_spread")})
  return row, last, wd.read_jsonl(storage.join(path, "metrics.jsonl"))


def _fmt(v):
  if isinstance(v, bool):
    return "yes" if v else "no"
  if isinstance(v, float):
    return f"{v:.4g}"
  return "" if v is None else str(v)


def report(pattern: str, outdir: str, paired_base: str | None = None) -> list[dict]:
  """`paired_base`: also OUT/paired.md, every arm against that one (resnorm.results.paired), checked before any
  file is written."""
  dirs = [d for d in storage.glob(pattern) if storage.isfile(storage.join(d, "config.json"))]
  check(dirs, f"--sweep={pattern!r} matches no run directory (a directory with config.json)")
  runs = [run_row(d) for d in dirs]
  table = paired.paired([r for r, _, _ in runs], paired_base) if paired_base else None
  try:
    storage.makedirs(outdir)
  except OSError as e:
    raise InputError(f"--outdir={outdir!r} cannot be created: {e.strerror}") from None
  rows = [r for r, _, _ in runs]
  f = io.StringIO(newline="")
  w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
  w.writeheader()
  w.writerows(rows)
  storage.write_text(storage.join(outdir, "sweep.csv"), f.getvalue())
  md = ["| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS) + "\n"]
  md += ["| " + " | ".join(_fmt(r.get(c)) for c in COLUMNS) + " |\n" for r in rows]
  storage.write_text(storage.join(outdir, "sweep.md"), "".join(md))
  if table is not None:
    storage.write_text(storage.join(outdir, "paired.md"), paired.markdown(table, paired_base))
    plots.paired_figure(table, paired_base, storage.join(outdir, "paired.png"))
  plots.overlay([(r["run"], last, metrics) for r, last, metrics in runs], outdir)
  print(f"{len(rows)} runs -> {storage.join(outdir, 'sweep.md')}", flush=True)
  return rows
