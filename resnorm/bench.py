"""`python -m resnorm.bench`: the command-line name of resnorm.tools.bench."""
from resnorm.errors import run_app
from resnorm.tools.bench import main

if __name__ == "__main__":
  run_app(main)
