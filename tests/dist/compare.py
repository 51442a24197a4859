#!/usr/bin/env python3
"""compare.py A.log B.log A.safetensors B.safetensors LOSS_TOL TENSOR_TOL — one process
against N ranks.

The per-step losses (column 2 of `kiln train --log`) must agree to LOSS_TOL relative, and
every tensor of the two checkpoints (parameters and the optimizer state) to TENSOR_TOL
relative to the largest magnitude of the tensor: the same numbers up to a different
summation order. The tensor tolerance is the looser one because Adam divides by sqrt(v): a
gradient that is zero in exact arithmetic (the attention's key bias: softmax ignores a shift
shared by all keys) is pure rounding noise, and the update it gets, up to lr, depends on the
summation order (seen: 1.5e-4 of c_attn.bias after 5 steps; every other tensor < 2e-5)."""
import json, struct, sys

def losses(path):
    return [float(l.split()[1]) for l in open(path) if l.strip()]

def tensors(path):
    raw = open(path, 'rb').read()
    n = struct.unpack('<Q', raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    out = {}
    for k, v in head.items():
        if k == '__metadata__':
            continue
        assert v['dtype'] == 'F32', (k, v['dtype'])
        a, b = v['data_offsets']
        buf = raw[8 + n + a: 8 + n + b]
        out[k] = struct.unpack('<%df' % (len(buf) // 4), buf)
    return out

def main():
    la, lb, ca, cb = sys.argv[1:5]
    tol, ttol = float(sys.argv[5]), float(sys.argv[6])
    a, b = losses(la), losses(lb)
    if len(a) != len(b) or not a:
        sys.exit('%s has %d losses, %s %d' % (la, len(a), lb, len(b)))
    worst = max(abs(x - y) / max(abs(x), 1e-12) for x, y in zip(a, b))
    if worst > tol:
        sys.exit('losses differ by %.3g relative (tolerance %g):\n  %s\n  %s' % (worst, tol, a, b))
    ta, tb = tensors(ca), tensors(cb)
    if sorted(ta) != sorted(tb):
        sys.exit('the checkpoints hold different tensors')
    wt, wname = 0.0, ''
    for k in ta:
        x, y = ta[k], tb[k]
        scale = max(max(abs(v) for v in x), 1e-30)
        d = max(abs(p - q) for p, q in zip(x, y)) / scale
        if d > wt:
            wt, wname = d, k
    if wt > ttol:
        sys.exit('tensor %s differs by %.3g relative (tolerance %g)' % (wname, wt, ttol))
    print('same: %d losses (worst %.2g), %d tensors (worst %.2g, %s)' % (len(a), worst, len(ta), wt, wname or '-'))

main()
