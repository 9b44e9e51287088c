"""Train one run: python train.py --config=configs/NAME.py[:SCALE] [--workdir=DIR] [--config.a.b=VALUE ...]

Rerunning the same command resumes from DIR's newest checkpoint. One train.py per workdir (DIR/lock.json; a dead
owner's lock is taken over, --force_unlock takes it now). Exit codes: 0 done, 2 bad input or workdir in use,
3 diverged, 4 preempted (checkpointed; rerun to resume).
"""
import sys

from resnorm import cli


if __name__ == "__main__":
  sys.exit(cli.main_train(sys.argv))
