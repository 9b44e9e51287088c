"""The module graph: no import cycle inside resnorm, configs and validation never reach the model, diagnostics is
array math only. Read from the source (ast), so an import inside a function counts too."""
import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _modules() -> dict[str, str]:
  out = {}
  for base in ("resnorm", "configs"):
    for dirpath, _, files in os.walk(os.path.join(ROOT, base)):
      for f in files:
        if f.endswith(".py"):
          rel = os.path.relpath(os.path.join(dirpath, f), ROOT)[:-3].replace(os.sep, ".")
          out[rel.removesuffix(".__init__")] = os.path.join(dirpath, f)
  return out


def graph() -> dict[str, set[str]]:
  mods = _modules()
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


def test_low_modules_do_not_import_high_ones():
  g = graph()
  high = {"resnorm.model", "resnorm.layers", "resnorm.step", "resnorm.optim", "resnorm.runtime", "resnorm.trainer"}
  for low in ("resnorm.configlib", "resnorm.diagnostics", "configs.base", "configs.tiny"):
    assert not (_closure(g, low) & high), (low, _closure(g, low) & high)
  # the model reaches the CPU kernels only through the kernel registry
  assert not any("xla_cpu" in d for m in ("resnorm.model", "resnorm.layers") for d in g[m])
