"""Data: the offline corpus, packing, determinism, disjoint splits, exact iterator resume, text files, TFDS."""
import numpy as np
import pytest
import tensorflow_datasets as tfds

from conftest import text_config, tiny_config
from resnorm import corpus, data
from resnorm.errors import InputError


def _cfg(stdlib_dir, **over):
  return tiny_config(**{"data.data_dir": stdlib_dir, **over})


def test_stdlib_corpus_split_by_path_hash_and_disjoint(stdlib_dir):
  files = corpus.stdlib_files()
  assert len(files) > 100
  val = {rel for rel, _ in files if corpus.split_of(rel) == "validation"}
  assert 0 < len(val) < len(files) / 5
  src = tfds.data_source(f"pystdlib/{corpus.config_name()}", split="validation", data_dir=stdlib_dir)
  paths = {src[i]["path"].decode() if isinstance(src[i]["path"], bytes) else src[i]["path"] for i in range(len(src))}
  assert paths == val
  rel, path = next((r, p) for r, p in files if r in paths)
  doc = next(src[i]["tokens"] for i in range(len(src)) if src[i]["path"] in (rel, rel.encode()))
  assert doc.tobytes() == path.read_bytes()


def test_batches_are_packed_shifted_and_deterministic(stdlib_dir):
  cfg = _cfg(stdlib_dir)
  a, b = data.train_iterator(cfg), data.train_iterator(cfg)
  for _ in range(3):
    x, y = next(a), next(b)
    for k in x:
      np.testing.assert_array_equal(x[k], y[k])
  assert x["inputs"].shape == (4, 16) and x["inputs"].dtype == np.int32
  np.testing.assert_array_equal(x["inputs"][:, 1:], x["targets"][:, :-1])
  assert x["mask"].all()  # packed rows are full
  assert (x["inputs"] <= data.BOS).all()
  other = next(data.train_iterator(_cfg(stdlib_dir, seed=1)))
  assert not np.array_equal(other["inputs"], x["inputs"])


def test_packing_concatenates_documents_with_bos(text_corpus):
  cfg = text_config(text_corpus, **{"data.seq_len": 64})
  rows = [next(data.train_iterator(cfg))["inputs"] for _ in range(1)][0]
  flat = np.concatenate([r for r in rows])
  assert (flat == data.BOS).sum() >= 1  # document boundaries are marked
  cfg = text_config(text_corpus, **{"data.seq_len": 64, "data.pack": False})
  x = next(data.train_iterator(cfg))
  assert (x["inputs"][:, 0] == data.BOS).all()  # cropped: every row is the start of a document


def test_iterator_state_resumes_exactly(stdlib_dir):
  cfg = _cfg(stdlib_dir)
  it = data.train_iterator(cfg)
  for _ in range(5):
    next(it)
  state = it.get_state()
  expected = [next(it) for _ in range(3)]
  fresh = data.train_iterator(cfg)
  fresh.set_state(state)
  for e in expected:
    np.testing.assert_array_equal(next(fresh)["inputs"], e["inputs"])


def test_eval_batches_fixed_and_from_validation(stdlib_dir):
  cfg = _cfg(stdlib_dir)
  a, b = data.eval_batches(cfg), data.eval_batches(cfg)
  assert len(a) == cfg.data.eval_batches
  np.testing.assert_array_equal(a[1]["inputs"], b[1]["inputs"])


def test_text_files_split_head_tail(text_corpus):
  cfg = text_config(text_corpus)
  train, val = data.documents(cfg.data, "train"), data.documents(cfg.data, "validation")
  assert len(train) == len(val) == 2
  assert all(len(v) < len(t) / 10 for t, v in zip(train, val))


@pytest.mark.parametrize("paths,msg", [("", "data.paths is empty"), ("/nonexistent/*.txt", "matches no file")])
def test_text_files_errors(paths, msg):
  with pytest.raises(InputError, match=msg):
    data.documents(text_config(paths).data, "train")


def test_registered_tfds_text_dataset_with_mock_data(tmp_path):
  cfg = tiny_config(**{"data.name": "lm1b", "data.text_key": "text", "data.data_dir": str(tmp_path)})
  with tfds.testing.mock_data(num_examples=64, policy=tfds.testing.MockPolicy.USE_CODE):
    batch = next(data.train_iterator(cfg))
  assert batch["inputs"].shape == (4, 16) and (batch["inputs"] <= data.BOS).all()


def test_unknown_dataset_is_input_error(tmp_path):
  with pytest.raises(InputError, match="data.name='no_such_dataset'"):
    data.documents(tiny_config(**{"data.name": "no_such_dataset", "data.data_dir": str(tmp_path)}).data, "train")
