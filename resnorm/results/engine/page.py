"""Lines every report's page opens with: when and from which commit it was generated, and the commits its records'
runs were made at."""
import datetime

from resnorm.io import provenance


def generated(report: str) -> str:
  """The page's Generated line (the one line a rebuild from the same records changes)."""
  here = provenance.git_state()
  return (f"Generated {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} by `python -m "
          f"resnorm.results --report={report}` (or `--from_records`) at commit "
          f"`{(here['git_commit'] or 'unknown')[:10]}`.")


def commits(recs) -> list[str]:
  """The commits (10 characters) the records' runs were made at, sorted."""
  return sorted({(r["provenance"].get("git_commit") or "unknown")[:10] for r in recs})


def quoted(xs) -> str:
  """`a`, `b`: names as the pages list them."""
  return ", ".join(f"`{x}`" for x in xs)
