"""The docs name only what exists: README.md, tests/README.md and every docs/*.md page.

Each check reads the pages as text and compares what they name with an independent source: config keys with
`configs/base.py`'s config (both scales), files and modules with the repository, flags of `train.py` and `eval.py`
with their definitions in `resnorm/cli.py` (read with ast, so nothing is parsed or run), and relative links with
the target file and its headings (GitHub's anchors). Names are taken from code (fenced blocks and `inline` spans),
where the docs put everything a reader would type; links from the prose. Placeholders (NAME, DIR, OUT, BUCKET) are
not names.
"""
import ast
import functools
import glob
import itertools
import os
import re

import pytest

from configs import base

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = sorted(["README.md", "tests/README.md"] + [os.path.relpath(p, ROOT)
                                                   for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))])
SECTIONS = ("seed", "scale", "model", "data", "train", "ckpt", "mesh")
FILE_SUFFIXES = {"py", "md", "json", "jsonl", "txt", "png", "csv", "sh", "toml", "gz", "parquet"}
PLACEHOLDER = re.compile(r"NAME|DIR|OUT|BUCKET|<|test_x\.py")
SCRIPTS = re.compile(r"(?<![\w/.-])(?:train\.py|eval\.py|-m (resnorm(?:\.\w+)+))(?![\w.])")
FLAG = re.compile(r"(?<![\w=-])--([A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)*)")  # dotted: --slurm.partition


def read(page):
  with open(os.path.join(ROOT, page), encoding="utf-8") as f:
    return f.read()


def split_code(text, keep_inline=False):
  """(prose, code): code is the fenced blocks and inline spans, each as one string; prose is the rest, with the
  inline spans blanked (or, keep_inline, kept as plain text: headings' anchors include it)."""
  code, prose = [], []
  for i, part in enumerate(re.split(r"^```[^\n]*\n(.*?)^```[ \t]*$", text, flags=re.M | re.S)):
    if i % 2:
      code.append(part)
    else:
      code += re.findall(r"`([^`]+)`", part)
      prose.append(re.sub(r"`([^`]+)`", r"\1" if keep_inline else " ", part))
  return "\n".join(prose), code


def expand(s):
  """Shell-style brace expansion: a.{b,c}.d -> a.b.d, a.c.d."""
  parts = re.split(r"(\{[^{}]*\})", s)
  options = [p[1:-1].split(",") if p.startswith("{") else [p] for p in parts]
  return ["".join(c) for c in itertools.product(*options)]


def command_lines(block):
  """The lines of a code block, with backslash continuations joined."""
  return block.replace("\\\n", " ").splitlines()


# --- what exists -----------------------------------------------------------------------------------------------

def config_keys():
  """Every dotted path of the base config at both scales: leaves and sections (model.hc for model.hc.*)."""
  keys = set()

  def walk(node, prefix):
    for k, v in node.items():
      keys.add(prefix + k)
      if hasattr(v, "items"):
        walk(v, prefix + k + ".")
  for scale in base.SCALES:
    walk(base.get_config(scale), "")
  return keys


@functools.lru_cache(maxsize=None)
def parsed(path):
  """The syntax tree of a source file, parsed once per test process (every page's flags walk the same files)."""
  with open(os.path.join(ROOT, path), encoding="utf-8") as f:
    return ast.parse(f.read())


def defined_flags(path, functions=None):
  """Names of the absl flags a source file defines (DEFINE_*("name", ...)), in `functions` only when given."""
  tree = parsed(path)
  roots = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name in functions] if functions \
      else [tree]
  names = set()
  for node in itertools.chain.from_iterable(ast.walk(r) for r in roots):
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr.startswith("DEFINE_")
        and node.args and isinstance(node.args[0], ast.Constant)):
      names.add(node.args[0].value)
  return names


def module_file(module):
  path = os.path.join(ROOT, *module.split("."))
  for candidate in (path + ".py", os.path.join(path, "__main__.py")):
    if os.path.isfile(candidate):
      return os.path.relpath(candidate, ROOT)
  return None


@functools.lru_cache(maxsize=None)
def module_flags(module):
  """Flags of `python -m module`: those its file defines and those of the resnorm modules it imports, transitively
  (dotted names whole, `slurm.partition`, and also their first part, for prose such as `--slurm.*`)."""
  names = _imported_flags(module, set())
  return frozenset(names | {n.split(".", 1)[0] for n in names if "." in n})


def _imported_flags(module, seen):
  path = module_file(module)
  if path is None or path in seen:
    return set()
  seen.add(path)
  names = defined_flags(path)
  for node in ast.walk(parsed(path)):
    if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("resnorm"):
      for sub in [node.module] + [f"{node.module}.{a.name}" for a in node.names]:
        names |= _imported_flags(sub, seen)
  return names


def absl_flags():
  """absl's own flags (--helpfull, --verbosity, ...), by the module that defines them, not what tests added."""
  from absl import app, flags, logging  # noqa: F401  (defining modules)
  return {f.name for mod, fl in flags.FLAGS.flags_by_module_dict().items() if mod.startswith("absl.") for f in fl}


def script_flags():
  cli = "resnorm/cli.py"
  common = defined_flags(cli, {"_define_common"}) | absl_flags()
  return {"train.py": common | defined_flags(cli, {"main_train"}),
          "eval.py": common | defined_flags(cli, {"main_eval"})}


def tool_flags():
  """Flags the scripts in tools/ take (gpu_bench.sh --fetch, peer_torch.py --hc): every --name their source has."""
  names = set()
  for path in glob.glob(os.path.join(ROOT, "tools", "*")):
    with open(path, encoding="utf-8") as f:
      names.update(re.findall(r"[\"'(|\s]--([A-Za-z_][\w-]*)", f.read()))
  return names


def slug(heading):
  """GitHub's anchor for a heading: lower case, punctuation dropped (not - or _), spaces to hyphens."""
  text = re.sub(r"[`*]", "", heading.strip().lower())
  return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page):
  out, seen = set(), {}
  prose, _ = split_code(read(page), keep_inline=True)
  for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", prose, flags=re.M):
    s = slug(m.group(1))
    n = seen.get(s, 0)
    seen[s] = n + 1
    out.add(s if n == 0 else f"{s}-{n}")
  out |= set(re.findall(r"<a (?:name|id)=\"([^\"]+)\"", read(page)))
  return out


# --- what the pages name ---------------------------------------------------------------------------------------

def named_keys(code):
  """Config keys in code: --config.a.b[=v] always, and a.b / a.b=v / a.b.* / a.{b,c} for the config's sections."""
  keys = set()
  for span in code:
    keys.update(re.findall(r"--config\.([\w.{},*]+)", span))
    for m in re.finditer(r"(?<![\w./$-])((?:%s)(?:\.(?:\w+|\*|\{[\w,]+\}))+)" % "|".join(SECTIONS), span):
      keys.add(m.group(1))
  out = set()
  for k in keys:
    k = k.rstrip(".")
    if k == "a.b":  # --config.a.b=VALUE: the form itself
      continue
    if k.rsplit(".", 1)[-1] in FILE_SUFFIXES:  # train.py, model.py, data.json: files, not keys
      continue
    out.update(expand(k))
  return out


def named_paths(code):
  """Repository paths in code (configs/, resnorm/, tests/, tools/, requirements/, docs/, .ci/), braces expanded."""
  paths = set()
  for span in code:
    for m in re.finditer(r"(?<![\w./$-])((?:configs|resnorm|tests|tools|requirements|docs|\.ci)/[\w./*{},+-]*)",
                         span):
      paths.add(m.group(1).rstrip(".,;)"))
  return {p for path in paths if not PLACEHOLDER.search(path) for p in expand(path)}


def named_scales(code):
  return {(m.group(1), m.group(2)) for span in code
          for m in re.finditer(r"(configs/[\w/]+\.py):(\w+)", span) if not PLACEHOLDER.search(m.group(1))}


def named_commands(code):
  """(script, flag) for every flag after `train.py`, `eval.py` or `-m resnorm.X` on a command line."""
  out = set()
  for span in code:
    for line in command_lines(span):
      for segment in re.split(r"\s#\s", line):
        hits = list(SCRIPTS.finditer(segment))
        for i, m in enumerate(hits):
          end = hits[i + 1].start() if i + 1 < len(hits) else len(segment)
          script = m.group(1) or m.group(0)
          for flag in FLAG.findall(segment[m.end():end]):
            if not flag.startswith("config."):
              out.add((script, flag))
  return out


def lone_flags(code):
  """Flags in spans that are only flags (`--dry_run --target=NAME`): whose they are is left to the reader."""
  return {f for span in code if span.lstrip().startswith("--") for f in FLAG.findall(span)
          if not f.startswith(("config.", "xla_"))}


def named_modules(text):
  return set(re.findall(r"python -m (resnorm(?:\.\w+)+)", text))


def links(prose):
  return [m.group(1) for m in re.finditer(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", prose)]


# --- the checks ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def keys():
  return config_keys()


@pytest.fixture(scope="module")
def flags_by_script():
  return script_flags()


@pytest.mark.parametrize("page", PAGES)
def test_config_keys_exist(page, keys):
  _, code = split_code(read(page))
  unknown = sorted(k for k in named_keys(code) if (k[:-2] if k.endswith(".*") else k) not in keys)
  assert not unknown, f"{page} names config keys configs/base.py does not have: {unknown}"


@pytest.mark.parametrize("page", PAGES)
def test_files_exist(page):
  _, code = split_code(read(page))
  missing = sorted(p for p in named_paths(code) if not glob.glob(os.path.join(ROOT, p)))
  assert not missing, f"{page} names files that do not exist: {missing}"
  bad_scale = sorted(f"{p}:{s}" for p, s in named_scales(code) if s not in base.SCALES)
  assert not bad_scale, f"{page} names config scales other than {base.SCALES}: {bad_scale}"


@pytest.mark.parametrize("page", PAGES)
def test_modules_exist(page):
  text = read(page)
  missing = sorted(m for m in named_modules(text) if module_file(m) is None)
  assert not missing, f"{page} runs modules that do not exist: {missing}"
  not_runnable = []
  for m in named_modules(text):
    with open(os.path.join(ROOT, module_file(m)), encoding="utf-8") as f:
      if "__main__" not in f.read():
        not_runnable.append(m)
  assert not not_runnable, f"{page}: these modules have no __main__ entry: {sorted(not_runnable)}"


@pytest.mark.parametrize("page", PAGES)
def test_flags_exist(page, flags_by_script):
  _, code = split_code(read(page))
  known = dict(flags_by_script)
  unknown = []
  for script, flag in sorted(named_commands(code)):
    if script not in known:
      known[script] = module_flags(script) | absl_flags() if module_file(script) else set()
    if flag not in known[script]:
      unknown.append(f"{script} --{flag}")
  assert not unknown, f"{page} gives flags their parser does not define: {unknown}"
  everywhere = set().union(*known.values(), *(module_flags(m) for m in ("resnorm.sweep", "resnorm.bench",
                                                                         "resnorm.results")), tool_flags())
  stray = sorted(f for f in lone_flags(code) if f not in everywhere)
  assert not stray, f"{page} names flags no resnorm command defines: {stray}"


@pytest.mark.parametrize("page", PAGES)
def test_links_resolve(page):
  prose, _ = split_code(read(page))
  broken = []
  for link in links(prose):
    if re.match(r"[a-z]+:", link):  # http:, https:, mailto:
      continue
    path, _, anchor = link.partition("#")
    target = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
    if not os.path.exists(os.path.join(ROOT, target)):
      broken.append(link)
    elif anchor and target.endswith(".md") and anchor not in anchors(target):
      broken.append(link)
  assert not broken, f"{page} has links that do not resolve: {broken}"


README_LINES, README_BYTES = 200, 15 * 1024


def test_the_readme_stays_an_entry():
  """The README is read in five minutes: about 200 lines and 15 KB at most, and it keeps CI's test command."""
  text = read("README.md")
  assert len(text.splitlines()) <= README_LINES and len(text.encode()) <= README_BYTES
  assert "make test" in text


def test_the_checkers_see_what_they_check():
  """The extractors find the names the checks rely on (a checker that finds nothing passes everything)."""
  code = ["python train.py --config=configs/hc_96l.py:tpu --dry_run --config.model.hc.n=2 \\\n"
          "  --config.train.lr=1 --step=3",
          "`model.mhc.{n,eps}`", "python -m resnorm.sweep configs/sweeps/x.py --jobs=2  # eval.py --init",
          "--allow_config_change", "XLA_FLAGS=--xla_force_host_platform_device_count=8 model.py"]
  assert named_keys(code) == {"model.hc.n", "train.lr", "model.mhc.n", "model.mhc.eps"}
  assert named_paths(code) == {"configs/hc_96l.py", "configs/sweeps/x.py"}
  assert named_scales(code) == {("configs/hc_96l.py", "tpu")}
  assert named_commands(code) == {("train.py", "config"), ("train.py", "dry_run"), ("train.py", "step"),
                                  ("resnorm.sweep", "jobs"), ("eval.py", "init")}
  assert lone_flags(code) == {"allow_config_change"}
  assert links("[a](b.md#c) ![f](docs/figures/x.png) [u](https://x.y)") == ["b.md#c", "docs/figures/x.png",
                                                                          "https://x.y"]
  assert slug("Memory plan: `--dry_run --target=NAME`") == "memory-plan---dry_run---targetname"
  assert {"dry_run", "target"} <= script_flags()["train.py"] and "dry_run" not in script_flags()["eval.py"]


HELP_PAGES = ("README.md", "docs/usage.md")
COMMANDS = {"train.py": ["train.py"], "eval.py": ["eval.py"], "resnorm.sweep": ["-m", "resnorm.sweep"],
            "resnorm.results": ["-m", "resnorm.results"], "resnorm.bench": ["-m", "resnorm.bench"],
            "resnorm.coord": ["-m", "resnorm.coord"]}


@pytest.fixture(scope="module")
def help_texts():
  """Each command's --help, run as a user runs it."""
  import subprocess
  import sys
  out = {}
  env = {**os.environ, "PYTHONPATH": ROOT}
  for name, argv in COMMANDS.items():
    r = subprocess.run([sys.executable, *argv, "--help"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=120)
    out[name] = (r.returncode, r.stdout + r.stderr)
  return out


def test_help_lists_every_flag_the_docs_give_each_command(help_texts):
  """`--help` of every command the README and docs/usage.md run lists each flag they give it, with its help."""
  used = {}
  for page in HELP_PAGES:
    for script, flag in named_commands(split_code(read(page))[1]):
      used.setdefault(script, set()).add(flag)
  assert set(used) <= set(COMMANDS), set(used) - set(COMMANDS)
  assert {"train.py", "eval.py", "resnorm.sweep", "resnorm.results"} <= set(used)  # the checker sees the commands
  missing = []
  for script, flags in sorted(used.items()):
    rc, text = help_texts[script]
    assert rc == 0, (script, text[-1500:])
    missing += [f"{script} --{f}" for f in sorted(flags - absl_flags())
                if not re.search(rf"--(\[no\])?{re.escape(f)}: \S", text)]
  assert not missing, f"--help does not list: {missing}"


def test_help_lists_the_flags_defined_in_other_modules(help_texts):
  """The flags a command takes from a shared module (resnorm.sweep.sweep_flags, resnorm.sweep.slurm) are listed."""
  for name in ("resnorm.sweep", "resnorm.results"):
    text = help_texts[name][1]
    for flag in ("root", "jobs", "launcher", "slurm.partition", "slurm.time"):
      assert re.search(rf"--{re.escape(flag)}: \S", text), (name, flag)
  assert "--residuals:" in help_texts["resnorm.bench"][1] and "--dry_run:" not in help_texts["eval.py"][1]
  assert "--[no]dry_run:" in help_texts["train.py"][1] and "--generate:" in help_texts["eval.py"][1]


def test_short_help_is_the_same_help(help_texts):
  """`-h` works like `--help` for every command: the same flag listing, exit 0."""
  import subprocess
  import sys
  env = {**os.environ, "PYTHONPATH": ROOT}
  for name, argv in COMMANDS.items():
    r = subprocess.run([sys.executable, *argv, "-h"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (name, r.stderr[-1000:])
    flags = set(re.findall(r"--(?:\[no\])?([\w.]+):", help_texts[name][1]))
    assert flags and flags == set(re.findall(r"--(?:\[no\])?([\w.]+):", r.stdout + r.stderr)), name
