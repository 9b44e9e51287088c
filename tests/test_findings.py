"""resnorm/results/v4/findings.py: the README's findings and hero caption are generated from the committed records'
report, and docs/results_notes.md is checked against the generated tables: every number it quotes, every part it
names, every verdict word, and null wordings only for parts that are not reproduced. Planted errors are caught."""
import os
import sys

import pytest

from resnorm.results.engine import claims as claim_rule
from resnorm.results.v4 import findings, grid
from test_cli import ROOT

sys.path.insert(0, ROOT)
from configs.sweeps import results as sweep_file  # noqa: E402

RECORDS = os.path.join(ROOT, "results", "v4")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
  """The report's tables rebuilt in this process from the committed records (the v4 spec's read and page, no notes
  appended; its figures not drawn: the checker reads the tables), and the judged claims."""
  from resnorm.results.engine.spec import Plan
  from resnorm.results.v4 import figs
  from resnorm.results.v4 import page as results_md
  from resnorm.results.v4 import spec as v4
  d = grid.design(sweep_file.FULL, "full")
  plan = Plan(d, RECORDS, str(tmp_path_factory.mktemp("report")), "", None)
  ledger, Rs = v4.SPEC.read(plan)
  ledger.check(False, "report v4's runs")
  by_corpus, summary = v4.evaluate_claims(Rs, d)
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(figs, "FIGURES", {k: (lambda R, d, fig_dir: []) for k in figs.FIGURES})
    lines = v4.page_lines(Rs, d, plan.out, 0.0, by_corpus, summary)
  tables = "\n".join(lines)
  return {"d": d, "Rs": Rs, "by_corpus": by_corpus, "summary": summary, "lines": lines,
          "facts": findings.facts(by_corpus, summary, tables, findings.map_cells(Rs, d)),
          "k": results_md.run_counts(Rs, d)}


def test_the_committed_page_is_the_rebuild_from_the_records(report):
  """docs/results.md is what the committed records build, then the notes: a record committed without the page
  rebuilt, or a page edited by hand, fails here (the Generated line and the figures' links aside)."""
  keep = lambda text: [l for l in text.split("\n") if not l.startswith(("Generated ", "!["))]
  rebuilt = "\n".join(report["lines"] + ["", _notes()]) + "\n"
  assert keep(open(os.path.join(ROOT, "docs", "results.md")).read()) == keep(rebuilt)


def _notes():
  return open(os.path.join(ROOT, "docs", "results_notes.md")).read()


def _readme():
  return open(os.path.join(ROOT, "README.md")).read()


def test_the_notes_match_the_tables(report):
  assert findings.check(_notes(), report["facts"]) == []


def test_the_readme_findings_and_caption_are_the_generated_ones(report):
  from resnorm.results import verdicts
  from resnorm.results.v4 import claims as cl
  text = _readme()
  rows = verdicts.power_table(cl.DESIGN, report["d"]["block_seeds"], report["summary"]["design_m"], cl.DESIGN_CALLS)
  block = findings.readme_block(report["by_corpus"], report["summary"], rows)
  assert findings.FINDINGS.lines(text) == block
  cap = findings.caption(report["k"], report["d"], findings.post_norm_map(report["Rs"], report["d"]))
  assert findings.CAPTION.lines(text) == cap
  assert "672 runs" not in text and "12 layers every Post-Norm cell" not in text
  assert findings.check("\n".join(block + cap), report["facts"]) == []


@pytest.mark.parametrize("old, new, why", [
    ("+0.389 on Python", "+0.398 on Python", "the number 0.398"),            # a wrong number
    ("C6b, mHC's adjacent cosine below Pre-Norm's, is not reproduced", "C6b, mHC's adjacent cosine below Pre-Norm's, "
     "is reproduced", "C6b is not 'reproduced'"),                               # a wrong verdict word
    ("C3c, the long warmup, is reproduced on Shakespeare", "C3c, the long warmup, is reproduced on Python",
     "C3c is not 'reproduced'"),                                               # the right word, the wrong corpus
    ("The 10% warmup's effect is therefore not decided either way.",
     "A 10% warmup does not rescue Post-Norm (C3b).", "'does not rescue' is said of C3b"),  # a null from no evidence
    ("C1b, C1c, C2a and C6b replicated", "C1b, C1c, C2a, C4b and C6b replicated", "C4b is not 'replicated'"),
    ("C10a, HC's composite gain", "C10c, HC's composite gain", "C10c is not a part"),      # a part that does not exist
    ("+0.0148 nats/byte per doubling", "+0.0184 nats/byte per doubling", "the number 0.0184"),
    # the notes' old sentences: Post-Norm "level" where it is behind in every seed, "rescued" where it only learns
    ("At lr 0.001 without warmup it is level", "At lr 0.001 and 0.003 without warmup it is level",
     "behind Pre-Norm in every seed at Python, 4 layers, lr 0.003, warmup 0"),
    ("but rescues it in 0 of 3", "and rescues it in 3 of 3", "rescued in 0 of 3 seeds"),
    ("At lr 0.001 without warmup it is level", "At lr 0.003 with a 10% warmup it is level",
     "behind Pre-Norm in every seed at Shakespeare, 4 layers, lr 0.003, warmup 0.1"),   # 0.011-0.027 behind
])
def test_a_planted_error_in_the_notes_is_caught(report, old, new, why):
  text = _notes()
  assert old in text, old
  problems = findings.check(text.replace(old, new), report["facts"])
  assert any(why in p for p in problems), problems


def test_a_planted_error_in_the_readme_findings_is_caught(report):
  block = findings.FINDINGS.lines(_readme())
  wrong = [l.replace("C6 not reproduced on both corpora", "C6 reproduced on both corpora") for l in block]
  assert wrong != block
  assert any("C6 is not 'reproduced'" in p for p in findings.check("\n".join(wrong), report["facts"]))


def test_items_and_numbers_are_read_as_written():
  assert findings.items("C1b, c and C6c-d; C3 and C10a") == ["C1b", "C1c", "C6c", "C6d", "C3", "C10a"]
  f = {"numbers": [0.387, 96.88, 8.87e-05], "parts": {}, "claims": {}, "replication": {}, "corpora": ["pystdlib"]}
  assert findings.check("0.39, 0.387, 97% and 8.9e-05, on 2026-12-04 at 14:58 in `eac5c17`", f) == []
  assert findings.check("0.38", f) == ["the number 0.38 is not in the tables"]


def test_a_verdict_said_of_both_corpora_must_hold_on_both():
  """'reproduced on both corpora' of a claim reproduced on one corpus only is refused; the same verdict said of
  that one corpus, or without naming a corpus, passes."""
  f = {"numbers": [], "parts": {}, "replication": {}, "corpora": ["pystdlib", "shakespeare"],
       "claims": {"C4": {"pystdlib": {"opposite"}, "shakespeare": {"reproduced"}}}}
  assert findings.check("C4 reproduced on Shakespeare.", f) == []
  assert findings.check("C4 reproduced.", f) == []
  problems = findings.check("C4 reproduced on both corpora.", f)
  assert problems and "C4 is not 'reproduced' on both corpora" in problems[0], problems


def _hand_report(flag_b=None):
  """One claim, one part, on both corpora: reproduced on each; flag_b flags it on the second corpus."""
  from resnorm.results.v4 import claims as cl
  from resnorm.results import verdicts

  class D:
    effect = 0.05
  out = {}
  for corpus, flag in (("pystdlib", None), ("shakespeare", flag_b)):
    p = {"cid": "C9", "label": "a", "verdict": verdicts.REPRODUCED, "values_verdict": verdicts.REPRODUCED,
         "flag": flag, "sign": 1, "ci": (0.01, 0.02), "test": {"kind": "t", "mean": 0.015}, "design": D}
    out[corpus] = [{"id": "C9", "verdict": claim_rule.combine([p["verdict"]]), "worded": claim_rule.worded([p]),
                    "deciding": claim_rule.deciding([p]), "parts": [p]}]
  return out


def test_a_claim_reads_on_both_corpora_only_when_its_words_are_the_same_on_both():
  from resnorm.results import verdicts
  same = findings.readme_block(_hand_report(), {}, [])
  assert "C9 reproduced on both corpora (decided by a)" in "\n".join(same)
  differ = "\n".join(findings.readme_block(_hand_report(verdicts.SMALLER), {}, []))
  assert "C9 reproduced on Python (decided by a), reproduced (a smaller than claimed) on Shakespeare" in differ


def test_the_checker_reads_same_sign_different_size_as_a_replication_verdict():
  from resnorm.results.v4 import replication as rp
  f = {"numbers": [], "parts": {"C4a": {}}, "claims": {}, "corpora": ["pystdlib", "shakespeare"], "cells": {},
       "replication": {"C4a": rp.DID_NOT_REPLICATE}}
  said = "C4a is same sign, different size across the corpora."
  problems = findings.check(said, f)
  assert any("C4a is not 'same sign, different size'" in x for x in problems), problems
  assert findings.check(said, dict(f, replication={"C4a": rp.SAME_SIGN})) == []
