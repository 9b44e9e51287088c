"""Input errors: one clear line on stderr and exit code 2, never a traceback.

Only errors that are the user's input (a config value, a path, a workdir) are raised as `InputError`; anything
else is a bug and keeps its traceback.
"""
import os
import sys

EXIT_BAD_INPUT = 2
EXIT_DIVERGED = 3
EXIT_PREEMPTED = 4
HELP_FLAGS = ("--help", "-h", "-?", "--helpshort", "--helpfull")  # asked-for help: the usage, exit 0


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


def run_app(main, explain=None) -> None:
  """absl's app.run for a module entry point, with a bad flag or an InputError raised while flags parse -> one line,
  exit 2 (`explain(error, argv)` -> InputError words a parse error, e.g. a config file's: configkeys.flag_error).
  Libraries' INFO lines (jax's probe of backends that are not installed, say) stay off the terminal unless
  --verbosity is given."""
  from absl import app, flags, logging

  def quiet_main(argv):
    if not flags.FLAGS["verbosity"].present:
      logging.set_verbosity(logging.WARNING)
    return main(argv)

  def parse(argv):  # absl's own parser ends a bad flag with two FATAL lines and exit 1
    try:
      return flags.FLAGS(argv)
    except Exception as e:  # a flag's value, or a config file or override that config_flags loads while parsing
      if explain:
        raise explain(e, argv) from None
      raise InputError((str(e).strip().splitlines() or [type(e).__name__])[0]) from None

  # absl knows --help but not -h or -?: the same help, not "Unknown command line flag 'h'"
  sys.argv = [("--help" if a in ("-h", "-?") else a) for a in sys.argv]
  try:
    app.run(quiet_main, flags_parser=parse)
  except SystemExit as e:  # absl ends --help with exit 1; asked-for help is a success, as in train.py and eval.py
    if e.code == 1 and any(a in HELP_FLAGS for a in sys.argv[1:]):
      sys.exit(0)
    raise
  except InputError as e:
    print(f"error: {e}", file=sys.stderr, flush=True)
    sys.exit(EXIT_BAD_INPUT)
