#!/usr/bin/env bash
# The GPU check of docs/performance.md, as one prepared command for a lent accelerator machine:
#  1. pre_norm, hc and mhc at a ~125M-parameter `:tpu`-like shape (d 1024, 16 heads, MLP 4096, 10 layers, seq 1024,
#     batch 32) in bfloat16 with float32 norm statistics and master weights, through resnorm.bench (the real train
#     step on synthetic batches; MFU against the datasheet dense bf16 peak);
#  2. a short `train.py` run of configs/pre_norm_12l.py:tpu as it stands (bfloat16, full remat, batch 256 as 16
#     micro-batches, seq 1024) on the offline pystdlib corpus instead of the bucket's shards: the whole loop, with
#     its evals, diagnostics and checkpoint.
#
#   bash tools/gpu_bench.sh --fetch   # here, with pip access: the wheels the GPU image lacks, into .whl/
#   bash tools/gpu_bench.sh           # there (carry .whl); writes $OUT/gpu_bench.{txt,json}, $OUT/gpu_train.*
#   SMOKE=1 bash tools/gpu_bench.sh   # anywhere: the same commands at a tiny shape, to check they run
#
# The GPU image has jax, flax, optax, orbax and absl but not ml_collections, grain, array_record or
# tensorflow-datasets (and a few of their needs): WHEELS below. Its python is 3.12, hence the wheels' tags.
set -euo pipefail
cd "$(dirname "$0")/.."

WHEELS=(ml_collections grain array_record tensorflow-datasets tensorflow-metadata googleapis-common-protos dm-tree
        immutabledict importlib_resources portpicker promise simple-parsing docstring_parser termcolor toml)

if [[ "${1:-}" == "--fetch" ]]; then
  grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
  platforms=()
  for p in manylinux_2_{17,24,27,28,31,34,35}_x86_64 manylinux2014_x86_64 any; do platforms+=(--platform "$p"); done
  for name in "${WHEELS[@]}"; do
    pin=$(grep -iE "^${name}==" requirements/lock-py3.12.txt | cut -d' ' -f1)
    if [[ "$name" == promise ]]; then  # an sdist only: built here as a pure-Python wheel
      python3 -m pip wheel -q --no-deps -w .whl "$pin"
    else
      python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        "${platforms[@]}" -d .whl "$pin"
    fi
  done
  ls .whl
  exit 0
fi

PY=${PYTHON:-python3}
if compgen -G ".whl/*.whl" > /dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
OUT=${OUT:-runs/gpu_bench}
mkdir -p "$OUT"

# one pass over the batch with dots_no_batch remat, as measured before the :tpu configs took up grad_accum
step=(--config.model.remat=dots_no_batch --config.train.grad_accum=1 --config.train.diag_batch=0)
shape=(--config.model.d_model=1024 --config.model.num_heads=16 --config.model.mlp_dim=4096
       --config.data.seq_len=1024 --config.train.batch_size=32 --depths=10 --steps=10 "${step[@]}")
if [[ -n "${SMOKE:-}" ]]; then
  shape=(--config.model.d_model=64 --config.model.num_heads=4 --config.model.mlp_dim=128
         --config.data.seq_len=32 --config.train.batch_size=2 --depths=2 --steps=2 "${step[@]}")
fi
export PYTHONUNBUFFERED=1
"$PY" -c 'import jax, flax, optax; print("jax", jax.__version__, "flax", flax.__version__, "optax", optax.__version__, jax.devices())'
"$PY" -m resnorm.bench --config=configs/pre_norm_12l.py:tpu --residuals=pre_norm,hc,mhc "${shape[@]}" \
  --json="$OUT/gpu_bench.json" 2>&1 | tee "$OUT/gpu_bench.txt" || echo "resnorm.bench failed (exit $?)"

# 2. the loop: configs/pre_norm_12l.py:tpu, 40 steps (the warmup cut to 10), one eval/diagnostics/checkpoint at
# the end; the throughput is in metrics.jsonl (tokens_per_s), the memory in summary.json
train=(--config.data.name=pystdlib --config.data.eval_set=stratified --config.data.eval_batch_size=64
       --config.train.steps=40 --config.train.warmup_steps=10 --config.train.log_every=5
       --config.train.eval_every=40 --config.train.diag_every=40 --config.train.ckpt_every=40)
if [[ -n "${SMOKE:-}" ]]; then
  train+=(--config.model.d_model=64 --config.model.num_heads=4 --config.model.mlp_dim=128 --config.model.num_layers=2
          --config.data.seq_len=32 --config.train.batch_size=16 --config.train.grad_accum=2
          --config.train.diag_batch=2 --config.data.eval_bytes=4096 --config.train.steps=4
          --config.train.warmup_steps=1 --config.train.log_every=1 --config.train.eval_every=4
          --config.train.diag_every=4 --config.train.ckpt_every=4)
fi
workdir=${TMPDIR:-/tmp}/resnorm_gpu_train
rm -rf "$workdir"
"$PY" train.py --config=configs/pre_norm_12l.py:tpu "${train[@]}" --workdir="$workdir" \
  2>&1 | tee "$OUT/gpu_train.txt" || echo "train.py failed (exit $?)"
cp "$workdir/summary.json" "$OUT/gpu_train_summary.json" || true
cp "$workdir/metrics.jsonl" "$OUT/gpu_train_metrics.jsonl" || true
