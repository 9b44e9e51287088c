"""model.remat_group (resnorm.model.group_scan): the scan over groups of layers computes the plain scan's loss and
gradients, and keeps fewer carries (XLA's memory analysis of the compiled gradient)."""
import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import init_params, tiny_config
from resnorm.config import configlib
from resnorm.model.group_scan import group_scan
from resnorm.model.model import LM


def test_group_scan_equals_the_scan_for_every_group_size_and_keeps_the_order():
  """A body whose output depends on the order of the layers and on each one's params: groups of 1 to 5 over 5
  layers (a shorter last group at 2 and 3) give the scan's state, per-layer outputs and gradients."""
  ps = jnp.arange(1.0, 6.0)[:, None] * jnp.ones((5, 3))
  layers = jnp.arange(5)

  def body(p, s, l):
    s = jnp.sin(s * p + l)
    return s, jnp.sum(s) * (l + 1)

  def loss(ps, k):
    s, ys = group_scan(body, ps, jnp.ones(3), layers, k) if k else jax.lax.scan(
        lambda s, x: body(x[0], s, x[1]), jnp.ones(3), (ps, layers))
    return jnp.sum(s) + jnp.sum(ys * jnp.arange(1.0, 6.0)), ys
  (want, ys), g = jax.value_and_grad(loss, has_aux=True)(ps, 0)
  for k in (1, 2, 3, 5, 7):
    (got, ys_k), g_k = jax.value_and_grad(loss, has_aux=True)(ps, k)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(ys_k, ys, rtol=1e-6)
    np.testing.assert_allclose(g_k, g, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name,k", [pytest.param("kromhc", 2, marks=pytest.mark.integration), pytest.param("resid_lambdas", 4, marks=pytest.mark.integration),
                                    pytest.param("pre_norm", 3, marks=pytest.mark.integration)])
def test_remat_group_equals_the_plain_scan(name, k):
  cfg = tiny_config(name, 5, **{"model.remat": "full"})
  mcfg, params, tokens = init_params(cfg)
  grouped = configlib.model_config(tiny_config(name, 5, **{"model.remat": "full", "model.remat_group": k}))

  def loss(m, p):
    return jnp.mean(jax.nn.log_softmax(LM(m).apply({"params": p}, tokens)[0])[..., 7])
  l1, g1 = jax.jit(jax.value_and_grad(lambda p: loss(mcfg, p)))(params)
  l2, g2 = jax.jit(jax.value_and_grad(lambda p: loss(grouped, p)))(params)
  np.testing.assert_allclose(l1, l2, rtol=1e-6)
  for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7)


def _temp_bytes(k):
  cfg = tiny_config("hc", 16, **{"model.remat": "full", "model.remat_group": k, "model.d_model": 64,
                                 "model.mlp_dim": 64, "model.num_heads": 2})
  mcfg = configlib.model_config(cfg)
  tokens = jnp.zeros((8, 64), jnp.int32)
  params = jax.eval_shape(lambda: flax.linen.unbox(LM(mcfg).init(jax.random.key(0), tokens)["params"]))
  grad = jax.jit(jax.grad(lambda p: jnp.mean(LM(mcfg).apply({"params": p}, tokens)[0])))
  return grad.lower(params).compile().memory_analysis().temp_size_in_bytes


def test_groups_keep_fewer_carries():
  """HC's 4 streams at 16 layers: groups of 4 keep 4 + 4 carries where the plain scan keeps 16, so the compiled
  gradient's temporaries shrink by most of 8 carries (a [8, 64, 4, 64] float32 carry is 0.5 MiB; measured: 6.4)."""
  carry = 8 * 64 * 4 * 64 * 4
  plain, grouped = _temp_bytes(1), _temp_bytes(4)
  assert plain - grouped > 5 * carry, (plain, grouped)
