"""Replication across the corpora as its own test (design.REPLICATION): per part the interaction, the paired
difference of the two corpora's per-seed values (sign-adjusted, so that the claim predicts > 0 on both; one seed gives
identical initial weights on both corpora, resnorm/step/runtime.py), tested by a two-sided one-sample t-test; one
Benjamini-Hochberg correction over this second family; intervals FCR-adjusted within it. The verdict, against the
part's effect of interest delta: where the interval excludes 0, "same sign, different size" when the part's mean
has the same sign on both corpora, "did not replicate" when the sign flips (either flagged "by less than the effect
of interest" when the interval also lies within +-delta); "replicated" when it reaches 0 and lies within +-delta,
"undecided" otherwise. Separating sign from size is post hoc (resnorm/results/post_hoc.py). Parts that count
failures (pooled discordant pairs) have no per-seed pairing and no interaction test.
"""
from resnorm.results import verdicts
from resnorm.results.v4.design import REPLICATION

REPLICATED, DID_NOT_REPLICATE, UNDECIDED = "replicated", "did not replicate", "undecided"
SAME_SIGN = "same sign, different size"
WITHIN = "by less than the effect of interest"
NO_TEST = "n/a"


def paired(pa: dict, pb: dict):
  """The per-seed differences x_a - x_b over the seeds with a value on both corpora (sign-adjusted units)."""
  return [pa["x"][s] - pb["x"][s] for s in sorted(set(pa["x"]) & set(pb["x"]))]


def classify(ci, delta: float, selected: bool, same_sign: bool = False) -> tuple[str, bool]:
  """(verdict, within): the replication rule on the interaction's interval; same_sign: the part's mean has one sign
  on both corpora."""
  if ci is None:
    return UNDECIDED, False
  lo, hi = ci
  within = -delta < lo and hi < delta
  if selected and (lo > 0 or hi < 0):
    return (SAME_SIGN if same_sign else DID_NOT_REPLICATE), within
  return (REPLICATED if within else UNDECIDED), False


def judge(by_corpus: dict) -> dict:
  """The replication family over the first two corpora: {"rows": one per part (part, pair, test, p_adj, ci, verdict,
  within), "m": tested interactions, "calls": BH's selected ones, "level": the FCR level}. Empty with one corpus."""
  corpora = list(by_corpus)
  if len(corpora) < 2:
    return {"rows": [], "m": 0, "calls": 0, "level": None}
  a, b = corpora[:2]
  rows = []
  for ca, cb in zip(by_corpus[a], by_corpus[b]):
    for pa, pb in zip(ca["parts"], cb["parts"]):
      t = None if "discordant" in pa or pa.get("pending") or pb.get("pending") else verdicts.t_test(paired(pa, pb))
      rows.append({"part": f"{ca['id']}{pa['label']}", "pa": pa, "pb": pb, "test": t, "sign": pa["sign"],
                   "delta": verdicts.effect_of(pa)})
  tested = [r for r in rows if r["test"] is not None]
  q = REPLICATION["q"]
  for r, adj in zip(tested, verdicts.bh([r["test"]["p"] for r in tested])):
    r["p_adj"] = adj
  calls = sum(r.get("p_adj", 1.0) < q and r["test"]["direction"] != 0 for r in tested)
  level = 1 - max(calls, 1) * q / max(len(tested), 1)
  for r in rows:
    r.setdefault("p_adj", None)
    selected = r["p_adj"] is not None and r["p_adj"] < q and r["test"]["direction"] != 0
    r["ci"] = verdicts.interval(r["test"], level)
    same = r["test"] is not None and _mean(r["pa"]) * _mean(r["pb"]) > 0
    r["verdict"], r["within"] = classify(r["ci"], r["delta"], selected, same) if r["test"] else (NO_TEST, False)
  return {"rows": rows, "m": len(tested), "calls": calls, "level": level, "corpora": (a, b)}


def _mean(p) -> float:
  """The part's mean over its seeds on one corpus (sign-adjusted)."""
  return sum(p["x"].values()) / len(p["x"])


def _num(x) -> str:
  return f"{x:+.3g}"


def interaction_text(r) -> str:
  """The interaction in the measured statistic's units: mean [interval]."""
  t = r["test"]
  if t is None:
    return "n/a"
  lo, hi = sorted((r["sign"] * r["ci"][0], r["sign"] * r["ci"][1]))
  return f"{_num(r['sign'] * t['mean'])} [{_num(lo)}, {_num(hi)}]"


def verdict_text(r) -> str:
  if r["test"] is None:
    return "n/a (failure counts pooled over cells: no per-seed pairing)"
  return f"**{r['verdict']}**" + (f" ({WITHIN})" if r["within"] else "")


def table(rep: dict, shown) -> list[str]:
  """The 'Both corpora' section: every part's verdict on each corpus and the replication test. shown(part) -> the
  per-corpus cell text."""
  if not rep["rows"]:
    return []
  a, b = rep["corpora"]
  lines = ["## Both corpora", "",
           f"Replication is its own test (resnorm/results/v4/replication.py, declared in resnorm/results/v4/design.py): per "
           f"part the interaction {a} - {b}, the mean over seeds of the paired difference of the two corpora's "
           "per-seed values (a seed gives identical initial weights on both corpora), a two-sided paired t-test, "
           f"Benjamini-Hochberg at q = {REPLICATION['q']} over the {rep['m']} interactions (a second family, beside "
           f"the parts' own), its intervals FCR-adjusted at {rep['level']:.2%}. Where the interval excludes 0: "
           f"**{SAME_SIGN}** when the part's mean has one sign on both corpora, **did not replicate** when its sign "
           "flips (either flagged when the interval lies within the effect of interest); **replicated**: it reaches 0 "
           "and lies "
           "within plus or minus the effect of interest; **undecided** otherwise. A verdict on one corpus and "
           "another on the other is not, by itself, a failure to replicate.", "",
           f"| part | {a} | {b} | interaction {a} - {b} (paired, FCR interval) | p (BH, this family) | replication |",
           "|---|---|---|---|---|---|"]
  for r in rep["rows"]:
    p = "n/a" if r["p_adj"] is None else (f"{r['p_adj']:.2g}" if r["p_adj"] >= 1e-4 else "<1e-4")
    lines.append(f"| {r['part']} | {shown(r['pa'])} | {shown(r['pb'])} | {interaction_text(r)} | {p} | "
                 f"{verdict_text(r)} |")
  return lines
