#!/usr/bin/env bash
# The GPU check of docs/performance.md, as one prepared command for a lent accelerator machine: pre_norm, hc and
# mhc at a ~125M-parameter `:tpu`-like shape (d 1024, 16 heads, MLP 4096, 10 layers, seq 1024, batch 32) in
# bfloat16 with float32 norm statistics and master weights, through resnorm.bench (the real train step on
# synthetic batches; MFU against the datasheet dense bf16 peak).
#
#   bash tools/gpu_bench.sh --fetch   # here, with pip access: the wheels the GPU image lacks, into .whl/
#   bash tools/gpu_bench.sh           # there (carry .whl); writes $OUT/gpu_bench.{txt,json}
#   SMOKE=1 bash tools/gpu_bench.sh   # anywhere: the same command at a tiny shape, to check it runs
#
# The GPU image has jax, flax, optax, orbax and absl but not ml_collections (resnorm.bench imports nothing else
# that it lacks: it builds no data pipeline). Its python is 3.12, hence the wheel's tags.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == "--fetch" ]]; then
  grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
  version=$(sed -n 's/^ml_collections==//p' requirements/lock-py3.12.txt)
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    -d .whl "ml_collections==${version}"
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
"$PY" -c 'import jax; print(jax.__version__, jax.devices())'
"$PY" -m resnorm.bench --config=configs/pre_norm_12l.py:tpu --residuals=pre_norm,hc,mhc "${shape[@]}" \
  --json="$OUT/gpu_bench.json" 2>&1 | tee "$OUT/gpu_bench.txt"
