#!/usr/bin/env bash
# test_comm.sh TEST_DIST — the communicator tests (tests/dist/test_comm.c) under mpiexec
# with 1, 2 and 4 ranks (4 ranks on a 2-core machine: oversubscribed; kiln's waits sleep),
# then the NCCL backend (one line "skip: ..." where there is no GPU).
set -euo pipefail
bin=$1
MPIEXEC=${MPIEXEC:-mpiexec}
for n in 1 2 4; do
    echo "== mpiexec -n $n"
    timeout 120 $MPIEXEC -n $n "$bin"
done
echo "== nccl, 1 rank"
timeout 120 $MPIEXEC -n 1 "$bin" nccl
