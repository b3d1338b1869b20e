#!/usr/bin/env bash
# The lab's GPU checks, for a Linux host with NVIDIA GPUs, Docker and the NVIDIA Container Toolkit.
# None was at hand where the lab is developed: these checks have never run there.
#
#   scripts/gpu-check.sh                     # every GPU (GPUS=all); or: GPUS=0,1 scripts/gpu-check.sh
#   scripts/gpu-check.sh --check RUN_DIR     # only the check, on a finished run's folder
#
# It makes two runs (the first builds tflab-trainer:gpu, which downloads several GB of wheels once):
#   1. make up STRATEGY=mirrored GPUS=...: one container, a replica on every GPU it is given;
#   2. make up STRATEGY=multiworker WORKERS=2 GPUS=... COLLECTIVE=nccl: two containers, one GPU
#      each (the same one, on a host with a single GPU), all-reducing with NCCL.
# and checks each from its files: summary.json says the run was ok, and every task's last
# cluster_ready event (its <task>.jsonl) lists GPU devices only. Exits 1 if either check fails;
# the run folders stay in RUNS_DIR (default runs/) to be read.
set -euo pipefail
cd "$(dirname "$0")/.."

check() {
    PYTHONPATH=scripts python3 - "$1" <<'EOF'
import json
import sys
from pathlib import Path

from tflab.core.schema import by_event, read_events

run = Path(sys.argv[1])
try:
    summary = json.loads((run / "summary.json").read_text())
except (OSError, json.JSONDecodeError) as error:
    sys.exit(f"gpu-check: FAILED {run.name}: no readable summary.json ({error})")
problems = [] if summary["ok"] else [f"the run ended {summary['outcome']}"]
for row in summary["tasks"]:
    ready = by_event(read_events(run / f"{row['task']}.jsonl"), "cluster_ready")
    devices = ready[-1]["devices"] if ready else []
    print(f"gpu-check: {run.name} {row['task']}: {row['status']}, replicas on {', '.join(devices) or 'nothing'}")
    if not devices or not all("/device:GPU:" in device for device in devices):
        problems.append(f"{row['task']} did not train on GPUs only")
if problems:
    sys.exit(f"gpu-check: FAILED {run.name}: " + "; ".join(problems))
print(f"gpu-check: ok {run.name}")
EOF
}

if [ "${1:-}" = "--check" ]; then
    check "${2:?usage: $0 --check RUN_DIR}"
    exit
fi

gpus=${GPUS:-all}
if [ "$gpus" = all ]; then
    count=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
else
    count=$(tr ',' '\n' <<<"$gpus" | wc -l)
fi
[ "$count" -gt 0 ] || { echo "gpu-check: no GPU found (nvidia-smi)" >&2; exit 1; }
runs=${RUNS_DIR:-runs}
stamp=$(date +%Y%m%d-%H%M%S)
failed=0

run() {
    local name=$1
    shift
    echo "gpu-check: make up $* GPUS=$gpus RUN=$name"
    make --no-print-directory up "$@" GPUS="$gpus" RUN="$name" RUNS_DIR="$runs" || true
    check "$runs/$name" || failed=1
}

# Mirrored splits every step over all its GPUs: a global batch of 32 examples per GPU divides evenly.
run "gpu-mirrored-$stamp" STRATEGY=mirrored GLOBAL_BATCH=$((32 * count))
run "gpu-nccl-$stamp" STRATEGY=multiworker WORKERS=2 COLLECTIVE=nccl
exit "$failed"
