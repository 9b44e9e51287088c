"""A report's generated block in README.md: the lines between two marker comments, replaced whole from the records.
Every report's block is spliced the same way; a README whose markers were edited away is refused in one line."""
from typing import NamedTuple

from resnorm.core.errors import check


class Block(NamedTuple):
  """The README's lines between `begin` and `end` (both on lines of their own); `what` names it in errors."""
  begin: str
  end: str
  what: str

  def locate(self, text: str, where: str = "README.md") -> tuple[int, int]:
    """The offsets of the start and end markers; one line unless both are there, in order."""
    i, j = text.find(self.begin), text.find(self.end)
    check(0 <= i < j, f"{where} has no {self.what} block between the markers '{self.begin[:40]}...' and "
          f"'{self.end}': restore them (git show HEAD:README.md) and rerun")
    return i, j

  def splice(self, text: str, lines: list[str], where: str = "README.md") -> str:
    """text with the block's lines replaced by `lines`."""
    i, j = self.locate(text, where)
    return text[:i] + "\n".join([self.begin, *lines, ""]) + text[j:]

  def lines(self, text: str) -> list[str]:
    """The block's current lines (empty where the markers are missing)."""
    i, j = text.find(self.begin), text.find(self.end)
    if not 0 <= i < j:
      return []
    return text[i + len(self.begin):j].strip("\n").split("\n")
