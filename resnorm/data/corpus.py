"""The offline default corpus: the running interpreter's standard-library `.py` sources, as bytes, in TFDS
array_record format (no TensorFlow, no network).

Files are read in sorted relative-path order; a file goes to `validation` when crc32(relative path) % 100 < 5,
else to `train`, so the split never depends on the file system's order. The builder config is named after the
interpreter version (`py3_11_7`), since another version ships other sources.
"""
import pathlib
import sys
import sysconfig
import zlib

import numpy as np
import tensorflow_datasets as tfds

VALIDATION_PERCENT = 5


def stdlib_root() -> pathlib.Path:
  return pathlib.Path(sysconfig.get_paths()["stdlib"])


def stdlib_files() -> list[tuple[str, pathlib.Path]]:
  root = stdlib_root()
  files = [p for p in root.rglob("*.py") if "site-packages" not in p.parts and "dist-packages" not in p.parts]
  return sorted((p.relative_to(root).as_posix(), p) for p in files)


def split_of(rel_path: str) -> str:
  return "validation" if zlib.crc32(rel_path.encode()) % 100 < VALIDATION_PERCENT else "train"


def config_name() -> str:
  return "py{}_{}_{}".format(*sys.version_info[:3])


class Pystdlib(tfds.core.GeneratorBasedBuilder):
  """Python standard-library sources as byte documents (feature `tokens`: uint8 bytes of one file)."""
  VERSION = tfds.core.Version("1.0.0")
  BUILDER_CONFIGS = [tfds.core.BuilderConfig(name=config_name(), description=f"CPython {sys.version.split()[0]}")]

  def _info(self):
    return tfds.core.DatasetInfo(
        builder=self, description="CPython standard-library .py sources, one document per file, as bytes.",
        features=tfds.features.FeaturesDict({"tokens": tfds.features.Tensor(shape=(None,), dtype=np.uint8),
                                             "path": tfds.features.Text()}))

  def _split_generators(self, dl_manager):
    del dl_manager
    return {"train": self._generate_examples("train"), "validation": self._generate_examples("validation")}

  def _generate_examples(self, split):
    for rel, path in stdlib_files():
      if split_of(rel) == split:
        yield rel, {"tokens": np.frombuffer(path.read_bytes(), dtype=np.uint8), "path": rel}


def prepare(data_dir: str) -> str:
  """Builds the corpus into data_dir on first use; returns the TFDS name to read it with."""
  builder = Pystdlib(data_dir=data_dir, config=config_name(), file_format="array_record")
  builder.download_and_prepare()
  return f"pystdlib/{config_name()}"
