#!/usr/bin/env bash
# test_optim_ptx.sh NVCC — the GPU's optimizer kernels round like the CPU's, checked without a
# GPU (make test: "optim-ptx"; prints "skip: ..." and exits 0 where nvcc is missing).
#
# ZeRO-Offload (kiln/offload.h) runs the update on the host (kn_optim_step_range, C11: no
# fused multiply-adds) and is checked against the GPU's update (core/runtime/cuda_optim.cu)
# byte for byte by tests/dist/test_offload_gpu.sh. nvcc fuses a product and a sum into one
# multiply-add by default (-fmad=true); a fused b1 * m + (1 - b1) * g rounds once where the
# host rounds twice, so the two updates differed now and then in the last bit, and Adam
# grew that into differences that hid any real ordering bug (issue 32: 3.7% of a bias in
# bf16 on an H200). The kernels write every product as __dmul_rn, which is never fused.
# This compiles cuda_optim.cu to PTX as the build does (-O2, the default -fmad) and fails
# if knc_adamw_kernel or knc_sgd_kernel holds a double fma (fused by nvcc) or a plain
# mul.f64 (ptxas may still fuse a product without a rounding modifier into the add that
# follows it; mul.rn.f64, __dmul_rn's, it never does). A control kernel (a * b + c written
# plainly) must show an fma, so the check can see a fusion with this nvcc.
set -uo pipefail
nvcc=${1:-}
if [ -z "$nvcc" ] || ! command -v "$nvcc" > /dev/null 2>&1; then
    echo "skip: no nvcc (the GPU optimizer's PTX is checked where CUDA compiles)"
    exit 0
fi
here=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
ptx() { "$nvcc" -std=c++17 -O2 -arch=sm_90 -I"$here/core/include" -I"$here/core" -DKN_HAVE_CUDA=1 -ptx "$1" -o "$2"; }
# body PTX NAME: the PTX of the kernel whose mangled name holds NAME
body() { awk -v k="$2" '$0 ~ "\\.entry .*" k {on = 1} on {print} on && /^}/ {on = 0}' "$1"; }

cat > "$tmp/control.cu" <<'EOF'
__global__ void knc_control_kernel(double *x, const double *a, const double *b) { x[0] = a[0] * b[0] + x[1]; }
EOF
if ! ptx "$tmp/control.cu" "$tmp/control.ptx"; then echo "FAIL: nvcc did not compile the control kernel"; exit 1; fi
if [ "$(body "$tmp/control.ptx" knc_control_kernel | grep -c 'fma\.rn\.f64')" -lt 1 ]; then
    echo "FAIL: the control kernel (a * b + c) has no fma.rn.f64: this check cannot see a fusion with $nvcc"
    exit 1
fi
echo "ok: nvcc fuses a plain a * b + c (the control)"

if ! ptx "$here/core/runtime/cuda_optim.cu" "$tmp/optim.ptx"; then echo "FAIL: nvcc did not compile cuda_optim.cu"; exit 1; fi
for k in knc_adamw_kernel knc_sgd_kernel; do
    b=$(body "$tmp/optim.ptx" "$k")
    nmul=$(grep -cE 'mul(\.rn)?\.f64' <<< "$b")
    nfma=$(grep -cE 'fma\.rn\.f64|mul\.f64' <<< "$b")
    if [ -z "$b" ] || [ "$nmul" -lt 1 ]; then
        echo "FAIL: $k: not found in the PTX, or without its double products"; fails=$((fails + 1))
    elif [ "$nfma" -gt 0 ]; then
        echo "FAIL: $k: $nfma fused multiply-add(s) or fusable products in double: the GPU's update rounds unlike the host's"
        grep -E 'fma\.rn\.f64|mul\.f64' <<< "$b" | head -3 | sed 's/^/    /'
        fails=$((fails + 1))
    else
        echo "ok: $k: $nmul double products, all mul.rn.f64, none fused (no fma.rn.f64)"
    fi
done
[ $fails -eq 0 ] && echo "optim-ptx: all passed" && exit 0
echo "optim-ptx: $fails failed"
exit 1
