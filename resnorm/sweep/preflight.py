"""Every point of a sweep checked before the first one starts, is submitted, or writes a file.

A sweep fans one typo out: a data glob that matches nothing, a bad value, an unknown key, each becomes N failed
runs (N queued SLURM jobs) with N logs, instead of one line. `check_points` builds each point's config as its
train.py will (the config file's `get_config(ARG)`, then the overrides), validates it (resnorm.config.configlib), and
lists the data each distinct source names (resnorm.data.data, resnorm.data.files): one InputError, naming the point, for the
first bad one. Reads only; writes nothing. The package's corpora (pystdlib, shakespeare) are built by the runs, so
only their names are checked here.
"""
import functools
import importlib.util
import os

from resnorm.core.errors import InputError


@functools.lru_cache(maxsize=None)
def _module(path: str):
  spec = importlib.util.spec_from_file_location("sweep_point_config", path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def _load(config: str, root: str):
  """`configs/x.py[:ARG]` -> the ConfigDict its get_config(ARG) returns, as config_flags loads it."""
  path, _, arg = config.partition(":")
  try:
    mod = _module(os.path.join(root, path))
    return mod.get_config(arg) if arg else mod.get_config()
  except InputError:
    raise
  except Exception as e:  # the config file itself raised: its own message, in one line
    raise InputError(f"config {config!r} does not load: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                     ) from None


def point_config(point: dict, root: str):
  """The validated config of one point (`load_points`' dict: config, name, overrides)."""
  from resnorm.config import configkeys, configlib
  cfg = _load(point["config"], root)
  for key, val in point["overrides"].items():
    configkeys.check_dotted(key)
    try:
      configkeys.set_dotted(cfg, key, val)
    except (TypeError, ValueError) as e:  # ml_collections refuses a value of another type
      raise InputError(f"--config.{key}={val!r}: {e}") from None
  configlib.validate(cfg)
  return cfg


def check_data(dcfg) -> None:
  """The files a data config names exist (globs match, shards have a known format); nothing is read or built."""
  from resnorm.data import data, files
  if dcfg.name == "files":
    files.list_files(dcfg.paths)
  elif dcfg.name == "text_files":
    data.text_file_paths(dcfg)


def prepare_corpora(points: list[dict], root: str) -> None:
  """Builds each package corpus the points read (pystdlib, shakespeare) once, here: points started together would
  each build it into the same data_dir, and all but the first fail to rename theirs into place."""
  from resnorm.data import data
  seen = set()
  for p in points:
    dcfg = point_config(p, root).data
    key = (dcfg.name, str(dcfg.get("data_dir", "")))
    if dcfg.name in data.PREPARED and key not in seen:
      seen.add(key)
      data.tfds_info(dcfg, "train")


def check_points(points: list[dict], root: str) -> None:
  """Raises one InputError, prefixed with the point's name, for the first point that train.py would refuse."""
  seen = set()
  for p in points:
    try:
      cfg = point_config(p, root)
      source = (cfg.data.name, str(cfg.data.get("paths", "")))
      if source not in seen:
        seen.add(source)
        check_data(cfg.data)
    except InputError as e:
      raise InputError(f"point {p['name']!r}: {e} (nothing was started or written)") from None
