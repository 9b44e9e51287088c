"""`train.init_from=WORKDIR[:STEP]`: a new run that starts from another run's params, only where the function the
params compute is preserved exactly. The optimizer state starts fresh (AdamW moments 0, step 0, the schedule from
its start); the data iterator starts at the new run's first batch.

Allowed, from a checkpoint of WORKDIR (STEP, or its newest):
- the same variant (fine-tuning): every model field equal; the params are copied;
- `pre_norm` -> `hc`, any n, static or dynamic: at the paper's init (Eq. 14: B = 1, A_m one-hot, A_r = I, W = 0)
  the n streams stay copies of the Pre-Norm stream, every sublayer reads one of them, and the final norm cancels the
  factor n of the stream sum (docs/variants.md section 2);
- `pre_norm` -> `mhc` with `model.mhc.init=identity` (or `uniform` with `alpha_init=0`): with a x' phi = 0 and
  b_post = 0 the streams stay copies, H_res rows sum to 1 and the block norm absorbs the scale of H_pre x
  (section 3);
- `pre_norm` -> `frac_hc`, any m, static or dynamic: A_m = A_r = I, B = 1 and W = 0 make every block
  x + F(N(x)) reassembled from its fractions (section 8).
In every upcycling case the Pre-Norm params (embedding, attention, MLP, norms, head) keep their paths and shapes, and
the new variant's own params keep their fresh init. Every other model field must be equal, except the runtime
fields (dtype, remat, kernels) and `init`, which only decides draws the source params replace. Anything else is
refused with exit 2 and one line saying why, before the new workdir is touched.
"""
import dataclasses

import flax
import jax

from resnorm.config import configlib
from resnorm.io import ckpt, storage, workdir as wd
from resnorm.model import residual
from resnorm.step import runtime
from resnorm.core.errors import InputError, check

# (source, destination) variants whose function a fresh destination init preserves: (the destination settings that
# make it so, what they are)
UPCYCLES = {
    ("pre_norm", "hc"): (lambda m: True, ""),
    ("pre_norm", "mhc"): (lambda m: m.mhc.init == "identity" or (m.mhc.init == "uniform" and m.mhc.alpha_init == 0),
                          "from the identity init (model.mhc.init=identity, or uniform with model.mhc.alpha_init=0)"),
    ("pre_norm", "frac_hc"): (lambda m: True, ""),
    ("pre_norm", "laurel"): (lambda m: not m.laurel.rw or m.laurel.rw_scale == 2.0,
                             "with path weights of 1 at init (model.laurel.rw_scale=2, or model.laurel.rw=False)"),
    ("pre_norm", "mudd"): (lambda m: True, ""),
    ("pre_norm", "value_residual"): (lambda m: m.value_residual.lambda_init == 0,
                                     "with model.value_residual.lambda_init=0 (no mix at init)"),
    ("pre_norm", "kromhc"): (lambda m: True, ""),
    ("pre_norm", "resid_lambdas"): (lambda m: m.resid_lambdas.preset == "identity",
                                    "from the identity preset (model.resid_lambdas.preset=identity: lambda_r 1, "
                                    "lambda_0 0, lambda_b 0, the embedding not normalized)"),
}
INIT_ONLY_FIELDS = ("init",)


@dataclasses.dataclass
class Source:
  workdir: str
  step: int
  cfg: object  # the source run's config (its checkpoint's own)

  def __str__(self):
    return f"{self.workdir}:{self.step}"


def has_checkpoint(workdir: str) -> bool:
  try:
    return any(name.isdigit() for name in storage.listdir(storage.join(workdir, "checkpoints")))
  except (FileNotFoundError, NotADirectoryError):
    return False


def _compare(src: dict, dst: dict, where: str, sections: bool) -> None:
  for key in sorted(set(src) | set(dst)):
    a, b = src.get(key), dst.get(key)
    if key in configlib.RUNTIME_MODEL_FIELDS or key in INIT_ONLY_FIELDS or key == "residual":
      continue
    if isinstance(a, dict) or isinstance(b, dict):
      own = (sections and key == dst["residual"]) or key in configlib.MODEL_SECTIONS
      if not own and configlib.NORM_SECTIONS.get(key) != dst.get("norm"):
        continue  # another variant's settings, or the upcycled variant's own (checked by UPCYCLES)
      diff = next((k for k in sorted(set(a or {}) | set(b or {})) if (a or {}).get(k) != (b or {}).get(k)), None)
      if diff is None:
        continue
      key, a, b = f"{key}.{diff}", (a or {}).get(diff), (b or {}).get(diff)
    if a != b:
      raise InputError(f"train.init_from: {where} has model.{key}={a!r} but this run has model.{key}={b!r}; "
                       "starting from it would change the function")


def check_transition(src_model: dict, cfg, where: str) -> None:
  """Raises InputError unless params of `src_model` compute, under cfg.model, the function they computed."""
  dst_model = configlib.to_json(cfg)["model"]
  src_name = residual.get(src_model["residual"]).name
  dst_name = residual.get(dst_model["residual"]).name
  if src_name == dst_name:
    _compare(src_model, {**dst_model, "residual": src_model["residual"]}, where, sections=True)
    return
  rule = UPCYCLES.get((src_name, dst_name))
  if rule is None:
    allowed = ", ".join(f"{a} -> {b}" for a, b in UPCYCLES)
    raise InputError(f"train.init_from: {where} is a {src_name} run and this run is {dst_name}: only the same "
                     f"variant or {allowed} preserve the function")
  holds, what = rule
  check(holds(cfg.model), f"train.init_from: {src_name} -> {dst_name} preserves the function only {what}")
  _compare(src_model, dst_model, where, sections=False)


def resolve(cfg) -> Source:
  """The checked source of `train.init_from` (exit 2 for a missing run, step or an unsafe transition)."""
  path, step = configlib.split_init_from(cfg.train.init_from)
  check(has_checkpoint(path), f"train.init_from={cfg.train.init_from!r}: {path!r} has no checkpoint")
  reader = ckpt.Checkpointer(storage.join(storage.absolute(path), "checkpoints"), read_only=True)
  steps = reader.steps()
  step = steps[-1] if step is None else step
  check(step in steps, f"train.init_from={cfg.train.init_from!r}: no checkpoint at step {step}; available: "
        f"{', '.join(map(str, steps))}")
  stored = reader.config(step) or wd.read_json(storage.join(path, "config.json"), "train.init_from config")
  reader.close()
  src_cfg = configlib.from_json(stored)
  check_transition(configlib.to_json(src_cfg)["model"], cfg, f"{path} (step {step})")
  return Source(path, step, src_cfg)


def load(source: Source, s: runtime.Setup, fresh_state: dict) -> dict:
  """`fresh_state` (the new run's init) with every param of the source checkpoint put in place."""
  src_cfg = source.cfg.copy_and_resolve_references()
  src_cfg.mesh = s.cfg.mesh            # restore onto this run's devices
  src_cfg.train.batch_size = s.cfg.train.batch_size
  src = runtime.build(src_cfg)
  reader = ckpt.Checkpointer(storage.join(storage.absolute(source.workdir), "checkpoints"), read_only=True)
  state, _ = reader.restore(source.step, src.abstract)
  reader.close()
  have = flax.traverse_util.flatten_dict(state["params"])
  params = flax.traverse_util.flatten_dict(fresh_state["params"])
  for path, value in have.items():
    if path not in params or params[path].shape != value.shape:  # ruled out by check_transition
      raise InputError(f"train.init_from: {source} holds param {'/'.join(path)} {value.shape}, which this model "
                       "does not have")
    params[path] = jax.device_put(value, params[path].sharding)
  return {**fresh_state, "params": flax.traverse_util.unflatten_dict(params)}
