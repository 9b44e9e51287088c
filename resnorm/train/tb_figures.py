"""TensorBoard's depth figures of a run: one depth-profile image per per-sublayer diagnostic (depth/*) and a few
depth summaries (diag/*), drawn within a share of the training time (should_draw) and always at the last step or a
stop (DepthFigures.draw_pending)."""
import time

from resnorm.io import workdir as wd
from resnorm.model import diagnostics

TB_DRAW_BUDGET = 0.02  # share of the training time TensorBoard's depth figures may take before the last step
TB_DRAW_GUESS_S = 1.0  # what a first drawing is assumed to cost (matplotlib's import included)


def tb_diagnostics(tb: wd.TensorBoard, history: list[tuple[int, list[dict]]], title: str, mixing=None) -> None:
  """TensorBoard's view of the newest diagnostics step in `history` [(step, sublayer rows)]: a few scalars whose
  number does not grow with depth (diag/*), one depth-profile image per per-sublayer field (depth/*), and the
  depth-mixing matrix of that step (`mixing`, depth/mixing_matrix)."""
  from resnorm.viz import plots  # matplotlib: imported only by runs that draw
  step, rows = history[-1]
  tb.scalars(step, {f"diag/{k}": v for k, v in diagnostics.depth_summary(rows).items()})
  for field, png in plots.profile_pngs(history, title).items():
    tb.image(step, f"depth/{field}", png)
  if mixing is not None:
    r2 = [r.get("mixing_r2") for r in rows]
    tb.image(step, "depth/mixing_matrix", plots.depth_mixing_png(mixing, r2, f"{title} step {step}"))
  tb.flush()


def should_draw(drawn_s: float, next_s: float, elapsed_s: float) -> bool:
  """Whether a diagnostics step before the last draws its depth figures: only while the figures, this one
  included (`next_s`: the last drawing's cost), stay within TB_DRAW_BUDGET of the time trained so far. A short CPU
  run then draws at its end only (each picture shows up to six earlier steps as thin lines); a long run draws at
  every diagnostics step. The last step always draws (DepthFigures.draw_pending)."""
  return drawn_s + next_s <= TB_DRAW_BUDGET * elapsed_s


def thin(history: list, keep: int = 64) -> list:
  """Bounds the diagnostics steps kept for TensorBoard's profiles (they draw a few, evenly spaced): past `keep`,
  every other earlier step is dropped; the first and the newest stay."""
  return history if len(history) <= keep else history[:-1:2] + history[-1:]


class DepthFigures:
  """The diagnostics steps a run has logged (those kept on resume included) and their drawing, timed."""

  def __init__(self, tb: wd.TensorBoard | None, title: str, kept: list[dict]):
    self.tb, self.title = tb, title
    self.history = thin([(r["step"], r["sublayers"]) for r in kept])
    self.draw_s, self.last_draw_s, self.drawn_step = 0.0, TB_DRAW_GUESS_S, None
    self.mixing = None  # the newest step's depth-mixing matrix (not kept on resume: it is not in diagnostics.jsonl)

  def add(self, step: int, rows: list[dict], last: bool, elapsed_s: float, mixing=None) -> None:
    """A new diagnostics step (and its depth-mixing matrix); drawn if it is the run's last or the budget allows."""
    self.history = thin([h for h in self.history if h[0] < step] + [(step, rows)])
    self.mixing = mixing
    if last or should_draw(self.draw_s, self.last_draw_s, elapsed_s):
      self.draw()

  def draw(self) -> None:
    t0 = time.perf_counter()
    tb_diagnostics(self.tb, self.history, self.title, self.mixing)
    self.last_draw_s = time.perf_counter() - t0
    self.draw_s += self.last_draw_s
    self.drawn_step = self.history[-1][0]

  def draw_pending(self) -> None:
    """At a stop before the last step: the newest diagnostics step's figures, if the budget skipped them."""
    if self.tb is not None and self.history and self.drawn_step != self.history[-1][0]:
      self.draw()
