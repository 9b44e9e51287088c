"""The parametrization axis (resnorm/model/param.py): `standard` is the code as it was, bit for bit; at the base shape
every parametrization computes what `standard` computes; each rule checked directly at two widths and two depths
against the papers' exponents written out here (init std per role, the first Adam update per role, eps and weight
decay per role, the branch, logit and query multipliers); the roles every placement declares; the refusals, in
the config and in docs/variants.md's table; a resume or an upcycle across parametrizations refused."""
import functools
import json
import os
import re

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import standard_golden
from conftest import ROOT, by_variant, tiny_config
from resnorm.config import configlib
from resnorm.core.errors import InputError
from resnorm.model import param, residual
from resnorm.model.layers import Attention
from resnorm.model.model import LM
from resnorm.step import optim, step
from resnorm.train import upcycle

NAMES = standard_golden.NAMES
# the placements whose digests `make test` checks; the rest in make test-integration
FAST = ("pre_norm",)
slow = lambda *names: pytest.param(*names, marks=pytest.mark.integration)
DEPTH_PARAMS = {"depth_mup": 0.5, "completep": 1.0}  # CompleteP's alpha (arXiv 2505.01618); mup has no depth rule


def _golden():
  with open(os.path.join(ROOT, "tests", "data", "standard_golden.json")) as f:
    return json.load(f).get(jax.__version__)


with open(os.path.join(ROOT, "tests", "data", "standard_golden.json")) as _f:
  # the placements that existed before the axis, whose code before it the digests record
  GOLDEN = sorted(set().union(*(v["placements"] for v in json.load(_f).values())))
# placements added since: no code before the axis to equal
AFTER_THE_AXIS = ("ddl", "delta_attn_res", "delta_attn_res_block", "keel", "kromhc", "resid_lambdas")


def test_every_placement_has_digests_or_came_after_the_axis():
  assert set(NAMES) == set(GOLDEN) | set(AFTER_THE_AXIS) and not set(GOLDEN) & set(AFTER_THE_AXIS)


@pytest.mark.parametrize("name", by_variant(GOLDEN, also=[n for n in GOLDEN if n not in FAST]))
def test_standard_is_the_code_before_the_axis_bit_for_bit(name):
  golden = _golden()
  if golden is None:
    pytest.skip(f"no digests for jax {jax.__version__} in tests/data/standard_golden.json")
  got, want = standard_golden.compute(name), golden["placements"][name]
  for what in ("init", "logits", "step"):
    if golden["cpu"] == standard_golden.cpu():
      assert got[what]["sha256"] == want[what]["sha256"], (name, what)
    else:  # another processor's kernels may round differently: the same function to float32 rounding
      np.testing.assert_allclose([got[what]["sum"], got[what]["abs_sum"]],
                                 [want[what]["sum"], want[what]["abs_sum"]], rtol=1e-5, err_msg=f"{name} {what}")


@pytest.mark.parametrize("name", ["pre_norm", slow("hc"), slow("post_norm"), slow("attn_res_block")])
def test_at_the_base_shape_every_parametrization_is_standard(name):
  """The base shape is the model's own (param_base 0): every factor is 1, and init, logits and one step (AdamW per
  role instead of one AdamW) equal standard's exactly. No rule differs at the base."""
  want = standard_golden.compute(name)
  for p in ("mup", "depth_mup", "completep"):
    assert standard_golden.compute(name, **{"model.param": p}) == want, (name, p)


def _cfg(name, p, width, depth, base=(32, 2), **over):
  c = tiny_config(name, depth, **{"model.param": p, "model.d_model": width, "model.mlp_dim": 2 * width,
                                  "model.num_heads": width // 16, "model.param_base.d_model": base[0],
                                  "model.param_base.num_layers": base[1], **over})
  configlib.validate(c)
  return c


def _init(c):
  mcfg, tx = configlib.model_config(c), optim.make(c)
  state = jax.jit(lambda: flax.linen.unbox(step.init_state(c, mcfg, tx, jax.random.key(1), 16)))()
  return mcfg, tx, state


def _flat(tree):
  return {k: np.asarray(v, np.float64) for k, v in flax.traverse_util.flatten_dict(tree).items()}


SHAPES = [(128, 2), (32, 8)]  # against the base (32, 2): 4x the width, 4x the depth


def shaped(cases, fast):
  """pytest params (*case, width, depth): each case at each of SHAPES, `make test` keeping only the pairs in `fast`
  (one case at one shape, the other shape in the other test) and `make test-integration` the rest."""
  return [pytest.param(*c, *s, marks=() if (c, s) in fast else pytest.mark.integration) for c in cases for s in SHAPES]


@pytest.mark.parametrize("init, p", [("normal", "completep"), ("gpt2", "completep"), ("xavier", "mup"),
                                     slow("gpt2", "standard"), slow("normal", "mup"), slow("normal", "standard"),
                                     slow("gpt2", "mup"), slow("xavier", "standard"), slow("xavier", "completep")])
def test_init_std_per_role(p, init):
  """Hidden matrices: the standard std at the base shape x m_d^-1/2, no depth factor (GPT-2's 1/sqrt(2L) at the base
  depth); the embedding and the head: the standard std at the base shape."""
  vocab = 320
  for width, depth in SHAPES:
    c = _cfg("pre_norm", p, width, depth, **{"model.init": init})
    params = _flat(_init(c)[2]["params"])
    m_d = width / 32 if p != "standard" else 1.0
    d_eff, L_eff = (32, 2) if p != "standard" else (width, depth)  # where the standard formula is read

    def base_std(fan_in, fan_out, out):
      if init == "xavier":
        return (2.0 / (fan_in + fan_out)) ** 0.5
      return 0.02 / ((2 * L_eff) ** 0.5 if (init == "gpt2" and out) else 1.0)
    want = {("attn", "q"): base_std(d_eff, d_eff, False) * m_d ** -0.5,
            ("attn", "o"): base_std(d_eff, d_eff, True) * m_d ** -0.5,
            ("mlp", "wi"): base_std(d_eff, 2 * d_eff, False) * m_d ** -0.5,
            ("mlp", "wo"): base_std(2 * d_eff, d_eff, True) * m_d ** -0.5,
            ("head",): base_std(d_eff, vocab, False),
            ("embed",): 1.0 if init == "xavier" else 0.02}
    for key, std in want.items():
      leaf = params[("blocks", *key)] if len(key) == 2 else params[key]
      np.testing.assert_allclose(leaf.std(), std, rtol=0.06, err_msg=f"{p} {init} {key} at d {width}, L {depth}")


def _factors(p, width, depth, base=(32, 2)):
  """The rules written out: role -> (lr, eps, weight decay) factors."""
  if p == "standard":
    return {r: (1.0, 1.0, 1.0) for r in param.ROLES}
  m_d, m_L, a = width / base[0], depth / base[1], DEPTH_PARAMS.get(p)
  lr_L = m_L ** (a - 1) if a else 1.0
  eps_L = m_L ** -a if a else 1.0
  wd = m_d if a else 1.0
  return {"hidden": (lr_L / m_d, eps_L / m_d, wd), "readout": (lr_L / m_d, eps_L / m_d, wd),
          "vector": (lr_L, eps_L / m_d, 1.0), "embed": (1.0, 1 / m_d, 1.0), "unembed": (1.0, 1 / m_d, 1.0),
          "final": (1.0, 1 / m_d, 1.0), "final_readout": (1 / m_d, 1 / m_d, 1.0)}


def _step_and_grads(c, state, seed=0):
  mcfg, tx = configlib.model_config(c), optim.make(c)
  tok = np.array(jax.random.randint(jax.random.key(seed), (4, 17), 0, 256))
  batch = {"inputs": tok[:, :-1], "targets": tok[:, 1:], "mask": np.ones((4, 16), np.float32)}
  grads = jax.jit(jax.grad(step.make_loss_fn(mcfg)))(state["params"], batch)
  new, _ = jax.jit(functools.partial(step.train_step, cfg=c, mcfg=mcfg, tx=tx))(state, batch)
  return _flat(grads), _flat(new["params"])


TRAIN = {"train.grad_clip": 0.0, "train.warmup_steps": 0, "train.schedule": "constant", "train.lr": 1e-3}


@pytest.mark.parametrize("name, p, width, depth", shaped(
    [("hc", "mup"), ("hc", "completep"), ("pre_norm", "completep"), ("hc", "depth_mup"), ("hc", "standard"),
     ("attn_res", "mup"), ("attn_res", "completep")], fast={(("pre_norm", "completep"), (128, 2))}))
def test_first_adam_update_per_role_is_the_rules_lr_times_sign(name, p, width, depth):
  """With eps ~ 0 and no decay, Adam's first update is -lr x sign(g): its size per coordinate is the role's lr."""
  c = _cfg(name, p, width, depth, **TRAIN, **{"train.eps": 1e-30, "train.weight_decay": 0.0})
  _, _, state = _init(c)
  old = _flat(state["params"])
  grads, new = _step_and_grads(c, state)
  factors, roles, seen = _factors(p, width, depth), residual.get(name).roles, set()
  for k, g in grads.items():
    r = param.role(k, roles)
    live = np.abs(g) > 1e-12
    if not live.any():
      continue
    seen.add(r)
    np.testing.assert_allclose(np.abs(new[k] - old[k])[live], 1e-3 * factors[r][0], rtol=2e-3,
                               err_msg=f"{name} {p} {'/'.join(k)} ({r}) at d {width}, L {depth}")
  assert seen >= {"hidden", "vector", "embed", "unembed"} | ({"readout", "final"} if name == "hc" else set()) | \
      ({"final"} if name == "pre_norm" else set())


@pytest.mark.parametrize("p, width, depth", shaped([("mup",), ("completep",)], fast=set()))
def test_eps_and_weight_decay_per_role(p, width, depth):
  """eps comparable to |g| and weight decay on: the update is -lr_r (g / (|g| + eps eps_r) + wd wd_r p) on the
  decayed params, with the role's factors."""
  c = _cfg("hc", p, width, depth, **TRAIN, **{"train.eps": 1e-4, "train.weight_decay": 0.3})
  _, _, state = _init(c)
  old = _flat(state["params"])
  grads, new = _step_and_grads(c, state)
  factors, roles = _factors(p, width, depth), residual.get("hc").roles
  decayed = set(optim.BASE_DECAY) | set(residual.get("hc").decay)
  for k, g in grads.items():
    lr_r, eps_r, wd_r = factors[param.role(k, roles)]
    wd = 0.3 * wd_r if k[-1] in decayed else 0.0
    want = -1e-3 * lr_r * (g / (np.abs(g) + 1e-4 * eps_r) + wd * old[k])
    np.testing.assert_allclose(new[k] - old[k], want, rtol=1e-3, atol=2e-7,
                               err_msg=f"{p} {'/'.join(k)} at d {width}, L {depth}")


def _apply(c, params, inputs):
  return LM(configlib.model_config(c), collect=True).apply({"params": params}, inputs)


@pytest.mark.parametrize("name, p", [slow("pre_norm", "completep"), ("post_norm", "completep"), slow("hc", "depth_mup"),
                                     slow("pre_norm", "depth_mup"), slow("post_norm", "depth_mup"),
                                     slow("hc", "completep")])
def test_branch_output_scaled_by_base_over_depth_to_the_alpha(name, p):
  """The same params (m_d = 1: the init is the same) under standard and a depth parametrization: the first
  sublayer's F, whose input is the embedding either way, is scaled by (L_base / L)^alpha, at two depths."""
  tok = jnp.asarray(np.arange(32).reshape(2, 16) % 256)
  for depth in (4, 8):
    std = _cfg(name, "standard", 32, depth)
    params = _init(std)[2]["params"]
    _, t_std = _apply(std, params, tok)
    _, t_p = _apply(_cfg(name, p, 32, depth), params, tok)
    np.testing.assert_allclose(np.asarray(t_p["f"][0]), np.asarray(t_std["f"][0]) * (2 / depth) ** DEPTH_PARAMS[p],
                               rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("p", ["mup", slow("completep")])
def test_logits_scaled_by_one_over_m_d(p):
  """µP's output multiplier: the same params at d 64 with a base of d 32 (and m_L = 1) give standard's logits / 2
  (the head's input is scaled after the final norm)."""
  tok = jnp.asarray(np.arange(32).reshape(2, 16) % 256)
  std = _cfg("pre_norm", "standard", 64, 2)
  params = _init(std)[2]["params"]
  want, _ = _apply(std, params, tok)
  got, _ = _apply(_cfg("pre_norm", p, 64, 2), params, tok)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want) / 2, rtol=1e-5, atol=1e-6)


def test_attention_scores_scale_as_one_over_head_dim():
  """µP's attention: with a base head dim of 2K the queries are scaled by sqrt(2) (scores x K_base / K relative to
  1/sqrt(K)); equal to standard attention with q's weights x sqrt(2)."""
  std = _cfg("pre_norm", "standard", 32, 2)
  mup = _cfg("pre_norm", "mup", 32, 2, **{"model.param_base.d_model": 32, "model.param_base.head_dim": 32})
  x = jax.random.normal(jax.random.key(2), (2, 16, 32))
  pos, key = jnp.arange(16, dtype=jnp.int32), jax.random.key(0)
  attn_std = Attention(configlib.model_config(std))
  params = flax.linen.unbox(attn_std.init(jax.random.key(0), x, key, pos))["params"]
  scaled = {**params, "q": params["q"] * 2 ** 0.5}
  want = attn_std.apply({"params": scaled}, x, key, pos)
  got = Attention(configlib.model_config(mup)).apply({"params": params}, x, key, pos)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)


def test_every_param_of_every_placement_has_a_role():
  for name in NAMES:
    for norm in ("layernorm", "derf"):
      c = tiny_config(name, 2, **{"model.norm": norm})
      shapes = jax.eval_shape(lambda c=c: LM(configlib.model_config(c)).init(jax.random.key(0),
                                                                             jnp.zeros((1, 8), jnp.int32)))
      roles = param.roles_tree(flax.linen.unbox(shapes["params"]), residual.get(name).roles)
      assert set(jax.tree.leaves(roles)) <= set(param.ROLES), name


@pytest.mark.parametrize("path, name, want", [
    (("blocks", "attn", "q"), "pre_norm", "hidden"), (("blocks", "mlp", "wo"), "pre_norm", "hidden"),
    (("blocks", "attn_norm", "scale"), "pre_norm", "vector"), (("final_norm", "scale"), "pre_norm", "final"),
    (("final_norm", "alpha"), "denseformer", "final"), (("blocks", "after_block", "alpha"), "denseformer", "vector"),
    (("embed",), "pre_norm", "embed"), (("head",), "pre_norm", "unembed"),
    (("blocks", "attn_res", "w_alpha"), "hc", "readout"), (("blocks", "attn_res", "static_alpha"), "hc", "vector"),
    (("blocks", "attn_res", "stream_norm", "scale"), "hc", "vector"),
    (("blocks", "attn_res", "query"), "attn_res", "readout"), (("final_res", "query"), "attn_res", "final_readout"),
    (("dense", "w1"), "mudd", "readout"), (("final_dense", "w1"), "mudd", "final_readout"),
    (("final_dense", "w2"), "mudd", "final"), (("dual_norm", "scale"), "resi_dual", "final"),
    (("blocks", "attn", "qkv", "q_norm", "scale"), "hybrid_norm", "vector"),
    (("blocks", "attn_res", "phi"), "mhc", "readout"), (("blocks", "attn_res", "down"), "laurel", "readout"),
    (("blocks", "attn_res", "up"), "laurel", "vector")])
def test_roles_of_named_params(path, name, want):
  assert param.role(path, residual.get(name).roles) == want


def test_an_undeclared_param_is_refused_by_name():
  with pytest.raises(InputError, match="blocks/attn_res/mystery has no parametrization role"):
    param.role(("blocks", "attn_res", "mystery"), {})


def _docs_table() -> dict:
  """docs/variants.md's support table: {placement: {param: cell}}."""
  with open(os.path.join(ROOT, "docs", "variants.md")) as f:
    text = f.read()
  section = text[text.index("### Support: placement x parametrization"):]
  rows = {}
  for line in section.splitlines()[1:]:
    if line.startswith("#"):
      break
    cells = [x.strip() for x in line.strip().strip("|").split("|")]
    if len(cells) == 5 and cells[0].startswith("`"):
      rows[cells[0].strip("`")] = dict(zip(param.PARAMS, cells[1:]))
  return rows


def test_refusals_one_line_naming_why_and_the_docs_table_says_the_same():
  table = _docs_table()
  assert set(table) == set(NAMES)
  for name in NAMES:
    variant = residual.get(name)
    for p in param.PARAMS:
      c = tiny_config(name, 2, **{"model.param": p})
      refused = p in variant.refuses
      assert table[name][p].startswith("refused") == refused, (name, p, table[name][p])
      if refused:
        with pytest.raises(InputError, match=re.escape(f"model.param={p!r} does not compose with "
                                                       f"model.residual={name!r}: {variant.refuses[p]}")):
          configlib.validate(c)
      else:
        configlib.validate(c)
  assert not residual.get("pre_norm").refuses and "standard" not in set().union(*(v.refuses for v in
                                                                                  residual.REGISTRY.values()))


def test_param_base_checked():
  for bad in (-1, -12):
    c = tiny_config("pre_norm", 2, **{"model.param_base.num_layers": bad})
    with pytest.raises(InputError, match="model.param_base.num_layers="):
      configlib.validate(c)


def test_a_resume_under_another_parametrization_is_refused():
  stored = configlib.to_json(tiny_config("pre_norm", 2))
  old = json.loads(json.dumps(stored))
  del old["model"]["param"], old["model"]["param_base"]  # a checkpoint from before the axis: standard
  configlib.check_compatible(old, tiny_config("pre_norm", 2), "runs/x")
  with pytest.raises(InputError, match="model.param='standard' but the config asks for model.param='completep'"):
    configlib.check_compatible(stored, tiny_config("pre_norm", 2, **{"model.param": "completep"}), "runs/x")
  with pytest.raises(InputError, match="model.param_base.num_layers=0 but the config asks for "
                                       "model.param_base.num_layers=1"):
    configlib.check_compatible(stored, tiny_config("pre_norm", 2, **{"model.param_base.num_layers": 1}), "runs/x")


def test_an_upcycle_across_parametrizations_is_refused():
  src = configlib.to_json(tiny_config("pre_norm", 2))["model"]
  upcycle.check_transition(src, tiny_config("hc", 2), "runs/src")
  with pytest.raises(InputError, match="model.param='standard' but this run has model.param='completep'"):
    upcycle.check_transition(src, tiny_config("hc", 2, **{"model.param": "completep"}), "runs/src")
  with pytest.raises(InputError, match="model.param_base.d_model=0 but this run has model.param_base.d_model=16"):
    upcycle.check_transition(src, tiny_config("hc", 2, **{"model.param_base.d_model": 16}), "runs/src")


@pytest.mark.parametrize("p", [slow("depth_mup"), "completep"])
def test_every_sublayers_output_carries_the_branch_multiplier(p):
  """Pre-Norm at 4 layers, base 2: each of the 8 sublayers' output (its tap f) is (L_base / L)^alpha x F(N(u)),
  F and N its own attention or MLP and norm applied to its own input u: attention and MLP, first and last."""
  from resnorm.model.layers import MLP
  from resnorm.model.norms import make_norm
  c = _cfg("pre_norm", p, 32, 4)
  mcfg = configlib.model_config(c)
  params = _init(c)[2]["params"]
  tok = jnp.asarray(np.arange(32).reshape(2, 16) % 256)
  _, taps = _apply(c, params, tok)
  key, pos = jax.random.key(0), jnp.arange(16, dtype=jnp.int32)
  mult = (2 / 4) ** DEPTH_PARAMS[p]
  for s in range(8):
    layer, kind = divmod(s, 2)
    bp = jax.tree.map(lambda a: a[layer], params["blocks"])
    name = ("attn", "mlp")[kind]
    h = make_norm(mcfg, None).apply({"params": bp[f"{name}_norm"]}, taps["u"][s])
    f = (Attention(mcfg).apply({"params": bp["attn"]}, h, key, pos) if kind == 0
         else MLP(mcfg).apply({"params": bp["mlp"]}, h, key))
    np.testing.assert_allclose(np.asarray(taps["f"][s]), mult * np.asarray(f), rtol=2e-5, atol=1e-6, err_msg=str(s))


def test_the_runtime_lays_out_a_parametrized_state():
  """train.py's set-up (the state's shardings from its boxed init) takes the per-role optimizer chain: one Adam
  state laid out like the params (test_trainer's integration test trains and resumes it)."""
  from resnorm.step import runtime
  setup = runtime.build(_cfg("hc", "completep", 64, 4))
  mu = setup.abstract["opt_state"][1][1].mu  # (clip, (per-role eps, Adam, decay, lr, per-role lr))
  assert jax.tree.structure(mu) == jax.tree.structure(setup.abstract["params"])
