"""The float64 reference's mutants (tests/test_reference.py runs them): each a plausible misreading of a paper, a
replacement for one function of np_reference or np_reference_placements, that the logit tolerance must catch.
MUTANTS maps a name to (variant, case id in test_reference.CASES, what to replace, the replacement)."""
import functools

import numpy as np
import scipy.special

import np_reference as ref
import np_reference_placements


def _dyt_alpha_outside(x, p, kind, eps, real=ref.norm):
  return p["alpha"] * np.tanh(x) * p["scale"] + (p["bias"] if "bias" in p else 0) if kind == "dyt" else \
      real(x, p, kind, eps)


def _dyt_no_bias(x, p, kind, eps, real=ref.norm):
  if kind != "dyt":
    return real(x, p, kind, eps)
  _ = p["bias"]  # read, so that the unused-param check does not catch it first: the tolerance must
  return np.tanh(p["alpha"] * x) * p["scale"]


def _derf_no_shift(x, p, kind, eps, real=ref.norm):
  if kind != "derf":
    return real(x, p, kind, eps)
  _ = p["shift"]  # read, so that the unused-param check does not catch it first
  y = scipy.special.erf(p["alpha"] * x) * p["scale"]
  return y + p["bias"] if "bias" in p else y


def _derf_as_tanh(x, p, kind, eps, real=ref.norm):  # DyT's tanh where the paper has erf
  if kind != "derf":
    return real(x, p, kind, eps)
  y = np.tanh(p["alpha"] * x + p["shift"]) * p["scale"]
  return y + p["bias"] if "bias" in p else y


def _frac_mutant(x, c, transpose_a_r=False, interleave=False, branch_reads_x=False):
  """ref.frac_hc with one change: A_r applied transposed; fraction i as features i, i+m, i+2m, ... (interleaved);
  or the branch reading the whole state instead of A_m's mix."""
  fc, res = c.cfg["frac_hc"], c.res
  m = int(fc["m"])
  b, t, d = x.shape
  split = (lambda z: z.reshape(b, t, d // m, m).swapaxes(-1, -2)) if interleave else \
      (lambda z: z.reshape(b, t, m, d // m))
  join = (lambda z: z.swapaxes(-1, -2).reshape(b, t, d)) if interleave else (lambda z: z.reshape(b, t, d))
  h = split(x)
  alpha, beta = res["static_alpha"][None, None], res["static_beta"][None, None]
  if fc["dynamic"]:
    hbar = c.norm(h, res["stream_norm"])
    alpha = alpha + res["s_alpha"] * np.tanh(hbar @ res["w_alpha"])
    beta = beta + res["s_beta"] * np.tanh(hbar @ res["w_beta"])
  a_m, a_r = alpha[..., :m], alpha[..., m:]
  a_r = np.swapaxes(a_r, -1, -2) if transpose_a_r else a_r
  x_in = x if branch_reads_x else join(np.einsum("btij,btif->btjf", a_m, h))
  y = split(c.f(c.n(x_in)))
  return join(np.einsum("btij,btif->btjf", a_r, h) + beta[..., None] * y)


_REAL_DEPTH = np_reference_placements.depth_attention


def _depth_attention_values_normed(sources, w, eps):  # RMSNorm(v_i) as the values too, not only the keys
  return _REAL_DEPTH([v / np.sqrt((v ** 2).mean(-1, keepdims=True) + eps) for v in sources], w, eps)


def _depth_attention_scaled(sources, w, eps):  # a 1/sqrt(D) temperature, as token attention has (the paper: none)
  return _REAL_DEPTH(sources, w / np.sqrt(sources[0].shape[-1]), eps)


def _attn_res_partial_never_read(state, c):  # Block: the current block's partial sum left out of the sources
  blocks, partial, done = state
  per = 2 * c.cfg["num_layers"] // c.cfg["attn_res"]["num_blocks"]
  f = c.f(c.n(_REAL_DEPTH(blocks, np_reference_placements.attn_res_query(c), float(c.cfg["norm_eps"]))))
  partial, done = (f if partial is None else partial + f), done + 1
  return (blocks + [partial], None, done) if done % per == 0 else (blocks, partial, done)


def _laurel_mutant(hist, c, swap_rw=False, pa_from_self=False, lr_transposed=False):
  """LAuReL with one realistic slip: the RW weights swapped between the paths; PA's g_1 on x_l itself (Eq. 4's j = 0
  term, read as the first earlier input); the low-rank factors applied transposed (x B^T A^T)."""
  lc, r = c.cfg["laurel"], c.res
  x = hist[0]
  f = c.f(c.n(x))
  lr = x @ r["up"].T @ r["down"].T if lr_transposed else x @ r["down"] @ r["up"]
  res = x + lr
  for j in range(1, lc["pa_k"]):
    src = j - 1 if pa_from_self else j
    if src < len(hist):
      res = res + r["pa_gain"][j - 1] * hist[src]
  e = np.exp(r["rw_logits"] - r["rw_logits"].max())
  a, b = float(lc["rw_scale"]) * e / e.sum()
  a, b = (b, a) if swap_rw else (a, b)
  return [a * f + b * res] + hist[: lc["pa_k"] - 1]


_REAL_LAUREL = np_reference_placements.laurel


def _laurel_unscaled(hist, c):  # the paper's bare softmax where the config asks for rw_scale = 2
  return _REAL_LAUREL(hist, _Unscaled(c))


class _Unscaled:
  def __init__(self, c):
    self.__dict__.update(c.__dict__)
    self.cfg = {**c.cfg, "laurel": {**c.cfg["laurel"], "rw_scale": 1.0}}


def _value_residual_mutant(state, c, lambda_swapped=False, previous_layer=False):
  """Value residual with lambda on the current values instead of V_1, or V_1 replaced by the previous layer's
  values (a chain, not a residual to the first layer)."""
  x, v1 = state
  if c.kind == "mlp":
    return x + c.f(c.n(x)), v1
  lam, seen = c.res["lambda"], {}

  def hook(q, k, v, rot):
    seen["v"] = v
    if v1 is None:
      mixed = v
    else:
      mixed = (1.0 - lam) * v1 + lam * v if lambda_swapped else lam * v1 + (1.0 - lam) * v
    return rot(q), rot(k), mixed, 1.0 / np.sqrt(q.shape[-1])
  y = np_reference_placements.attention(c.n(x), c.base, c.cfg, hook)
  return x + y, seen["v"] if (v1 is None or previous_layer) else v1


_REAL_MUDD_WEIGHTS = np_reference_placements.mudd_weights


def _mudd_one_way(x, p, ways, i, eps):  # every stream read with the R way's weights (dense, not multiway)
  a = _REAL_MUDD_WEIGHTS(x, p, ways, i, eps)
  return np.repeat(a[:, :, -1:], ways, axis=2)


def _mudd_no_gelu(x, p, ways, i, eps, real=np_reference_placements.gelu):  # a linear DA: W2 right after W1
  np_reference_placements.gelu = lambda z: z
  try:
    return _REAL_MUDD_WEIGHTS(x, p, ways, i, eps)
  finally:
    np_reference_placements.gelu = real


def _mudd_head_reads_last(outs, p, cfg):  # the head on X_L, no last DA (Eq. 8 dropped)
  p["w1"], p["w2"], p["bias"]  # read, so the reference's unused-param check still passes
  return outs[-1]


MUTANTS = {  # name: (variant, case, what to replace in np_reference, the replacement)
    "mudd one way": ("mudd", "ln-3l", "placements.mudd_weights", _mudd_one_way),
    "mudd no gelu": ("mudd", "rms-learned", "placements.mudd_weights", _mudd_no_gelu),
    "mudd head reads X_L": ("mudd", "ln-3l", "placements.mudd_head", _mudd_head_reads_last),
    "laurel rw unscaled": ("laurel", "rw-lr4-pa3-3l", "placements.laurel", _laurel_unscaled),
    "laurel rw swapped": ("laurel", "rw-lr4-pa3-3l", "placements.laurel",
                          functools.partial(_laurel_mutant, swap_rw=True)),
    "laurel pa reads x_l": ("laurel", "rw-lr4-pa3-3l", "placements.laurel",
                            functools.partial(_laurel_mutant, pa_from_self=True)),
    "laurel lr transposed": ("laurel", "rw-lr4-pa3-3l", "placements.laurel",
                             functools.partial(_laurel_mutant, lr_transposed=True)),
    "value_residual lambda swapped": ("value_residual", "learned-3l", "placements.value_residual",
                                      functools.partial(_value_residual_mutant, lambda_swapped=True)),
    "value_residual previous layer's values": ("value_residual", "learned-3l", "placements.value_residual",
                                               functools.partial(_value_residual_mutant, previous_layer=True)),
    "dyt alpha outside the tanh": ("pre_norm", "dyt", "norm", _dyt_alpha_outside),
    "dyt bias dropped": ("post_norm", "dyt-bias-3l", "norm", _dyt_no_bias),
    "derf shift dropped": ("pre_norm", "derf", "norm", _derf_no_shift),
    "derf with tanh": ("hc", "dyn-n2-derf-nobias", "norm", _derf_as_tanh),
    "attn_res values normalized": ("attn_res", "full-3l", "placements.depth_attention",
                                   _depth_attention_values_normed),
    "attn_res temperature 1/sqrt(d)": ("attn_res_block", "n2-rms-learned", "placements.depth_attention",
                                       _depth_attention_scaled),
    "attn_res_block partial sum never read": ("attn_res_block", "n3-3l", "placements.attn_res",
                                              _attn_res_partial_never_read),
    "frac_hc A_r transposed": ("frac_hc", "dyn-m4-ln", "frac_hc", functools.partial(_frac_mutant, transpose_a_r=True)),
    "frac_hc fractions interleaved": ("frac_hc", "dyn-m4-ln", "frac_hc",
                                      functools.partial(_frac_mutant, interleave=True)),
    "frac_hc branch reads x": ("frac_hc", "static-m2-rms-learned", "frac_hc",
                               functools.partial(_frac_mutant, branch_reads_x=True)),
}
