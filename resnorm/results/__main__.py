"""`python -m resnorm.results`: the command-line name of resnorm.results.results."""
from absl import flags

from resnorm.core.errors import run_app
from resnorm.results import results
from resnorm.results.results import main
from resnorm.sweep import slurm, sweep_flags

# --help lists the flags this command takes, wherever they are defined (absl shows only the main module's)
for _module in (results, sweep_flags, slurm):
  flags.adopt_module_key_flags(_module)
__doc__ = results.__doc__  # --help's usage text: the command's own

if __name__ == "__main__":
  run_app(main)
