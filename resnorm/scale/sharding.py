"""Mesh (data, fsdp, tensor), logical axis rules, and the shardings of params, optimizer state and batches.
Joining several processes into one mesh is resnorm/scale/distributed.py."""
import math

import flax.linen as nn
import jax
from jax.sharding import NamedSharding, PartitionSpec as P

from resnorm.core.errors import check

AXES = ("data", "fsdp", "tensor")

# Logical name -> mesh axes. Params are FSDP-sharded on their embed axis; heads / mlp / vocab go on tensor.
RULES = (
    ("batch", ("data", "fsdp")),
    ("embed", "fsdp"),
    ("heads", "tensor"),
    ("mlp", "tensor"),
    ("vocab", "tensor"),
    ("kv", None),
    ("layers", None),
    ("norm", None),
    ("streams", None),
    ("seq", None),
    ("act_embed", None),
    ("act_mlp", "tensor"),
    ("act_vocab", "tensor"),
)


def mesh_shape(mcfg, num_devices: int) -> tuple[int, int, int]:
  sizes = [mcfg.data, mcfg.fsdp, mcfg.tensor]
  for name, s in zip(AXES, sizes):
    check(s == -1 or s >= 1, f"mesh.{name}={s} must be -1 or >= 1")
  fill = [i for i, s in enumerate(sizes) if s == -1]
  check(len(fill) <= 1, "at most one of mesh.data, mesh.fsdp, mesh.tensor may be -1")
  known = math.prod(s for s in sizes if s != -1)
  if fill:
    check(num_devices % known == 0,
          f"mesh: {known} devices in the fixed axes do not divide the {num_devices} devices available")
    sizes[fill[0]] = num_devices // known
  check(math.prod(sizes) == num_devices,
        f"mesh: data*fsdp*tensor = {'*'.join(map(str, sizes))} = {math.prod(sizes)} but {num_devices} devices")
  return tuple(sizes)


def make_mesh(mcfg, devices=None) -> jax.sharding.Mesh:
  devices = devices if devices is not None else jax.devices()
  shape = mesh_shape(mcfg, len(devices))
  return jax.make_mesh(shape, AXES, axis_types=(jax.sharding.AxisType.Auto,) * 3, devices=devices)


def data_parallel_size(mesh) -> int:
  return mesh.shape["data"] * mesh.shape["fsdp"]


def logical_shardings(boxed_tree, mesh):
  """NamedShardings for a tree of (possibly nn.Partitioned) values."""
  specs = nn.get_partition_spec(boxed_tree)
  return nn.logical_to_mesh_sharding(specs, mesh, RULES)


def batch_sharding(mesh) -> NamedSharding:
  return NamedSharding(mesh, nn.logical_to_mesh_axes(("batch", "seq"), RULES))


def replicated(mesh) -> NamedSharding:
  return NamedSharding(mesh, P())
