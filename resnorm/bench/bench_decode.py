"""Decode timing for `python -m resnorm.bench --decode`: prefill of a prompt, then the time per generated token at a
short and a long position, for each variant, with one KV cache size for both positions (attention reads the whole
cache, masked, so a token's cost does not grow with the prefix)."""
import statistics
import time

import jax
import jax.numpy as jnp

from resnorm.evaluation import generate
from resnorm.step import runtime


def _timed(fn, reps: int) -> float:
  times = []
  for _ in range(reps):
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - t0)
  return statistics.median(times)


def decode_point(cfg, positions=(32, 512), batch: int = 1, reps: int = 10) -> dict:
  s = runtime.build(cfg)
  params = s.init_state()["params"]
  cache_len = max(positions) + reps + 6
  dec = generate.Decoder(s.mcfg, batch, cache_len)
  tok = jnp.zeros((batch, 1), jnp.int32)
  rng = jax.random.key(0)
  out = {"residual": cfg.model.residual, "num_layers": cfg.model.num_layers, "cache_len": cache_len}
  for p in positions:
    prompt = jnp.zeros((batch, p), jnp.int32)
    jax.block_until_ready(dec.step(params, dec.empty_cache, prompt, rng, 0.0, 0))  # compile
    out[f"prefill_{p}_s"] = _timed(lambda: dec.step(params, dec.empty_cache, prompt, rng, 0.0, 0), 3)
    _, cache = dec.step(params, dec.empty_cache, prompt, rng, 0.0, 0)
    jax.block_until_ready(dec.step(params, cache, tok, rng, 0.0, 0))  # compile the one-token step
    state = {"cache": cache}

    def one():
      nxt, state["cache"] = dec.step(params, state["cache"], tok, rng, 0.0, 0)
      return nxt
    for _ in range(3):
      jax.block_until_ready(one())
    out[f"token_at_{p}_s"] = _timed(one, reps)
  lo, hi = min(positions), max(positions)
  out["long_over_short"] = out[f"token_at_{hi}_s"] / out[f"token_at_{lo}_s"]
  return out


def print_decode(rows) -> None:
  keys = [k for k in rows[0] if k.endswith("_s")]
  print(f"{'residual':<11}{'L':>4}{'cache':>7}" + "".join(f"{k[:-2]:>14}" for k in keys) + f"{'long/short':>11}")
  for r in rows:
    print(f"{r['residual']:<11}{r['num_layers']:>4}{r['cache_len']:>7}" + "".join(
        f"{r[k] * 1e3:>12.2f}ms" for k in keys) + f"{r['long_over_short']:>11.2f}")
