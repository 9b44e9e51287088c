#!/usr/bin/env bash
# resnorm against the peers' own code at configs/peer.py's shape, alternated A B / B A so that the machine's drift
# hits both sides alike (docs/performance.md, "Against the peers' own code").
#
#   tools/peer_ab.sh NANOGPT_DIR TORCH_PYTHON [ROUNDS=4] [STEPS=6] [OUT=/tmp/peer_ab]
#
# PYTHON: resnorm's python (default: python); UNTIL=HH:MM (UTC): start no round after then. The torch side runs
# with the environment's OMP_WAIT_POLICY: on a shared, oversubscribed machine OpenMP's spin-waiting (the default)
# makes PyTorch several times slower, so say which was used.
#
# NANOGPT_DIR: a checkout of karpathy/nanoGPT; TORCH_PYTHON: a python with torch and hyper-connections (see
# tools/peer_nanogpt.py). Each round runs `python -m resnorm.bench --config=configs/peer.py
# --residuals=pre_norm,hc,mhc` and `tools/peer_nanogpt.py --residuals=pre_norm,hc,mhc`, each in a fresh process,
# resnorm first in odd rounds and the peers first in even ones, and prints the load average before each. Ends with
# the ratio peer ms / resnorm ms per round and residual (above 1: resnorm is faster).
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 NANOGPT_DIR TORCH_PYTHON [ROUNDS] [STEPS] [OUT]" >&2; exit 2
fi
NG=$1 TPY=$2 ROUNDS=${3:-4} STEPS=${4:-6} OUT=${5:-/tmp/peer_ab}
PY=${PYTHON:-python}
[ -f "$NG/model.py" ] || { echo "error: $NG: no model.py (give a checkout of karpathy/nanoGPT)" >&2; exit 2; }
mkdir -p "$OUT"
resnorm() {
  echo "[$(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)] resnorm round $1"
  "$PY" -m resnorm.bench --config=configs/peer.py --residuals=pre_norm,hc,mhc --steps="$STEPS" \
    --json="$OUT/resnorm_$1.json" | tail -4
}
peers() {
  echo "[$(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)] nanoGPT round $1 (torch $("$TPY" -c 'import torch; print(torch.__version__)'))"
  "$TPY" tools/peer_nanogpt.py --nanogpt="$NG" --residuals=pre_norm,hc,mhc --steps="$STEPS" \
    --json="$OUT/nanogpt_$1.json" | grep '^nanoGPT'
}
done_rounds=0
for r in $(seq 1 "$ROUNDS"); do
  if [ -n "${UNTIL:-}" ] && [[ "$(date -u +%H:%M)" > "$UNTIL" ]]; then break; fi
  if [ $((r % 2)) -eq 1 ]; then resnorm "$r"; peers "$r"; else peers "$r"; resnorm "$r"; fi
  done_rounds=$r
done
echo "[$(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)] done, OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset}"
"$PY" - "$OUT" "$done_rounds" <<'EOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
ratios = {}
print(f"{'round':<6}{'residual':<10}{'resnorm ms':>11}{'peer ms':>9}{'peer/resnorm':>13}")
for r in range(1, rounds + 1):
  rs = {x["residual"]: x["step_s_median"] for x in json.load(open(f"{out}/resnorm_{r}.json"))["runs"]}
  ps = {x["residual"]: x["step_s_median"] for x in json.load(open(f"{out}/nanogpt_{r}.json"))["runs"]}
  for k in rs:
    ratios.setdefault(k, []).append(ps[k] / rs[k])
    print(f"{r:<6}{k:<10}{rs[k] * 1e3:>11.1f}{ps[k] * 1e3:>9.1f}{ps[k] / rs[k]:>12.2f}x")
for k, v in ratios.items():
  print(f"{k}: median {statistics.median(v):.2f}x, range {min(v):.2f}-{max(v):.2f}x over {len(v)} rounds")
EOF
