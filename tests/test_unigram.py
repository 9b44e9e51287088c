"""The byte-unigram baseline: counts and loss against NumPy, the cache beside the data, learned_beyond_unigram both
ways (a run that learns, a run that does not), the stall in the sweep table, TensorBoard tags bounded in depth."""
import contextlib
import glob
import io
import json
import os
import shutil

import numpy as np
import pytest
from tensorboard.backend.event_processing import event_accumulator

from conftest import text_config, tiny_config
from resnorm.data import corpus, data, unigram
from resnorm.io import workdir as wd
from resnorm.train import trainer
from resnorm.results import sweep_report

REPEAT = "the quick brown fox jumps over the lazy dog. " * 60


def _numpy_counts(paths, val_fraction=0.05):
  """Bytes of the train part (the head) of each file, and the number of documents."""
  counts = np.zeros(256, np.int64)
  for p in paths:
    raw = np.frombuffer(open(p, "rb").read(), np.uint8)
    counts += np.bincount(raw[: int(raw.size * (1 - val_fraction))], minlength=256)
  return counts, len(paths)


def _numpy_unigram_loss(cfg, counts, docs):
  """Add-one over the 256 bytes + BOS (one per document), scored on the masked targets of the eval batches."""
  p = (np.concatenate([counts, [docs]]) + 1.0) / (counts.sum() + docs + 257)
  nll, n = 0.0, 0.0
  for b in data.eval_batches(cfg):
    t, m = b["targets"].ravel(), b["mask"].ravel().astype(np.float64)
    assert not np.any((t == data.PAD) & (m > 0))
    nll += -np.sum(np.log(p[np.minimum(t, 256)]) * m)
    n += m.sum()
  return nll / n


def test_text_counts_match_numpy_and_are_cached_in_the_workdir(tmp_path):
  files = [tmp_path / "a.txt", tmp_path / "b.txt"]
  files[0].write_text(REPEAT)
  files[1].write_text("import os\nprint(os.sep)\n" * 40)
  dcfg = text_config(str(tmp_path / "*.txt")).data
  c = unigram.counts(dcfg, str(tmp_path / "wd"))
  ref, docs = _numpy_counts(sorted(map(str, files)))
  assert not c["cached"] and c["byte_counts"] == ref.tolist() and c["documents"] == docs == 2
  cache = tmp_path / "wd" / "unigram.json"
  stored = json.loads(cache.read_text())
  stored["byte_counts"][0] = 12345
  cache.write_text(json.dumps(stored))
  assert unigram.counts(dcfg, str(tmp_path / "wd"))["byte_counts"][0] == 12345  # read from the cache
  files[1].write_text("changed\n" * 50)  # another file: the key no longer matches, counted again
  c = unigram.counts(dcfg, str(tmp_path / "wd"))
  assert not c["cached"] and c["byte_counts"] == _numpy_counts(sorted(map(str, files)))[0].tolist()


def test_pystdlib_counts_are_cached_beside_the_data(stdlib_dir):
  dcfg = tiny_config(**{"data.data_dir": stdlib_dir}).data
  c = unigram.counts(dcfg)
  path = os.path.join(stdlib_dir, "pystdlib", corpus.config_name(), "1.0.0", "resnorm_unigram.json")
  assert os.path.exists(path) and not c["cached"] and unigram.counts(dcfg)["cached"]
  ref, docs = np.zeros(256, np.int64), 0
  for rel, p in corpus.stdlib_files():
    if corpus.split_of(rel) == "train":
      ref += np.bincount(np.frombuffer(p.read_bytes(), np.uint8), minlength=256)
      docs += 1
  assert c["byte_counts"] == ref.tolist() and c["documents"] == docs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """Two short runs on a repetitive text: 2 layers at lr 1e-2 (learns), 6 layers at lr 1e-6 (does not)."""
  root = tmp_path_factory.mktemp("unigram")
  (root / "rep.txt").write_text(REPEAT)
  cfgs = {"learn": text_config(str(root / "rep.txt"), "pre_norm", 2, **{
              "train.lr": 1e-2, "train.warmup_steps": 0, "train.steps": 12, "train.eval_every": 12,
              "train.ckpt_every": 12, "train.diag_every": 12}),
          "stall": text_config(str(root / "rep.txt"), "pre_norm", 6, **{
              "train.lr": 1e-6, "train.warmup_steps": 0, "train.steps": 2, "train.eval_every": 2,
              "train.ckpt_every": 2, "train.diag_every": 2})}
  out = {}
  for name, cfg in cfgs.items():
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
      assert trainer.train(cfg, str(root / name)) == 0
    out[name] = (cfg, str(root / name), buf.getvalue())
  return out


def test_unigram_eval_loss_matches_numpy_and_is_logged_once(runs):
  for cfg, path, _ in runs.values():
    summary = wd.read_json(os.path.join(path, "summary.json"), "summary")
    ref = _numpy_unigram_loss(cfg, *_numpy_counts(glob.glob(cfg.data.paths)))
    assert summary["unigram_eval_loss"] == pytest.approx(ref, rel=1e-5)
    logged = [m for m in wd.read_jsonl(os.path.join(path, "metrics.jsonl")) if "unigram_eval_loss" in m]
    assert len(logged) == 1 and logged[0]["step"] == cfg.train.eval_every and "eval_loss" in logged[0]
    assert logged[0]["unigram_eval_loss"] == summary["unigram_eval_loss"]


def test_learned_beyond_unigram_both_ways(runs):
  learn = wd.read_json(os.path.join(runs["learn"][1], "summary.json"), "summary")
  stall = wd.read_json(os.path.join(runs["stall"][1], "summary.json"), "summary")
  assert learn["learned_beyond_unigram"] is True and learn["final_eval_loss"] < learn["unigram_eval_loss"] - 0.1
  assert stall["learned_beyond_unigram"] is False and stall["status"] == "completed"
  assert "stalled:" not in runs["learn"][2]
  assert "stalled:" in runs["stall"][2] and "nothing beyond byte frequencies" in runs["stall"][2]


def test_sweep_table_marks_stalled_apart_from_diverged(runs, tmp_path):
  shutil.copytree(runs["stall"][1], tmp_path / "runs" / "diverged", ignore=shutil.ignore_patterns("checkpoints"))
  summary = wd.read_json(str(tmp_path / "runs" / "diverged" / "summary.json"), "summary")
  wd.write_json(str(tmp_path / "runs" / "diverged" / "summary.json"), {**summary, "status": "diverged"})
  for name in ("learn", "stall"):
    shutil.copytree(runs[name][1], tmp_path / "runs" / name, ignore=shutil.ignore_patterns("checkpoints"))
  rows = {r["run"]: r for r in sweep_report.report(str(tmp_path / "runs" / "*"), str(tmp_path / "out"))}
  assert rows["stall"]["stalled"] is True and rows["learn"]["stalled"] is False
  assert rows["diverged"]["stalled"] is None and rows["diverged"]["status"] == "diverged"
  md = (tmp_path / "out" / "sweep.md").read_text()
  col = md.splitlines()[0].split(" | ").index("stalled")
  assert [l.split(" | ")[col] for l in md.splitlines()[2:]] == ["", "no", "yes"]  # diverged, learn, stall


def test_tensorboard_scalar_tags_do_not_grow_with_depth(runs):
  tags = {}
  for name, (cfg, path, _) in runs.items():
    acc = event_accumulator.EventAccumulator(os.path.join(path, "tb"), size_guidance={"images": 0})
    acc.Reload()
    tags[cfg.model.num_layers] = acc.Tags()
  assert set(tags[2]["scalars"]) == set(tags[6]["scalars"]) and len(tags[6]["scalars"]) <= 16, tags[6]["scalars"]
  assert {"unigram_eval_loss", "eval_loss", "diag/grad_ratio_last_first"} <= set(tags[6]["scalars"])
  assert {"depth/grad_norm", "depth/act_rms", "depth/update_ratio", "depth/cosine",
          "depth/mixing_matrix"} == set(tags[6]["images"])


def test_neg_log_probs_by_hand_with_as_many_documents_as_bytes():
  """Add-one smoothing written out by hand on a count where BOS (one per document) is as frequent as the bytes, so
  a BOS count off by one, doubled or left out moves its -ln p by 0.18 to 1.6 nats (and every byte's by 4e-3 to
  2e-2) against a 1e-12 tolerance."""
  counts = np.zeros(256, np.int64)
  counts[ord("a")], counts[ord("b")] = 3, 1
  c = {"byte_counts": counts.tolist(), "documents": 4, "bytes": 4}
  packed = unigram.neg_log_probs(c, pack=True, vocab_size=data.PAD + 1)
  assert packed.shape == (258,) and data.BOS == 256 and data.PAD == 257
  z = 4 + 4 + 257                                   # 4 bytes, 4 BOS, 257 symbols with one each added
  want = {ord("a"): 4 / z, ord("b"): 2 / z, ord("c"): 1 / z, 0: 1 / z, 255: 1 / z, data.BOS: 5 / z}
  for sym, p in want.items():
    assert packed[sym] == pytest.approx(-np.log(p), rel=1e-12, abs=0), sym
  assert packed[data.PAD] == 0.0                    # never a target
  cropped = unigram.neg_log_probs(c, pack=False, vocab_size=data.PAD + 1)
  z = 4 + 256                                       # no BOS target without packing: 256 symbols
  assert cropped[ord("a")] == pytest.approx(-np.log(4 / z), rel=1e-12) and cropped[data.BOS] == 0.0
  assert cropped[ord("c")] == pytest.approx(-np.log(1 / z), rel=1e-12)


@pytest.mark.parametrize("eval_loss,want", [
    (3.0 - unigram.MARGIN - 1e-3, True),    # just past the margin below the unigram
    (3.0 - unigram.MARGIN + 1e-3, False),   # below the unigram, but not by the margin
    (3.0 + unigram.MARGIN - 1e-3, False),   # within a margin above it (a sign flip of the margin says True)
    (3.0, False),
    (float("nan"), False),
    (None, None),
])
def test_learned_beyond_unigram_at_the_margin(eval_loss, want):
  """MARGIN = 0.1 nats/byte below a 3.0 unigram loss: 2.899 learned beyond it, 2.901 and 3.099 did not."""
  assert unigram.MARGIN == 0.1
  assert unigram.learned_beyond(eval_loss, 3.0) is want
