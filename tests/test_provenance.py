"""provenance.git_state on throwaway git repositories: the commit, and git_dirty true for a changed tracked file or an
untracked one, false for a clean checkout and for ignored files; None outside a checkout or inside another repo."""
import os
import shutil
import subprocess

import pytest

from resnorm.io import provenance

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(root, *args):
  return subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                        capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path, monkeypatch):
  root = tmp_path / "checkout"
  root.mkdir()
  _git(root, "init", "-q")
  (root / "code.py").write_text("x = 1\n")
  (root / ".gitignore").write_text("runs/\n")
  _git(root, "add", "code.py", ".gitignore")
  _git(root, "commit", "-q", "-m", "first")
  monkeypatch.setattr(provenance, "ROOT", str(root))
  return root


def test_clean_checkout_is_not_dirty_and_names_its_commit(repo):
  (repo / "runs").mkdir()
  (repo / "runs" / "log.txt").write_text("ignored\n")  # an ignored file leaves it clean
  assert provenance.git_state() == {"git_commit": _git(repo, "rev-parse", "HEAD"), "git_dirty": False}


def test_changed_tracked_file_is_dirty(repo):
  (repo / "code.py").write_text("x = 2\n")
  assert provenance.git_state() == {"git_commit": _git(repo, "rev-parse", "HEAD"), "git_dirty": True}
  _git(repo, "commit", "-q", "-am", "second")  # committed: clean again, at the new commit
  assert provenance.git_state() == {"git_commit": _git(repo, "rev-parse", "HEAD"), "git_dirty": False}


def test_untracked_file_is_dirty(repo):
  (repo / "new.py").write_text("y = 1\n")
  assert provenance.git_state()["git_dirty"] is True


def test_outside_a_checkout_or_inside_another_repository_is_unknown(repo, tmp_path, monkeypatch):
  monkeypatch.setattr(provenance, "ROOT", str(tmp_path / "nowhere"))
  os.makedirs(tmp_path / "nowhere")
  assert provenance.git_state() == {"git_commit": None, "git_dirty": None}
  (repo / "pkg").mkdir()
  monkeypatch.setattr(provenance, "ROOT", str(repo / "pkg"))  # installed inside some other repository
  assert provenance.git_state() == {"git_commit": None, "git_dirty": None}
