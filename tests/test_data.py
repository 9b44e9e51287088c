"""Data: the offline corpus (disjoint splits), packing (BOS + whole documents), crop/pad (PAD never a target),
seed shuffling, per-process shards, eval = the validation split, exact iterator resume, text files, TFDS."""
import re

import numpy as np
import pytest
import tensorflow_datasets as tfds

from conftest import short_config, text_config, tiny_config
from resnorm.data import corpus, data
from resnorm.core.errors import InputError


def _cfg(stdlib_dir, **over):
  return tiny_config(**{"data.data_dir": stdlib_dir, **over})


def _path(p):
  return p.decode() if isinstance(p, bytes) else p


def _stream(batches):
  """The token stream packed rows were cut from: each row's inputs plus its last target, rows in order."""
  return np.concatenate([np.concatenate([b["inputs"], b["targets"][:, -1:]], 1).reshape(-1) for b in batches])


def _with_bos(docs):
  """What packing must produce, computed independently: BOS + document, document after document."""
  return np.concatenate([np.concatenate([[data.BOS], np.asarray(d, np.int64)]) for d in docs])


def _doc_order(stream, docs):
  """Indices of the whole documents between consecutive BOS tokens (each piece must be exactly one document)."""
  index = {bytes(np.asarray(d)): i for i, d in enumerate(docs)}
  assert len(index) == len(docs)
  cuts = np.flatnonzero(stream == data.BOS)
  pieces = [bytes(stream[a + 1:b].astype(np.uint8)) for a, b in zip(cuts, cuts[1:])]
  missing = [p for p in pieces if p not in index]
  assert not missing, f"pieces between BOS tokens that are not whole documents: {missing[:3]}"
  return [index[p] for p in pieces]


def test_stdlib_corpus_split_by_path_hash_and_disjoint(stdlib_dir):
  files = corpus.stdlib_files()
  assert len(files) > 100
  val = {rel for rel, _ in files if corpus.split_of(rel) == "validation"}
  assert 0 < len(val) < len(files) / 5
  src = tfds.data_source(f"pystdlib/{corpus.config_name()}", split="validation", data_dir=stdlib_dir)
  paths = {_path(src[i]["path"]) for i in range(len(src))}
  assert paths == val
  train = tfds.data_source(f"pystdlib/{corpus.config_name()}", split="train", data_dir=stdlib_dir)
  train_paths = [_path(train[i]["path"]) for i in range(len(train))]
  assert len(set(train_paths)) == len(train_paths) and not set(train_paths) & val  # disjoint splits
  assert set(train_paths) | val == {rel for rel, _ in files}
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


def test_packing_concatenates_whole_documents_each_after_bos(short_docs):
  """Packed rows, concatenated, are BOS + document, document after document: every document of the first epoch
  exactly once, whole, in an order set by the seed."""
  cfg = short_config(short_docs)
  docs = list(data.documents(cfg.data, "train"))
  assert len(docs) == 30

  def first_epoch(seed):
    it = data.train_iterator(short_config(short_docs, seed=seed))
    batches = [next(it) for _ in range(12)]
    for b in batches:
      assert b["mask"].all() and b["inputs"].shape == (4, 16)  # packed rows are full
    s = _stream(batches)
    assert s[0] == data.BOS  # the stream starts at a document's start
    order = _doc_order(s, docs)
    assert len(order) >= 30 and sorted(order[:30]) == list(range(30)), order
    return order[:30]

  a = first_epoch(0)
  assert first_epoch(0) == a and first_epoch(1) != a  # shuffled with the seed, reproducibly
  assert a != sorted(a)


def test_unpacked_rows_are_one_document_cropped_or_padded(short_docs):
  cfg = short_config(short_docs, **{"data.pack": False})
  docs = {bytes(np.asarray(d)[:3]): np.asarray(d) for d in data.documents(cfg.data, "train")}  # tag `<NN` -> doc
  it = data.train_iterator(cfg)
  batches = [next(it) for _ in range(4)]
  tags = []
  for b in batches:
    rows = np.concatenate([b["inputs"], b["targets"][:, -1:]], 1)
    for row in rows:
      assert row[0] == data.BOS
      doc = docs[bytes(row[1:4].astype(np.uint8))]
      tags.append(bytes(doc[:3]))
      want = np.concatenate([[data.BOS], doc[:16], np.full(16 - min(doc.size, 16), data.PAD)])
      np.testing.assert_array_equal(row, want)
    np.testing.assert_array_equal(b["mask"], (b["targets"] != data.PAD).astype(np.float32))  # PAD never a target
  masks = np.concatenate([b["mask"] for b in batches])
  assert (masks.sum(1) < 16).sum() >= 4 and (masks.sum(1) == 16).sum() >= 2  # padded rows and cropped rows
  assert len(set(tags)) == len(tags)  # 16 rows of one epoch: no document twice


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


def _assert_eval_is_validation_prefix(cfg):
  """Eval batches are the unshuffled validation split, packed: the first rows of BOS + doc, doc after doc."""
  batches = data.eval_batches(cfg)
  assert len(batches) == cfg.data.eval_batches
  got = _stream(batches)
  docs, n = [], 0
  for d in data.documents(cfg.data, "validation"):
    docs.append(d)
    n += d.size + 1
    if n >= got.size:
      break
  np.testing.assert_array_equal(got, _with_bos(docs)[:got.size])
  return batches


def test_eval_batches_fixed_and_from_validation(stdlib_dir, short_docs):
  cfg = _cfg(stdlib_dir)
  a = _assert_eval_is_validation_prefix(cfg)
  b = data.eval_batches(cfg)
  np.testing.assert_array_equal(a[1]["inputs"], b[1]["inputs"])
  _assert_eval_is_validation_prefix(short_config(short_docs, **{"data.eval_batches": 3}))


def test_text_files_split_head_tail(text_corpus):
  cfg = text_config(text_corpus)
  train, val = data.documents(cfg.data, "train"), data.documents(cfg.data, "validation")
  assert len(train) == len(val) == 2
  for i, (t, v) in enumerate(zip(train, val)):  # head | tail of each file: no byte in both, none lost
    raw = np.frombuffer(open(text_corpus.replace("*", str(i)), "rb").read(), np.uint8)
    np.testing.assert_array_equal(np.concatenate([t, v]), raw)
    assert v.size == raw.size - int(raw.size * 0.95)


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


# ---- report v4: the eval set and what each seed reads ----------------------------------------------------------

TAG = re.compile(rb"<(\d\d)>")


def _works_config(works, seed=0, **over):
  return text_config(works, **{"seed": seed, "data.seq_len": 64, "train.batch_size": 8, "data.val_fraction": 0.1,
                               "data.piece_bytes": 4096, **over})


def test_seeds_read_different_text_across_many_works(works):
  """Pieces of at most 4 KB, shuffled: over seeds 0-5 the first 200 steps' bytes differ pairwise, and each seed's
  span covers at least 10 works (whole documents, the default before pieces, covered one or two)."""
  streams = []
  for seed in range(6):
    it = data.train_iterator(_works_config(works, seed))
    b = [next(it) for _ in range(200)]
    stream = _stream(b)
    streams.append(stream)
    text = bytes(stream[stream < 256].astype(np.uint8))
    assert len(set(TAG.findall(text))) >= 10, (seed, sorted(set(TAG.findall(text))))
    starts = np.flatnonzero(stream == data.BOS)
    assert np.diff(starts).max() <= 4096 + 1  # no piece longer than piece_bytes (+ its BOS)
  for i in range(6):
    for j in range(i):
      assert not np.array_equal(streams[i], streams[j]), (i, j)
  whole = _stream([next(it) for it in [data.train_iterator(_works_config(works, 0, **{"data.piece_bytes": 0}))]
                   for _ in range(200)])
  assert len(set(TAG.findall(bytes(whole[whole < 256].astype(np.uint8))))) <= 6


def test_pieces_cover_each_training_document_once(works):
  cfg = _works_config(works)
  docs = data.documents(cfg.data, "train")
  pieces = data._Pieces(docs, 4096)
  for i in range(len(docs)):
    got = np.concatenate([pieces[k] for k in np.flatnonzero(pieces.doc == i)])
    np.testing.assert_array_equal(got, docs[i])
  assert all(len(pieces[k]) <= 4096 for k in range(len(pieces)))


def test_eval_set_is_stratified_over_every_validation_document_not_its_head(works):
  cfg = _works_config(works, **{"data.eval_set": "stratified", "data.eval_bytes": 16384, "data.eval_batch_size": 32})
  batches = data.eval_batches(cfg)
  assert all(b["inputs"].shape == (32, 64) for b in batches)
  tokens = sum(b["mask"].sum() for b in batches)
  assert tokens >= 16384
  rows = np.concatenate([np.concatenate([b["inputs"], b["targets"][:, -1:]], 1) for b in batches])
  rows = rows[np.concatenate([b["mask"][:, 0] > 0 for b in batches])]
  val = [np.concatenate([[data.BOS], np.asarray(d, np.int64)]) for d in data.documents(cfg.data, "validation")]
  # every row is a window of one validation document; every document has rows; windows do not overlap
  found = {}
  for r in rows:
    text = bytes(r[r < 256].astype(np.uint8))
    (w,) = set(TAG.findall(text))
    doc = val[int(w)]
    offs = [o for o in range(doc.size - 64) if np.array_equal(doc[o:o + 65], r)]
    assert len(offs) == 1
    found.setdefault(int(w), []).append(offs[0])
  assert sorted(found) == list(range(60))
  for offs in found.values():
    assert all(b - a >= 65 for a, b in zip(sorted(offs), sorted(offs)[1:]))
  # not the head of the split: the first rows do not all come from the first document, and another seed scores the
  # same bytes
  head = data.eval_batches(_works_config(works, **{"data.eval_set": "head", "data.eval_batches": 8,
                                                    "data.eval_batch_size": 32}))
  assert not np.array_equal(head[0]["inputs"], batches[0]["inputs"])
  again = data.eval_batches(_works_config(works, 5, **{"data.eval_set": "stratified", "data.eval_bytes": 16384,
                                                       "data.eval_batch_size": 32}))
  for a, b in zip(batches, again):
    np.testing.assert_array_equal(a["inputs"], b["inputs"])


def test_allocate_is_proportional_each_document_first_and_capped():
  np.testing.assert_array_equal(data.allocate(10, [100, 300, 600], [50, 50, 50]), [1, 3, 6])
  np.testing.assert_array_equal(data.allocate(4, [1, 1, 1000], [5, 5, 5]), [1, 1, 2])  # each document first
  np.testing.assert_array_equal(data.allocate(99, [10, 20], [2, 3]), [2, 3])  # all there is
  assert data.allocate(7, [5, 1, 1], [9, 9, 9]).sum() == 7


def test_eval_rows_carry_their_document_and_the_subset_spans_every_document(works):
  """Each eval row's `_doc` is the document its window comes from (the block bootstrap's unit) and `_row` its place
  in the eval set; the subset the evals before a run's last score is every k-th row, in batches of the same shape,
  and still reaches every document."""
  cfg = _works_config(works, **{"data.eval_set": "stratified", "data.eval_bytes": 16384, "data.eval_batch_size": 32})
  batches = data.eval_batches(cfg)
  rows = np.concatenate([np.concatenate([b["inputs"], b["targets"][:, -1:]], 1) for b in batches])
  doc, row = np.concatenate([b["_doc"] for b in batches]), np.concatenate([b["_row"] for b in batches])
  real = row >= 0
  assert np.array_equal(row[real], np.arange(real.sum())) and (doc[~real] == -1).all()
  for r, d_ in zip(rows[real], doc[real]):
    (w,) = set(TAG.findall(bytes(r[r < 256].astype(np.uint8))))
    assert int(w) == d_
  sub = data.subset_batches(batches, 4)
  assert all(b["inputs"].shape == (32, 64) for b in sub)
  srow = np.concatenate([b["_row"] for b in sub])
  assert list(srow[srow >= 0]) == list(range(0, real.sum(), 4))
  sdoc = np.concatenate([b["_doc"] for b in sub])
  assert len(set(sdoc[sdoc >= 0])) >= 30  # spread over the documents, not the first batches
  keep = real & (row % 4 == 0)
  srows = np.concatenate([np.concatenate([b["inputs"], b["targets"][:, -1:]], 1) for b in sub])[srow >= 0]
  np.testing.assert_array_equal(srows, rows[keep])
  assert data.subset_batches(batches, 1) is batches


def test_files_source_scores_the_stratified_eval_set(tmp_path, shards):
  """data.name=files with the stratified eval set (the :cpu default): its validation documents (known by their
  hash) are read once and rows drawn across all of them; a run trains end to end on parquet and jsonl.gz shards."""
  from resnorm.train import trainer
  import json
  d, docs = shards
  cfg = tiny_config(**{"data.name": "files", "data.paths": f"{d}/*.parquet,{d}/*.jsonl.gz", "data.val_fraction": 0.2,
                       "data.eval_set": "stratified", "data.eval_bytes": 2048, "data.eval_batch_size": 16})
  val = data.documents(cfg.data, "validation")
  assert 0 < len(val) < 170 and all(bytes(v).decode() in docs for v in val)
  batches = data.eval_batches(cfg)
  assert len(set(np.concatenate([b["_doc"] for b in batches])) - {-1}) == len(val)  # every document has a row
  out = str(tmp_path / "run")
  assert trainer.train(cfg, out) == 0
  summary = json.load(open(f"{out}/summary.json"))
  assert summary["eval_tokens"] >= 2048 and summary["eval_loss_se"] > 0


# ---- the eval set's rows (issue 50: behaviours a planted bug could break unseen) -------------------------------------

def test_stratified_rows_are_windows_of_whole_documents_reaching_their_end():
  """The validation split is never cut into pieces: each row is a window of one whole document (with its BOS), a
  document's windows run from its start to its end (the last ends within one row of it), and a document shorter
  than a row is one padded row whose PAD targets are never scored, though the input before the first is a byte."""
  rng = np.random.default_rng(0)
  docs = [rng.integers(0, 250, n) for n in (300, 40, 1000)]  # random bytes: every window occurs once
  tok, owner = data.stratified_rows(docs, 16, 600, with_docs=True)
  assert list(np.bincount(owner)) != [0] and set(owner) == {0, 1, 2}
  for i, d in enumerate(docs):
    full = np.concatenate([[data.BOS], d]).astype(np.int32)
    rows = tok[owner == i]
    offs = []
    for r in rows:
      real = r[r != data.PAD]
      found = [o for o in range(full.size - real.size + 1) if np.array_equal(full[o:o + real.size], real)]
      assert found, (i, r)
      offs.append(found[0])
    assert offs[0] == 0 and (full.size < 17 or full.size - (offs[-1] + 17) < 17), (i, offs, full.size)
  short = data._batched(*data.stratified_rows([np.arange(1, 6)], 16, 16, with_docs=True), np.arange(1), 4)[0]
  row = 0
  last_byte = int(np.flatnonzero(short["inputs"][row] != data.PAD).max())
  assert short["targets"][row, last_byte] == data.PAD and short["inputs"][row, last_byte] != data.PAD
  np.testing.assert_array_equal(short["mask"], (short["targets"] != data.PAD).astype(np.float32))
  assert short["mask"][row, last_byte] == 0


def test_head_eval_set_streams_whole_validation_documents_whatever_piece_bytes(works):
  """data.piece_bytes cuts training documents only: the `head` eval set (configs before eval_set existed) is still
  the unshuffled validation split, document after document, with no BOS inside a document."""
  cfg = _works_config(works, **{"data.piece_bytes": 32, "data.eval_set": "head", "data.eval_batches": 3})
  _assert_eval_is_validation_prefix(cfg)


def test_allocation_gives_every_document_a_row_first_even_when_rows_equal_documents():
  np.testing.assert_array_equal(data.allocate(3, [1, 1, 1000], [5, 5, 5]), [1, 1, 1])
  np.testing.assert_array_equal(data.allocate(3, [1000, 1, 1], [5, 5, 5]), [1, 1, 1])
  np.testing.assert_array_equal(data.allocate(2, [1, 1, 1000], [5, 5, 5]), [0, 0, 2])  # fewer rows than documents
