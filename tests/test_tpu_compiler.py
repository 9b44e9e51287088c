"""The memory plan on the TPU compiler (resnorm.scale.tpu_compiler): slice topologies, the child's environment and its
noise, the compiler's out-of-memory refusal, and, where libtpu is installed, train.py --dry_run compiling a tiny
config for a v4-8 and a v5e-8 with no TPU here."""
import json
import os
import subprocess
import sys

import pytest

from resnorm.core.errors import InputError
from resnorm.plan import dryrun, memplan
from resnorm.results.v4 import tpu_budget
from resnorm.scale import tpu_compiler
from test_cli import ROOT

HAVE_LIBTPU = tpu_compiler.libtpu_version() is not None
needs_libtpu = pytest.mark.skipif(not HAVE_LIBTPU, reason="libtpu not installed (the [tpu] extra)")


@pytest.mark.parametrize("target, name, hosts, accel, chip_config", [
    ("v4-8", "v4:2x2x1", 1, "v4-8", "megacore"), ("v4-32", "v4:2x2x4", 4, "v4-32", "megacore"),
    ("v4-128", "v4:4x4x4", 16, "v4-128", "megacore"), ("v5p-8", "v5p:2x2x1", 1, "v5p-8", "megacore"),
    ("v5e-1", "v5e:1x1", 1, "v5litepod-1", "default"), ("v5e-8", "v5e:2x4", 1, "v5litepod-8", "default"),
    ("v5litepod-16", "v5e:4x4", 4, "v5litepod-16", "default"), ("v5e-256", "v5e:16x16", 64, "v5litepod-256", "default"),
    ("v6e-8", "v6e:2x4", 1, "v6e-8", "default"), ("v6e-32", "v6e:4x8", 8, "v6e-32", "default")])
def test_slice_topologies(target, name, hosts, accel, chip_config):
  """Cloud TPU's standard slice shapes, hosts of 2x2(x1) chips (single-host v5e/v6e up to 8), GCE's names."""
  topo = memplan.parse_target(target).topology
  assert (topo.name, topo.hosts, topo.accelerator_type, topo.chip_config) == (name, hosts, accel, chip_config)
  assert topo.devices == memplan.parse_target(target).devices


def test_multislice_and_nonstandard_slices():
  t = memplan.parse_target("2xv5e-256")
  assert (t.devices, t.num_slices, t.topology.name, t.topology.hosts) == (512, 2, "v5e:16x16", 128)
  assert memplan.parse_target("v5e-256").num_slices == 1
  with pytest.raises(InputError, match="not a standard slice shape"):
    memplan.parse_target("v4-24").topology
  assert memplan.parse_target("h100x8").topology is None


def test_compiler_choice(monkeypatch):
  gpu, v4 = memplan.parse_target("h100"), memplan.parse_target("v4-8")
  assert memplan.compiler_for(gpu, "auto") == "cpu" and memplan.compiler_for(v4, "cpu") == "cpu"
  with pytest.raises(InputError, match="--compiler=tpu compiles for TPU slices"):
    memplan.compiler_for(gpu, "tpu")
  monkeypatch.setattr(tpu_compiler, "libtpu_version", lambda: None)
  assert memplan.compiler_for(v4, "auto") == "cpu"
  assert memplan.compiler_line(v4, "cpu") == "compiler: cpu estimate (install .[tpu] for the TPU compiler)"
  with pytest.raises(InputError, match=r"--compiler=tpu needs libtpu: pip install"):
    memplan.compiler_for(v4, "tpu")
  monkeypatch.setattr(tpu_compiler, "libtpu_version", lambda: "0.0.50.1")
  assert memplan.compiler_for(v4, "auto") == "tpu"
  odd = memplan.parse_target("v4-24")  # no standard topology: auto falls back to the estimate and says why
  assert memplan.compiler_for(odd, "auto") == "cpu"
  assert memplan.compiler_line(odd, "cpu") == "compiler: cpu estimate (v4-24 is not a standard slice shape)"
  with pytest.raises(InputError, match="not a standard slice shape"):
    memplan.compiler_for(odd, "tpu")
  assert memplan.compiler_line(v4, "tpu").startswith("compiler: tpu (libtpu 0.0.50.1), topology v4:2x2x1")


def test_child_env_names_the_slice_and_stays_in_the_child():
  env = tpu_compiler.child_env(memplan.parse_target("v5e-8").topology)
  assert env["TPU_ACCELERATOR_TYPE"] == "v5litepod-8" and env["TPU_WORKER_HOSTNAMES"] == "localhost"
  assert env["ALLOW_MULTIPLE_LIBTPU_LOAD"] == "1"  # two dry runs at once (xdist, a table) do not lock each other out
  assert not any(k in os.environ for k in ("TPU_ACCELERATOR_TYPE", "TPU_WORKER_HOSTNAMES"))


def test_noise_is_filtered_and_errors_are_not():
  """libtpu's lines on a machine without a TPU, as 0.0.50.1 prints them without its environment."""
  noise = [
      "Failed to find host bounds for accelerator type: WARNING: could not determine TPU accelerator type, please "
      "set env var `TPU_ACCELERATOR_TYPE` manually, otherwise libtpu.so may not properly initialize.",
      "WARNING: Logging before InitGoogle() is written to STDERR",
      "E0000 00:00:1796235531.899249    3169 common_lib.cc:860] INVALID_ARGUMENT: Error: unexpected worker hostname "
      "'WARNING: could not determine TPU worker hostnames or IP addresses' from env var TPU_WORKER_HOSTNAMES.",
      "=== Source Location Trace: ===", "learning/45eac/tfrc/runtime/libtpu_init_utils.cc:370"]
  assert all(tpu_compiler.is_noise(line) for line in noise)
  kept = ["error: --config.train.lr=-1: train.lr must be > 0", "Traceback (most recent call last):",
          "jax.errors.JaxRuntimeError: INTERNAL: something real", "E1202 12:00:00.000 1 tpu.cc:1] a real failure"]
  assert not any(tpu_compiler.is_noise(line) for line in kept)


def test_compilers_refusal_is_the_plans_answer():
  """XLA:TPU refuses a program larger than the chip at compile time; its figure becomes the step's peak."""
  msg = ("RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom: Ran out of memory on HBM, the total memory required for HLO "
         "temporaries (19.13G) exceeds available HBM (15.75G). HLO module: jit_train_step.")
  mem = dryrun.refused_memory(RuntimeError(msg), 2**20)
  assert mem["temp"] == int(19.13 * 2**30) and mem["refused"] == int(15.75 * 2**30)
  assert mem["peak"] == mem["temp"] + 2**20
  assert dryrun.refused_memory(RuntimeError("INTERNAL: something else"), 0) is None


def test_budget_refuses_a_model_that_does_not_fit():
  fits = {"fits": True, "peak": 2**30, "memory_gib": 32.0, "compiler": "tpu", "libtpu": "x", "suggestions": []}
  big = {**fits, "fits": False, "peak": 40 * 2**30,
         "suggestions": [{"overrides": {"train.grad_accum": 32}, "peak": 20 * 2**30}]}
  rows = [{"model": "pre_norm, 12 layers", "runs": 3, "hours": 1.0, "plan": fits},
          {"model": "hc, 96 layers", "runs": 3, "hours": 9.0, "plan": big}]
  assert "| all | 6 | 10 | | |" in tpu_budget.table(rows, "v4-8")
  tpu_budget.refuse_unless_fits(rows[:1], "v4-8")
  with pytest.raises(InputError, match=r"does not fit v4-8: 1 of its 2 models, first hc, 96 layers: peak 40.0 GiB "
                                       r"of 32 GiB per device \(tpu\); fits with --config.train.grad_accum=32"):
    tpu_budget.refuse_unless_fits(rows, "v4-8")


TINY = ["--config=configs/hc_12l.py:tpu", "--config.model.num_layers=2", "--config.model.d_model=32",
        "--config.model.num_heads=2", "--config.model.mlp_dim=64", "--config.data.seq_len=32",
        "--config.train.batch_size=64"]
# 1.8e9 params, replicated (mesh.data=-1): params and Adam alone exceed a v5e chip's 16 GiB; all-FSDP fits
TOO_LARGE = ["--config=configs/hc_12l.py:tpu", "--config.model.num_layers=1", "--config.model.d_model=12288",
             "--config.model.num_heads=96", "--config.model.mlp_dim=49152", "--config.data.seq_len=32",
             "--config.train.batch_size=8", "--config.train.grad_accum=1", "--config.train.diag_every=0",
             "--config.mesh.data=-1", "--config.mesh.fsdp=1"]


def _train_py(*args):
  env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_DISABLE_MOST_OPTIMIZATIONS")}
  env["PYTHONPATH"] = ROOT
  return subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), "--dry_run", *args], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=600)


@needs_libtpu
def test_tiny_config_compiles_for_a_v4_8_on_the_tpu_compiler():
  r = _train_py(*TINY, "--target=v4-8")
  assert r.returncode == 0, r.stderr[-2000:]
  assert f"compiler: tpu (libtpu {tpu_compiler.libtpu_version()}), topology v4:2x2x1 (megacore" in r.stdout
  assert "'fsdp': 4" in r.stdout and "diagnostics step" in r.stdout
  assert r.stdout.strip().splitlines()[-1].startswith("fits v4-8: yes (")
  assert r.stderr.strip() == "", r.stderr[-2000:]  # libtpu's no-TPU-here lines stay off the terminal
  assert "TPU_ACCELERATOR_TYPE" not in os.environ


@needs_libtpu
def test_too_large_for_a_v5e_chip_is_refused_with_a_setting_compiled_by_the_tpu_compiler():
  r = _train_py(*TOO_LARGE, "--target=v5e-8", "--json")
  assert r.returncode == 2, r.stderr[-2000:]
  plan = json.loads(r.stdout.strip().splitlines()[-1])
  assert plan["compiler"] == "tpu" and plan["topology"]["name"] == "v5e:2x4" and not plan["fits"]
  assert plan["memory"]["train"]["refused"] is not None  # XLA:TPU itself refused the step: out of HBM
  (fix,) = plan["suggestions"]
  assert fix["overrides"] == {"mesh.data": 1, "mesh.fsdp": -1} and fix["peak"] < plan["budget_bytes"]
  assert "Traceback" not in r.stderr and "TPU_WORKER_HOSTNAMES" not in r.stderr
  # the suggestion's figure is the TPU compiler's: planning that setting by itself gives the same peak
  again = _train_py(*TOO_LARGE, "--config.mesh.data=1", "--config.mesh.fsdp=-1", "--target=v5e-8", "--json")
  assert again.returncode == 0 and json.loads(again.stdout.strip().splitlines()[-1])["peak"] == fix["peak"]


def test_the_childs_stderr_loses_only_libtpus_noise(capsys):
  """Between the compiler child and the user (memplan._forward_stderr): on one stream, libtpu's no-TPU-here lines
  are dropped and the child's own lines, its errors included, pass through in order."""
  import io
  from resnorm.plan import memplan
  stream = io.StringIO("Logging before InitGoogle() is written to STDERR\n"
                       "error: model.num_layers=0 must be >= 1\n"
                       "E0000 could not determine TPU accelerator type\n"
                       "compiler: tpu (libtpu 0.0.50.1)\n")
  memplan._forward_stderr(stream)
  assert capsys.readouterr().err == "error: model.num_layers=0 must be >= 1\ncompiler: tpu (libtpu 0.0.50.1)\n"
