"""Kernel sets, chosen by `model.kernels`: `reference` (plain jnp + autodiff, what GPU and TPU run) or `xla_cpu`
(forms tuned for XLA:CPU, equal in value and gradient); `auto` picks `xla_cpu` on the CPU backend only."""
import jax

from resnorm.model.kernels import reference, xla_cpu

_SETS = {"reference": reference, "xla_cpu": xla_cpu}


def get(name: str):
  """The kernel module for `model.kernels` (resolved at trace time, so `auto` follows the backend in use)."""
  if name == "auto":
    name = "xla_cpu" if jax.default_backend() == "cpu" else "reference"
  return _SETS[name]
