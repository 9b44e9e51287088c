"""TensorBoard: per-sublayer fields as one depth-profile image each and a few scalars whose number does not grow with
depth, read back with TensorBoard's own reader."""
import io

import numpy as np
import pytest
from matplotlib import image as mpimg
from tensorboard.backend.event_processing import event_accumulator

from resnorm.io import workdir as wd
from resnorm.train import tb_figures

FIELDS = {"grad_norm", "act_rms", "update_ratio", "cosine", "gains", "stream_spread"}


def _rows(num_layers, seed):
  """Per-sublayer rows as diagnostics.sublayer_report writes them (hc: with gains and stream spread)."""
  rng = np.random.default_rng(seed)
  s = 2 * num_layers
  rows = []
  for i in range(s):
    cos = None if i == s - 1 else float(rng.uniform(0.5, 0.9))
    rows.append({"index": i, "layer": i // 2, "kind": ("attn", "mlp")[i % 2], "grad_norm": float(rng.lognormal()),
                 "act_rms": float(rng.lognormal()), "update_ratio": float(rng.lognormal()), "cos_next_median": cos,
                 "cos_next_p05": cos and cos - 0.2, "cos_next_p95": cos and cos + 0.1,
                 "gain_forward": float(rng.lognormal()), "gain_backward": float(rng.lognormal()),
                 "stream_spread": float(rng.uniform())})
  return rows


def _read(logdir):
  acc = event_accumulator.EventAccumulator(logdir, size_guidance={"images": 0, "scalars": 0})
  acc.Reload()
  return acc


def test_depth_profiles_are_images_and_scalars_do_not_grow_with_depth(tmp_path):
  accs = {}
  for layers in (2, 6):
    tb, history = wd.TensorBoard(str(tmp_path / f"l{layers}")), []
    for step in (0, 5, 10):
      history.append((step, _rows(layers, step)))
      tb_figures.tb_diagnostics(tb, history, f"hc L={layers}")
    tb.close()
    accs[layers] = _read(str(tmp_path / f"l{layers}"))
  tags = {k: a.Tags() for k, a in accs.items()}
  assert set(tags[2]["scalars"]) == set(tags[6]["scalars"]) and len(tags[6]["scalars"]) <= 8, tags[6]["scalars"]
  assert set(tags[2]["images"]) == set(tags[6]["images"]) == {f"depth/{f}" for f in FIELDS}
  rows = history[-1][1]
  last = lambda tag: accs[6].Scalars(tag)[-1].value
  assert last("diag/grad_ratio_last_first") == pytest.approx(rows[-1]["grad_norm"] / rows[0]["grad_norm"], rel=1e-6)
  assert last("diag/max_gain") == pytest.approx(max(max(r["gain_forward"], r["gain_backward"]) for r in rows), rel=1e-6)
  assert last("diag/stream_spread") == pytest.approx(np.median([r["stream_spread"] for r in rows]), rel=1e-6)
  images = accs[6].Images("depth/cosine")
  assert [i.step for i in images] == [0, 5, 10]
  pixels = mpimg.imread(io.BytesIO(images[-1].encoded_image_string), format="png")
  assert pixels.shape == (images[-1].height, images[-1].width, 4) and pixels.shape[1] >= 400
  assert pixels[..., :3].std() > 0.05  # something is drawn


def test_pre_norm_rows_draw_only_their_fields(tmp_path):
  rows = [{k: v for k, v in r.items() if k not in ("gain_forward", "gain_backward", "stream_spread")}
          for r in _rows(3, 0)]
  tb = wd.TensorBoard(str(tmp_path))
  tb_figures.tb_diagnostics(tb, [(0, rows)], "pre_norm L=3")
  tb.close()
  tags = _read(str(tmp_path)).Tags()
  assert set(tags["images"]) == {f"depth/{f}" for f in FIELDS - {"gains", "stream_spread"}}
  assert "diag/max_gain" not in tags["scalars"] and "diag/cos_last_quarter" in tags["scalars"]


def test_depth_mixing_matrix_is_an_image_when_given(tmp_path):
  rows = _rows(2, 0)
  for r in rows:
    r["mixing_r2"] = 0.99
  tb = wd.TensorBoard(str(tmp_path))
  tb_figures.tb_diagnostics(tb, [(3, rows)], "post_norm L=2", mixing=np.tril(np.ones((4, 5))) * 0.5)
  tb.close()
  acc = _read(str(tmp_path))
  assert "depth/mixing_matrix" in acc.Tags()["images"]
  img = acc.Images("depth/mixing_matrix")[-1]
  assert img.step == 3
  assert mpimg.imread(io.BytesIO(img.encoded_image_string), format="png")[..., :3].std() > 0.05
