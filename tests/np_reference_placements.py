"""The float64 NumPy reference (tests/np_reference.py, whose layers, param view and conventions it uses) for the
placements whose state, hooks or head do not fit its per-sublayer table: admin, resi_dual, hybrid_norm,
denseformer, ngpt, mhc_lite, attn_res and delta_attn_res (Full and Block), laurel, value_residual, mudd, written
from the equations in their docstrings and docs/variants.md sections 3-4.
Like np_reference it imports nothing from resnorm. `np_reference.forward` hands these names to `forward` here;
`admin_profile` is Admin's profiling pass.
"""
import itertools
import math

import numpy as np

from np_layers import UnusedParams, _leaf_paths, _View, attention, mlp, norm
from np_reference import mhc_coefficients


class _Ctx:
  """What a sublayer sees: f (F with its base weights), n (its own norm, or None), res (the variant's params),
  kind ("attn" or "mlp"), base (F's own params, for a placement that reaches inside attention)."""

  def __init__(self, f, n, res, cfg, kind, base=None):
    self.f, self.n, self.res, self.cfg, self.kind, self.base = f, n, res, cfg, kind, base


def unit(x):
  """nGPT's Norm: x / ||x|| over the last axis."""
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


def admin(x, c):
  """Admin: x <- N(omega (.) x + F(x))."""
  return c.n(c.res["omega"] * x + c.f(x))


def resi_dual(s, c):
  """ResiDual: (x, d) <- (N(x + F(x)), d + F(x)); s[:, :, 0] = x, s[:, :, 1] = d."""
  y = c.f(s[:, :, 0])
  return np.stack([c.n(s[:, :, 0] + y), s[:, :, 1] + y], axis=2)


def hybrid(x, c):
  """HybridNorm: attention Y = X + Attn_QKV(X); FFN X' = N(Y) + FFN(N(Y))."""
  if c.kind == "attn":
    return x + c.f(x)
  h = c.n(x)
  return h + c.f(h)


def pre(x, c):
  """Pre-Norm x + F(N(x)): DenseFormer's blocks, and HybridNorm*'s first block (its attention with QKV norms)."""
  return x + c.f(c.n(x))


def ngpt(h, c):
  """nGPT: h <- Norm(Norm(h) + |alpha| (Norm(F(h)) - Norm(h))), alpha = param * alpha_init sqrt(D)."""
  a = np.abs(c.res["alpha"] * c.cfg["ngpt"]["alpha_init"] * math.sqrt(c.cfg["d_model"]))
  hn = unit(h)
  return unit(hn + a * (unit(c.f(h)) - hn))


def depth_attention(sources, w, eps):
  """AttnRes (arXiv 2603.15031) Eqs. 2-4: sum_i softmax_i(w . RMSNorm(v_i)) v_i, the RMSNorm without a gain."""
  logits = np.stack([(v / np.sqrt((v ** 2).mean(-1, keepdims=True) + eps)) @ w for v in sources], axis=-1)
  a = np.exp(logits - logits.max(-1, keepdims=True))
  a = a / a.sum(-1, keepdims=True)
  return sum(a[..., i, None] * v for i, v in enumerate(sources))


def attn_res_query(c):
  """The sublayer's pseudo-query w_l: the model keeps a layer's two (attention's, then the MLP's) as one [2, D]
  param of the attention sublayer."""
  return c.res["query"][0 if c.kind == "attn" else 1]


def attn_res(state, c):
  """AttnRes, one sublayer: state = (completed block summaries [b_0 = embedding, b_1, ...], the current block's
  partial sum or None, sublayers done). The input attends over the summaries and the partial sum; the output joins
  the partial sum, which becomes a summary after `per` sublayers (Full AttnRes: per = 1)."""
  blocks, partial, done = state
  L = c.cfg["num_layers"]
  per = 1 if c.cfg["residual"] == "attn_res" else 2 * L // c.cfg["attn_res"]["num_blocks"]
  h = depth_attention(blocks + ([partial] if partial is not None else []), attn_res_query(c), float(c.cfg["norm_eps"]))
  f = c.f(c.n(h))
  partial = f if partial is None else partial + f
  done += 1
  return (blocks + [partial], None, done) if done % per == 0 else (blocks, partial, done)


def delta_attn_res(state, c):
  """Delta AttnRes (arXiv 2605.18855), one sublayer: state = (completed summaries [b_0 = embedding, b_1, ...], the
  current block's partial sum or None, sublayers done, the stream x). h = x + the depth attention over the completed
  summaries (none before the first sublayer); the output joins the stream and the partial sum (Full: per = 1)."""
  blocks, partial, done, x = state
  L = c.cfg["num_layers"]
  per = 1 if c.cfg["residual"] == "delta_attn_res" else 2 * L // c.cfg["attn_res"]["num_blocks"]
  h = x if done == 0 else x + depth_attention(blocks, attn_res_query(c), float(c.cfg["norm_eps"]))
  f = c.f(c.n(h))
  partial = f if partial is None else partial + f
  done += 1
  blocks, partial = (blocks + [partial], None) if done % per == 0 else (blocks, partial)
  return blocks, partial, done, x + f


def laurel(hist, c):
  """LAuReL (arXiv 2411.07501) Eq. 6 on a Pre-Norm sublayer, hist = [x_l, x_{l-1}, ...] (newest first, at most k):
  x_{l+1} = a f + b (x + x A B + sum_{j=1}^{k-1} g_j x_{l-j}), f = F(N(x_l)); (a, b) = c softmax(rw_logits), c =
  laurel.rw_scale (RW; off:
  1, 1), A = `down` [D, r], B = `up` [r, D] (LR), g = `pa_gain` (PA). An earlier input before the first: none."""
  lc, r = c.cfg["laurel"], c.res
  x = hist[0]
  f = c.f(c.n(x))
  res = x + (x @ r["down"] @ r["up"] if lc["rank"] else 0.0)
  for j in range(1, lc["pa_k"]):
    if j < len(hist):
      res = res + r["pa_gain"][j - 1] * hist[j]
  if lc["rw"]:
    e = np.exp(r["rw_logits"] - r["rw_logits"].max())
    a, b = float(lc["rw_scale"]) * e / e.sum()
  else:
    a = b = 1.0
  return [a * f + b * res] + hist[: lc["pa_k"] - 1]


def value_residual(state, c):
  """ResFormer (arXiv 2410.17897) on Pre-Norm: attention layer n >= 2 uses values lambda_n V_1 + (1 - lambda_n) V_n,
  V_1 the first attention layer's values (lambda = `lambda` if learned, else value_residual.lambda_init).
  state = (x, V_1 or None before the first attention)."""
  x, v1 = state
  if c.kind == "mlp":
    return x + c.f(c.n(x)), v1
  vc, seen = c.cfg["value_residual"], {}
  lam = c.res["lambda"] if vc["learned"] else float(vc["lambda_init"])

  def hook(q, k, v, rot):
    seen["v"] = v
    mixed = v if v1 is None else lam * v1 + (1.0 - lam) * v
    return rot(q), rot(k), mixed, 1.0 / math.sqrt(q.shape[-1])
  y = attention(c.n(x), c.base, c.cfg, hook)
  return x + y, seen["v"] if v1 is None else v1


def resid_lambdas(state, c):
  """The speedrun's scalars (nanochat gpt.py; modded-nanogpt's backout record) on Pre-Norm: before block l, x <-
  lambda_r[l] x + lambda_0[l] x0; after the block whose 0-based index is the backout layer (L // 2, or round(2L / 3)
  under the `backout` preset), x_b = x. state = (x, x0, x_b or None, blocks done)."""
  x, x0, x_b, l = state
  if c.kind == "attn":
    x = c.res["lambda_r"] * x + c.res["lambda_0"] * x0
    return x + c.f(c.n(x)), x0, x_b, l
  x = x + c.f(c.n(x))
  L = c.cfg["num_layers"]
  b = round(2 * L / 3) if c.cfg["resid_lambdas"]["preset"] == "backout" else L // 2
  return x, x0, (x if l == b else x_b), l + 1


def gelu(x):
  """GELU, tanh approximation (Hendrycks & Gimpel 2016)."""
  return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def mudd_weights(x, p, ways, i, eps):
  """MUDDFormer (arXiv 2502.12170) Eq. 6, multiway, over the sources j = 0..i: A = GELU(RMSNorm(x) W1) W2 + a,
  [B, T, ways, i + 1], RMSNorm without a gain, hidden width 4 (i+1) for every DA (the last, one way out, too):
  W1 [D, 4 (i+1)], W2 [4 (i+1), ways (i+1)] (column c (i+1) + j), a [ways, i+1]."""
  xn = x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps)
  a = gelu(xn @ p["w1"]) @ p["w2"]
  return a.reshape(x.shape[:2] + (ways, i + 1)) + p["bias"]


def mudd_unpack(p, num_layers):
  """DA_1 .. DA_{L-1}, each at its own shape, from the model's packed params (each DA's block after the one
  before): W1's columns, W2's entries (row-major [4 (l+1), 4 (l+1)]), a's entries (row-major [4, l+1]). Every
  entry belongs to exactly one DA."""
  w1, w2, bias = p["w1"], p["w2"], p["bias"]
  das, o1, o2 = [], 0, 0
  for l in range(1, num_layers):
    h = 4 * (l + 1)
    das.append({"w1": w1[:, o1:o1 + h], "w2": w2[o2:o2 + h * h].reshape(h, h), "bias": bias[o1:o1 + h].reshape(4, l + 1)})
    o1, o2 = o1 + h, o2 + h * h
  assert (o1, o2) == (w1.shape[1], w2.size) == (bias.size, w2.size), "packed DA params: sizes do not add up"
  return das


def mudd(state, c):
  """MUDDFormer Eq. 7 on block l: streams Xbar^c = sum_{j<=l} A_l[c, j] X_j (block 0: the embedding four times),
  X^A = MHA(N Q, N K, N V) + R, X_{l+1} = FFN(N X^A) + X^A. state = (outputs [X_0 .. X_l], X^A or None, the DAs
  from mudd_unpack)."""
  outs, xa, das = state
  if c.kind == "mlp":
    return outs + [xa + c.f(c.n(xa))], None, das
  l = len(outs) - 1
  if l == 0:
    q = k = v = r = outs[0]
  else:
    a = mudd_weights(outs[l], das[l - 1], 4, l, float(c.cfg["norm_eps"]))
    q, k, v, r = (sum(a[:, :, w, j, None] * outs[j] for j in range(l + 1)) for w in range(4))

  def hook(q_, k_, v_, rot):
    kk, vv = (np.einsum("btd,dhk->bthk", c.n(x), c.base[name]) for x, name in ((k, "k"), (v, "v")))
    return rot(q_), rot(kk), vv, 1.0 / math.sqrt(q_.shape[-1])
  return outs, r + attention(c.n(q), c.base, c.cfg, hook), das


def mudd_head(outs, p, cfg):
  """Eq. 8: the last DA's R way (its own weights, one way) over X_0 .. X_L."""
  a = mudd_weights(outs[-1], p, 1, len(outs) - 1, float(cfg["norm_eps"]))
  return sum(a[:, :, 0, j, None] * x for j, x in enumerate(outs))


def mhc_lite(x, c):
  """mHC-lite as the authors' code (FFTYYY/mhc-lite, hyper_conn/mhc_lite.py): x' = vec(x) / rms(vec(x)) (eps
  mhc_lite.eps), proj = x' phi = [pre n | post n | res n!], H_pre = sigmoid(a_pre proj_pre + b_pre), H_post =
  2 sigmoid(...), H = sum_k softmax(a_res proj_res + b_res)_k P_k with P_k = I[perm_k] (P_k[i, perm_k(i)] = 1,
  perms in itertools order), and the residual mix out_t = sum_s H[s, t] x_s (their einsum '... s t, ... s d ->
  ... t d'), written here as a loop over the permutations: out_t = sum_k w_k x_{perm_k^-1(t)}."""
  mc, r = c.cfg["mhc_lite"], c.res
  b, t, n, d = x.shape
  proj, h_pre, h_post = mhc_coefficients(x, r, float(mc["eps"]))
  z = r["a_res"] * proj[..., 2 * n:] + r["b_res"]
  w = np.exp(z - z.max(-1, keepdims=True))
  w = w / w.sum(-1, keepdims=True)
  mixed = np.zeros_like(x)
  for kk, perm in enumerate(itertools.permutations(range(n))):
    for s in range(n):
      if mc.get("mix", "transpose") == "transpose":  # P_k[s, perm(s)] = 1: stream s goes to output perm(s)
        mixed[:, :, perm[s]] += w[..., kk, None] * x[:, :, s]
      else:                                          # resnorm before 2026-12-01: (H x)_s = sum_k w_k x_{perm_k(s)}
        mixed[:, :, s] += w[..., kk, None] * x[:, :, perm[s]]
  y = c.f(c.n(np.einsum("btn,btnd->btd", h_pre, x)))
  return mixed + h_post[..., None] * y[:, :, None, :]


def dwa(outs, alpha, i, cfg):
  """DenseFormer after block i (1-based): sum of alpha_j X_j over the j <= i with j = i (mod k) if i = 0 (mod p),
  else X_i. `outs` = [X_0 (the embedding), X_1, ..., X_i]."""
  k, p = cfg["denseformer"]["dilation"], cfg["denseformer"]["period"]
  if i % p:
    return outs[i]
  return sum(alpha[j] * outs[j] for j in range(i + 1) if (i - j) % k == 0)


def hybrid_qkv_norm(x, p, cfg, form):
  """HybridNorm's N_q / N_k / N_v on x [B, T, H, K]. `head` (the authors' code, BryceZhuo/HybridNorm
  dense_model/olmo/model.py: a norm of size d_model // n_heads on [B, heads, T, head_dim]): each head normalized over
  its K features on its own, one scale (and bias) of size K for all heads, written as a loop over the heads.
  `all`: one norm over the H*K features of the token, a scale of size H*K."""
  kind, eps = cfg["norm"], float(cfg["norm_eps"])
  b, t, h, kd = x.shape
  if form == "head":
    assert p["scale"].shape == (kd,), f"per-head QKV norm: scale {p['scale'].shape}, the authors' is ({kd},)"
    return np.stack([norm(x[:, :, j], p, kind, eps) for j in range(h)], axis=2)
  assert form == "all", form
  return norm(x.reshape(b, t, h * kd), p, kind, eps).reshape(x.shape)


def _qkv_hook(name, base, cfg, hybrid_form=None):
  """HybridNorm: N per head or over each whole projection (hybrid_qkv_norm), then RoPE; `hybrid_form` overrides
  the config's `hybrid_norm.qkv_norm`. nGPT: q, k <- s_qk Norm(RoPE(.)) per head, s_qk = param sqrt(D) s_qk_init,
  scores times sqrt(K)."""
  def nrm(x, which):
    form = hybrid_form or cfg["hybrid_norm"]["qkv_norm"]
    return hybrid_qkv_norm(x, base["qkv"][which], cfg, form)

  def hybrid_hook(q, k, v, rot):
    return rot(nrm(q, "q_norm")), rot(nrm(k, "k_norm")), nrm(v, "v_norm"), q.shape[-1] ** -0.5

  def ngpt_hook(q, k, v, rot):
    s = base["qkv"]["s_qk"] * math.sqrt(cfg["d_model"]) * cfg["ngpt"]["s_qk_init"]
    return s * unit(rot(q)), s * unit(rot(k)), v, math.sqrt(q.shape[-1])
  return {"hybrid_norm": hybrid_hook, "ngpt": ngpt_hook}.get(name)


DELTA = ("delta_attn_res", "delta_attn_res_block")


def _segments(name, cfg):
  L = cfg["num_layers"]
  if name == "hybrid_norm" and cfg["hybrid_norm"]["first_pre_norm"]:
    return (("blocks_first", 1, pre), ("blocks", L - 1, hybrid))
  fn = {"admin": admin, "resi_dual": resi_dual, "hybrid_norm": hybrid, "denseformer": pre, "ngpt": ngpt,
        "mhc_lite": mhc_lite, "attn_res": attn_res, "attn_res_block": attn_res, "laurel": laurel,
        "delta_attn_res": delta_attn_res, "delta_attn_res_block": delta_attn_res,
        "value_residual": value_residual, "mudd": mudd, "resid_lambdas": resid_lambdas}[name]
  return (("blocks", L, fn),)


def forward(params, cfg, tokens, hybrid_form=None):
  """Logits [B, T, V] (float64); cfg: the model config (dict-like). Raises UnusedParams for an unread leaf.
  `hybrid_form`: HybridNorm's QKV norm form ("head" or "all") whatever the config says."""
  name, used = cfg["residual"], set()
  p = _View(params, used)
  kind, eps = cfg["norm"], float(cfg["norm_eps"])
  x = p["embed"][np.asarray(tokens)]
  if cfg["pos"] == "learned":
    x = x + p["pos_embed"][None, : x.shape[1]]
  if name == "resi_dual":
    state = np.stack([x, x], axis=2)                           # both streams start at the embedding
  elif name == "mhc_lite":
    state = np.repeat(x[:, :, None], cfg["mhc_lite"]["n"], axis=2)
  elif name in ("attn_res", "attn_res_block"):
    state = ([x], None, 0)
  elif name in DELTA:
    state = ([x], None, 0, x)
  elif name == "laurel":
    state = [x]
  elif name == "value_residual":
    state = (x, None)
  elif name == "resid_lambdas":
    if cfg["resid_lambdas"]["preset"] != "identity":           # nanochat's x = x0 = norm(x): no weight
      x = x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps)
    state = (x, x, None, 0)
  elif name == "mudd":
    state = ([x], None, mudd_unpack(p["dense"], cfg["num_layers"]) if cfg["num_layers"] > 1 else [])
  else:
    state = x
  outs, i = [x], 0                                             # DenseFormer: X_0, X_1, ...
  for seg, length, fn in _segments(name, cfg):
    for li in range(length):
      lp, i = p[seg].layer(li, length), i + 1
      for kind_name in ("attn", "mlp"):
        base = lp[kind_name]
        if kind_name == "attn":
          f = lambda h, base=base: attention(h, base, cfg, _qkv_hook(name, base, cfg, hybrid_form))
        else:
          hidden = None
          if name == "ngpt":  # s_v sqrt(D) on x W_i (param * s_v_init: scale 1)
            s_v = lambda base: base["hidden"]["s_v"] * cfg["ngpt"]["s_v_init"] * math.sqrt(cfg["d_model"])
            hidden = lambda h, base=base, s_v=s_v: h * s_v(base)
          f = lambda h, base=base, hidden=hidden: mlp(h, base, cfg, hidden)
        own = f"{kind_name}_norm"
        nrm = (lambda h, q=lp[own]: norm(h, q, kind, eps)) if own in lp else None
        res = lp[f"{kind_name}_res"] if f"{kind_name}_res" in lp else None
        if name in ("attn_res", "attn_res_block") + DELTA:
          res = lp["attn_res"]                                 # both sublayers' pseudo-queries
        state = fn(state, _Ctx(f, nrm, res, cfg, kind_name, base))
      if name == "denseformer":
        outs.append(state)
        state = dwa(outs, lp["after_block"]["alpha"], i, cfg)
  assert i == cfg["num_layers"]
  if name == "resi_dual":
    y = state[:, :, 0] + norm(state[:, :, 1], p["dual_norm"], kind, eps)   # y = x_N + N_d(d_N)
  elif name in ("attn_res", "attn_res_block"):
    assert state[1] is None and state[2] == 2 * cfg["num_layers"]
    y = depth_attention(state[0], p["final_res"]["query"], eps)            # the head's own aggregation
  elif name in ("laurel", "value_residual"):
    y = state[0]
  elif name in DELTA:
    assert state[1] is None and state[2] == 2 * cfg["num_layers"]
    y = state[3]
  elif name == "resid_lambdas":
    x_b = state[2] if state[2] is not None else np.zeros_like(state[0])
    y = state[0] - p["backout"]["lambda_b"] * x_b                       # the backout
  elif name == "mudd":
    y = mudd_head(state[0], p["final_dense"], cfg)
  else:
    y = state.sum(axis=2) if name == "mhc_lite" else state
  if name in ("hybrid_norm", "denseformer", "mhc_lite", "attn_res", "attn_res_block", "laurel",
              "value_residual", "mudd", "resid_lambdas") + DELTA and cfg["final_norm"]:
    y = norm(y, p["final_norm"], kind, eps)
  logits = y @ p["embed"].T if cfg["tie_embed"] else y @ p["head"]
  if name == "ngpt":  # s_z = param sqrt(D) s_z_init per vocabulary entry
    logits = logits * p["logit_scale"]["s_z"] * math.sqrt(cfg["d_model"]) * cfg["ngpt"]["s_z_init"]
  unused = sorted("/".join(k) for k in set(_leaf_paths(params)) - used)
  if unused:
    raise UnusedParams(f"residual {name}: params not used by the reference: {', '.join(unused)}")
  return logits


def admin_profile(params, cfg, tokens):
  """[L, 2] Admin omegas (Transformer-Clinic's adaptive profiling), in one pass over the sublayers: omega_1 = 1,
  omega_{i+1}^2 = Var[omega_i x] + Var[F_i(x)] (over all elements), then x <- N(omega_i x + F_i(x))."""
  p = _View(params, set())
  kind, eps = cfg["norm"], float(cfg["norm_eps"])
  x = p["embed"][np.asarray(tokens)]
  if cfg["pos"] == "learned":
    x = x + p["pos_embed"][None, : x.shape[1]]
  r2, out = 1.0, []
  for li in range(cfg["num_layers"]):
    lp = p["blocks"].layer(li, cfg["num_layers"])
    row = []
    for kind_name, f in (("attn", attention), ("mlp", mlp)):
      omega = math.sqrt(r2)
      y = f(x, lp[kind_name], cfg)
      r2 = np.var(omega * x) + np.var(y)
      x = norm(omega * x + y, lp[f"{kind_name}_norm"], kind, eps)
      row.append(omega)
    out.append(row)
  return np.array(out)
