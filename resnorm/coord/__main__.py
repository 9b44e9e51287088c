"""Coordinate checks: python -m resnorm.coord [--residuals=pre_norm,hc] [--params=standard,completep]
[--widths=64,128,256,512] [--depths=12,24,48,96] [--steps=10] [--lr=3e-3] --out=DIR

For each placement and parametrization, trains `--steps` steps at one lr over the widths (at --width_depth layers)
and the depths (at --depth_width), the base shape the first rung of each, and writes DIR/coord_RESIDUAL_PARAM.json
(per rung, per step: mean |activation| and mean |update| per param role) and .png (against width and depth, one
line per step). Prints each quantity's spread (max / min over the rungs) at the last step.
"""
import json
import os

from absl import flags

from resnorm.config import configkeys
from resnorm.coord import coord
from resnorm.core.errors import InputError, check, run_app
from resnorm.io import storage
from resnorm.model import param, residual
from resnorm.viz import coord_figs

FLAGS = flags.FLAGS
flags.DEFINE_list("residuals", ["pre_norm"], "Placements to check.")
flags.DEFINE_list("params", ["standard", "mup", "completep"], "Parametrizations to check.")
flags.DEFINE_list("widths", ["64", "128", "256", "512"], "The width ladder (the first is the base width).")
flags.DEFINE_list("depths", ["12", "24", "48", "96"], "The depth ladder (the first is the base depth).")
flags.DEFINE_integer("width_depth", 2, "Layers of the width ladder.")
flags.DEFINE_integer("depth_width", 64, "Width of the depth ladder.")
flags.DEFINE_integer("head_dim", 16, "Head dim at every rung (heads = width / head_dim).")
flags.DEFINE_integer("steps", 10, "Training steps per rung.")
flags.DEFINE_float("lr", 3e-3, "The one learning rate of every rung (constant, no warmup).")
flags.DEFINE_integer("batch", 8, "Sequences per step.")
flags.DEFINE_integer("seq_len", 64, "Bytes per sequence.")
flags.DEFINE_integer("seed", 0, "Init seed.")
flags.DEFINE_string("init", "xavier", "model.init of every rung.")
flags.DEFINE_string("out", None, "Directory for the JSON and PNG files (created).")


def _ints(name: str, values: list[str]) -> tuple:
  try:
    out = tuple(int(v) for v in values)
  except ValueError:
    raise InputError(f"--{name}={','.join(values)} must be integers") from None
  check(out and all(v >= 1 for v in out), f"--{name}={','.join(values)} must be integers >= 1")
  return out


def main(argv):
  check(len(argv) == 1, f"unexpected arguments: {' '.join(argv[1:])}")
  check(FLAGS.out, "--out is required")
  check(FLAGS.steps >= 1 and FLAGS.lr > 0, f"--steps={FLAGS.steps} must be >= 1 and --lr={FLAGS.lr} > 0")
  ladder = coord.Ladder(_ints("widths", FLAGS.widths), _ints("depths", FLAGS.depths), FLAGS.width_depth,
                        FLAGS.depth_width, FLAGS.head_dim)
  for w in ladder.widths + (ladder.depth_width,):
    check(w % ladder.head_dim == 0, f"width {w} is not a multiple of --head_dim={ladder.head_dim}")
  from configs import base
  cfgs = []
  for r in FLAGS.residuals:
    for p in FLAGS.params:
      check(p in param.PARAMS, f"--params: {p!r} is unknown; known: {', '.join(param.PARAMS)}")
      residual.get(r)
      c = base.get_config("cpu")
      c.model.residual, c.model.param, c.model.init, c.seed = r, p, FLAGS.init, FLAGS.seed
      c.model.remat = "none"
      c.train.lr, c.train.warmup_steps, c.train.schedule, c.train.steps = FLAGS.lr, 0, "constant", FLAGS.steps
      c.train.grad_clip = 0.0
      c.data.seq_len, c.train.batch_size = FLAGS.seq_len, FLAGS.batch
      for w, d in [(w, ladder.width_depth) for w in ladder.widths] + [(ladder.depth_width, d) for d in ladder.depths]:
        coord.shaped(c, w, d, ladder, (w, d))  # every rung's config valid before any trains
      cfgs.append(c)
  storage.makedirs(FLAGS.out)
  for c in cfgs:
    res = coord.check(c, ladder, FLAGS.steps, FLAGS.batch, FLAGS.seq_len, log=coord.log_stderr)
    stem = os.path.join(FLAGS.out, f"coord_{c.model.residual}_{c.model.param}")
    storage.write_text(stem + ".json", json.dumps(res, indent=1, sort_keys=True))
    coord_figs.coord_figure(res, stem + ".png")
    for axis in ("width", "depth"):
      worst = sorted(coord.spread(res, axis, FLAGS.steps).items(), key=lambda kv: -kv[1])
      print(f"{c.model.residual} {c.model.param} over {axis}: "
            + ", ".join(f"{k} {v:.2f}x" for k, v in worst), flush=True)


if __name__ == "__main__":
  run_app(main, explain=configkeys.flag_error)
