"""Config checks in-process (each documented bad input -> InputError naming it) and checkpoint compatibility,
nested variant settings included. No subprocess: test_cli and test_reliability run the same checks end to end."""
import os
import re

import pytest

from conftest import ROOT, tiny_config
from resnorm.config import configlib
from resnorm.step import runtime
from resnorm.core.errors import InputError

BAD = [
    ("pre_norm", {"model.residual": "nope"}, "model.residual='nope' is unknown"),
    ("pre_norm", {"model.norm": "batchnorm"}, "model.norm='batchnorm'"),
    ("pre_norm", {"train.schedule": "step"}, "train.schedule='step'"),
    ("pre_norm", {"model.init": "kaiming"}, "model.init='kaiming'"),
    ("pre_norm", {"model.remat": "some"}, "model.remat='some'"),
    ("pre_norm", {"model.dtype": "float16"}, "model.dtype='float16'"),
    ("pre_norm", {"model.pos": "alibi"}, "model.pos='alibi'"),
    ("pre_norm", {"model.kernels": "triton"}, "model.kernels='triton'"),
    ("pre_norm", {"model.num_heads": 3}, "model.num_heads=3 must divide"),
    ("pre_norm", {"model.num_layers": 0}, "model.num_layers=0"),
    ("mudd", {"model.depth_chunks": 0}, "model.depth_chunks=0 must be an integer >= 1"),
    ("hc", {"model.remat_group": 0}, "model.remat_group=0 must be an integer >= 1"),
    ("pre_norm", {"data.seq_len": 1}, "data.seq_len=1"),
    ("pre_norm", {"train.lr": 0.0}, "train.lr=0.0"),
    ("pre_norm", {"train.lr": -1e-3}, "train.lr=-0.001"),
    ("pre_norm", {"train.warmup_steps": 7}, "train.warmup_steps=7"),
    ("pre_norm", {"train.grad_clip": -1.0}, "train.grad_clip=-1.0"),
    ("pre_norm", {"train.batch_size": 0}, "train.batch_size=0"),
    ("pre_norm", {"train.steps": 0}, "train.steps=0"),
    ("pre_norm", {"data.val_fraction": 1.0}, "data.val_fraction=1.0"),
    ("pre_norm", {"data.eval_batches": 0}, "data.eval_batches=0"),
    ("pre_norm", {"train.ckpt_every": 0}, "train.ckpt_every=0"),
    ("pre_norm", {"model.pos": "learned", "model.max_len": 8}, "data.seq_len=16 exceeds model.max_len=8"),
    ("pre_norm", {"model.num_heads": 32, "model.d_model": 32}, "needs an even head dim"),
    ("pre_norm", {"ckpt.keep": 0}, "ckpt.keep=0"),
    ("hc", {"model.hc.n": 0}, "model.hc.n=0"),
    ("mhc", {"model.mhc.n": 0}, "model.mhc.n=0"),
    ("mhc", {"model.mhc.sinkhorn_iters": 0}, "model.mhc.sinkhorn_iters=0"),
    ("mhc", {"model.mhc.init": "random"}, "model.mhc.init='random'"),
    ("mix_ln", {"model.mix_ln.post_fraction": 1.5}, "model.mix_ln.post_fraction=1.5"),
    ("hybrid_norm", {"model.hybrid_norm.qkv_norm": "token"}, "model.hybrid_norm.qkv_norm='token' is unknown; known: head, all"),
    ("deepnorm", {"model.init": "gpt2"}, "model.init='gpt2'"),
    ("ln_scaling", {"model.init": "gpt2"}, "model.init='gpt2'"),
    ("pre_norm", {"model.norm": "dyt", "model.dyt.alpha_attn": float("nan")}, "model.dyt.alpha_attn=nan must be a finite"),
    ("pre_norm", {"model.dyt.alpha_final": float("inf")}, "model.dyt.alpha_final=inf must be a finite"),
    ("hc", {"model.hc.s_alpha": float("-inf")}, "model.hc.s_alpha=-inf must be a finite"),
    ("pre_norm", {"train.b2": float("nan")}, "train.b2=nan must be a finite"),
    ("attn_res_block", {"model.attn_res.num_blocks": 3}, "model.attn_res.num_blocks=3 must divide the 4 sublayers"),
    ("attn_res_block", {"model.attn_res.num_blocks": 0}, "model.attn_res.num_blocks=0 must divide"),
    ("laurel", {"model.laurel.rank": -1}, "model.laurel.rank=-1 must be an integer in 0..model.d_model=32"),
    ("laurel", {"model.laurel.pa_k": 0}, "model.laurel.pa_k=0 must be an integer in 1..4"),
    ("value_residual", {"model.value_residual.lambda_init": 1.5}, "model.value_residual.lambda_init=1.5 must be in"),
    ("value_residual", {"model.value_residual.lambda_init": -0.1}, "model.value_residual.lambda_init=-0.1 must be in"),
    ("value_residual", {"model.value_residual.lambda_init": float("nan")}, "lambda_init=nan must be a finite"),
]


def test_laurel_pa_reaches_back_over_every_sublayer():
  """pa_k counts sublayers (2 per layer): every earlier sublayer's input is allowed, one more is not."""
  configlib.validate(tiny_config("laurel", **{"model.laurel.pa_k": 4}))
  with pytest.raises(InputError, match=r"model.laurel.pa_k=5 must be an integer in 1..4"):
    configlib.validate(tiny_config("laurel", **{"model.laurel.pa_k": 5}))


@pytest.mark.parametrize("residual,over,msg", BAD, ids=[m for _, _, m in BAD])
def test_validate_names_the_field(residual, over, msg):
  cfg = tiny_config(residual, **over)
  with pytest.raises(InputError, match=msg.replace("(", r"\(").replace("[", r"\[")):
    configlib.validate(cfg)


def test_good_configs_pass():
  for residual in ("pre_norm", "hc", "mhc", "mix_ln", "deepnorm", "rezero"):
    configlib.validate(tiny_config(residual))
  # the ends of a range are settings too: value residual's lambda_init 0 is the setting upcycling uses
  for lam, learned in ((0.0, True), (0.0, False), (1.0, True)):
    configlib.validate(tiny_config("value_residual", **{"model.value_residual.lambda_init": lam,
                                                        "model.value_residual.learned": learned}))


def test_block_attnres_with_one_sublayer_per_block_passes():
  """model.attn_res.num_blocks = 2L, each sublayer its own block (Full AttnRes in Block's form, the end of the
  range), validates at every depth."""
  refused = []
  for layers in (1, 2, 3):
    try:
      configlib.validate(tiny_config("attn_res_block", layers, **{"model.attn_res.num_blocks": 2 * layers}))
    except InputError as e:
      refused.append(str(e))
  assert not refused, refused


def test_batch_not_divisible_by_data_parallel_size():
  cfg = tiny_config(**{"train.batch_size": 3, "mesh.data": 1})
  runtime.build(cfg)  # one device: any batch
  import jax
  devices = jax.devices() * 2  # a two-device data axis, without needing two devices to exist
  with pytest.raises(InputError, match="train.batch_size=3 is not divisible by the data-parallel size 2"):
    runtime.build(tiny_config(**{"train.batch_size": 3, "mesh.data": -1}), devices=devices)


def _stored(cfg):
  return configlib.to_json(cfg)


# (residual of the stored run, the changed key, the new value): every one changes the model, so it is refused.
REFUSED = [
    ("pre_norm", "model.residual", "post_norm"),
    ("pre_norm", "model.num_layers", 3),
    ("pre_norm", "model.d_model", 64),
    ("pre_norm", "model.num_heads", 4),
    ("pre_norm", "model.mlp_dim", 128),
    ("pre_norm", "model.norm", "rmsnorm"),
    ("pre_norm", "model.pos", "learned"),
    ("pre_norm", "model.tie_embed", True),
    ("pre_norm", "model.final_norm", False),
    ("pre_norm", "model.norm_stats_dtype", "compute"),
    ("hc", "model.hc.n", 2),
    ("hc", "model.hc.dynamic", False),
    ("hc", "model.hc.tanh", False),
    ("mhc", "model.mhc.n", 2),
    ("mhc", "model.mhc.sinkhorn_iters", 5),
    ("mhc", "model.mhc.init", "uniform"),
    ("mix_ln", "model.mix_ln.post_fraction", 0.5),
    ("rezero", "model.rezero.alpha_init", 0.5),
    ("rezero", "model.rezero.share_gate", True),
    ("hybrid_norm", "model.hybrid_norm.qkv_norm", "all"),
    ("attn_res_block", "model.attn_res.num_blocks", 4),  # settings in another variant's section (Variant.section)
    ("pre_norm", "model.norm", "derf"),
    ("laurel", "model.laurel.rank", 8),
    ("value_residual", "model.value_residual.learned", False),
]


@pytest.mark.parametrize("residual,key,val", REFUSED, ids=[f"{r}:{k}" for r, k, _ in REFUSED])
def test_another_model_is_refused_naming_both_values(residual, key, val):
  stored = _stored(tiny_config(residual))
  cfg = tiny_config(residual, **{key: val})
  old = stored
  for part in key.split("."):
    old = old[part]
  with pytest.raises(InputError, match=f"with {key}={old!r} but the config asks for {key}={val!r}"):
    configlib.check_compatible(stored, cfg, "runs/x")


@pytest.mark.parametrize("norm,other", [("dyt", "derf"), ("derf", "dyt")])
def test_an_elementwise_norms_settings_are_the_models_own(norm, other):
  """DyT's and Derf's sections are compared like a variant's own settings when model.norm names them (each field
  refused by name), and ignored when it names another norm: the other kind's settings change nothing computed."""
  stored = _stored(tiny_config("pre_norm", **{"model.norm": norm}))
  flip = not stored["model"][norm]["bias"]
  for field, val in (("alpha_attn", 0.5), ("alpha_ffn", 0.25), ("alpha_final", 2.0), ("bias", flip)):
    old = stored["model"][norm][field]
    with pytest.raises(InputError, match=re.escape(f"model.{norm}.{field}={old!r} but the config asks for "
                                                   f"model.{norm}.{field}={val!r}")):
      configlib.check_compatible(stored, tiny_config("pre_norm", **{"model.norm": norm, f"model.{norm}.{field}": val}),
                                 "runs/x")
    configlib.check_compatible(stored, tiny_config("pre_norm", **{"model.norm": norm, f"model.{other}.{field}": val}),
                               "runs/x")


ACCEPTED = [
    ("pre_norm", {"model.dtype": "bfloat16", "model.remat": "full", "model.kernels": "reference"}),
    ("pre_norm", {"model.hc.n": 2, "model.mhc.n": 8, "model.mix_ln.post_fraction": 0.5}),  # other variants' keys
    ("hc", {"model.mhc.sinkhorn_iters": 3, "model.rezero.alpha_init": 1.0}),
    ("mhc", {"model.hc.n": 2}),
    ("kromhc", {"model.remat_group": 4, "model.depth_chunks": 2}),
    ("pre_norm", {"train.lr": 0.5, "train.steps": 100, "data.seq_len": 32, "seed": 3}),  # not model fields
]


@pytest.mark.parametrize("residual,over", ACCEPTED)
def test_runtime_and_unrelated_changes_resume(residual, over):
  configlib.check_compatible(_stored(tiny_config(residual)), tiny_config(residual, **over), "runs/x")


def test_fields_added_later_default_to_what_old_runs_computed():
  stored = _stored(tiny_config("pre_norm"))
  for key in configlib.ADDED_MODEL_FIELDS:
    del stored["model"][key]
  configlib.check_compatible(stored, tiny_config("pre_norm"), "runs/x")
  with pytest.raises(InputError, match="model.final_norm=True but the config asks for model.final_norm=False"):
    configlib.check_compatible(stored, tiny_config("pre_norm", **{"model.final_norm": False}), "runs/x")


def test_hybrid_norm_runs_stored_before_per_head_qkv_norms_are_the_all_features_form():
  """A HybridNorm config stored before `hybrid_norm.qkv_norm` existed ran the H*K form: eval reads it so, and the
  per-head default refuses its checkpoint naming both forms."""
  stored = _stored(tiny_config("hybrid_norm"))
  del stored["model"]["hybrid_norm"]["qkv_norm"]
  assert configlib.from_json(stored).model.hybrid_norm.qkv_norm == "all"
  configlib.check_compatible(stored, tiny_config("hybrid_norm", **{"model.hybrid_norm.qkv_norm": "all"}), "runs/x")
  with pytest.raises(InputError, match="model.hybrid_norm.qkv_norm='all' but the config asks for "
                                       "model.hybrid_norm.qkv_norm='head'"):
    configlib.check_compatible(stored, tiny_config("hybrid_norm"), "runs/x")


def test_mhc_lite_runs_stored_before_the_authors_mix_keep_their_own():
  """An mHC-lite config stored before `mhc_lite.mix` existed mixed with H_res x: eval reads it so, and the authors'
  H_res^T x (the default now) refuses its checkpoint naming both; an unknown mix is refused."""
  stored = _stored(tiny_config("mhc_lite"))
  del stored["model"]["mhc_lite"]["mix"]
  assert configlib.from_json(stored).model.mhc_lite.mix == "direct"
  configlib.check_compatible(stored, tiny_config("mhc_lite", **{"model.mhc_lite.mix": "direct"}), "runs/x")
  with pytest.raises(InputError, match="model.mhc_lite.mix='direct' but the config asks for "
                                       "model.mhc_lite.mix='transpose'"):
    configlib.check_compatible(stored, tiny_config("mhc_lite"), "runs/x")
  with pytest.raises(InputError, match="model.mhc_lite.mix='both' is unknown"):
    configlib.validate(tiny_config("mhc_lite", **{"model.mhc_lite.mix": "both"}))


# docs/reliability.md (Config changes on resume), written out: what a resume may change and what it may not.
TRAJECTORY = {"model.dtype": "bfloat16", "train.batch_size": 8, "train.lr": 2e-3, "train.warmup_steps": 3,
              "train.schedule": "linear", "train.min_lr_ratio": 0.5, "train.b1": 0.8, "train.b2": 0.9,
              "train.eps": 1e-6, "train.weight_decay": 0.2, "train.grad_clip": 0.5, "seed": 7,
              "data.seq_len": 32, "data.pack": False,
              "data.eval_subset_every": 3}  # the subset the report's regime compares at 75% and 100% would change
HARMLESS = {"train.log_every": 3, "train.eval_every": 5, "train.diag_every": 5, "train.ckpt_every": 5,
            "train.skip_nonfinite": True, "train.max_skipped": 9, "train.grad_accum": 2, "ckpt.keep": 5,
            "data.eval_batches": 3, "model.remat": "full", "model.kernels": "reference", "train.init_from": "/x"}


@pytest.mark.parametrize("field,value", [*TRAJECTORY.items(), *HARMLESS.items(), ("train.steps", 12)])
def test_config_changes_classify_each_field_as_the_readme_says(field, value):
  base = tiny_config("pre_norm", 2)
  other = tiny_config("pre_norm", 2, **{field: value})
  changes = configlib.config_changes(configlib.to_json(base), other)
  want = "steps" if field == "train.steps" else "harmless" if field in HARMLESS else "trajectory"
  assert [(c["field"], c["kind"]) for c in changes] == [(field, want)]


# ---- keys configs/base.py does not define ------------------------------------------------------------------------

def _with(cfg, dotted, val):
  node = cfg
  *path, last = dotted.split(".")
  for p in path:
    node = node[p]
  node[last] = val
  return cfg


# A stale or misspelled key, set in code as a config file or a test does: at the top, in a section, in a variant's
# nested section, and a whole new section. Each is named, dotted, in the error.
UNKNOWN = [("seeds", 1), ("model.nope", 1), ("model.mhc.sym_break", "onehot"), ("model.hybridnorm.x", 1),
           ("train.lr_decay", 0.5), ("data.paths_glob", "*")]


@pytest.mark.parametrize("key,val", UNKNOWN, ids=[k for k, _ in UNKNOWN])
def test_a_key_base_does_not_define_is_refused_naming_it(key, val):
  import ml_collections
  cfg = tiny_config("mhc")
  if key == "model.hybridnorm.x":  # a new section: the section itself is the unknown key
    cfg.model.hybridnorm = ml_collections.ConfigDict({"x": val})
    key = "model.hybridnorm"
  else:
    _with(cfg, key, val)
  with pytest.raises(InputError, match=rf"^unknown config key {re.escape(key)}( \(did you mean [\w.]+\?\))?$"):
    configlib.validate(cfg)


# A near miss (one part of the path a typo away from a key base.py defines) and far misses, by each way a key
# arrives: a sweep override (load_points, preflight) and a --config override (cli.parse names the first override
# base.py lacks) name the whole key; a config built in code or by a file (validate) names the first unknown key of
# its tree, a misspelt section itself. One line each, dotted, no quotes. (key, value, override's line, validate's)
NEAR = " (did you mean model.attn_res.num_blocks?)"
MISSES = [("model.attn_res.num_block", 2, NEAR, NEAR),
          ("model.attn_rs.num_blocks", 2, NEAR, " (did you mean model.attn_res?)"),
          ("train.lr_decay", 0.5, "", ""),
          ("model.attn_res.zzzz", 2, "", "")]


@pytest.mark.parametrize("key,val,hint,hint_validate", MISSES, ids=[m[0] for m in MISSES])
def test_a_near_miss_names_the_key_it_misspells_in_one_line(tmp_path, key, val, hint, hint_validate):
  import ml_collections
  from resnorm.config import configkeys
  from resnorm.sweep import preflight, sweep
  want = f"unknown config key {key}{hint}"
  assert "\n" not in want and "'" not in want
  cfg = tiny_config("attn_res")
  *parents, last = key.split(".")
  node, first = cfg, None
  for part in parents:
    if part not in node:
      node[part] = ml_collections.ConfigDict()
      first = first or key[:key.index(part) + len(part)]
    node = node[part]
  node[last] = val
  with pytest.raises(InputError) as e:
    configlib.validate(cfg)
  assert str(e.value) == f"unknown config key {first or key}{hint_validate}"
  bad = tmp_path / "bad.py"
  bad.write_text(f"def sweep(add):\n  add(config='configs/tiny.py', **{{'{key}': {val!r}}})\n")
  with pytest.raises(InputError) as e:
    sweep.load_points(str(bad))
  assert str(e.value) == f"{bad}: {want}"
  with pytest.raises(InputError) as e:
    preflight.point_config({"config": "configs/tiny.py", "overrides": {key: val}}, ROOT)
  assert str(e.value) == want
  assert configkeys.first_unknown_override(["train.lr", key, "model.nope"]) == key


def test_a_section_set_to_a_value_is_refused():
  stored = _stored(tiny_config("hc"))  # ConfigDict refuses the type change in code; a JSON config does not
  stored["model"]["hc"] = 4
  cfg = configlib.from_json(stored)
  with pytest.raises(InputError, match=r"config key 'model.hc' is a section in configs/base.py"):
    configlib.validate(cfg)


def test_every_config_file_and_scale_validates():
  """No false refusals: every experiment file at both scales (tiny at several variants) and configs/peer.py."""
  import glob
  import importlib
  names = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "configs", "*.py")))
  names = [n for n in names if n not in ("__init__", "base")]
  assert len(names) >= 24, names
  for name in names:
    mod = importlib.import_module(f"configs.{name}")
    for arg in (("pre_norm", "hc", "mhc_lite") if name == "tiny" else (None, "tpu")):
      configlib.validate(mod.get_config(arg))


def test_sweep_files_load_and_an_unknown_override_is_refused(tmp_path, monkeypatch):
  from resnorm.sweep import sweep
  monkeypatch.setenv("RESNORM_SMOKE_DATA", "x.txt")
  for path in sorted(glob_sweeps()):
    assert sweep.load_points(path)  # every override of every point is a known key
  bad = tmp_path / "bad.py"
  bad.write_text("def sweep(add):\n  add(config='configs/tiny.py', **{'train.lr': 1e-3})\n"
                 "  add(config='configs/tiny.py', **{'model.mhc.sym_break': 'onehot'})\n")
  with pytest.raises(InputError, match=r"bad.py: unknown config key model.mhc.sym_break$"):
    sweep.load_points(str(bad))
  bad.write_text("def sweep(add):\n  add(config='configs/tiny.py', **{'model.hc': 2})\n")
  with pytest.raises(InputError, match=r"config key 'model.hc' is a section"):
    sweep.load_points(str(bad))


def glob_sweeps():
  import glob
  return [p for p in glob.glob(os.path.join(ROOT, "configs", "sweeps", "*.py")) if not p.endswith("__init__.py")]


def test_a_stored_config_keeps_unknown_keys_for_validate_but_drops_retired_runtime_ones():
  stored = _stored(tiny_config("mhc"))
  stored["model"]["attention"] = "einsum"  # the old name of model.kernels: runtime only
  cfg = configlib.from_json(stored)
  assert "attention" not in cfg.model
  configlib.validate(cfg)
  stored["model"]["mhc"]["sym_break"] = "onehot"  # a retired setting that changed the model: refused
  with pytest.raises(InputError, match="^unknown config key model.mhc.sym_break$"):
    configlib.validate(configlib.from_json(stored))
