"""Report v5's design, declared before any run of its grid: do the 2026 depth-aggregation papers' headline claims
hold at resnorm's scale, and how much compute is each placement worth?

The ladder. Every arm trains at the widths LADDER_D at one depth (DEPTH layers), heads of HEAD_DIM features, MLP
4d: N = 144 d^2 non-embedding params (per layer 4 d^2 attention and 8 d^2 MLP; norms and the placements' own params
aside), 83k to 746k, a 9x span. Each width trains TOKENS_PER_PARAM tokens per N, the same for every arm (arms differ
only in the connection: a seed gives them identical base weights), at the :cpu data shape (BATCH x SEQ tokens a
step), at one recipe for every width and arm: peak lr LR after WARMUP_FRAC of the steps, cosine to 1/10 (the :cpu
schedule), one eval at the end on EVAL_BYTES of the stratified eval set. LR is not the :cpu 1e-3: in the pilot ladder
(configs/sweeps/v5_pilot.py, seed 0, pystdlib) at 1e-3 the smallest width, at 130 steps, did not learn beyond the
byte unigram (3.60 against 3.25 nats/byte); at 3e-3 it reaches 3.02, and d 24, 32 and 72 lie on one power law
(log-log slopes 0.081 and 0.080 between them). LAuReL's low-rank term has rank d // 16 (1 to 4) rather than the
:cpu config's 16, which at d 24 would add 40% to a sublayer's parameters: its claim is at equal size. Compute is
resnorm.model.flops' training FLOPs per token, each placement's own FLOPs included, times the tokens trained.

The budget. STEP_MS is the step time of every arm at every width, measured by `python -m resnorm.bench
--config=configs/pre_norm_12l.py --residuals=... --depths=12 --steps=5 --config.model.d_model=D
--config.model.num_heads=D/8 --config.model.mlp_dim=4D` on the 2-core development CPU (one process per width, both
cores). `budget_s` adds up the grid's training time from it, plus per run RUN_START_S (process start and
compilation) and the final evaluation at EVAL_STEPS step times (both measured in the pilot at `--jobs=2`: 2.5-5 s to
start; the eval at d 24 took 1.3 s, 63 step times), and the design must fit BUDGET_S with MARGIN to spare; it
assumes the two jobs together run no faster than one job on both cores.

The claims C11-C17 (CLAIMS) are each paper's headline in its own terms, with the paper's figure where it gives one;
their parts form one correction family (Benjamini-Hochberg over every part on both corpora) under v4's verdict rule
(resnorm.results.v4.design.VERDICT_RULE, CLAIM_RULE), failures counted as outcomes (a diverged run's loss is FAIL_LOSS,
the byte-uniform loss: compute_equiv's `fill`). Pilot sds: the compare_2026 pilot's per-seed paired differences
of final loss (docs/variants.md, 5 seeds at d 64, 200 steps; the larger of the two corpora's, from its 95% t
interval). A multiplier part's per-seed value is mean_k log(C_pre(L'_k) / C'_k), C_pre the power law fitted to
Pre-Norm's ladder of the same seed (the pairing: the fit's noise is the seed's own), so a paired loss difference dL
moves it by about -dL / (L b), b the pilot ladder's slope of log L on log C (PILOT_B) and L its mid-ladder loss
(PILOT_L): its pilot sd is the arm's loss-difference sd times 1 / (L b), not divided by the ladder's four widths
(their noise may be shared). A part whose statistic the pilot did not measure (C12) has no pilot sd (NaN) and no
row of power.

Effects of interest. A multiplier part's is the paper's own multiplier (log of it): "reproduced, smaller than
claimed" then says the paper's figure lies above the interval, and "not reproduced" that an effect of the paper's
size is excluded. C13's is half of Full's pilot gain (0.01 nats/byte: Block recovering all of Full's gain). C16's
and C17's is 0.01 nats/byte. C13, C16 and C17 are not decidable at 5 seeds by the pilot's sds (the power table, at
DESIGN_CALLS calls, says so; C16 narrowly); they are reported with their intervals, and a verdict other than
undecided needs an effect beyond the design's.

C12 reads the diagnostics at the end of training at the top width: per sublayer, the RMS of its input (the hidden
state it reads: act_rms) and the norm of its parameters' gradient (grad_norm), on the diagnostics batch; the
statistic is Pre-Norm's coefficient of variation over the 2 x DEPTH sublayers minus AttnRes's, per seed.

Failures. A run that diverged counts at FAIL_LOSS in every loss statistic. Where a seed's statistic is still
undefined (C12 without final diagnostics; a multiplier whose seed's Pre-Norm fit does not fall with compute), that
seed takes the least favourable value among the others (v4's sensitivity rule), so it is never dropped.
"""
import math
from typing import NamedTuple

from resnorm.results.v4.design import Design

# Fixed by the commit before the grid's first record (results/v5/ holds the records).
STATUS = "final"

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
LR, WARMUP_FRAC = 3e-3, 0.1
EVAL_BYTES = 131072            # half the :cpu stratified eval set: the eval is a run's largest fixed cost
RUN_START_S = 5.0              # wall seconds per run: process start and compilation
EVAL_STEPS = 60                # the final eval's cost in step times
PILOT_B, PILOT_L = 0.080, 2.5  # the pilot ladder's slope of log L on log C, and its mid-ladder loss (nats/byte)

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


def laurel_rank(d: int) -> int:
  return max(1, d // 16)


def budget_s(seeds: int = SEEDS, corpora: int = len(CORPORA)) -> float:
  """The grid's wall time at --jobs=2: every arm at every width, seed and corpus."""
  return seeds * corpora * sum(run_s(a, d) for a in ARMS for d in LADDER_D)


def run_s(arm: str, d: int) -> float:
  """One run's wall seconds by the budget model: start, training steps and the final eval at the measured step time."""
  return RUN_START_S + (steps(d) + EVAL_STEPS) * STEP_MS[arm][LADDER_D.index(d)] / 1000


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


MULT = "log of the compute-equivalent multiplier over the ladder (resnorm.results.v5.compute_equiv)"
CLAIMS = {
    ("C11", "a"): Claim("attn_res_block", "Attention Residuals, arXiv 2603.15031", "Sec. 5, scaling fits",
                        "Block AttnRes matches a Pre-Norm baseline trained with 1.25x the compute", MULT, 1.25),
    ("C12", "a"): Claim("attn_res", "Attention Residuals, arXiv 2603.15031", "Sec. 5, per-layer profiles",
                        "output magnitudes more uniform across depth than Pre-Norm's (PreNorm dilution mitigated)",
                        "Pre-Norm minus AttnRes: coefficient of variation over sublayers of the RMS of the sublayer input (the "
                        "hidden state each sublayer reads: act_rms), at the "
                        "end of training, top width", None),
    ("C12", "b"): Claim("attn_res", "Attention Residuals, arXiv 2603.15031", "Sec. 5, per-layer profiles",
                        "gradients more uniform across depth than Pre-Norm's",
                        "Pre-Norm minus AttnRes: coefficient of variation over sublayers of the gradient norm, at "
                        "the end of training, top width", None),
    ("C13", "a"): Claim("attn_res_block", "Attention Residuals, arXiv 2603.15031", "ablation over N",
                        "Block AttnRes with about 8 blocks recovers most of Full AttnRes's gain",
                        "G_block - G_full / 2, G the mean over the ladder's widths of the paired final-eval-loss "
                        "gain over Pre-Norm (> 0: Block recovers more than half of Full's gain)", None),
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
# C13 is the linear form of "most of Full's gain": G_block - G_full / 2 over the ladder's mean paired gains, > 0 when
# Block recovers more than half; its sd is sd_block + sd_full / 2 (the worst case of their unknown covariance).
# C17: DenseFormer was not in the pilot; the largest paired sd among the placements it ran (value_residual's) stands in.
_T95_4 = 2.776   # t(0.975, 4): the pilot's intervals are mean +- t s / sqrt(5)
_SD = lambda lo, hi: (hi - lo) / 2 * math.sqrt(5) / _T95_4
PILOT_SD = {"attn_res_block": _SD(-0.0415, -0.0167), "attn_res": _SD(-0.0278, -0.0151), "mudd": _SD(-0.0517, -0.0301),
            "value_residual": _SD(-0.0674, -0.0387), "laurel": _SD(-0.0157, -0.0072)}
_MULT_SD = lambda arm: PILOT_SD[arm] / (PILOT_L * PILOT_B)
DESIGN = {
    ("C11", "a"): Design("ladder", _MULT_SD("attn_res_block"), math.log(1.25), None),
    ("C12", "a"): Design("ladder", math.nan, 0.1, None),
    ("C12", "b"): Design("ladder", math.nan, 0.1, None),
    ("C13", "a"): Design("ladder", PILOT_SD["attn_res_block"] + PILOT_SD["attn_res"] / 2, 0.01, None),
    ("C14", "a"): Design("ladder", _MULT_SD("mudd"), math.log(1.89), None),
    ("C15", "a"): Design("ladder", _MULT_SD("value_residual"), math.log(1 / (1 - 0.203)), None),
    ("C16", "a"): Design("ladder", PILOT_SD["laurel"], 0.01, None),
    ("C17", "a"): Design("ladder", PILOT_SD["value_residual"], 0.01, None),
}
BLOCK_SEEDS = {"ladder": SEEDS}
DESIGN_CALLS = 1               # the power table's level: BH's threshold for a first call among FAMILY parts
FAMILY = 2 * len(DESIGN)       # every part on both corpora, one Benjamini-Hochberg family
