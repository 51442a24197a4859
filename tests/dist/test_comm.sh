#!/usr/bin/env bash
# test_comm.sh TEST_DIST — the communicator tests (tests/dist/test_comm.c) under mpiexec
# with 1, 2 and 4 ranks (4 ranks on a 2-core machine: oversubscribed; kiln's waits sleep),
# then the NCCL backend (one line "skip: ..." where there is no GPU; 2 ranks too where
# the machine has 2 GPUs or more).
set -euo pipefail
bin=$1
MPIEXEC=${MPIEXEC:-mpiexec}
for n in 1 2 4; do
    echo "== mpiexec -n $n"
    timeout 120 $MPIEXEC -n $n "$bin"
done
echo "== nccl, 1 rank"
timeout 120 $MPIEXEC -n 1 "$bin" nccl
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${gpus:-0}" -ge 2 ]; then
    echo "== nccl, 2 ranks ($gpus GPUs)"
    timeout 120 $MPIEXEC -n 2 "$bin" nccl
fi
