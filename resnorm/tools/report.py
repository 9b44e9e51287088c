"""eval.py --sweep: one table row per run directory (from its own files) and overlaid figures."""
import csv
import glob
import os

import numpy as np

from resnorm import workdir as wd
from resnorm.tools import plots
from resnorm.errors import InputError, check

COLUMNS = ("run", "residual", "layers", "lr", "warmup", "seed", "status", "diverged_step", "final_train_loss",
           "final_eval_loss", "bits_per_byte", "spikes", "cos_last_quarter", "grad_ratio_last_first", "max_gain",
           "stream_spread")


def run_row(path: str) -> tuple[dict, dict | None, list]:
  cfg = wd.read_json(os.path.join(path, "config.json"), "run config")
  summary = {}
  if os.path.exists(os.path.join(path, "summary.json")):
    summary = wd.read_json(os.path.join(path, "summary.json"), "run summary")
  diags = wd.read_jsonl(os.path.join(path, "diagnostics.jsonl"))
  last = diags[-1] if diags else None
  row = {"run": os.path.basename(os.path.normpath(path)), "residual": cfg["model"]["residual"],
         "layers": cfg["model"]["num_layers"], "lr": cfg["train"]["lr"], "warmup": cfg["train"]["warmup_steps"],
         "seed": cfg["seed"], "status": summary.get("status", "unknown"),
         "diverged_step": summary.get("diverged_step"), "final_train_loss": summary.get("final_train_loss"),
         "final_eval_loss": summary.get("final_eval_loss"), "bits_per_byte": summary.get("bits_per_byte"),
         "spikes": summary.get("spikes")}
  if last:
    rows = last["sublayers"]
    cos = [r["cos_next_median"] for r in rows if r.get("cos_next_median") is not None]
    cos = cos[len(cos) * 3 // 4:]
    row["cos_last_quarter"] = float(np.median(cos)) if cos else None
    g0, g1 = rows[0]["grad_norm"], rows[-1]["grad_norm"]
    row["grad_ratio_last_first"] = g1 / g0 if g0 else None
    gains = [max(r["gain_forward"], r["gain_backward"]) for r in rows if r.get("gain_forward") is not None]
    row["max_gain"] = max(gains) if gains else None
    spread = [r["stream_spread"] for r in rows if r.get("stream_spread") is not None]
    row["stream_spread"] = float(np.median(spread)) if spread else None  # median over sublayers
  return row, last, wd.read_jsonl(os.path.join(path, "metrics.jsonl"))


def _fmt(v):
  if isinstance(v, float):
    return f"{v:.4g}"
  return "" if v is None else str(v)


def report(pattern: str, outdir: str) -> list[dict]:
  dirs = sorted(d for d in glob.glob(pattern) if os.path.isfile(os.path.join(d, "config.json")))
  check(dirs, f"--sweep={pattern!r} matches no run directory (a directory with config.json)")
  runs = [run_row(d) for d in dirs]
  try:
    os.makedirs(outdir, exist_ok=True)
  except OSError as e:
    raise InputError(f"--outdir={outdir!r} cannot be created: {e.strerror}") from None
  rows = [r for r, _, _ in runs]
  with open(os.path.join(outdir, "sweep.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
  with open(os.path.join(outdir, "sweep.md"), "w") as f:
    f.write("| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS) + "\n")
    for r in rows:
      f.write("| " + " | ".join(_fmt(r.get(c)) for c in COLUMNS) + " |\n")
  plots.overlay([(r["run"], last, metrics) for r, last, metrics in runs], outdir)
  print(f"{len(rows)} runs -> {os.path.join(outdir, 'sweep.md')}", flush=True)
  return rows
