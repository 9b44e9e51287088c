"""8 simulated CPU devices (a subprocess sets XLA_FLAGS before importing jax): meshes agree with one device."""
import json
import os
import subprocess
import sys

import pytest

from resnorm import sharding
from resnorm.errors import InputError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def results(tmp_path_factory):
  env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
         "JAX_DISABLE_MOST_OPTIMIZATIONS": "1", "PYTHONPATH": ROOT}
  r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "scripts", "multidevice.py"),
                      str(tmp_path_factory.mktemp("ck"))], env=env, capture_output=True, text=True, timeout=900)
  assert r.returncode == 0, r.stderr[-3000:]
  return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("residual", ["pre_norm", "hc"])
def test_same_losses_on_every_mesh(results, residual):
  ref = results[f"{residual}:(1, 1, 1)"]["losses"]
  for mesh in ("(8, 1, 1)", "(1, 8, 1)", "(2, 2, 2)", "(1, 2, 4)"):
    got = results[f"{residual}:{mesh}"]["losses"]
    for a, b in zip(got, ref):
      assert abs(a - b) <= 1e-5 * abs(b), (mesh, got, ref)


def test_grad_accum_on_a_mesh_matches_one_device(results):
  ref, got = results["hc:(1, 1, 1)"]["losses"], results["hc:(2, 2, 2):accum2"]["losses"]
  for a, b in zip(got, ref):
    assert abs(a - b) <= 1e-5 * abs(b), (got, ref)


def test_param_and_optimizer_shardings_follow_rules(results):
  r = results["pre_norm:(2, 2, 2)"]
  assert r["spec_q"] == "P(None, 'fsdp', 'tensor', None)"  # (layers, embed, heads, kv)
  assert r["spec_embed"] == "P('tensor', 'fsdp')"   # (vocab, embed)
  assert "fsdp" in r["spec_mu"]  # Adam moments are sharded like their params


def test_dry_run_bytes_match_real_arrays(results):
  for key, r in results.items():
    if "bytes_predicted" in r:
      assert r["bytes_predicted"] == r["bytes_actual"], key


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
