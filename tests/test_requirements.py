"""requirements.txt: `pip install -r requirements.txt` gives the environment CI tests. It points at the Python 3.11
lock (one source of truth) and the package; the lock pins every dependency the package pulls in; and pip, asked
without an index, finds nothing in those pins to change in this (lock-built) venv. Nothing is downloaded."""
import importlib.metadata
import json
import os
import subprocess
import sys
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOCK_311 = "requirements/lock-py3.11.txt"
HERE = f"requirements/lock-py{sys.version_info.major}.{sys.version_info.minor}.txt"


def _lines(path):
  with open(os.path.join(ROOT, path)) as f:
    return [l.split("#")[0].strip() for l in f if l.split("#")[0].strip()]


def _pins(path) -> dict:
  out = {}
  for line in _lines(path):
    name, _, version = line.partition("==")
    assert version, f"{path}: {line!r} is not an exact pin"
    out[canonicalize_name(name)] = version
  return out


def test_requirements_txt_is_the_lock_and_the_package():
  assert _lines("requirements.txt") == [f"-r {LOCK_311}", "-e ."]


def _closure() -> set[str]:
  """The distributions `pip install -e '.[test]'` pulls in: pyproject's dependencies and test extra, then each
  installed distribution's own requirements (markers evaluated here, extras followed)."""
  with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    project = tomllib.load(f)["project"]
  todo = [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["test"]]
  seen: dict[str, set] = {}
  while todo:
    req = todo.pop()
    name = canonicalize_name(req.name)
    extras = set(req.extras)
    if name in seen and extras <= seen[name]:
      continue
    seen[name] = seen.get(name, set()) | extras
    try:
      dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
      pytest.fail(f"{req} is required but not installed in the tested environment")
    for spec in dist.requires or []:
      sub = Requirement(spec)
      if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in seen[name] | {""}):
        todo.append(sub)
  return set(seen)


@pytest.mark.skipif(not os.path.exists(os.path.join(ROOT, HERE)), reason=f"no {HERE} for this Python")
def test_the_lock_pins_every_dependency_of_the_package():
  missing = sorted(_closure() - set(_pins(HERE)))
  assert not missing, f"{HERE} does not pin {missing}: a fresh install would get whatever version is newest"


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="requirements.txt is the Python 3.11 environment")
def test_pip_finds_nothing_to_change_in_the_tested_environment(tmp_path):
  # `-e .` is left out: building its metadata needs setuptools' wheel support from the index; the package's
  # own dependencies are the previous test's. Every pin the file reaches must be installed at exactly that version:
  # without an index, one that is not makes pip fail.
  req = tmp_path / "requirements.txt"
  req.write_text("".join(l.replace("-r ", f"-r {ROOT}/", 1) + "\n" for l in _lines("requirements.txt")
                         if not l.startswith("-e")))
  report = tmp_path / "report.json"
  r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--dry-run", "--no-index", "--no-cache-dir",
                      "--disable-pip-version-check", "--report", str(report), "-r", str(req)],
                     capture_output=True, text=True, timeout=300, cwd=ROOT)
  assert r.returncode == 0, r.stderr[-2000:]
  assert json.loads(report.read_text())["install"] == []
