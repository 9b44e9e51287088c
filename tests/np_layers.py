"""The float64 NumPy reference's param view and base layers (tests/np_reference.py builds the whole LM on them,
tests/np_reference_placements.py its placements): the read-recording view of the Flax param tree, and norm, RoPE,
attention and the MLP from the equations of docs/variants.md. Like np_reference it imports nothing from resnorm.
"""
import functools
import math

import numpy as np
import scipy.special

class UnusedParams(AssertionError):
  pass


def _is_tree(v):
  return hasattr(v, "keys")


class _View:
  """Read-only view of the param tree that records every leaf read (as a path); `layer(i)` slices stacked leaves."""

  def __init__(self, tree, used, path=(), layer=None, length=None):
    self._tree, self._used, self._path, self._layer, self._length = tree, used, path, layer, length

  def __contains__(self, key):
    return key in self._tree

  def __getitem__(self, key):
    if key not in self._tree:
      raise KeyError(f"param {'/'.join(self._path + (key,))} is missing")
    v, path = self._tree[key], self._path + (key,)
    if _is_tree(v):
      return _View(v, self._used, path, self._layer, self._length)
    self._used.add(path)
    a = np.asarray(v, np.float64)
    if self._layer is None:
      return a
    assert a.shape[0] == self._length, f"{'/'.join(path)}: {a.shape[0]} stacked layers, expected {self._length}"
    return a[self._layer]

  def layer(self, i, length):
    return _View(self._tree, self._used, self._path, i, length)


def _leaf_paths(tree, path=()):
  for k, v in tree.items():
    if _is_tree(v):
      yield from _leaf_paths(v, path + (k,))
    else:
      yield path + (k,)


# ---------------------------------------------------------------------------------------------------------------
# Base layers.


def norm(x, p, kind, eps):
  """LayerNorm (Ba et al. 2016): (x - mean) / sqrt(var + eps) * scale + bias; RMSNorm (Zhang & Sennrich 2019):
  x / sqrt(mean(x^2) + eps) * scale, no bias. Both over the last axis. DyT (Zhu et al. 2025, Eq. 1), elementwise:
  scale * tanh(alpha x) + bias, alpha a scalar, the bias only where the params have one (`model.dyt.bias`). Derf
  (Chen et al. 2025, arXiv 2512.10938), elementwise: scale * erf(alpha x + shift) + bias, alpha and shift scalars."""
  if kind == "derf":
    y = scipy.special.erf(p["alpha"] * x + p["shift"]) * p["scale"]
    return y + p["bias"] if "bias" in p else y
  if kind == "dyt":
    y = np.tanh(p["alpha"] * x) * p["scale"]
    return y + p["bias"] if "bias" in p else y
  if kind == "layernorm":
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * p["scale"] + p["bias"]
  if kind == "rmsnorm":
    return x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps) * p["scale"]
  raise ValueError(f"norm {kind!r}")


@functools.lru_cache(maxsize=None)
def rope_rotations(t, k, base):
  """R[p] in R^{K x K}, the RoPE rotation at position p (Su et al. 2021, Eq. 13-15), built entry by entry.

  Pairing convention: the model uses the rotate-half (GPT-NeoX) form, which rotates the pair of dims (i, i + K/2)
  by the angle p * base^(-2i/K), i = 0..K/2-1 (Su et al. write the pairs as (2i, 2i+1); the two differ by a fixed
  permutation of the head dims, absorbed by W_q and W_k in training but not at given params).
  """
  half = k // 2
  r = np.zeros((t, k, k))
  for i in range(half):
    theta = base ** (-2.0 * i / k)
    for p in range(t):
      c, s = math.cos(p * theta), math.sin(p * theta)
      r[p, i, i], r[p, i, i + half] = c, -s
      r[p, i + half, i], r[p, i + half, i + half] = s, c
  return r


def attention(x, p, cfg, qkv=None):
  """Causal softmax attention (Vaswani et al. 2017): softmax(q k^T / sqrt(K) + mask) v, then W_o; RoPE on q and k.
  `qkv(q, k, v, rope) -> (q, k, v, score scale)`: a variant's own treatment of the projections (HybridNorm's QKV
  norms, nGPT's normalized q and k; tests/np_reference_placements.py) in place of RoPE and 1/sqrt(K)."""
  q, k, v = (np.einsum("btd,dhk->bthk", x, p[name]) for name in ("q", "k", "v"))
  t, kd = x.shape[1], q.shape[-1]
  rot = lambda z: z
  if cfg["pos"] == "rope":
    r = rope_rotations(t, kd, float(cfg["rope_base"]))
    rot = lambda z: np.einsum("tij,bthj->bthi", r, z)
  if qkv is None:
    q, k, scale = rot(q), rot(k), 1.0 / math.sqrt(kd)
  else:
    q, k, v, scale = qkv(q, k, v, rot)
  s = np.einsum("bthk,bshk->bhts", q, k) * scale
  s = np.where(np.tril(np.ones((t, t), bool)), s, -np.inf)  # key s visible from query t iff s <= t
  w = np.exp(s - s.max(-1, keepdims=True))
  w = w / w.sum(-1, keepdims=True)
  return np.einsum("bhts,bshk,hkd->btd", w, v, p["o"])


def mlp(x, p, cfg=None, hidden=None):
  """GELU MLP without biases, GELU in its tanh approximation (Hendrycks & Gimpel 2016). `hidden`: a variant's
  scaling of x W_i before the GELU (nGPT's s_v)."""
  h = x @ p["wi"]
  h = hidden(h) if hidden is not None else h
  return 0.5 * h * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h ** 3))) @ p["wo"]


def _sigmoid(z):
  return 1.0 / (1.0 + np.exp(-z))
