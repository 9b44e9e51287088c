"""Sampling from a trained model with a KV cache (eval.py --generate).

The prompt is encoded as training data is: BOS, then its UTF-8 bytes. One jitted call prefills the cache with the
prompt; then one jitted call per new token appends it at the cached position and samples the next one on device
(no host sync until the end). Tokens the model never sees as targets (PAD, the vocabulary's padding ids) are never
sampled; a sampled BOS ends that sample (a new document would begin).
"""
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from resnorm.data.data import BOS, PAD
from resnorm.core.errors import check
from resnorm.model.model import LM


def encode(prompt: str) -> np.ndarray:
  return np.concatenate([[BOS], np.frombuffer(prompt.encode("utf-8"), np.uint8)]).astype(np.int32)


def decode_bytes(tokens) -> str:
  out = []
  for t in tokens:
    if t == BOS:
      break
    out.append(int(t))
  return bytes(out).decode("utf-8", errors="replace")


def check_lengths(cfg, prompt_len: int, max_new_tokens: int) -> None:
  """The trained context (data.seq_len, and model.max_len for learned positions) bounds prompt + new tokens."""
  context = cfg.data.seq_len if cfg.model.pos == "rope" else min(cfg.data.seq_len, cfg.model.max_len)
  check(max_new_tokens >= 1, f"--max_new_tokens={max_new_tokens} must be >= 1")
  check(prompt_len <= context, f"--generate: the prompt is {prompt_len} tokens with BOS, longer than the model's "
        f"context of {context} (data.seq_len{' / model.max_len' if cfg.model.pos == 'learned' else ''})")
  check(prompt_len + max_new_tokens <= context,
        f"--max_new_tokens={max_new_tokens}: prompt ({prompt_len} tokens with BOS) + new tokens exceed the model's "
        f"context of {context}; use --max_new_tokens={context - prompt_len} or less")


SAMPLEABLE = PAD  # ids 0..PAD-1: the 256 bytes and BOS; PAD and the vocabulary's padding ids are never sampled


def check_settings(temperature: float, top_k: int, num_samples: int, seed: int) -> None:
  """The sampling flags' ranges (eval.py --generate), checked before any checkpoint is read."""
  check(math.isfinite(temperature) and temperature >= 0,
        f"--temperature={temperature} must be a finite number >= 0 (0: greedy)")
  check(0 <= top_k <= SAMPLEABLE, f"--top_k={top_k} must be in [0, {SAMPLEABLE}]: 0 samples among all "
        f"{SAMPLEABLE} tokens a model can generate (the 256 bytes and BOS)")
  check(num_samples >= 1, f"--num_samples={num_samples} must be >= 1")
  check(-2**63 <= seed < 2**63, f"--seed={seed} must be in [-2**63, 2**63 - 1] (a 64-bit integer)")


def sample(logits_BV: jax.Array, rng: jax.Array, temperature: float, top_k: int) -> jax.Array:
  """Next tokens [B] from the last position's logits: greedy when temperature == 0, else softmax(logits / T)
  restricted to the top_k (0 = all) of the 256 bytes and BOS."""
  ids = jnp.arange(logits_BV.shape[-1])
  logits = jnp.where((ids < PAD)[None], logits_BV.astype(jnp.float32), -jnp.inf)
  if temperature == 0:
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)
  if top_k:
    kth = jax.lax.top_k(logits, top_k)[0][:, -1:]
    logits = jnp.where(logits >= kth, logits, -jnp.inf)
  return jax.random.categorical(rng, logits / temperature, axis=-1).astype(jnp.int32)


class Decoder:
  """A model with a KV cache of `cache_len` positions for `batch` sequences."""

  def __init__(self, mcfg, batch: int, cache_len: int):
    self.model = LM(mcfg, cache_len=cache_len)
    shapes = jax.eval_shape(self.model.init, jax.random.key(0), jnp.zeros((batch, 1), jnp.int32))["cache"]
    self.empty_cache = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

  @functools.partial(jax.jit, static_argnums=(0,))
  def logits(self, params, cache, tokens_BT):
    """(logits [B, T, V] of the T tokens appended at the cached position, the updated cache)."""
    (logits, _), mut = self.model.apply({"params": params, "cache": cache}, tokens_BT, mutable=["cache"])
    return logits, mut["cache"]

  @functools.partial(jax.jit, static_argnums=(0, 5, 6))
  def step(self, params, cache, tokens_BT, rng, temperature, top_k):
    logits, cache = self.logits(params, cache, tokens_BT)
    return sample(logits[:, -1], rng, temperature, top_k), cache


def generate(mcfg, params, prompt: np.ndarray, max_new_tokens: int, temperature: float = 0.0, top_k: int = 0,
             seed: int = 0, num_samples: int = 1) -> list[list[int]]:
  """`num_samples` continuations of one prompt (int32 tokens, BOS first), each `max_new_tokens` long or cut at BOS."""
  dec = Decoder(mcfg, num_samples, len(prompt) + max_new_tokens)
  rngs = jax.random.split(jax.random.key(seed), max_new_tokens)
  tokens = jnp.asarray(np.tile(prompt[None], (num_samples, 1)))
  nxt, cache = dec.step(params, dec.empty_cache, tokens, rngs[0], float(temperature), int(top_k))
  out = [nxt]
  for i in range(1, max_new_tokens):
    nxt, cache = dec.step(params, cache, nxt[:, None], rngs[i], float(temperature), int(top_k))
    out.append(nxt)
  rows = np.asarray(jax.device_get(jnp.stack(out, axis=1)))
  return [list(r[: (list(r).index(BOS) if BOS in r else len(r))]) for r in rows]
