"""What produced a run: the code (git commit, uncommitted changes), the package versions and the devices.

Written into summary.json as `provenance`, so every result can be traced to the code and hardware behind it.
"""
import importlib.metadata
import os
import subprocess

PACKAGES = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "grain")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout holding resnorm/


def _git(*args) -> str | None:
  try:
    r = subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True, timeout=20)
  except (OSError, subprocess.SubprocessError):
    return None  # no git installed, or it hung
  return r.stdout if r.returncode == 0 else None


def git_state() -> dict:
  """{git_commit, git_dirty}: the checkout's HEAD and whether tracked or untracked (not ignored) files differ
  from it; both None outside a git checkout."""
  inside = _git("rev-parse", "--show-toplevel")
  if inside is None or os.path.realpath(inside.strip()) != os.path.realpath(ROOT):
    return {"git_commit": None, "git_dirty": None}  # installed elsewhere, or inside some other repository
  head = _git("rev-parse", "HEAD")
  status = _git("status", "--porcelain")
  return {"git_commit": head.strip() if head else None, "git_dirty": None if status is None else bool(status.strip())}


def versions() -> dict:
  out = {}
  for name in PACKAGES:
    try:
      out[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      out[name] = None
  return out


def collect() -> dict:
  import jax
  dev = jax.devices()[0]
  return {**git_state(), "versions": versions(),
          "devices": {"platform": dev.platform, "device_kind": dev.device_kind, "count": jax.device_count()},
          "processes": jax.process_count()}
