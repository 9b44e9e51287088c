"""The module graph: resnorm/ is grouped by role, and a group imports only the groups LAYERS allows it (no group
reaches up); no import cycle; configs and validation never reach the model's code. Read from the source (ast), so
an import inside a function counts too. docs/design.md draws the same layers."""
import ast
import os
import shutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# group -> the groups it may import. Bottom up; `resnorm.cli` (train.py and eval.py's logic) is the top and may import
# any group. Each group's __init__.py docstring says the same in words.
LAYERS = {
    "core": set(),
    "io": {"core"},
    "model": {"core"},
    "scale": {"core"},
    "config": {"core", "model"},
    "data": {"core", "io"},
    "viz": {"core", "io"},
    "step": {"core", "config", "model", "scale"},
    "evaluation": {"core", "io", "model", "config", "data", "scale", "viz", "step"},
    "train": {"core", "io", "model", "config", "data", "scale", "viz", "step", "evaluation"},
    "plan": {"core", "config", "model", "scale", "step"},
    "coord": {"core", "io", "model", "config", "data", "scale", "viz", "step"},
    "sweep": {"core", "config", "io", "data", "scale"},
    "results": {"core", "io", "model", "config", "data", "scale", "viz", "step", "evaluation", "plan", "sweep",
                "coord"},
    "bench": {"core", "io", "model", "config", "data", "scale", "viz", "step", "evaluation", "train", "plan"},
}
TOP = {"resnorm", "resnorm.cli"}


def _modules(root: str = ROOT) -> dict[str, str]:
  out = {}
  for base in ("resnorm", "configs"):
    for dirpath, _, files in os.walk(os.path.join(root, base)):
      for f in files:
        if f.endswith(".py"):
          rel = os.path.relpath(os.path.join(dirpath, f), root)[:-3].replace(os.sep, ".")
          out[rel.removesuffix(".__init__")] = os.path.join(dirpath, f)
  return out


def graph(root: str = ROOT) -> dict[str, set[str]]:
  mods = _modules(root)
  g = {}
  for name, path in mods.items():
    deps = set()
    for node in ast.walk(ast.parse(open(path).read())):
      if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom) and node.module:  # `from pkg import mod` depends on mod, not pkg
        targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods else node.module
                   for a in node.names]
      else:
        continue
      deps |= {t for t in targets if t in mods and t != name}
    g[name] = deps
  return g


def group_of(module: str) -> str | None:
  """resnorm.model.residual.hyper -> model; the top (resnorm, resnorm.cli) and configs.* -> None."""
  parts = module.split(".")
  if parts[0] != "resnorm" or module in TOP:
    return None
  return parts[1]


def layer_violations(g: dict[str, set[str]]) -> list[str]:
  """Every import from one group into another that LAYERS does not allow, as 'a.b -> c.d (x may not import y)'."""
  out = []
  for mod, deps in sorted(g.items()):
    src = group_of(mod)
    if src is None:
      continue
    for dep in sorted(deps):
      dst = group_of(dep)
      if dep in TOP:
        out.append(f"{mod} -> {dep} (only the top imports the command layer)")
      elif dst is not None and dst != src and dst not in LAYERS.get(src, set()):
        out.append(f"{mod} -> {dep} ({src} may not import {dst})")
  return out


def _closure(g, start):
  seen, todo = set(), [start]
  while todo:
    for d in g[todo.pop()]:
      if d not in seen:
        seen.add(d)
        todo.append(d)
  return seen


def test_no_import_cycle():
  g = graph()
  cycles = [m for m in g if m in _closure(g, m)]
  assert not cycles, cycles


def test_every_module_lives_in_a_group():
  """resnorm/ holds groups, plus the top (cli.py); a module dropped at the top level would sit outside the layers."""
  g = graph()
  stray = [m for m in g if m.startswith("resnorm") and m not in TOP and group_of(m) not in LAYERS]
  assert not stray, stray
  for group in LAYERS:  # each group says what it is and what it may import
    doc = ast.get_docstring(ast.parse(open(os.path.join(ROOT, "resnorm", group, "__init__.py")).read()))
    assert doc and "mport" in doc, group


def test_layers_are_a_dag():
  assert not [g for g in LAYERS if g in _closure(LAYERS, g)]


def test_groups_import_only_the_layers_below():
  assert layer_violations(graph()) == []


def test_named_rules():
  """The rules a reader looks for, spelled out (LAYERS implies them; this guards LAYERS against an edit)."""
  below = {g: _closure(LAYERS, g) for g in LAYERS}
  assert not below["model"] & {"train", "results", "sweep", "io", "data", "config"}
  assert "model" not in below["data"]
  assert "train" not in below["results"] and "train" not in below["sweep"] and "train" not in below["plan"]


def test_planted_upward_import_fails(tmp_path):
  """The check reads the tree as it is: an upward import planted in a copy of resnorm/ is reported, naming it."""
  shutil.copytree(os.path.join(ROOT, "resnorm"), tmp_path / "resnorm",
                  ignore=shutil.ignore_patterns("__pycache__"))
  os.makedirs(tmp_path / "configs")
  with open(tmp_path / "resnorm" / "model" / "norms.py", "a") as f:
    f.write("\n\ndef _planted():\n  from resnorm.train import trainer  # noqa\n")
  with open(tmp_path / "resnorm" / "data" / "files.py", "a") as f:
    f.write("\nfrom resnorm.model import layers  # noqa\n")
  with open(tmp_path / "resnorm" / "io" / "lock.py", "a") as f:
    f.write("\nimport resnorm.cli  # noqa\nimport resnorm  # noqa\n")
  found = layer_violations(graph(str(tmp_path)))
  assert found == ["resnorm.data.files -> resnorm.model.layers (data may not import model)",
                   "resnorm.io.lock -> resnorm (only the top imports the command layer)",
                   "resnorm.io.lock -> resnorm.cli (only the top imports the command layer)",
                   "resnorm.model.norms -> resnorm.train.trainer (model may not import train)"], found


def test_low_modules_do_not_import_high_ones():
  g = graph()
  high = {"resnorm.model.model", "resnorm.model.layers", "resnorm.step.step", "resnorm.step.optim",
          "resnorm.step.runtime", "resnorm.train.trainer"}
  for low in ("resnorm.config.configlib", "resnorm.model.diagnostics", "configs.base", "configs.tiny"):
    assert not (_closure(g, low) & high), (low, _closure(g, low) & high)
  # the model reaches the CPU kernels only through the kernel registry
  assert not any("xla_cpu" in d for m in ("resnorm.model.model", "resnorm.model.layers") for d in g[m])
