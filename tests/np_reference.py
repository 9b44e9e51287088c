"""An independent float64 NumPy forward pass of the whole LM, written from the equations of docs/VARIANTS.md.

It imports nothing from resnorm: only the param names and the param layout are shared with the model (read off
the Flax tree), never its code. `forward(params, cfg, tokens)` returns logits [B, T, V]; `loss(...)` the masked
mean cross-entropy. Every leaf of the param tree must be read by the forward pass (`UnusedParams` otherwise), so
a param the model gains without a matching equation here makes the comparison fail instead of slipping past.
The param view and the base layers (norm, RoPE, attention, MLP) are in tests/np_layers.py.

Param layout (the model's): base weights `embed` [V, D], `pos_embed` [max_len, D] (pos=learned), `head` [D, V]
(absent when tied), `final_norm`; blocks stacked on a leading axis under `blocks` (Mix-LN: `blocks_post` then
`blocks_pre`), each with `attn` {q, k, v: [D, H, K], o: [H, K, D]}, `mlp` {wi: [D, F], wo: [F, D]},
`attn_norm` / `mlp_norm` (the sublayer's own norm) and `attn_res` / `mlp_res` (the variant's own params).
"""
import math

import numpy as np

from np_layers import UnusedParams, _leaf_paths, _sigmoid, _View, attention, mlp, norm

ALIASES = {"sandwich": "peri_norm"}


# ---------------------------------------------------------------------------------------------------------------
# Residual variants: one function per sublayer, (state, sublayer context) -> state. `c` carries F (the branch),
# N (the sublayer's own norm, a function), `res` (the variant's params view), l (1-based block index), cfg.


class _Ctx:
  def __init__(self, f, nrm, res, l, cfg, sub=None):
    self.f, self.n, self.res, self.l, self.cfg, self.sub = f, nrm, res, l, cfg, sub  # sub: 0-based sublayer index

  def norm(self, h, p):
    """A norm of the model's kind (`model.norm`) with the params p (the variant's own norms)."""
    return norm(h, p, self.cfg["norm"], float(self.cfg["norm_eps"]))


def post_norm(x, c):
  """Post-LN (VARIANTS.md 1): x <- N(x + F(x))."""
  return c.n(x + c.f(x))


def pre_norm(x, c):
  """Pre-LN (VARIANTS.md 1): x <- x + F(N(x))."""
  return x + c.f(c.n(x))


def peri_norm(x, c):
  """Peri-LN / Sandwich-LN (VARIANTS.md 4): x <- x + N_out(F(N_in(x))); N_out is `<kind>_res/out_norm`."""
  return x + c.norm(c.f(c.n(x)), c.res["out_norm"])


def deepnorm(x, c):
  """DeepNorm (VARIANTS.md 4, decoder-only): x <- N(alpha x + F(x)), alpha = (2M)^(1/4), M the number of layers.
  Its beta is an init scale only, so it does not appear here."""
  alpha = (2.0 * c.cfg["num_layers"]) ** 0.25
  return c.n(alpha * x + c.f(x))


def keel(x, c):
  """Keel (VARIANTS.md, Keel; arXiv 2601.19895 v2 Eq. 16): x <- LN_1(alpha x + F(LN_2(x))), alpha = S = 2L sublayers
  (or keel.alpha when > 0); LN_2 the sublayer's own norm, LN_1 `<kind>_res/out_norm`. First sublayers: v2 makes the
  first attention x + F(LN_2(x)) and gives the first MLP alpha 1; v1 makes both x + F(LN_2(x))."""
  kcfg = c.cfg["keel"]
  alpha = float(kcfg["alpha"]) if float(kcfg["alpha"]) > 0 else 2.0 * c.cfg["num_layers"]
  out_p = c.res["out_norm"]  # read for every sublayer: its param exists whether or not this one applies it
  y = c.f(c.n(x))
  pre_ln = {"v2": 1, "v1": 2, "none": 0}[kcfg["first"]]
  if c.sub < pre_ln:
    return x + y
  if kcfg["first"] != "none" and c.sub < 2:
    alpha = 1.0
  return c.norm(alpha * x + y, out_p)


def ddl(x, c):
  """Deep Delta Learning (VARIANTS.md, DDL; arXiv 2601.00417 Eq. 2.2, the authors' DDL-vdim1 code): c_ = N(x),
  h = F(c_), k = h / sqrt(||h||^2 + 1e-10), beta = 2 sigmoid(w_beta . c_ + b_beta), v = 4 sigmoid(w_v . x + b_v)
  (`code`) or w_v . c_ (`paper`); x <- x + beta k (v - k . x)."""
  r = c.res
  cn = c.n(x)
  h = c.f(cn)
  k = h / np.sqrt((h ** 2).sum(-1, keepdims=True) + 1e-10)
  beta = 2.0 * _sigmoid(cn @ r["w_beta"] + r["b_beta"])
  v = 4.0 * _sigmoid(x @ r["w_v"] + r["b_v"]) if c.cfg["ddl"]["v"] == "code" else cn @ r["w_v"]
  return x + (beta * (v - (k * x).sum(-1)))[..., None] * k


def rezero(x, c):
  """ReZero (VARIANTS.md 4): x <- x + a_l F(x), a_l a learned scalar per sublayer; no norm."""
  return x + c.res["alpha"] * c.f(x)


def ln_scaling(x, c):
  """LayerNorm Scaling (VARIANTS.md 4): Pre-LN with N(x) / sqrt(l), l = 1..L the block index."""
  return x + c.f(c.n(x) / math.sqrt(c.l))


def hc(h, c):
  """Hyper-Connections (VARIANTS.md 2; Zhu et al. Alg. 2, Eq. 10-13). h [B, T, n, D], one row per stream.

  alpha = [A_m | A_r] (n x (n+1)) and beta = B (n), plus for DHC the dynamic terms, row i from stream i only:
  alpha += s_alpha tanh(norm(h_i) W_alpha), beta += s_beta tanh(norm(h_i) W_beta) (per-stream `stream_norm`).
  Then h_0 = A_m^T H, and H' = A_r^T H + B^T F(N(h_0)), i.e. h'_j = sum_i A_r[i, j] h_i + B_j F(N(h_0)).
  """
  hcfg, res = c.cfg["hc"], c.res
  alpha = res["static_alpha"][None, None]      # [1, 1, n, n+1]
  beta = res["static_beta"][None, None]        # [1, 1, n]
  if hcfg["dynamic"]:
    act = np.tanh if hcfg["tanh"] else (lambda z: z)
    hbar = c.norm(h, res["stream_norm"])       # per stream: over the D features of each row
    alpha = alpha + res["s_alpha"] * act(hbar @ res["w_alpha"])
    beta = beta + res["s_beta"] * act(hbar @ res["w_beta"])
  a_m, a_r = alpha[..., 0], alpha[..., 1:]
  h0 = np.einsum("btn,btnd->btd", a_m, h)
  y = c.f(c.n(h0))
  return np.einsum("btij,btid->btjd", a_r, h) + beta[..., None] * y[:, :, None, :]


def frac_hc(x, c):
  """Frac-Connections (Zhu et al. 2025, arXiv 2503.14125): HC's connections between m fractions of one state.
  x [B, T, D] is read as H [B, T, m, D/m], fraction i = features i*D/m .. (i+1)*D/m - 1.

  alpha = [A_m | A_r] (m x 2m) and beta = B (m); dynamic: row i of alpha and entry i of beta gain
  s tanh(norm(H_i) W) from fraction i alone (per-fraction `stream_norm`). The branch input is the whole vector
  x_in = concat_j (sum_i A_m[i, j] H_i); the output Y = F(N(x_in)) is cut into the same fractions, and
  H'_j = sum_i A_r[i, j] H_i + B_j Y_j.
  """
  fc, res = c.cfg["frac_hc"], c.res
  m = int(fc["m"])
  b, t, d = x.shape
  h = x.reshape(b, t, m, d // m)
  alpha = res["static_alpha"][None, None]      # [1, 1, m, 2m]
  beta = res["static_beta"][None, None]        # [1, 1, m]
  if fc["dynamic"]:
    act = np.tanh if fc["tanh"] else (lambda z: z)
    hbar = c.norm(h, res["stream_norm"])
    alpha = alpha + res["s_alpha"] * act(hbar @ res["w_alpha"])
    beta = beta + res["s_beta"] * act(hbar @ res["w_beta"])
  a_m, a_r = alpha[..., :m], alpha[..., m:]
  x_in = np.einsum("btij,btif->btjf", a_m, h).reshape(b, t, d)
  y = c.f(c.n(x_in)).reshape(b, t, m, d // m)
  return (np.einsum("btij,btif->btjf", a_r, h) + beta[..., None] * y).reshape(b, t, d)


def sinkhorn(logits, iters):
  """Sinkhorn-Knopp (mHC Eq. 9): M_0 = exp(logits), M_t = T_r(T_c(M_{t-1})): every column divided by its sum,
  then every row by its sum, `iters` times. Rows are normalized last, so row sums are exactly 1."""
  m = np.exp(logits)
  for _ in range(iters):
    m = m / m.sum(-2, keepdims=True)  # T_c: column j divided by sum_i m[i, j]
    m = m / m.sum(-1, keepdims=True)  # T_r: row i divided by sum_j m[i, j]
  return m


def mhc_coefficients(x, res, eps):
  """mHC's shared coefficients (Eq. 7-8): x' = vec(x) / rms(vec(x)) over all nC features (stream-major, eps `eps`),
  proj = x' phi, H_pre = sigmoid(a_pre proj[:n] + b_pre), H_post = 2 sigmoid(a_post proj[n:2n] + b_post).
  Returns (proj, H_pre, H_post); proj[2n:] holds the H_res logits before a_res and b_res."""
  b, t, n, d = x.shape
  v = x.reshape(b, t, n * d)
  v = v / np.sqrt((v ** 2).mean(-1, keepdims=True) + eps)
  proj = v @ res["phi"]
  h_pre = _sigmoid(res["a_pre"] * proj[..., :n] + res["b_pre"])
  h_post = 2.0 * _sigmoid(res["a_post"] * proj[..., n:2 * n] + res["b_post"])
  return proj, h_pre, h_post


def mhc(x, c):
  """mHC (VARIANTS.md 3; Xie et al. Eq. 3, 7-9). x [B, T, n, C]; x <- H_res x + H_post^T F(N(H_pre x)).

  x' = RMSNorm(vec(x)) over all nC features (vec flattens the n x C matrix row by row, stream-major), without a
  weight and with eps `mhc.eps`; proj = x' phi, phi [nC, 2n + n^2] with columns [pre (n) | post (n) | res (n^2),
  mat() row-major], the column order of the model's param.
  H_pre = sigmoid(a_pre proj_pre + b_pre), H_post = 2 sigmoid(a_post proj_post + b_post),
  H_res = Sinkhorn(a_res mat(proj_res) + b_res). (H_res x)_i = sum_j H_res[i, j] x_j.
  """
  mc, res = c.cfg["mhc"], c.res
  b, t, n, d = x.shape
  proj, h_pre, h_post = mhc_coefficients(x, res, float(mc["eps"]))
  h_res = sinkhorn(res["a_res"] * proj[..., 2 * n:].reshape(b, t, n, n) + res["b_res"], int(mc["sinkhorn_iters"]))
  u = np.einsum("btn,btnc->btc", h_pre, x)
  y = c.f(c.n(u))
  return np.einsum("btij,btjc->btic", h_res, x) + h_post[..., None] * y[:, :, None, :]


def _mix_ln_segments(cfg):
  """Mix-LN (VARIANTS.md 4): Post-LN for the first floor(post_fraction * L) layers, Pre-LN after."""
  k = math.floor(float(cfg["mix_ln"]["post_fraction"]) * cfg["num_layers"])
  return (("blocks_post", k, post_norm), ("blocks_pre", cfg["num_layers"] - k, pre_norm))



def kromhc(x, c):
  """KromHC (VARIANTS.md, KromHC; arXiv 2601.21579 and wz1119/KromHC): mHC's coefficients (mhc_coefficients) with
  proj's last 2K columns the logits of K = log2(n) factors (factor-major, [keep | swap] each); p_k = softmax(a_res
  z_k + b_res[k])[0]; H[i, j] = prod_k (p_k if bit k of i equals bit k of j else 1 - p_k), bit 0 the most significant
  (factor 0 outermost in the Kronecker product); the authors' mix out_t = sum_s H[s, t] x_s."""
  kc, r = c.cfg["kromhc"], c.res
  b, t, n, d = x.shape
  k = int(round(math.log2(n)))
  proj, h_pre, h_post = mhc_coefficients(x, r, float(kc["eps"]))
  z = (r["a_res"] * proj[..., 2 * n:]).reshape(b, t, k, 2) + r["b_res"]
  p = 1.0 / (1.0 + np.exp(z[..., 1] - z[..., 0]))  # softmax over the pair, weight on the identity
  h = np.ones((b, t, n, n))
  for i in range(n):
    for j in range(n):
      for f in range(k):
        bi, bj = (i >> (k - 1 - f)) & 1, (j >> (k - 1 - f)) & 1
        h[:, :, i, j] *= p[..., f] if bi == bj else 1.0 - p[..., f]
  mixed = np.einsum("btsu,btsd->btud", h, x)  # out_u = sum_s H[s, u] x_s
  y = c.f(c.n(np.einsum("btn,btnd->btd", h_pre, x)))
  return mixed + h_post[..., None] * y[:, :, None, :]

# name -> (sublayer, number of streams (0: a [B, T, D] state), final norm, the sublayers use their own norm,
# segments (None: one segment `blocks`))
VARIANTS = {
    "post_norm": (post_norm, lambda cfg: 0, False, True, None),
    "pre_norm": (pre_norm, lambda cfg: 0, True, True, None),
    "peri_norm": (peri_norm, lambda cfg: 0, True, True, None),
    "deepnorm": (deepnorm, lambda cfg: 0, False, True, None),
    "rezero": (rezero, lambda cfg: 0, False, False, None),
    "keel": (keel, lambda cfg: 0, False, True, None),
    "ddl": (ddl, lambda cfg: 0, True, True, None),
    "ln_scaling": (ln_scaling, lambda cfg: 0, True, True, None),
    "mix_ln": (None, lambda cfg: 0, True, True, _mix_ln_segments),
    "hc": (hc, lambda cfg: cfg["hc"]["n"], True, True, None),
    "mhc": (mhc, lambda cfg: cfg["mhc"]["n"], True, True, None),
    "kromhc": (kromhc, lambda cfg: cfg["kromhc"]["n"], True, True, None),
    "frac_hc": (frac_hc, lambda cfg: 0, True, True, None),
}
# Placements whose state, hooks or head do not fit the table above: their whole forward pass is in
# tests/np_reference_placements.py (built on the layers here).
PLACEMENTS = ("admin", "resi_dual", "hybrid_norm", "denseformer", "ngpt", "mhc_lite", "attn_res", "attn_res_block",
              "delta_attn_res", "delta_attn_res_block", "laurel", "value_residual", "mudd", "resid_lambdas")
VARIANTS.update(dict.fromkeys(PLACEMENTS))
NAMES = frozenset(VARIANTS) | frozenset(ALIASES)


def canonical(name):
  return ALIASES.get(name, name)


# ---------------------------------------------------------------------------------------------------------------


def forward(params, cfg, tokens):
  """Logits [B, T, V] (float64) of the LM at `params` (the unboxed Flax tree) for int tokens [B, T].

  cfg: the model config (ConfigDict, FrozenConfigDict or nested dict), or the full config with a `model` node.
  Raises UnusedParams if any leaf of `params` was not read.
  """
  if "model" in cfg:
    cfg = cfg["model"]
  name = canonical(cfg["residual"])
  if name not in VARIANTS:
    raise KeyError(f"no reference for residual {name!r}")
  if name in PLACEMENTS:
    import np_reference_placements
    return np_reference_placements.forward(params, cfg, tokens)
  sub, streams, final, block_norms, segments = VARIANTS[name]
  used = set()
  p = _View(params, used)
  kind, eps = cfg["norm"], float(cfg["norm_eps"])
  tokens = np.asarray(tokens)
  t = tokens.shape[1]

  emb = p["embed"]
  x = emb[tokens]
  if cfg["pos"] == "learned":
    x = x + p["pos_embed"][None, :t]
  n = streams(cfg)
  state = np.repeat(x[:, :, None, :], n, axis=2) if n else x  # H^0: the embedding repeated n times
  segs = segments(cfg) if segments else (("blocks", cfg["num_layers"], sub),)
  offset = 0
  for seg, length, fn in segs:
    if length == 0:
      assert seg not in p, f"{seg} holds params but should have 0 layers"
      continue
    stack = p[seg]
    for i in range(length):
      lp = stack.layer(i, length)
      for j, (kind_name, f) in enumerate((("attn", attention), ("mlp", mlp))):
        base = lp[kind_name]
        branch = lambda h, f=f, base=base: f(h, base, cfg)
        if block_norms:
          nrm_p = lp[f"{kind_name}_norm"]
          nrm = lambda h, nrm_p=nrm_p: norm(h, nrm_p, kind, eps)
        else:
          nrm = None
        res = lp[f"{kind_name}_res"] if f"{kind_name}_res" in lp else None
        state = fn(state, _Ctx(branch, nrm, res, offset + i + 1, cfg, sub=2 * (offset + i) + j))
    offset += length
  assert offset == cfg["num_layers"]
  y = state.sum(axis=2) if n else state  # the n streams summed (HC Alg. 2, mHC): not their mean
  if final and cfg["final_norm"]:         # model.final_norm=False: the ablation without it
    y = norm(y, p["final_norm"], kind, eps)
  logits = y @ emb.T if cfg["tie_embed"] else y @ p["head"]
  unused = sorted("/".join(k) for k in set(_leaf_paths(params)) - used)
  if unused:
    raise UnusedParams(f"residual {name}: params not used by the reference: {', '.join(unused)}")
  return logits


def cross_entropy(logits, targets, mask):
  """sum(mask * CE) / max(sum(mask), 1), CE = logsumexp(logits) - logits[target]."""
  m = logits.max(-1, keepdims=True)
  lse = (m + np.log(np.exp(logits - m).sum(-1, keepdims=True)))[..., 0]
  ce = lse - np.take_along_axis(logits, np.asarray(targets)[..., None], axis=-1)[..., 0]
  mask = np.asarray(mask, np.float64)
  return float((ce * mask).sum() / max(mask.sum(), 1.0))


def loss(params, cfg, tokens, targets, mask):
  return cross_entropy(forward(params, cfg, tokens), targets, mask)
