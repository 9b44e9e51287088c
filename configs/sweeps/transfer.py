"""The transfer study's grid (resnorm/results/transfer/grid.py, its design resnorm/results/transfer/design.py): every
run the grid holds given the records so far, but those with a record under $RESNORM_RESULTS_RECORDS. Run it through
`python -m resnorm.results --report=transfer`, which records each run as it finishes and runs again while the
records grow a cell's grid."""
import os

from resnorm.results.engine import paths
from resnorm.results.transfer import grid as tgrid


def sweep(add):
  tgrid.add_points(add, tgrid.design(), os.environ.get(paths.RECORDS_ENV))
