"""Progress on stdout: a tqdm bar on a terminal (steps, loss, lr, tokens/s), plain lines otherwise (logs, CI, sweep
log files), so a log file never fills with carriage returns."""
import sys

from tqdm import tqdm


class Progress:

  def __init__(self, total: int, initial: int = 0, desc: str = "train", enabled: bool | None = None):
    self.bar = None
    if sys.stdout.isatty() if enabled is None else enabled:
      self.bar = tqdm(total=total, initial=initial, desc=desc, dynamic_ncols=True, leave=True, file=sys.stdout)

  def advance(self, n: int = 1) -> None:
    """n more steps dispatched (host-side count: no device sync)."""
    if self.bar is not None:
      self.bar.update(n)

  def metrics(self, line: str, **postfix) -> None:
    """A logged step: the bar's postfix on a terminal, else `line` as a plain line."""
    if self.bar is not None:
      self.bar.set_postfix(postfix, refresh=False)
    else:
      print(line, flush=True)

  def write(self, line: str) -> None:
    """Any other message (eval results, warnings), printed above the bar."""
    if self.bar is not None:
      self.bar.write(line, file=sys.stdout)
    else:
      print(line, flush=True)

  def close(self) -> None:
    if self.bar is not None:
      self.bar.close()
      self.bar = None
