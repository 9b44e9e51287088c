"""data.name='files': parquet, jsonl.gz, jsonl and txt shards; the validation split; exact resume; errors; and a
reduced `:tpu` config trained on CPU from such shards."""
import json
import os
import re
import subprocess
import sys
import zlib

import numpy as np
import pytest

from conftest import tiny_config
from resnorm.data import data, files
from resnorm.core.errors import InputError
from test_cli import ENV, ROOT


def _cfg(paths, **over):
  return tiny_config(**{"data.name": "files", "data.paths": paths, **over})


def _epoch(ds, n):
  it = iter(ds)
  return [bytes(next(it)).decode() for _ in range(n)]


def _expected(docs, split):
  """The split computed here from the text alone: crc32 in the lowest 5% of 0..9999 is validation."""
  return [d for d in docs if (zlib.crc32(d.encode()) % 10_000 < 500) == (split == "validation")]


def test_formats_split_and_order(shards):
  d, docs = shards
  dcfg = _cfg(f"{d}/part-*").data
  train, val = _expected(docs, "train"), _expected(docs, "validation")
  assert 0 < len(val) < len(docs) / 5 and len(train) + len(val) == len(docs)
  # unshuffled: parquet, jsonl.gz, jsonl in sorted order, each in file order; then the next epoch starts over
  assert _epoch(files.documents(dcfg, "train", 0, False), len(train) + 1) == train + train[:1]
  assert _epoch(files.documents(dcfg, "validation", 0, False), len(val)) == val
  # shuffled: each epoch reads the shards in another order, and documents move within windows
  dcfg.shuffle_window = 0
  epochs = _epoch(files.documents(dcfg, "train", 0, True), 6 * len(train))
  epochs = [epochs[i * len(train):(i + 1) * len(train)] for i in range(6)]
  assert all(sorted(e) == sorted(train) for e in epochs) and len({e[0] for e in epochs}) > 1
  dcfg.shuffle_window = 16
  windowed = _epoch(files.documents(dcfg, "train", 0, True), 64)
  assert sorted(windowed) == sorted(epochs[0][:64]) and windowed != epochs[0][:64]
  # a URI goes through pyarrow's file-system listing (the gs:// code path) and reads the same
  uri = _cfg(f"file://{d}/part-00[12].json*").data
  assert _epoch(files.documents(uri, "train", 0, False), 5) == [t for t in train if t in docs[90:]][:5]
  # a .txt file is one document: the head for training, the tail for validation (as text_files)
  txt = _cfg(f"{d}/notes.txt").data
  head, tail = (_epoch(files.documents(txt, s, 0, False), 1)[0] for s in ("train", "validation"))
  assert head + tail == open(f"{d}/notes.txt").read() and len(tail) == 3000 - int(3000 * 0.95)


def test_text_key_picks_the_field(shards):
  """data.text_key reads another JSON field: the jsonl.gz shard's `url`s, not its texts."""
  dcfg = _cfg(f"{shards[0]}/part-001.jsonl.gz", **{"data.text_key": "url"}).data
  urls = _expected([f"u{i}" for i in range(80)], "train")
  assert _epoch(files.documents(dcfg, "train", 0, False), len(urls)) == urls


# the saved state points inside the shard: at record 33 of the parquet one (its second row group), 16 of the gzip one
@pytest.mark.parametrize("shard,skip", [("part-000.parquet", 30), ("part-001.jsonl.gz", 12)])
def test_iterator_state_resumes_exactly(shards, shard, skip):
  cfg = _cfg(f"{shards[0]}/{shard}", **{"data.shuffle_window": 16, "data.seq_len": 64})
  it = data.train_iterator(cfg)
  for _ in range(skip):
    next(it)
  state = it.get_state()
  assert state["parent_state"]["parent_window_start_state"]["record"] > 0
  expected = [next(it)["inputs"] for _ in range(4)]
  fresh = data.train_iterator(cfg)
  fresh.set_state(json.loads(json.dumps(state)))  # as the checkpoint stores it
  for e in expected:
    np.testing.assert_array_equal(next(fresh)["inputs"], e)


def test_eval_batches_are_validation_text(shards):
  cfg = _cfg(f"{shards[0]}/part-*", **{"data.pack": False, "data.seq_len": 400})
  rows = data.eval_batches(cfg)[0]["inputs"]
  first = rows[0][1:][rows[0][1:] != data.PAD].astype(np.uint8).tobytes().decode()
  assert first == _expected(shards[1], "validation")[0]


ERRORS = [
    ({"data.paths": "SET_ME: gs://BUCKET/c4/*.json.gz"}, "is a placeholder"),
    ({"data.paths": " , "}, "data.paths is empty"),
    ({"data.paths": "{d}/nothing-*.jsonl"}, "matches no file"),
    ({"data.paths": "{d}/x.csv"}, "unknown format"),
    ({"data.paths": "{d}/part-001.jsonl.gz", "data.text_key": "body"}, "has no such field (it has: text, url)"),
    ({"data.paths": "{d}/part-000.parquet", "data.text_key": "body"}, "has no such column (it has: id, text)"),
    ({"data.paths": "{d}/bad.jsonl"}, "line 2 of"),
    ({"data.paths": "{d}/part-002.jsonl", "data.val_fraction": 0.0001}, "no validation documents"),
]


@pytest.mark.parametrize("over,msg", ERRORS, ids=[m for _, m in ERRORS])
def test_errors_name_the_field(shards, tmp_path, over, msg):
  (tmp_path / "x.csv").write_text("a,b\n")
  (tmp_path / "bad.jsonl").write_text('{"text": "fine"}\n{not json\n')
  for name in os.listdir(shards[0]):
    os.symlink(os.path.join(shards[0], name), tmp_path / name)
  cfg = _cfg("", **{k: v.format(d=tmp_path) if isinstance(v, str) else v for k, v in over.items()})
  with pytest.raises(InputError, match=msg.replace("(", r"\(").replace(")", r"\)")):
    data.eval_batches(cfg)


def test_tpu_configs_read_files_and_refuse_the_placeholder():
  from configs import post_norm_96l
  cfg = post_norm_96l.get_config("tpu")
  assert cfg.data.name == "files" and cfg.data.text_key == "text"
  with pytest.raises(InputError, match="is a placeholder"):
    data.train_iterator(cfg)


@pytest.mark.integration  # train.py as a subprocess, end to end
def test_reduced_tpu_config_trains_on_cpu(tmp_path, shards):
  """The :tpu config (bfloat16, FSDP over every device, remat full, accumulated micro-batches, files) at tiny dims
  on 8 CPU devices, from a parquet and a jsonl.gz shard."""
  wd = tmp_path / "run"
  r = subprocess.run(
      [sys.executable, os.path.join(ROOT, "train.py"), "--config=configs/pre_norm_12l.py:tpu", f"--workdir={wd}",
       f"--config.data.paths={shards[0]}/part-000.parquet,{shards[0]}/part-001.jsonl.gz",
       "--config.model.num_layers=2", "--config.model.d_model=32", "--config.model.num_heads=2",
       "--config.model.mlp_dim=64", "--config.data.seq_len=32", "--config.data.eval_batches=1",
       "--config.train.batch_size=16", "--config.train.grad_accum=2", "--config.train.steps=3", "--config.train.warmup_steps=1",
       "--config.train.log_every=1", "--config.train.eval_every=3", "--config.train.ckpt_every=3",
       "--config.train.diag_every=0"],
      cwd=ROOT, env={**ENV, "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}, capture_output=True, text=True,
      timeout=300)
  assert r.returncode == 0, r.stderr[-2000:]
  assert "mesh {'data': 1, 'fsdp': 8, 'tensor': 1}" in r.stdout
  cfg = json.load(open(wd / "config.json"))
  assert (cfg["model"]["dtype"], cfg["model"]["remat"], cfg["data"]["name"]) == ("bfloat16", "full", "files")
  losses = [json.loads(l)["loss"] for l in open(wd / "metrics.jsonl") if '"loss"' in l]
  assert len(losses) == 3 and all(np.isfinite(losses)) and losses[0] > 4.0
  assert json.load(open(wd / "summary.json"))["status"] == "completed"


def _damage_row_group(src, dst, group, column="text"):
  """`src` with the bytes of one row group's column chunk scrambled; the footer (schema, row counts) stays valid."""
  import pyarrow.parquet as pq
  meta = pq.ParquetFile(src).metadata
  col = meta.row_group(group).column(meta.schema.names.index(column))
  start = col.dictionary_page_offset or col.data_page_offset
  raw = bytearray(open(src, "rb").read())
  raw[start:start + col.total_compressed_size] = np.random.default_rng(0).bytes(col.total_compressed_size)
  open(dst, "wb").write(bytes(raw))


CORRUPT = ["random bytes named .parquet", "a damaged second row group", "random bytes named .jsonl.gz"]


@pytest.mark.parametrize("kind", CORRUPT)
def test_a_corrupt_shard_is_named_up_front_and_mid_run(shards, tmp_path, kind):
  # a good shard of the same format: part-000.parquet (90 documents, 3 row groups of 30), part-001.jsonl.gz (80)
  suffix, good, docs = ((".jsonl.gz", "part-001.jsonl.gz", shards[1][90:170]) if "jsonl" in kind
                        else (".parquet", "part-000.parquet", shards[1][:90]))
  good = os.path.join(shards[0], good)
  bad = tmp_path / f"b{suffix}"
  if "row group" in kind:
    _damage_row_group(good, bad, 1)
    before = _expected(shards[1][:30], "train")  # row group 0 is read before the damaged one
  else:
    bad.write_bytes(np.random.default_rng(1).bytes(3000))
    before = []
  msg = rf"^data.paths: cannot read '{re.escape(str(bad))}': \S"
  # up front: the first record of the first shard of its format is read before anything runs
  with pytest.raises(InputError, match=msg):
    data.eval_batches(_cfg(str(bad)))
  # mid-run: the good shard first (it passes the up-front check), then the corrupt one, met while iterating
  os.symlink(good, tmp_path / f"a{suffix}")
  cfg = _cfg(f"{tmp_path}/a{suffix},{bad}")
  it = iter(files.documents(cfg.data, "train", seed=0, shuffle=False))
  got = []
  with pytest.raises(InputError, match=msg):
    while True:
      got.append(bytes(next(it)).decode())
  assert got == _expected(docs, "train") + before
