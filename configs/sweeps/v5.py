"""Report v5's grid (resnorm/results/grid_v5.py, its design resnorm/results/design_v5.py): every arm at every ladder
width, seed and corpus; the points with a record under $RESNORM_RESULTS_RECORDS are left out. Run it through
`python -m resnorm.results --report=v5`, which records each run as it finishes."""
import os

from resnorm.results import grid_v5
from resnorm.results.engine import paths


def sweep(add):
  grid_v5.add_points(add, grid_v5.design(), os.environ.get(paths.RECORDS_ENV))
