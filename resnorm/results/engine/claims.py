"""The claim rule every report shares (design.CLAIM_RULE): a claim's verdict from its parts' verdicts (combine),
the parts that decided it (deciding), what its one word would drop (qualifiers), the verdict as every page, finding
and README prints it (worded), and judge: one correction over every part of a report (verdicts.finalize), then each
claim's verdict from its parts."""
from resnorm.results import verdicts
from resnorm.results.verdicts import NOT_REPRODUCED, OPPOSITE, OUT_OF_REGIME, PENDING, REPRODUCED, UNDECIDED

MIXED = "mixed"   # a claim with one part reproduced and another opposite


def combine(vs) -> str:
  """design.CLAIM_RULE: a claim's verdict from its parts' verdicts."""
  vs = list(vs)
  if PENDING in vs:
    return PENDING
  if OPPOSITE in vs and REPRODUCED in vs:
    return MIXED
  for v in (OPPOSITE, NOT_REPRODUCED):
    if v in vs:
      return v
  if vs and all(v == REPRODUCED for v in vs):
    return REPRODUCED
  return OUT_OF_REGIME if OUT_OF_REGIME in vs else UNDECIDED


def deciding(parts) -> list[str]:
  """The labels of the parts that decided the claim's verdict (combine's): those with its verdict (every part for
  reproduced; for undecided, those undecided; for mixed, the reproduced and the opposite ones)."""
  v = combine(p["verdict"] for p in parts)
  decided = (REPRODUCED, OPPOSITE) if v == MIXED else (v,)
  return [p["label"] for p in parts if p["verdict"] in decided]


def qualifiers(parts) -> list[str]:
  """What the claim's one word would drop, as 'a reproduced' (by the part's label, as "decided by" names it): for a
  mixed claim each deciding part's verdict; for any claim the size flags (verdicts.flag) of its reproduced and
  opposite parts."""
  mixed = combine(p["verdict"] for p in parts) == MIXED
  out = [f"{p['label']} {p['verdict']}" for p in parts if mixed and p["verdict"] in (REPRODUCED, OPPOSITE)]
  return out + [f"{p['label']} {p['flag']}" for p in parts if p.get("flag") and p["verdict"] in (REPRODUCED, OPPOSITE)]


def worded(parts) -> str:
  """The claim's verdict as the claims table, the findings and the README print it: its word, then its qualifiers
  in parentheses ('reproduced (a smaller than claimed)', 'mixed (a reproduced, b opposite)')."""
  q = qualifiers(parts)
  return combine(p["verdict"] for p in parts) + (f" ({', '.join(q)})" if q else "")


def judge(claims: list[dict]) -> dict:
  """claims: dicts whose "parts" are a report's measured parts (every corpus's). Judges every part as one family
  (verdicts.finalize: its summary is returned) and sets each claim's verdict, deciding parts and worded verdict."""
  out = verdicts.finalize([p for c in claims for p in c["parts"]])
  for c in claims:
    c["verdict"] = combine(p["verdict"] for p in c["parts"])
    c["deciding"] = deciding(c["parts"])
    c["worded"] = worded(c["parts"])
  return out
