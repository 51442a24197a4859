#!/usr/bin/env bash
# test_tp.sh TEST_DIST — tensor parallelism (tests/dist/test_tp.c) under mpiexec with 2 and
# 4 ranks (tp=2, tp=4: the placement pass's local graphs trained against one process; 4
# ranks oversubscribe 2 cores, kiln's waits sleep).
set -euo pipefail
bin=$1
MPIEXEC=${MPIEXEC:-mpiexec}
for n in 2 4; do
    echo "== mpiexec -n $n test-dist tp"
    timeout 120 $MPIEXEC -n $n "$bin" tp
done
