"""Command-line parsing for train.py and eval.py: absl flags + ml_collections config files, where every bad
flag, config key, value or path becomes one line on stderr and exit code 2."""
import os

from absl import flags, logging
from ml_collections import config_flags

from resnorm.config import configkeys
from resnorm.scale import startup
from resnorm.core.errors import HELP_FLAGS, InputError, cli_main

FLAGS = flags.FLAGS


def _define_common():
  config_flags.DEFINE_config_file("config", None, "Config file, configs/NAME.py[:SCALE] (SCALE: cpu | tpu).",
                                  lock_config=True)
  flags.DEFINE_string("workdir", None, "Run directory (default: runs/NAME).")


def _print_help() -> None:
  """The script's usage (its docstring) and every flag it defines, with their help (absl's app.run is not used here:
  parse() turns its errors into one line)."""
  import sys
  doc = (sys.modules["__main__"].__doc__ or "").strip()
  print(f"{doc}\n\nflags:\n{FLAGS.module_help(__name__)}\n\n--config.KEY=VALUE overrides any field of the config "
        "(configs/base.py defines them).")


def parse(argv):
  """Parses flags; returns the positional args. Raises InputError for any bad flag or config. --help prints the
  usage and every flag, and exits 0."""
  if any(a in HELP_FLAGS for a in argv[1:]):
    _print_help()
    raise SystemExit(0)
  try:
    rest = FLAGS(argv)
  except Exception as e:  # a flag's value, or a config file or override config_flags loads while parsing
    raise configkeys.flag_error(e, argv) from None
  if len(rest) > 1:  # a flag without its dashes, or a value split from its flag by a space
    raise InputError(f"unexpected arguments: {' '.join(rest[1:])} (flags are --name=value)")
  logging.set_verbosity(logging.WARNING)
  return rest


def load_config():
  cfg = configkeys.load(FLAGS)
  if cfg is None:
    raise InputError("--config is required, e.g. --config=configs/post_norm_96l.py")
  return cfg


def config_name() -> str:
  path = FLAGS["config"].config_filename if hasattr(FLAGS["config"], "config_filename") else FLAGS["config"].value
  return os.path.splitext(os.path.basename(str(path).split(":")[0]))[0]


@cli_main
def main_train(argv) -> int:
  _define_common()
  flags.DEFINE_bool("dry_run", False, "Print sizes, FLOPs and the compiled steps' memory; do not train.")
  flags.DEFINE_string("target", None, "With --dry_run: the accelerator to plan memory for (e.g. v4-8, h100; "
                      "see resnorm/plan/memplan.py); compiled for its device count, simulated on the CPU if needed.")
  flags.DEFINE_enum("compiler", "auto", ["auto", "tpu", "cpu"], "With --target: auto is the TPU compiler for a TPU "
                    "slice where libtpu is installed (the [tpu] extra), else the CPU estimate; tpu or cpu forces one.")
  flags.DEFINE_bool("json", False, "With --dry_run --target: print the plan as one JSON object (progress on stderr).")
  flags.DEFINE_bool("allow_config_change", False, "Resume even though the config changes the training "
                    "trajectory (batch, lr, schedule, data, ...); the change is recorded in config_changes.jsonl.")
  flags.DEFINE_bool("force_unlock", False, "Take the workdir's lock even if its owner looks alive (only when you "
                    "know it is dead).")
  parse(argv)
  cfg = load_config()
  workdir = FLAGS.workdir or os.path.join("runs", config_name())
  if FLAGS.target and not FLAGS.dry_run:
    raise InputError("--target plans memory for a dry run: add --dry_run")
  if FLAGS.dry_run:
    return _dry_run(cfg)
  startup.start()
  from resnorm.train import trainer
  return trainer.train(cfg, workdir, FLAGS.allow_config_change, force_unlock=FLAGS.force_unlock)


def _dry_run(cfg) -> int:
  """--dry_run [--target=NAME]: sizes and compiled memory; with a target, whether it fits (exit 0) or not (2)."""
  from resnorm.plan import memplan
  target = memplan.parse_target(FLAGS.target) if FLAGS.target else None
  if target is None and (FLAGS["compiler"].present or FLAGS.json):
    raise InputError("--compiler and --json belong to the memory plan: add --target")
  compiler = memplan.compiler_for(target, FLAGS.compiler) if target else "cpu"
  if target is not None and not memplan.run_here(target, compiler):
    return memplan.reexec(target, compiler, quiet=FLAGS.json)
  startup.start(compilation_cache=False)  # compile for real: the analysis, and compile_s, of a fresh compile
  from resnorm.plan import dryrun
  if target is None:
    dryrun.print_info(dryrun.dry_run(cfg))
    return 0
  return memplan.plan(cfg, target, compiler, as_json=FLAGS.json)


@cli_main
def main_eval(argv) -> int:
  _define_common()
  flags.DEFINE_integer("step", None, "Checkpoint step (default: the newest).")
  flags.DEFINE_bool("init", False, "Evaluate a freshly initialized model of --config.")
  flags.DEFINE_string("outdir", None, "Output directory (--init, --sweep).")
  flags.DEFINE_integer("eval_batches", None, "Validation batches (default: the config's data.eval_batches).")
  flags.DEFINE_bool("all_steps", False, "Evaluate every checkpoint of --workdir (and draw how curves evolve).")
  flags.DEFINE_string("sweep", None, "Glob of run directories: writes OUT/sweep.csv, sweep.md and figures.")
  flags.DEFINE_string("paired", None, "--sweep: every arm against this one, paired by condition and seed "
                      "(runs named ARM-COND-sSEED): writes OUT/paired.md and paired.png.")
  flags.DEFINE_string("generate", None, "Sample continuations of this prompt from --workdir's checkpoint.")
  flags.DEFINE_integer("max_new_tokens", 32, "--generate: tokens to sample per continuation.")
  flags.DEFINE_float("temperature", 0.0, "--generate: softmax temperature (0: greedy, deterministic).")
  flags.DEFINE_integer("top_k", 0, "--generate: sample among the k likeliest bytes (0: all).")
  flags.DEFINE_integer("seed", 0, "--generate: sampling seed.")
  flags.DEFINE_integer("num_samples", 1, "--generate: continuations of the prompt.")
  parse(argv)
  startup.start()
  if FLAGS.sweep:
    if not FLAGS.outdir:
      raise InputError("--sweep needs --outdir")
    from resnorm.results import sweep_report
    sweep_report.report(FLAGS.sweep, FLAGS.outdir, FLAGS.paired)
    return 0
  if FLAGS.paired:
    raise InputError("--paired needs --sweep")
  from resnorm.evaluation import evaluate
  if FLAGS.init:
    if not FLAGS.outdir:
      raise InputError("--init needs --outdir")
    return evaluate.eval_init(load_config(), FLAGS.outdir, FLAGS.eval_batches)
  if not FLAGS.workdir:
    raise InputError("give --workdir=DIR (a training run), or --config=... --init --outdir=OUT")
  if FLAGS.generate is not None:
    return evaluate.generate_workdir(FLAGS.workdir, FLAGS.step, FLAGS.generate, FLAGS.max_new_tokens,
                                     FLAGS.temperature, FLAGS.top_k, FLAGS.seed, FLAGS.num_samples)
  return evaluate.eval_workdir(FLAGS.workdir, FLAGS.step, FLAGS.eval_batches, FLAGS.all_steps)
