#!/usr/bin/env bash
# deps.sh [--check] — make sure what kiln needs is installed.
#
# Each line of NEEDS below is "how to test for it | Debian package". Anything missing is
# installed with apt-get when we are root; otherwise we print the exact apt-get line and
# fail. Run by `make deps`, `make run` and `make test`, so a fresh Debian 12 machine needs
# nothing but `make` and a compiler (and the CUDA toolkit for the GPU parts).
set -u
here=$(cd "$(dirname "$0")" && pwd)
# numpy: some interpreter that kiln's Python steps will pick (core/mk/python.sh) must have
# it; python3-numpy serves /usr/bin/python3, which python.sh tries first.
NEEDS=(
  "test -f /usr/include/criterion/criterion.h | libcriterion-dev"
  "command -v mpicc | mpich"
  "test -f /usr/include/x86_64-linux-gnu/mpich/mpi.h -o -f /usr/include/mpich/mpi.h | libmpich-dev"
  "command -v gnuplot | gnuplot-nox"
  "command -v pandoc | pandoc"
  "command -v cc | gcc"
  "command -v clang | clang"
  "ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a | libclang-rt-14-dev"
  "command -v python3 | python3"
  "bash \"$here/python.sh\" numpy | python3-numpy"
  "command -v chromium | chromium"
  "test -d /usr/share/fonts/truetype/dejavu | fonts-dejavu-core"
  "command -v bwrap | bubblewrap"
  # benchmark reference only (make bench-gemm opens it with dlopen; libkiln never links it)
  "ls /usr/lib/x86_64-linux-gnu/libopenblas.so.0 | libopenblas-dev"
)
missing=()
for n in "${NEEDS[@]}"; do
    probe=${n%%|*} pkg=${n##*| }
    eval "$probe" > /dev/null 2>&1 || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
    echo "kiln: installing ${missing[*]} (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -q && apt-get install -y -q --no-install-recommends "${missing[@]}"; } > /tmp/kiln-apt.log 2>&1 || {
        echo "kiln: apt-get failed; see /tmp/kiln-apt.log"; tail -n 20 /tmp/kiln-apt.log; exit 1; }
    exit 0
fi
echo "kiln: missing packages: ${missing[*]}"
echo "kiln: install them with:  sudo apt-get install ${missing[*]}"
exit 1
