"""The config's key tree is configs/base.py's: a key base.py does not define is refused (exit 2, naming it).

ml_collections lets code add fields to a ConfigDict (`c.model.mhc.sym_break = "onehot"`, a config file that sets a
retired field, a sweep override with a typo); nothing reads such a field, so the run would silently ignore it.
Light on purpose (configs.base and errors only): the sweep tool checks its points' overrides before starting any
process, and configlib.validate checks every config a run, eval or bench builds.
"""
import difflib
import functools
import re

from configs import base
from resnorm.core.errors import InputError

# Fields earlier versions stored in checkpoints that change nothing this code computes: dropped on load
# (configlib.from_json). `model.attention` was the kernel choice now called `model.kernels` (runtime only).
RETIRED_RUNTIME_FIELDS = ("model.attention",)


@functools.cache
def _known() -> dict:
  return base.get_config("cpu").to_dict()


def _tree(cfg) -> dict:
  return cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg)


def _first_unknown(have: dict, known: dict, prefix: str = "") -> str | None:
  for key in sorted(have):  # sorted: the same key named on every run
    name = f"{prefix}{key}"
    if key not in known:
      return name
    if isinstance(have[key], dict) != isinstance(known[key], dict):
      kind = "a section" if isinstance(known[key], dict) else "a value"
      raise InputError(f"config key {name!r} is {kind} in configs/base.py; it cannot be set to {have[key]!r}")
    if isinstance(have[key], dict):
      found = _first_unknown(have[key], known[key], f"{name}.")
      if found:
        return found
  return None


def _resolves(parts: list) -> bool:
  node = _known()
  for part in parts:
    if not isinstance(node, dict) or part not in node:
      return False
    node = node[part]
  return True


def suggest(name: str) -> str | None:
  """The key of configs/base.py that `name` most likely misspells (one part of its dotted path, such as
  num_block for num_blocks or attn_rs for attn_res), or None when no part is near a known one."""
  parts = name.split(".")
  node = _known()
  for i, part in enumerate(parts):
    if not isinstance(node, dict):
      return None
    if part not in node:
      for near in difflib.get_close_matches(part, sorted(node), 3, 0.75):
        fixed = parts[:i] + [near] + parts[i + 1:]
        if _resolves(fixed):
          return ".".join(fixed)
      return None
    node = node[part]
  return None


def unknown_key(name: str, where: str = "") -> InputError:
  """The one line for a key configs/base.py does not define: its dotted name, and the near miss if there is one."""
  near = suggest(name)
  return InputError(f"{where}unknown config key {name}" + (f" (did you mean {near}?)" if near else ""))


def first_unknown_override(names) -> str | None:
  """The first of the dotted override keys `names` that configs/base.py does not define."""
  return next((n for n in names if not _resolves(n.split("."))), None)


def check(cfg) -> None:
  """Raises InputError naming the first key (dotted, in sorted order) of `cfg` that configs/base.py lacks."""
  name = _first_unknown(_tree(cfg), _known())
  if name is not None:
    raise unknown_key(name)


def set_dotted(cfg, name: str, value) -> None:
  """cfg['a']['b']['c'] = value for name 'a.b.c' (a sweep point's or a grid recipe's override)."""
  *parents, last = name.split(".")
  node = cfg
  for part in parents:
    node = node[part]
  node[last] = value


def check_dotted(name: str, where: str = "") -> None:
  """Refuses an override key such as 'model.hc.n' that is not a field of configs/base.py."""
  node = _known()
  for part in name.split("."):
    if not isinstance(node, dict) or part not in node:
      raise unknown_key(name, where)
    node = node[part]
  if isinstance(node, dict):
    raise InputError(f"{where}config key {name!r} is a section in configs/base.py, not a value")


def load(FLAGS):
  """FLAGS.config (None when not given), its load failure raised now as one line: config_flags defers it to the
  config's first access."""
  try:
    cfg = FLAGS.config
    if cfg is not None:
      cfg.to_dict()
  except Exception as e:
    raise flag_error(e) from None
  return cfg


def flag_error(err: Exception, argv=()) -> InputError:
  """The one line for an error raised while absl parses a command line with a config file flag (config_flags), or
  while the config loads: an override naming a key configs/base.py lacks (ml_collections' KeyError holds quoted
  reprs, a newline and only the last part of the key: named here from the overrides `argv`), an unknown flag, a
  config file that raised or cannot be read, a bad value."""
  if isinstance(err, (KeyError, AttributeError)):
    name = first_unknown_override([a.split("=")[0][len("--config."):] for a in argv if a.startswith("--config.")])
    if name is not None:
      return unknown_key(name)
    return InputError(f"--config: {str(err.args[0] if err.args else err).splitlines()[0]}")
  text = str(err)
  m = re.search(r"Unknown command line flag '([^']+)'", text)
  if m:
    name = m.group(1)
    return unknown_key(name[len("config."):]) if name.startswith("config.") else InputError(f"unknown flag --{name}")
  lines = [l.strip() for l in text.splitlines() if l.strip()]
  if "Traceback" in text:  # a config file raised: keep its last line (the exception itself)
    return InputError(f"--config: {lines[-1]}")
  if "No such file" in text or "Failed loading config" in text:
    path = next((l for l in lines if l.startswith("configs") or l.endswith(".py")), "")
    return InputError(f"--config: cannot load config file {path}".strip())
  return InputError(lines[0] if lines else type(err).__name__)
