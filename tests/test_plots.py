"""resnorm.viz.plots: the cross-run figures of `eval.py --sweep`."""
import warnings

from resnorm.viz import plots


def test_overlay_of_runs_with_nothing_to_draw_is_quiet(tmp_path):
  # runs without a logged loss or an eval result draw empty panels (test_buckets' eval --sweep met one),
  # without matplotlib's "No artists with labels" warning
  runs = [("empty", None, []), ("no-loss", None, [{"step": 10, "eval_loss": 3.0}])]
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    paths = plots.overlay(runs, str(tmp_path))
  assert {p.rsplit("/", 1)[1] for p in paths} == {"sweep_loss.png", "sweep_cos_next_median.png",
                                                   "sweep_grad_norm.png", "sweep_act_rms.png"}
  assert all((tmp_path / p.rsplit("/", 1)[1]).stat().st_size > 0 for p in paths)
