"""Host memory for XLA:CPU: a step reuses its buffers instead of page-faulting them back in on every call.

XLA:CPU allocates a step's temporaries as one buffer of tens to hundreds of MB. glibc serves a block that large
with mmap and unmaps it on free, so every step faults the whole buffer back in, one zeroed 4 KiB page at a time
(the counts and the kernel time it costs are in docs/performance.md). Two changes make the step reuse its memory:

- glibc: no mmap for large blocks (M_MMAP_MAX=0) and a high trim threshold, so freed blocks stay in the heap;
- JAX: synchronous dispatch on the CPU (`jax_cpu_enable_async_dispatch=False`), so the step runs on the calling
  thread and allocates from the main heap. A block over 64 MB allocated by a worker thread comes from a thread
  arena, which cannot hold it and falls back to mmap whatever M_MMAP_MAX says. The host loop loses nothing it
  used: preparing a batch takes well under a millisecond against a step of tens to hundreds.

Minor faults per step go to zero. The price: the resident set stays at its peak between steps. M_ARENA_MAX=1 would
also route worker threads to the main heap, but made steps slower (allocator lock contention; docs/performance.md).

Both must be in place before the backend starts, so `keep_freed_memory` runs before the first JAX computation and
decides from what is installed whether the backend will be the CPU. Only glibc on Linux is tuned.
`RESNORM_HOST_MALLOC=default` leaves both alone.
"""
import ctypes
import importlib.metadata
import importlib.util
import os
import platform

from resnorm.core.errors import InputError

ENV = "RESNORM_HOST_MALLOC"
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # glibc <malloc.h> parameter numbers
_state = {"mode": "default"}


def backend_will_be_cpu() -> bool:
  """Whether JAX will pick the CPU, decided without starting a backend: $JAX_PLATFORMS when set, else whether a
  TPU or GPU plugin is installed."""
  platforms = os.environ.get("JAX_PLATFORMS", "").strip()
  if platforms:
    return platforms.split(",")[0].strip() == "cpu"
  if importlib.util.find_spec("libtpu") is not None:
    return False
  return not any(True for _ in importlib.metadata.entry_points(group="jax_plugins"))


def keep_freed_memory() -> str:
  """Call before the first JAX computation. Returns the mode in effect: `keep` (tuned) or `default` (left alone:
  asked to, not glibc on Linux, or not the CPU backend)."""
  wanted = os.environ.get(ENV, "keep").strip().lower()
  if wanted not in ("keep", "default"):
    raise InputError(f"${ENV}={wanted!r} is unknown; known: keep, default")
  if _state["mode"] == "keep" or wanted == "default":
    return _state["mode"]
  if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc" or not backend_will_be_cpu():
    return _state["mode"]
  libc = ctypes.CDLL(None)
  if libc.mallopt(_M_MMAP_MAX, 0) == 1 and libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1) == 1:
    import jax
    jax.config.update("jax_cpu_enable_async_dispatch", False)
    _state["mode"] = "keep"
  return _state["mode"]


def mode() -> str:
  return _state["mode"]
