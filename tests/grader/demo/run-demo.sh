#!/usr/bin/env bash
# run-demo.sh — the MPI/GPU check of the grader's self-test: build mpi_gpu_demo.c with
# mpicc and the hardened hook, run its three tests through run-one.sh exactly as grade.sh
# runs a lab's tests (sandbox user, limits, MPI ranks from the rubric tag mpi=N), score
# them with report.py and a rubric, and check: the MPI test passes on 2 ranks, the test
# where one rank _exit(0)s fails, the GPU test is skipped without a GPU (scored with
# KN_GRADE_SKIP_WEIGHT=0.5) or passes with one. Run from the repository root.
set -u
command -v mpicc > /dev/null || { echo "no mpicc: MPI demo not built (install MPICH)"; exit 1; }
w=$(mktemp -d /tmp/kiln-grade-demo.XXXXXX); trap 'rm -rf "$w"' EXIT
chmod 711 "$w"; mkdir -p "$w"/{t,out,v,rec,res}; chmod 711 "$w/rec"
mpicc -std=c11 -Wall -Wextra -Wswitch-enum -Werror -D_POSIX_C_SOURCE=200809L -Icore/include -Itests/harness \
    tests/grader/demo/mpi_gpu_demo.c tests/grader/kn_test_grade.c tests/harness/kn_out.c core/base/status.c \
    -o "$w/demo" -lcriterion -lm || exit 1
chmod 755 "$w/demo"
export KN_GRADE_WALL=${KN_GRADE_WALL:-10} KN_GRADE_CPU=${KN_GRADE_CPU:-5} KN_GRADE_MEM_MB=2048
export KN_GRADE_NPROC=64 KN_GRADE_NOFILE=256 KN_GRADE_FSIZE_MB=16
export MPIEXEC=${MPIEXEC:-mpiexec -pmi-port -genv UCX_POSIX_USE_PROC_LINK n}
KN_GRADE_GID=$(id -g kiln-grader 2>/dev/null || echo 65534)
export KN_GRADE_UID_BASE=$((2000000000 + $$ * 256)) KN_GRADE_GID
cat > "$w/rubric.txt" <<'R'
grader_mpi::allreduce_of_ranks 2 mpi=2
grader_mpi::one_rank_leaves_early 2 mpi=2
grader_gpu::needs_a_gpu 2 gpu
R
i=0
while read -r t _ tag; do
    np=0; [[ $tag == mpi=* ]] && np=${tag#mpi=}
    echo "$i public $w/demo $t" >> "$w/manifest"
    bash tests/grader/run-one.sh "$w" "$i" "$w/demo" "$t" "$np"
    echo "$t: $(cat "$w/v/$i") $(head -n 1 "$w/v/$i.msg")"
    i=$((i + 1))
done < "$w/rubric.txt"
: > "$w/notes"; : > "$w/build.log"
python3 tests/grader/report.py --lab 00 --name demo --rubric "$w/rubric.txt" --manifest "$w/manifest" \
    --work "$w" --build-ok 1 --build-log "$w/build.log" --notes "$w/notes" --out "$w/res" \
    --skip-weight 0.5 || exit 1
python3 tests/grader/check.py schema "$w/res/results.json" || exit 1
python3 - "$w/res/results.json" <<'PY'
import json, os, sys
d = {t["name"]: t for t in json.load(open(sys.argv[1]))["tests"]}
gpu = os.path.exists("/dev/nvidiactl")
assert d["grader_mpi::allreduce_of_ranks"]["score"] == 2, d["grader_mpi::allreduce_of_ranks"]
assert d["grader_mpi::one_rank_leaves_early"]["score"] == 0, d["grader_mpi::one_rank_leaves_early"]
g = d["grader_gpu::needs_a_gpu"]
assert g["score"] == (2 if gpu else 1) and (gpu or "skipped" in g["tags"]), g
print("MPI test passed on 2 ranks; early-leaving rank failed; GPU test", "passed" if gpu else "skipped, scored 1 of 2 (weight 0.5)")
PY
