"""The one path layer for every file under a workdir (and for eval's and the sweep table's outputs), local or in a
bucket: `gs://` (gcsfs) and any other fsspec URL etils.epath reaches (`s3://` with s3fs installed).

Local paths keep POSIX semantics: a whole-file write goes to a temporary name and is renamed over the target, so a
reader never sees half a file. A bucket has no rename and no append, but an object appears whole when its upload
completes, so a whole-file write there is one plain upload; the JSONL logs cope with the missing append by writing
numbered pieces (resnorm/io/workdir.py, docs/buckets.md). Paths are plain strings everywhere else in the package.
"""
import contextlib
import fnmatch
import glob as glob_lib
import os
import posixpath
import shutil
import uuid

_GLOB_CHARS = "*?["


def is_remote(path) -> bool:
  return "://" in str(path)


def _no_listing_cache() -> None:
  """fsspec caches a folder's listing for the life of the process by default. A bucket is shared: a live run adds
  log pieces and checkpoints under a reader (eval.py, the sweep table, Orbax's reload() of the step list), and a
  stale listing would hide them; so no gcsfs / s3fs instance made in this process caches listings. Set at import,
  before etils, Orbax or the lock make their first instance."""
  try:
    import fsspec.config
  except ImportError:
    return
  for proto in ("gs", "gcs", "s3", "s3a"):
    fsspec.config.conf.setdefault(proto, {}).setdefault("use_listings_cache", False)


_no_listing_cache()


_BACKENDS = {"gs": "gcsfs", "gcs": "gcsfs", "s3": "s3fs", "s3a": "s3fs"}
PROBE_TIMEOUT_S = 10.0
_reached: dict[str, str | None] = {}


def _quiet_gcsfs() -> None:
  """gcsfs logs every request that ran out of retries as an ERROR with its traceback, before the exception reaches
  the caller; resnorm reports that exception itself, in one line (InputError) or as its own traceback (a bug)."""
  import logging
  logging.getLogger("gcsfs").setLevel(logging.CRITICAL)


_quiet_gcsfs()


def _endpoint(path: str) -> tuple[str, str, int] | None:
  """(URL, host, port) of the object store a gs:// path is served by (the emulator's when $STORAGE_EMULATOR_HOST
  is set, as gcsfs reads it); None for other schemes."""
  import urllib.parse
  if str(path).split("://", 1)[0] not in ("gs", "gcs"):
    return None
  url = os.environ.get("STORAGE_EMULATOR_HOST") or "https://storage.googleapis.com"
  if "://" not in url:
    url = "http://" + url
  u = urllib.parse.urlsplit(url)
  return url, u.hostname or "", u.port or (443 if u.scheme == "https" else 80)


def check_reachable(path) -> None:
  """One TCP connect to the store behind `path`, at most PROBE_TIMEOUT_S, once per endpoint and process: gcsfs
  would retry an unreachable endpoint 6 times with exponential backoff (about a minute) before failing."""
  import socket
  from resnorm.core.errors import InputError
  ep = _endpoint(path)
  if ep is None:
    return
  url, host, port = ep
  if url not in _reached:
    try:
      socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S).close()
      _reached[url] = None
    except OSError as e:
      _reached[url] = f"{type(e).__name__}: {e.strerror or e}" if not isinstance(e, socket.timeout) else \
          f"no answer in {PROBE_TIMEOUT_S:.0f} s"
  if _reached[url]:
    raise InputError(f"{path}: the storage endpoint {url} cannot be reached ({_reached[url]}); check the network "
                     "or $STORAGE_EMULATOR_HOST")


def as_epath(path):
  """The etils.epath of a remote path (local paths go through os here); exit 2 naming the package when the
  URL's filesystem is not installed."""
  import importlib.util
  from etils import epath
  from resnorm.core.errors import InputError
  package = _BACKENDS.get(str(path).split("://", 1)[0])
  if package and importlib.util.find_spec(package) is None:
    raise InputError(f"{path}: {package} is not installed (pip install -e '.[gcs]' brings gcsfs for gs://)")
  check_reachable(path)
  return epath.Path(str(path))


def join(base, *parts) -> str:
  return posixpath.join(str(base), *parts) if is_remote(base) else os.path.join(str(base), *parts)


def absolute(path) -> str:
  return str(path) if is_remote(path) else os.path.abspath(path)


def basename(path) -> str:
  return posixpath.basename(str(path).rstrip("/"))


def exists(path) -> bool:
  return as_epath(path).exists() if is_remote(path) else os.path.exists(path)


def isdir(path) -> bool:
  return as_epath(path).is_dir() if is_remote(path) else os.path.isdir(path)


def isfile(path) -> bool:
  return as_epath(path).is_file() if is_remote(path) else os.path.isfile(path)


def makedirs(path) -> None:
  """A bucket has no directories (a prefix exists once an object is under it); this is a no-op there."""
  if is_remote(path):
    as_epath(path).mkdir(parents=True, exist_ok=True)
  else:
    os.makedirs(path, exist_ok=True)


def read_bytes(path) -> bytes:
  if is_remote(path):
    return as_epath(path).read_bytes()
  with open(path, "rb") as f:
    return f.read()


def read_text(path) -> str:
  return read_bytes(path).decode("utf-8")


def write_bytes(path, data: bytes) -> None:
  """Replaces `path` whole: readers see the old content or the new one, never a mix."""
  if is_remote(path):
    as_epath(path).write_bytes(data)
    return
  tmp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
  with open(tmp, "wb") as f:
    f.write(data)
  os.replace(tmp, path)


def write_text(path, text: str) -> None:
  write_bytes(path, text.encode("utf-8"))


def listdir(path) -> list[str]:
  """Names in a directory (a prefix, in a bucket), sorted; FileNotFoundError when there is none."""
  if is_remote(path):
    p = as_epath(path)
    if not p.is_dir():
      raise FileNotFoundError(str(path))
    return sorted(c.name for c in p.iterdir())
  return sorted(os.listdir(path))


def remove(path) -> None:
  """Deletes a file; a missing one is fine."""
  if is_remote(path):
    with contextlib.suppress(FileNotFoundError):
      as_epath(path).unlink()
  else:
    with contextlib.suppress(FileNotFoundError):
      os.remove(path)


def rmtree(path) -> None:
  if is_remote(path):
    p = as_epath(path)
    if p.exists():
      p.rmtree()
  else:
    shutil.rmtree(path, ignore_errors=True)


def move(src, dst) -> None:
  """Moves a file or directory (in a bucket: copies every object, then deletes the originals)."""
  if is_remote(src):
    fs, _ = _fsspec(src)
    fs.mv(str(src), str(dst), recursive=True)
  else:
    shutil.move(src, dst)


def _fsspec(path):
  import fsspec
  return fsspec.core.url_to_fs(str(path))


def glob(pattern: str) -> list[str]:
  """Paths matching a shell pattern (`*`, `?`, `[...]` within one path component), sorted."""
  if not is_remote(pattern):
    return sorted(glob_lib.glob(os.path.expanduser(pattern)))
  scheme, rest = pattern.split("://", 1)
  parts = rest.split("/")
  first = next((i for i, p in enumerate(parts) if any(c in p for c in _GLOB_CHARS)), len(parts))
  base = f"{scheme}://" + "/".join(parts[:first])
  if first == len(parts):
    return [base] if exists(base) else []
  found = [base]
  for part in parts[first:]:
    nxt = []
    for d in found:
      try:
        names = listdir(d)
      except FileNotFoundError:
        continue
      nxt += [join(d, n) for n in names if fnmatch.fnmatchcase(n, part)]
    found = nxt
  return sorted(found)
