"""`python -m resnorm.results`: the command-line name of resnorm.tools.results."""
from resnorm.errors import run_app
from resnorm.tools.results import main

if __name__ == "__main__":
  run_app(main)
