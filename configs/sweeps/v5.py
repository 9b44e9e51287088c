"""Report v5's grid (resnorm/results/v5/grid.py, its design resnorm/results/v5/design.py): every arm at every ladder
width, seed and corpus; the points with a record under $RESNORM_RESULTS_RECORDS are left out. Run it through
`python -m resnorm.results --report=v5`, which records each run as it finishes."""
import os

from resnorm.results.engine import paths
from resnorm.results.v5 import grid as grid_v5


def sweep(add):
  grid_v5.add_points(add, grid_v5.design(), os.environ.get(paths.RECORDS_ENV))
