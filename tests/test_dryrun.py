"""train.py --dry_run --target: the memory plan's verdict, its exit code, and the settings it names."""
import os
import subprocess
import sys

import pytest

from resnorm.plan import memplan
from resnorm.core.errors import InputError
from test_cli import ENV, ROOT

# a :tpu config (bfloat16, its remat, grad_accum and diag_batch, all-FSDP mesh) at tiny dimensions
TPU_SHAPED = ["--config=configs/hc_12l.py:tpu", "--config.model.num_layers=2", "--config.model.d_model=32",
              "--config.model.num_heads=2", "--config.model.mlp_dim=64", "--config.data.seq_len=32",
              "--config.train.batch_size=64"]


def dry_run(*args, devices=None):
  env = dict(ENV)
  env.pop("XLA_FLAGS", None)
  if devices:
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
  r = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), "--dry_run", *args], cwd=ROOT, env=env,
                     capture_output=True, text=True, timeout=600)
  return r, r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""


@pytest.mark.integration
def test_tpu_config_fits_v4_8():
  # a one-device process: re-executes itself on 4 CPU devices (the CPU estimate, whether or not libtpu is here)
  r, last = dry_run(*TPU_SHAPED, "--target=v4-8", "--compiler=cpu")
  assert r.returncode == 0, r.stderr[-2000:]
  assert "simulating 4 devices" in r.stdout and "'fsdp': 4" in r.stdout
  assert "compiler: cpu estimate (" in r.stdout
  assert "diagnostics step" in r.stdout and "eval step" in r.stdout
  assert last.startswith("fits v4-8: yes (") and last.endswith(" of 32.0 GiB per device)"), last


@pytest.mark.integration
def test_too_large_names_what_fits_and_that_fits():
  """A budget between the peaks of one and two micro-batches: exit 2, naming grad_accum=2, which then fits.
  (Peaks measured here: 4.4 MiB at one micro-batch of 8 per device, 2.4 MiB at two; 6.4 and 3.4 before the train
  step's guards became conditionals, resnorm/step/step.py.)"""
  small = ["--config.train.batch_size=32", "--config.model.remat=none", "--config.train.grad_accum=1",
           "--config.train.diag_every=0", "--target=4x0.004"]
  r, last = dry_run(*TPU_SHAPED, *small, devices=4)  # the devices are there already: no re-execution
  assert r.returncode == 2, (r.stdout[-2000:], r.stderr[-2000:])
  assert "simulating" not in r.stdout and "Traceback" not in r.stderr
  assert last.startswith("fits 4x0.004: no (") and "fits with --config.train.grad_accum=2 (" in last, last
  assert "--config.model.remat=full (" in last
  r, last = dry_run(*TPU_SHAPED, *small, "--config.train.grad_accum=2", devices=4)
  assert r.returncode == 0 and last.startswith("fits 4x0.004: yes ("), (last, r.stderr[-2000:])


def test_targets():
  assert (memplan.parse_target("v4-8").devices, memplan.parse_target("v4-8").memory_gib) == (4, 32.0)
  assert memplan.parse_target("v5e-8").devices == 8 and memplan.parse_target("v5p-8").devices == 4
  assert memplan.parse_target("v4-32").devices == 16 and memplan.parse_target("v6e-16").devices == 16
  assert memplan.parse_target("h100x8").devices == 8 and memplan.parse_target("8x40").memory_gib == 40.0
  assert memplan.TARGETS["h100"].usable_gib == pytest.approx(0.75 * 79.6)  # JAX's default GPU fraction
  with pytest.raises(InputError, match="--target='tpu' is unknown"):
    memplan.parse_target("tpu")
  with pytest.raises(InputError, match="unknown"):
    memplan.parse_target("v4-7")  # v4 slices count 2 TensorCores per chip


def test_verdict_keeps_the_margin_and_target_kernels():
  t = memplan.parse_target("v5e-8")
  line, code = memplan.verdict(t, 0.89 * 16 * 2**30, None)
  assert code == 0 and line == "fits v5e-8: yes (14.2 GiB of 16.0 GiB per device)"
  line, code = memplan.verdict(t, 0.95 * 16 * 2**30, [({"train.grad_accum": 2}, 9 * 2**30)])
  assert code == 2 and line.startswith("fits v5e-8: no (15.2 GiB of 16.0 GiB per device; the budget is 14.4 GiB")
  assert line.endswith("fits with --config.train.grad_accum=2 (9.0 GiB)")
  from conftest import tiny_config
  assert memplan.for_target(tiny_config(), t).model.kernels == "reference"  # what auto picks off the CPU
