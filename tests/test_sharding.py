"""8 simulated CPU devices (a subprocess sets XLA_FLAGS before importing jax): meshes agree with one device."""
import json
import os
import subprocess
import sys

import pytest

from resnorm.scale import sharding
from resnorm.core.errors import InputError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# The tests that read `results` are end-to-end (8 devices in a subprocess, training and checkpoints): integration.
E2E = pytest.mark.integration


@pytest.fixture(scope="module")
def results(tmp_path_factory):
  env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
         "JAX_DISABLE_MOST_OPTIMIZATIONS": "1", "PYTHONPATH": ROOT}
  r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "scripts", "multidevice.py"),
                      str(tmp_path_factory.mktemp("ck"))], env=env, capture_output=True, text=True, timeout=900)
  assert r.returncode == 0, r.stderr[-3000:]
  return json.loads(r.stdout.strip().splitlines()[-1])


@E2E
@pytest.mark.parametrize("residual", ["pre_norm", "hc"])
def test_same_losses_on_every_mesh(results, residual):
  ref = results[f"{residual}:(1, 1, 1)"]["losses"]
  for mesh in ("(8, 1, 1)", "(1, 8, 1)", "(2, 2, 2)", "(1, 2, 4)"):
    got = results[f"{residual}:{mesh}"]["losses"]
    for a, b in zip(got, ref):
      assert abs(a - b) <= 1e-5 * abs(b), (mesh, got, ref)


@E2E
def test_grad_accum_on_a_mesh_matches_one_device(results):
  ref, got = results["hc:(1, 1, 1)"]["losses"], results["hc:(2, 2, 2):accum2"]["losses"]
  for a, b in zip(got, ref):
    assert abs(a - b) <= 1e-5 * abs(b), (got, ref)


@E2E
def test_param_and_optimizer_shardings_follow_rules(results):
  r = results["pre_norm:(2, 2, 2)"]
  assert r["spec_q"] == "P(None, 'fsdp', 'tensor', None)"  # (layers, embed, heads, kv)
  assert r["spec_embed"] == "P('tensor', 'fsdp')"   # (vocab, embed)
  assert "fsdp" in r["spec_mu"]  # Adam moments are sharded like their params


@E2E
def test_dry_run_bytes_match_real_arrays(results):
  for key, r in results.items():
    if "bytes_predicted" in r:
      assert r["bytes_predicted"] == r["bytes_actual"], key


@E2E
def test_checkpoints_restore_across_mesh_shapes(results):
  rs = {k: v for k, v in results.items() if k.startswith("restore:")}
  assert len(rs) == 6 and all(v["equal"] for v in rs.values())
  assert results["restore:8x1x1->(2, 2, 2)"]["sharding"] == "P(None, 'fsdp', 'tensor')"


def test_mesh_shape_errors():
  class M:
    data, fsdp, tensor = 3, 1, 1
  with pytest.raises(InputError, match="but 8 devices"):
    sharding.mesh_shape(M, 8)
  M.data, M.fsdp = -1, -1
  with pytest.raises(InputError, match="at most one"):
    sharding.mesh_shape(M, 8)
  M.fsdp, M.tensor = 2, 3
  with pytest.raises(InputError, match="do not divide"):
    sharding.mesh_shape(M, 8)
  M.tensor = 2
  assert sharding.mesh_shape(M, 8) == (2, 2, 2)


def _mesh_specs(cfg):
  """{param path: mesh PartitionSpec} from the params' logical axis names and sharding.RULES (no devices needed)."""
  import flax
  import flax.linen as nn
  import jax
  from resnorm.config import configlib
  from resnorm.model.model import LM
  mcfg = configlib.model_config(cfg)
  tokens = jax.ShapeDtypeStruct((1, cfg.data.seq_len), jax.numpy.int32)
  boxed = jax.eval_shape(LM(mcfg).init, jax.random.key(0), tokens)["params"]
  specs = nn.get_partition_spec(boxed)
  flat = flax.traverse_util.flatten_dict(specs, is_leaf=lambda _, x: isinstance(x, jax.sharding.PartitionSpec))
  return {"/".join(k): tuple(nn.logical_to_mesh_axes(v, sharding.RULES)) for k, v in flat.items()}


def test_rules_place_params_and_batch_as_the_readme_says():
  """Params FSDP-sharded on their embed axis; heads, MLP and vocab on tensor; the batch on (data, fsdp); the
  layers axis, norms and RoPE-free kv never sharded. Written from docs/scaling.md, not read from the rules."""
  from conftest import tiny_config
  got = _mesh_specs(tiny_config("hc", 2, **{"model.pos": "learned"}))
  want = {
      "embed": ("tensor", "fsdp"), "head": ("fsdp", "tensor"), "pos_embed": (None, "fsdp"),
      "blocks/attn/q": (None, "fsdp", "tensor", None), "blocks/attn/k": (None, "fsdp", "tensor", None),
      "blocks/attn/v": (None, "fsdp", "tensor", None), "blocks/attn/o": (None, "tensor", None, "fsdp"),
      "blocks/mlp/wi": (None, "fsdp", "tensor"), "blocks/mlp/wo": (None, "tensor", "fsdp"),
      "blocks/attn_norm/scale": (None, None), "blocks/attn_res/w_alpha": (None, "fsdp", None),
  }
  for k, v in want.items():
    assert got[k] == v, (k, got[k], v)
  assert got["final_norm/scale"] == (None,)
  from jax.sharding import PartitionSpec as P
  import flax.linen as nn
  assert nn.logical_to_mesh_axes(("batch", "seq"), sharding.RULES) == P(("data", "fsdp"), None)
