#!/usr/bin/env python3
"""test_data_safetensors.py MODE FILE — check a safetensors file that kiln wrote.

Called by tests/core/test_data_safetensors.c with the file it wrote (tensors "a" f32[2,3]
= 0, 0.5, ..., 2.5; "b" i32[4] = -1, 2, -3, 4; "c" f64[] = 3.25; metadata step="7",
config='{"layers": 2}').

  MODE stdlib   reads it with nothing but json and struct: the format as specified.
  MODE package  reads it with the `safetensors` package (numpy backend), as PyTorch's
                loader does; exits 77 (skip) when the package is not installed.
Prints what disagrees and exits 1, or exits 0."""
import json
import struct
import sys

EXPECT = {
    "a": ("F32", [2, 3], [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]),
    "b": ("I32", [4], [-1, 2, -3, 4]),
    "c": ("F64", [], [3.25]),
}
META = {"step": "7", "config": '{"layers": 2}'}
FMT = {"F32": "f", "F64": "d", "I32": "i"}


def fail(msg):
    print("safetensors check failed: " + msg)
    sys.exit(1)


def check_stdlib(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    if (8 + n) % 8:
        fail("data does not start 8-byte aligned")
    header = json.loads(raw[8 : 8 + n].decode("utf-8"))
    data = raw[8 + n :]
    if header.pop("__metadata__", None) != META:
        fail("metadata differs")
    if set(header) != set(EXPECT):
        fail("tensor names %s" % sorted(header))
    spans = []
    for name, (dtype, shape, values) in EXPECT.items():
        e = header[name]
        if e["dtype"] != dtype or e["shape"] != shape:
            fail("%s: dtype/shape %s %s" % (name, e["dtype"], e["shape"]))
        b, end = e["data_offsets"]
        spans.append((b, end))
        got = list(struct.unpack("<%d%s" % (len(values), FMT[dtype]), data[b:end]))
        if got != values:
            fail("%s: values %s" % (name, got))
    spans.sort()
    at = 0
    for b, end in spans:
        if b != at:
            fail("offsets do not tile the data")
        at = end
    if at != len(data):
        fail("trailing data")


def check_package(path):
    try:
        from safetensors import safe_open
        import numpy  # noqa: F401  (the numpy backend)
    except ImportError:
        print("skip: python package 'safetensors' (with numpy) is not installed")
        sys.exit(77)
    with safe_open(path, framework="np") as f:
        if f.metadata() != META:
            fail("metadata %s" % f.metadata())
        for name, (dtype, shape, values) in EXPECT.items():
            t = f.get_tensor(name)
            if list(t.shape) != shape or t.reshape(-1).tolist() != values:
                fail("%s: %s" % (name, t))


if __name__ == "__main__":
    mode, path = sys.argv[1], sys.argv[2]
    check_stdlib(path) if mode == "stdlib" else check_package(path)
    print("ok")
