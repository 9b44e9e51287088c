"""Report v5's design, declared before any run of its grid: do the 2026 depth-aggregation papers' headline claims
hold at resnorm's scale, and how much compute is each placement worth?

The ladder. Every arm trains at the widths LADDER_D at one depth (DEPTH layers), heads of HEAD_DIM features, MLP
4d: N = 144 d^2 non-embedding params (per layer 4 d^2 attention and 8 d^2 MLP; norms and the placements' own params
aside), 83k to 746k, a 9x span. Each width trains TOKENS_PER_PARAM tokens per N, the same for every arm (arms differ
only in the connection: a seed gives them identical base weights), at the :cpu data shape (BATCH x SEQ tokens a
step) and the :cpu recipe otherwise (one learning rate for every width and arm). Compute is resnorm.model.flops'
training FLOPs per token, each placement's own FLOPs included, times the tokens trained.

The budget. STEP_MS is the step time of every arm at every width, measured by `python -m resnorm.bench
--config=configs/pre_norm_12l.py --residuals=... --depths=12 --steps=5 --config.model.d_model=D
--config.model.num_heads=D/8 --config.model.mlp_dim=4D` on the 2-core development CPU (one process per width, both
cores). `budget_s` adds up the grid's training time from it, plus RUN_OVERHEAD_S of wall time per run (process
start, compilation, the final evaluation) at `--jobs=2`, and the design must fit BUDGET_S with MARGIN to spare; it
assumes the two jobs together run no faster than one job on both cores.

The claims C11-C17 (CLAIMS) are each paper's headline in its own terms, with the paper's figure where it gives one;
their parts form one correction family (Benjamini-Hochberg over every part on both corpora) under v4's verdict rule
(resnorm.results.design.VERDICT_RULE, CLAIM_RULE), failures counted as outcomes (a diverged run's loss is FAIL_LOSS,
the byte-uniform loss: compute_equiv's `fill`). Pilot sds: the compare_2026 pilot's per-seed paired differences
(docs/variants.md, 5 seeds at d 64, 200 steps; the larger of the two corpora's, from its 95% t interval). A part
whose statistic the pilot did not measure has no pilot sd (NaN) and no row of power.
"""
import math
from typing import NamedTuple

from resnorm.results.design import Design

# Not yet fixed: the multiplier parts (C11, C14, C15) and C12 have no pilot sd until a Pre-Norm pilot ladder gives
# the slope of loss against compute at this scale, and C13 and C17 are not decidable at 5 seeds by the pilot's sds
# (power_table). The design is fixed by the commit before the grid's first record; no record exists yet.
STATUS = "draft"

LADDER_D = (24, 32, 48, 72)
DEPTH = 12
HEAD_DIM = 8
SEQ, BATCH = 64, 8
TOKENS_PER_PARAM = 0.8
SEEDS = 5
CORPORA = ("pystdlib", "shakespeare")
ARMS = ("pre_norm", "attn_res_block", "attn_res", "mudd", "denseformer", "value_residual", "laurel", "hc", "mhc")
FAIL_LOSS = math.log(256)      # nats/byte: a failed run counts at the uniform byte distribution's loss
BUDGET_S = 6 * 3600            # the budget: 6 hours of wall time at --jobs=2
MARGIN = 0.10
RUN_OVERHEAD_S = 10.0          # wall seconds per run at --jobs=2: half of a run's ~20 s start, compile and eval

# ms per step (8 x 64 tokens), 12 layers, both cores, measured 2026-12-05 (see the module docstring)
STEP_MS = {
    "pre_norm": (21.4, 26.6, 42.0, 70.8), "attn_res_block": (33.2, 41.4, 62.7, 104.2),
    "attn_res": (44.6, 54.7, 82.5, 135.9), "mudd": (39.3, 48.0, 71.1, 119.5),
    "denseformer": (29.1, 36.0, 55.5, 91.8), "value_residual": (21.3, 29.8, 45.4, 75.3),
    "laurel": (30.3, 39.3, 59.3, 95.5), "hc": (44.3, 56.1, 80.8, 122.1), "mhc": (65.3, 80.1, 101.9, 144.1)}


def non_embedding_params(d: int, layers: int = DEPTH) -> int:
  return layers * 12 * d * d


def steps(d: int) -> int:
  """Steps at width d: TOKENS_PER_PARAM x N tokens, BATCH x SEQ a step."""
  return max(1, round(TOKENS_PER_PARAM * non_embedding_params(d) / (BATCH * SEQ)))


def budget_s(seeds: int = SEEDS, corpora: int = len(CORPORA)) -> float:
  """The grid's wall time at --jobs=2: every arm at every width, seed and corpus."""
  train = sum(steps(d) * STEP_MS[a][k] / 1000 for a in ARMS for k, d in enumerate(LADDER_D))
  return seeds * corpora * (train + len(ARMS) * len(LADDER_D) * RUN_OVERHEAD_S)


class Claim(NamedTuple):
  """A claim's part: the arm it tests against Pre-Norm, the paper and where it says so, what the paper measured,
  the statistic per seed (signed so that the claim predicts a positive value), and the paper's figure (a
  compute multiplier, or None)."""
  arm: str
  paper: str
  where: str
  says: str
  statistic: str
  figure: float | None


MULT = "log of the compute-equivalent multiplier over the ladder (resnorm.results.compute_equiv)"
CLAIMS = {
    ("C11", "a"): Claim("attn_res_block", "Attention Residuals, arXiv 2603.15031", "Sec. 5, scaling fits",
                        "Block AttnRes matches a Pre-Norm baseline trained with 1.25x the compute", MULT, 1.25),
    ("C12", "a"): Claim("attn_res", "Attention Residuals, arXiv 2603.15031", "Sec. 5, per-layer profiles",
                        "output magnitudes more uniform across depth than Pre-Norm's (PreNorm dilution mitigated)",
                        "Pre-Norm minus AttnRes: coefficient of variation over sublayers of the output RMS, at the "
                        "end of training, top width", None),
    ("C12", "b"): Claim("attn_res", "Attention Residuals, arXiv 2603.15031", "Sec. 5, per-layer profiles",
                        "gradients more uniform across depth than Pre-Norm's",
                        "Pre-Norm minus AttnRes: coefficient of variation over sublayers of the gradient norm, at "
                        "the end of training, top width", None),
    ("C13", "a"): Claim("attn_res_block", "Attention Residuals, arXiv 2603.15031", "ablation over N",
                        "Block AttnRes with about 8 blocks recovers most of Full AttnRes's gain",
                        "(Pre-Norm - Block) / (Pre-Norm - Full) of the final eval loss, minus 1/2, top width", None),
    ("C14", "a"): Claim("mudd", "MUDDFormer, arXiv 2502.12170", "scaling curves (Fig. 1)",
                        "matches Transformer++ trained with 1.8-2.4x the compute (1.89x at 834M)", MULT, 1.89),
    ("C15", "a"): Claim("value_residual", "ResFormer, arXiv 2410.17897", "scaling curves",
                        "equal loss with 16.1% fewer parameters or 20.3% less data (1 / 0.797 = 1.25x the data)",
                        MULT, 1 / (1 - 0.203)),
    ("C16", "a"): Claim("laurel", "LAuReL, arXiv 2411.07501", "fixed-size comparisons",
                        "lower loss at equal size, at negligible cost",
                        "Pre-Norm minus LAuReL final eval loss, mean over the ladder's widths", None),
    ("C17", "a"): Claim("denseformer", "DenseFormer, arXiv 2402.02622", "fixed-size comparisons",
                        "lower loss at equal size, at negligible cost",
                        "Pre-Norm minus DenseFormer final eval loss, mean over the ladder's widths", None),
}

# The pilot's per-seed sd of each part's statistic (NaN: not measured by the pilot; see the module docstring).
# C13: the delta method on the pilot's Full and Block paired differences (covariance ignored), the larger corpus's.
# C17: DenseFormer was not in the pilot; the largest paired sd among the placements it ran (value_residual's) stands in.
_T95_4 = 2.776   # t(0.975, 4): the pilot's intervals are mean +- t s / sqrt(5)
_SD = lambda half: half * math.sqrt(5) / _T95_4
DESIGN = {
    ("C11", "a"): Design("ladder", math.nan, math.log(1.1), None),
    ("C12", "a"): Design("ladder", math.nan, 0.1, None),
    ("C12", "b"): Design("ladder", math.nan, 0.1, None),
    ("C13", "a"): Design("ladder", 0.57, 0.5, None),
    ("C14", "a"): Design("ladder", math.nan, math.log(1.1), None),
    ("C15", "a"): Design("ladder", math.nan, math.log(1.1), None),
    ("C16", "a"): Design("ladder", _SD((-0.0072 + 0.0157) / 2), 0.01, None),
    ("C17", "a"): Design("ladder", _SD((-0.0387 + 0.0674) / 2), 0.01, None),
}
BLOCK_SEEDS = {"ladder": SEEDS}
FAMILY = 2 * len(DESIGN)       # every part on both corpora, one Benjamini-Hochberg family
