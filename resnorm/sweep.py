"""`python -m resnorm.sweep`: the command-line name of resnorm.tools.sweep."""
from resnorm.errors import run_app
from resnorm.tools.sweep import main

if __name__ == "__main__":
  run_app(main)
