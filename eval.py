"""Evaluate: python eval.py --workdir=DIR [--step=K]  |  python eval.py --config=configs/NAME.py --init --outdir=OUT

A checkpoint is always evaluated with the config stored in it. Writes DIR/eval/step_K.json (or OUT/init.json).
"""
import sys

from resnorm import cli


if __name__ == "__main__":
  sys.exit(cli.main_eval(sys.argv))
