"""Decoding with a KV cache computes what training computed: prefill + one token at a time == the full forward at
every position, for every variant; sampling is reproducible; prompt encoding and length checks."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import apply_fn, init_and_apply, init_params, representative, tiny_config
from resnorm.evaluation import generate
from resnorm.model import residual
from resnorm.core.errors import InputError

VARIANTS = sorted({v.name for v in residual.REGISTRY.values()})


def _perturbed(params, scale=0.05):
  """Every leaf moved off its init, so symmetric inits (identical streams, I, J/n) cannot hide a wrong cache."""
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(11), len(leaves))
  return jax.tree.unflatten(tree, [x + scale * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys)])


def _incremental_logits(mcfg, params, tokens, prefill: int):
  dec = generate.Decoder(mcfg, tokens.shape[0], tokens.shape[1])
  logits, cache = dec.logits(params, dec.empty_cache, tokens[:, :prefill])
  out = [logits]
  for t in range(prefill, tokens.shape[1]):
    logits, cache = dec.logits(params, cache, tokens[:, t:t + 1])
    out.append(logits)
  return jnp.concatenate(out, axis=1)


# Decoding is the LM's own for every variant; the fast suite decodes each kind of state (one stream, n streams,
# fractions, a depth store, a carried window, value residuals), `make test-integration` the rest.
@pytest.mark.parametrize("name", representative(VARIANTS, keep=("mhc",)))
def test_prefill_then_decode_equals_full_forward(name):
  pos = "learned" if name in ("pre_norm", "hc") else "rope"  # both position schemes, on a single and a multi-stream
  cfg = tiny_config(name, 4 if name == "mix_ln" else 2, **{"model.pos": pos})  # mix_ln: both segments
  mcfg, params, tokens = init_params(cfg, t=12)
  params = _perturbed(params)
  full = apply_fn(mcfg)(params, tokens)
  inc = _incremental_logits(mcfg, params, tokens, prefill=5)
  np.testing.assert_allclose(inc, full, rtol=1e-5, atol=1e-5)


def test_decode_in_bfloat16_with_float32_norm_statistics():
  """bf16 decoding against the bf16 full forward: the same function up to bf16 rounding of the two orders of
  computation (measured max |diff| well under the 0.1 stated here, on logits of magnitude ~5)."""
  cfg = tiny_config("hc", 2, **{"model.dtype": "bfloat16"})
  mcfg, params, tokens, full = init_and_apply(cfg, t=12)
  inc = _incremental_logits(mcfg, params, tokens, prefill=3)
  assert float(jnp.max(jnp.abs(inc - full))) < 0.1


def test_greedy_is_deterministic_and_sampling_reproducible_with_a_seed():
  cfg = tiny_config("mhc", 2)
  mcfg, params, _ = init_params(cfg)
  prompt = generate.encode("def f(")
  runs = [generate.generate(mcfg, params, prompt, 6, temperature=0.0) for _ in range(2)]
  assert runs[0] == runs[1] and len(runs[0][0]) <= 6
  a = generate.generate(mcfg, params, prompt, 6, temperature=1.0, top_k=5, seed=3, num_samples=3)
  b = generate.generate(mcfg, params, prompt, 6, temperature=1.0, top_k=5, seed=3, num_samples=3)
  assert a == b and len(a) == 3 and all(t < 256 for row in a for t in row)


def test_encoding_and_length_checks():
  np.testing.assert_array_equal(generate.encode(""), [256])
  np.testing.assert_array_equal(generate.encode("hé"), [256, 104, 195, 169])
  assert generate.decode_bytes([104, 195, 169, 256, 65]) == "hé"
  cfg = tiny_config("pre_norm", 2)  # context 16
  generate.check_lengths(cfg, 10, 6)
  with pytest.raises(InputError, match="longer than the model's context of 16"):
    generate.check_lengths(cfg, 17, 1)
  with pytest.raises(InputError, match="max_new_tokens=7"):
    generate.check_lengths(cfg, 10, 7)


def test_top_k_and_greedy_sampling_rules():
  logits = jnp.asarray([[0.0] * 257 + [9.0] * 63])  # PAD (257) and the padding ids above it
  logits = logits.at[0, 65].set(5.0).at[0, 66].set(4.0)
  assert int(generate.sample(logits, jax.random.key(0), 0.0, 0)[0]) == 65  # never sampled, however likely
  got = {int(generate.sample(logits, k, 1.0, 2)[0]) for k in jax.random.split(jax.random.key(1), 50)}
  assert got == {65, 66}
  # the temperature divides the logits: the share of the second-best byte follows softmax(logits / T)
  n = 4000
  for t in (0.25, 1.0, 4.0):
    share = float(jnp.mean(generate.sample(jnp.repeat(logits, n, axis=0), jax.random.key(2), t, 2) == 66))
    p = 1.0 / (1.0 + np.exp(1.0 / t))
    assert abs(share - p) < 4 * np.sqrt(p * (1 - p) / n), (t, share, p)


# The flags' ranges: 257 tokens can be sampled (256 bytes + BOS, counted by hand), seeds are 64-bit.
BAD_SETTINGS = [({"top_k": 1000}, r"--top_k=1000 must be in \[0, 257\]"),
                ({"top_k": 258}, r"--top_k=258 must be in \[0, 257\]"),
                ({"top_k": -1}, r"--top_k=-1 must be in \[0, 257\]"),
                ({"temperature": -0.5}, r"--temperature=-0.5 must be a finite number >= 0"),
                ({"temperature": float("nan")}, r"--temperature=nan must be a finite number"),
                ({"temperature": float("inf")}, r"--temperature=inf must be a finite number"),
                ({"num_samples": 0}, r"--num_samples=0 must be >= 1"),
                ({"seed": 2**63}, r"--seed=9223372036854775808 must be in \[-2\*\*63, 2\*\*63 - 1\]")]


@pytest.mark.parametrize("over,msg", BAD_SETTINGS, ids=[m.split(" ")[0] for _, m in BAD_SETTINGS])
def test_sampling_flags_out_of_range_are_refused_with_the_range(over, msg):
  settings = {"temperature": 1.0, "top_k": 0, "num_samples": 1, "seed": 0, **over}
  with pytest.raises(InputError, match=f"^{msg}"):
    generate.check_settings(**settings)


def test_the_largest_top_k_allowed_samples_as_top_k_0():
  for top_k, seed in ((257, 2**63 - 1), (0, -2**63), (1, 0)):
    generate.check_settings(1.0, top_k, 1, seed)
  logits = jax.random.normal(jax.random.key(3), (64, 320))
  keys = jax.random.split(jax.random.key(4), 5)
  for k in keys:  # 257 keeps every sampleable token: the same draws as no restriction
    np.testing.assert_array_equal(generate.sample(logits, k, 1.0, 257), generate.sample(logits, k, 1.0, 0))


def test_eval_generate_top_k_past_the_vocabulary_is_one_line_and_exit_2(tmp_path):
  from test_cli import run
  r = run("eval.py", f"--workdir={tmp_path}", "--generate=def ", "--temperature=1", "--top_k=1000")
  assert r.returncode == 2, (r.returncode, r.stderr[-1500:])
  assert r.stderr.strip().splitlines() == [
      "error: --top_k=1000 must be in [0, 257]: 0 samples among all 257 tokens a model can generate "
      "(the 256 bytes and BOS)"]
