"""Input errors: one clear line on stderr and exit code 2, never a traceback.

Only errors that are the user's input (a config value, a path, a workdir) are raised as `InputError`; anything
else is a bug and keeps its traceback.
"""
import os
import sys

EXIT_BAD_INPUT = 2
EXIT_DIVERGED = 3
EXIT_PREEMPTED = 4


class InputError(Exception):
  """A bad config value, path or workdir. The message names the field and what is allowed."""


def check(cond: bool, msg: str) -> None:
  if not cond:
    raise InputError(msg)


def cli_main(fn):
  """Wraps an entry point: InputError -> 'error: ...' on stderr and exit 2; output piped into a reader that stopped
  early (`| head`) -> a quiet exit 1, as the Python docs advise, not a BrokenPipeError traceback."""
  def wrapped(*args, **kwargs):
    try:
      return fn(*args, **kwargs)
    except InputError as e:
      print(f"error: {e}", file=sys.stderr, flush=True)
      sys.exit(EXIT_BAD_INPUT)
    except BrokenPipeError:
      os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the interpreter's final flush must not fail
      sys.exit(1)
  return wrapped


def run_app(main) -> None:
  """absl's app.run for a module entry point, with an InputError raised while flags parse -> one line, exit 2."""
  from absl import app
  try:
    app.run(main)
  except InputError as e:
    print(f"error: {e}", file=sys.stderr, flush=True)
    sys.exit(EXIT_BAD_INPUT)
