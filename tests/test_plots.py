"""resnorm.viz.plots: the cross-run figures of `eval.py --sweep`."""
import warnings

import pytest

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


def test_attn_res_depth_figures_show_its_depth_attention(tmp_path):
  """eval.py's depth figures for AttnRes: the token-averaged depth-attention matrix [sublayer, source] and the
  entropy profile, from the diagnostics' JSON (summarize with full=True)."""
  import jax.numpy as jnp
  import numpy as np
  from conftest import init_and_apply, tiny_config
  from resnorm.config import configlib
  from resnorm.model import diagnostics
  from resnorm.step import step
  cfg = tiny_config("attn_res", 2)
  _, params, tokens, _ = init_and_apply(cfg)
  out = step.make_diag_fn(cfg, configlib.model_config(cfg))(
      params, {"inputs": tokens, "targets": tokens, "mask": jnp.ones(tokens.shape)})
  result = {"step": 0, "residual": "attn_res", "num_layers": 2, **diagnostics.summarize(cfg, out, full=True)}
  assert np.array(result["depth_weights"]).shape == (4, 5)
  assert all(r["depth_entropy"] is not None for r in result["sublayers"])
  names = {p.rsplit("/", 1)[1] for p in plots.depth_figures(result, str(tmp_path))}
  assert {"depth_weights.png", "depth_entropy.png", "cosine.png", "depth_mixing.png"} <= names
  assert "mixing.png" not in names and np.array(result["depth_mixing"]).shape == (4, 5)


@pytest.mark.integration  # two more runs' figures; test_attn_res_depth_figures_show_its_depth_attention is make test's
def test_mudd_and_laurel_figures(tmp_path):
  """MUDDFormer's token-averaged DA weights per way and their entropies; LAuReL's and value residual's learned
  weights profile."""
  import jax.numpy as jnp
  import numpy as np
  import pytest
  from conftest import init_and_apply, tiny_config
  from resnorm.config import configlib
  from resnorm.model import diagnostics
  from resnorm.step import step
  for name, figures in (("mudd", {"dense_weights.png", "dense_entropy.png"}), ("laurel", {"learned_weights.png"}),
                        ("value_residual", {"learned_weights.png"})):
    cfg = tiny_config(name, 3)
    _, params, tokens, _ = init_and_apply(cfg)
    out = step.make_diag_fn(cfg, configlib.model_config(cfg))(
        params, {"inputs": tokens, "targets": tokens, "mask": jnp.ones(tokens.shape)})
    result = {"step": 0, "residual": name, "num_layers": 3, **diagnostics.summarize(cfg, out, full=True)}
    (tmp_path / name).mkdir()
    names = {p.rsplit("/", 1)[1] for p in plots.depth_figures(result, str(tmp_path / name))}
    assert figures <= names, names
    rows = result["sublayers"]
    if name == "mudd":
      dense = result["dense_weights"]
      assert dense[0] is None and np.array(dense[2]).shape == (4, 3)
      np.testing.assert_allclose(np.array(dense[2])[:, 2], 1.0)       # at init: the newest source, every way
      assert rows[1]["dense_entropy_q"] is None and rows[2]["dense_entropy_r"] == pytest.approx(0.0, abs=1e-6)
    elif name == "laurel":
      assert rows[0]["laurel_alpha"] == pytest.approx(1.0) and rows[0]["pa_gain_2"] == 0.0
    else:  # the first layer's lambda is stored but unused, and the MLPs have none
      assert [r["value_lambda"] for r in rows] == [None, None, 0.5, None, 0.5, None]
