#!/usr/bin/env bash
# What wedges an MPS control daemon when clients are killed as they connect
# (issue 46): on the H200 the escape suite's burst of escapers killed at
# their NEW CLIENT line was followed by a control daemon that answered no
# command for minutes (docs/gpu-runs/gpu-escape-2026-11-29-h200-cut.md), its
# first hung command a get_server_status. No daemon of ours runs here:
# clients/wedge.py gives each variant a control daemon of its own and kills
# escapers at the variant's moment, asking the control daemon after each
# (the variants and what is recorded: its docstring).
#   device run: bash tests/gpu/probe-wedge.sh
# Output: $OUT/probe-wedge.txt (kept as docs/gpu-runs/probe-wedge-<date>.txt),
# the variants' control and server logs in $OUT/wedge-logs.tgz. Never
# changes the card's settings.
set -uo pipefail
OUT=${OUT:-/tmp/probe-wedge-out}; mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
C=$HERE/clients
R=$OUT/probe-wedge.txt
W=$(mktemp -d /tmp/pw.XXXX); chmod 755 "$W"
trap '(cd "$W" && tar czf "$OUT/wedge-logs.tgz" */log */*.out) 2>/dev/null; pkill -KILL -f "$W/ec" 2>/dev/null; for d in "$W"/*/pipe; do [ -S "$d/control" ] && echo quit | CUDA_MPS_PIPE_DIRECTORY=$d timeout 10 nvidia-cuda-mps-control >/dev/null 2>&1; done' EXIT
{
echo "# Killing clients as they connect, and the MPS control daemon: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
nvidia-smi --query-gpu=index,uuid,name,memory.total,driver_version --format=csv
echo "cores: $(nproc); kernel $(uname -r)"
} | tee "$R"
UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
gcc -O2 -o "$W/ec" "$C/escape_client.c" -ldl 2>&1 | tee -a "$R"
gcc -O2 -o "$W/nc" "$C/nvml_cost.c" -ldl 2>&1 | tee -a "$R"
TRIES=${TRIES:-120}
DEADLINE=${DEADLINE:-520}
VARIANTS=${VARIANTS:-first+status+now+nvml first+list+nvml first+clients+now+nvml ctx+status+now+nvml second+status+now+nvml}
# shellcheck disable=SC2086
timeout $((DEADLINE + 60)) python3 "$C/wedge.py" "$W/ec" "$W/nc" "$UUID" "$W" "$TRIES" "$DEADLINE" $VARIANTS 2>&1 | tee -a "$R"
echo "RESULT: done" | tee -a "$R"
