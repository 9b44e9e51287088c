"""An independent float64 NumPy forward pass for the placements admin, resi_dual, hybrid_norm, denseformer, ngpt and
mhc_lite, written from the equations in their docstrings and docs/variants.md sections 3-4 (same conventions as
tests/np_reference.py). It imports nothing from resnorm: only the param names and layout are shared with the model.
`forward(params, cfg, tokens)` returns logits [B, T, V]; every leaf of the param tree must be read
(`UnusedParams` otherwise). `admin_profile(params, cfg, tokens)` is Admin's profiling pass.
"""
import itertools
import math

import numpy as np

VARIANTS = ("admin", "resi_dual", "hybrid_norm", "denseformer", "ngpt", "mhc_lite")


class UnusedParams(AssertionError):
  pass


class _View:
  """Read-only view of the param tree that records each leaf read; `layer(i)` slices stacked leaves."""

  def __init__(self, tree, used, path=(), layer=None):
    self._tree, self._used, self._path, self._layer = tree, used, path, layer

  def __contains__(self, key):
    return key in self._tree

  def __getitem__(self, key):
    v, path = self._tree[key], self._path + (key,)
    if hasattr(v, "keys"):
      return _View(v, self._used, path, self._layer)
    self._used.add(path)
    a = np.asarray(v, np.float64)
    return a if self._layer is None else a[self._layer]

  def layer(self, i):
    return _View(self._tree, self._used, self._path, i)


def _leaves(tree, path=()):
  for k, v in tree.items():
    yield from (_leaves(v, path + (k,)) if hasattr(v, "keys") else [path + (k,)])


def norm(x, p, cfg):
  """LayerNorm (x - mean) / sqrt(var + eps) * scale + bias, or RMSNorm x / sqrt(mean x^2 + eps) * scale."""
  eps = float(cfg["norm_eps"])
  if cfg["norm"] == "layernorm":
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * p["scale"] + p["bias"]
  return x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps) * p["scale"]


def unit(x):
  """nGPT's Norm: x / ||x|| over the last axis."""
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


def rope(x, base):
  """Rotate-half RoPE: dims (i, i + K/2) of position t rotated by t * base^(-2i/K)."""
  t, k = x.shape[1], x.shape[-1]
  ang = np.arange(t)[:, None] * base ** (-2.0 * np.arange(k // 2) / k)
  c, s = np.cos(ang)[None, :, None], np.sin(ang)[None, :, None]
  a, b = x[..., : k // 2], x[..., k // 2:]
  return np.concatenate([a * c - b * s, b * c + a * s], -1)


def attention(x, p, cfg, qkv=None):
  """Causal softmax(q k^T / sqrt(K)) v W_o. `qkv(q, k, v, rope) -> (q, k, v, score_scale)` replaces RoPE."""
  q, k, v = (np.einsum("btd,dhk->bthk", x, p[n]) for n in ("q", "k", "v"))
  rot = (lambda z: rope(z, float(cfg["rope_base"]))) if cfg["pos"] == "rope" else (lambda z: z)
  t, kd = x.shape[1], q.shape[-1]
  if qkv is None:
    q, k, scale = rot(q), rot(k), kd ** -0.5
  else:
    q, k, v, scale = qkv(q, k, v, rot)
  s = np.einsum("bthk,bshk->bhts", q, k) * scale
  s = np.where(np.tril(np.ones((t, t), bool)), s, -np.inf)
  w = np.exp(s - s.max(-1, keepdims=True))
  return np.einsum("bhts,bshk,hkd->btd", w / w.sum(-1, keepdims=True), v, p["o"])


def mlp(x, p, hidden=None):
  """GELU (tanh form) MLP; `hidden` acts on x W_i before the GELU."""
  h = x @ p["wi"]
  h = hidden(h) if hidden else h
  return 0.5 * h * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h ** 3))) @ p["wo"]


# --- the variants: sublayer (state, c) -> state, c with f (branch), n (own norm), res, cfg -------------------------


class _Ctx:
  def __init__(self, f, n, res, cfg, kind):
    self.f, self.n, self.res, self.cfg, self.kind = f, n, res, cfg, kind


def admin(x, c):
  """x <- N(omega (.) x + F(x))."""
  return c.n(c.res["omega"] * x + c.f(x))


def resi_dual(s, c):
  """(x, d) <- (N(x + F(x)), d + F(x)); s[:, :, 0] = x, s[:, :, 1] = d."""
  y = c.f(s[:, :, 0])
  return np.stack([c.n(s[:, :, 0] + y), s[:, :, 1] + y], axis=2)


def hybrid(x, c):
  """Attention: X + Attn_QKV(X); FFN: N(Y) + FFN(N(Y))."""
  if c.kind == "attn":
    return x + c.f(x)
  h = c.n(x)
  return h + c.f(h)


def pre(x, c):
  """Pre-Norm, HybridNorm*'s first block (its attention with the QKV norms): x + F(N(x))."""
  return x + c.f(c.n(x))


def ngpt(h, c):
  """h <- Norm(Norm(h) + |alpha| (Norm(F(h)) - Norm(h))), alpha = param * alpha_init sqrt(D)."""
  a = np.abs(c.res["alpha"] * c.cfg["ngpt"]["alpha_init"] * math.sqrt(c.cfg["d_model"]))
  hn = unit(h)
  return unit(hn + a * (unit(c.f(h)) - hn))


def _sigmoid(z):
  return 1.0 / (1.0 + np.exp(-z))


def mhc_lite(x, c):
  """x <- H_res x + H_post^T F(N(H_pre x)); x' = vec(x) / rms, proj = x' phi = [pre n | post n | res n!];
  H_res = sum_k softmax(a_res proj_res + b_res)_k P_k, (P_k x)_i = x_{perm_k(i)} (itertools order)."""
  mc, r = c.cfg["mhc_lite"], c.res
  b, t, n, d = x.shape
  v = x.reshape(b, t, n * d)
  v = v / np.sqrt((v ** 2).mean(-1, keepdims=True) + float(mc["eps"]))
  proj = v @ r["phi"]
  h_pre = _sigmoid(r["a_pre"] * proj[..., :n] + r["b_pre"])
  h_post = 2.0 * _sigmoid(r["a_post"] * proj[..., n:2 * n] + r["b_post"])
  z = r["a_res"] * proj[..., 2 * n:] + r["b_res"]
  w = np.exp(z - z.max(-1, keepdims=True))
  w = w / w.sum(-1, keepdims=True)
  perms = list(itertools.permutations(range(n)))
  h_res = np.zeros((b, t, n, n))
  for kk, perm in enumerate(perms):
    for i in range(n):
      h_res[:, :, i, perm[i]] += w[..., kk]
  y = c.f(c.n(np.einsum("btn,btnd->btd", h_pre, x)))
  return np.einsum("btij,btjd->btid", h_res, x) + h_post[..., None] * y[:, :, None, :]


def _dwa(outs, alpha, i, cfg):
  """DenseFormer after block i (1-based): sum of alpha_j X_j over j <= i with j = i mod k, if i = 0 mod p."""
  k, p = cfg["denseformer"]["dilation"], cfg["denseformer"]["period"]
  if i % p:
    return outs[i]
  return sum(alpha[j] * outs[j] for j in range(i + 1) if (i - j) % k == 0)


def _qkv_norm(c_attn, cfg):
  """HybridNorm: N over each whole projection (H*K features), before RoPE."""
  def hook(q, k, v, rot):
    def n(x, name):
      b, t, h, kd = x.shape
      return norm(x.reshape(b, t, h * kd), c_attn["qkv"][name], cfg).reshape(x.shape)
    return rot(n(q, "q_norm")), rot(n(k, "k_norm")), n(v, "v_norm"), q.shape[-1] ** -0.5
  return hook


def _ngpt_qk(c_attn, cfg):
  """nGPT: q, k <- s_qk Norm(RoPE(.)) per head, s_qk = param sqrt(D) s_qk_init; scores scaled by sqrt(K)."""
  def hook(q, k, v, rot):
    s = c_attn["qkv"]["s_qk"] * math.sqrt(cfg["d_model"]) * cfg["ngpt"]["s_qk_init"]
    return s * unit(rot(q)), s * unit(rot(k)), v, math.sqrt(q.shape[-1])
  return hook


def _segments(name, cfg):
  L = cfg["num_layers"]
  if name == "hybrid_norm" and cfg["hybrid_norm"]["first_pre_norm"]:
    return (("blocks_first", 1, pre), ("blocks", L - 1, hybrid))
  return (("blocks", L, {"admin": admin, "resi_dual": resi_dual, "hybrid_norm": hybrid, "denseformer": pre,
                         "ngpt": ngpt, "mhc_lite": mhc_lite}[name]),)


def forward(params, cfg, tokens):
  """Logits [B, T, V] (float64). cfg: the model config as a dict-like."""
  name = cfg["residual"]
  used = set()
  p = _View(params, used)
  x = p["embed"][np.asarray(tokens)]
  if cfg["pos"] == "learned":
    x = x + p["pos_embed"][None, : x.shape[1]]
  n = cfg["mhc_lite"]["n"] if name == "mhc_lite" else 0
  state = {"resi_dual": lambda: np.stack([x, x], 2), "mhc_lite": lambda: np.repeat(x[:, :, None], n, 2)}.get(
      name, lambda: x)()
  outs, i = [x], 0  # DenseFormer: X_0, X_1, ...
  for seg, length, fn in _segments(name, cfg):
    for li in range(length):
      lp = p[seg].layer(li) if length else None
      i += 1
      for kind in ("attn", "mlp"):
        base = lp[kind]
        if kind == "attn":
          hook = {"hybrid_norm": _qkv_norm, "ngpt": _ngpt_qk}.get(name)
          f = lambda h, base=base, hook=hook: attention(h, base, cfg, hook(base, cfg) if hook else None)
        else:
          hid = None
          if name == "ngpt":
            hid = lambda h, base=base: h * base["hidden"]["s_v"] * cfg["ngpt"]["s_v_init"] * math.sqrt(cfg["d_model"])
          f = lambda h, base=base, hid=hid: mlp(h, base, hid)
        own = f"{kind}_norm"
        nrm = (lambda h, q=lp[own]: norm(h, q, cfg)) if own in lp else None
        res = lp[f"{kind}_res"] if f"{kind}_res" in lp else None
        state = fn(state, _Ctx(f, nrm, res, cfg, kind))
      if name == "denseformer":
        outs.append(state)
        state = _dwa(outs, lp["after_block"]["alpha"], i, cfg)
  assert i == cfg["num_layers"]
  if name == "resi_dual":
    y = state[:, :, 0] + norm(state[:, :, 1], p["dual_norm"], cfg)
  elif name == "mhc_lite":
    y = state.sum(2)
  else:
    y = state
  if name in ("hybrid_norm", "denseformer", "mhc_lite") and cfg["final_norm"]:
    y = norm(y, p["final_norm"], cfg)
  logits = y @ p["embed"].T if cfg["tie_embed"] else y @ p["head"]
  if name == "ngpt":
    logits = logits * p["logit_scale"]["s_z"] * math.sqrt(cfg["d_model"]) * cfg["ngpt"]["s_z_init"]
  unused = sorted("/".join(k) for k in set(_leaves(params)) - used)
  if unused:
    raise UnusedParams(f"residual {name}: params not used by the reference: {', '.join(unused)}")
  return logits


def admin_profile(params, cfg, tokens):
  """[L, 2] Admin omegas (Transformer-Clinic's adaptive profiling): omega_1 = 1, then per sublayer
  omega_{i+1}^2 = Var[omega_i x] + Var[F_i(x)] (over all elements), x <- N(omega_i x + F_i(x)), in one pass."""
  p = _View(params, set())
  x = p["embed"][np.asarray(tokens)]
  if cfg["pos"] == "learned":
    x = x + p["pos_embed"][None, : x.shape[1]]
  r2, out = 1.0, []
  for li in range(cfg["num_layers"]):
    lp = p["blocks"].layer(li)
    row = []
    for kind, f in (("attn", lambda h, b: attention(h, b, cfg)), ("mlp", lambda h, b: mlp(h, b))):
      omega = math.sqrt(r2)
      y = f(x, lp[kind])
      r2 = np.var(omega * x) + np.var(y)
      x = norm(omega * x + y, lp[f"{kind}_norm"], cfg)
      row.append(omega)
    out.append(row)
  return np.array(out)


def cross_entropy(logits, targets, mask):
  m = logits.max(-1, keepdims=True)
  lse = (m + np.log(np.exp(logits - m).sum(-1, keepdims=True)))[..., 0]
  ce = lse - np.take_along_axis(logits, np.asarray(targets)[..., None], axis=-1)[..., 0]
  mask = np.asarray(mask, np.float64)
  return float((ce * mask).sum() / max(mask.sum(), 1.0))
