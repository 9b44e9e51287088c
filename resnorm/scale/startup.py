"""JAX start-up shared by train.py, eval.py and the bench: quiet logs, the host allocator, the persistent
compilation cache and multi-process init. Everything here must run before the first JAX computation."""
import os

from resnorm.core.errors import InputError

CACHE_ENV = "RESNORM_COMPILATION_CACHE"


def start(compilation_cache: bool = True) -> None:
  """Quiet C++ logs, tune the host allocator (resnorm.scale.hostmem), the compilation cache (off for the bench, whose
  compile times must be real), then jax.distributed when this is one process of several."""
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  from resnorm.scale import distributed, hostmem
  hostmem.keep_freed_memory()
  if compilation_cache:
    enable_compilation_cache()
  else:
    import jax
    jax.config.update("jax_enable_compilation_cache", False)
  distributed.initialize()


def enable_compilation_cache() -> str | None:
  """JAX's persistent compilation cache, so a second run of a config (a resumed run, a rerun, sweep points of one
  shape) loads its compiled steps instead of compiling them. $RESNORM_COMPILATION_CACHE names the directory
  (default ~/.cache/resnorm/jax; `off` disables); JAX's own JAX_COMPILATION_CACHE_DIR, when set, wins.
  Returns the directory in use, or None."""
  import jax
  if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
    return os.environ["JAX_COMPILATION_CACHE_DIR"]
  path = os.environ.get(CACHE_ENV, os.path.join(os.path.expanduser("~"), ".cache", "resnorm", "jax"))
  if path.lower() in ("off", "0", "none", ""):
    return None
  try:
    os.makedirs(path, exist_ok=True)
  except OSError as e:
    raise InputError(f"${CACHE_ENV}={path}: cannot create the compilation cache ({e.strerror})") from None
  jax.config.update("jax_compilation_cache_dir", path)
  if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)  # the train, eval and diagnostics steps
  return path
