"""Recomputation over groups of layers (`model.remat_group` = k): the scan over blocks saves the carry only at the
start of every group of k layers; the backward of a group recomputes its forward from that carry, saving the
carries inside the group while it runs.

The scan over blocks keeps every block's input carry for the backward: L carries of [B, T, D] for a single stream,
[B, T, n, D] for the multi-stream placements (HC, mHC, KromHC: n = 4) and the speedrun scalars' [B, T, 3, D]. With
groups it keeps ceil(L / k) of them, plus the k of the group the backward is in: the mHC paper's recomputation
(arXiv 2512.24880, Sec. 4.3: the input of every L_r-th layer kept, the blocks between recomputed), on any placement
whose state rides the carry. The cost is one more forward of every block in the backward. Each block keeps its
own `model.remat` policy inside the recomputed group. The function, the params and their layout are unchanged
(tested equal to the plain scan in loss and gradients), so the field is a runtime one: a checkpoint resumes under
any value of it.
"""
import jax


def group_scan(body, params, state, layers, k: int):
  """(state, ys) of `for l: state, y_l = body(params[l], state, layers[l])` over the leading axis, as scans over
  groups of k layers (the last group shorter when k does not divide the length), each group a jax.checkpoint that
  saves only its input carry."""
  length = layers.shape[0]

  def run(s, inp):
    return jax.lax.scan(lambda s, x: body(x[0], s, x[1]), s, inp)

  group = jax.checkpoint(run, prevent_cse=False)   # under a scan: CSE across iterations is not a risk
  full, ys = (length // k) * k, []
  if full:
    grouped = jax.tree.map(lambda a: a[:full].reshape((full // k, k) + a.shape[1:]), (params, layers))
    state, y = jax.lax.scan(group, state, grouped)
    ys.append(jax.tree.map(lambda a: a.reshape((full,) + a.shape[2:]), y))
  if full < length:
    state, y = group(state, jax.tree.map(lambda a: a[full:], (params, layers)))
    ys.append(y)
  if len(ys) == 1:
    return state, ys[0]
  return state, jax.tree.map(lambda *a: jax.numpy.concatenate(a), *ys)
