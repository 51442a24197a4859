#!/usr/bin/env python3
"""gpt_numpy.py - a self-contained safetensors reader and kiln's GPT forward pass in
float64 numpy: the reference that plots/torch_agree.py uses when PyTorch is not there
(--reference numpy), and the reader it uses always.

The model is exactly kiln's (core/nn/gpt.c), written from its parameter layout:
  x = wte[idx] + wpe[:T]                                   [B*T, D] (batch-major rows)
  per layer l, with p = "h.<l>.":
    h = layernorm(x, p.ln_1) (eps 1e-5, biased variance)
    qkv = h @ p.attn.c_attn.weight [D, 3D] + bias; columns [q | k | v], each split into
          heads of D/H consecutive columns
    att = softmax(causal(q k^T / sqrt(D/H))) v, heads concatenated back in order
    x = x + att @ p.attn.c_proj.weight [D, D] + bias
    x = x + gelu_tanh(layernorm(x, p.ln_2) @ p.mlp.c_fc.weight [D, 4D] + b) @ p.mlp.c_proj.weight + b
  logits = layernorm(x, ln_f) @ wte^T                      [B*T, V] (output tied to wte)
  loss = mean cross-entropy of logits against targets
Weights are stored [in, out] (Hugging Face GPT-2's Conv1D layout), so every linear layer
is x @ W + b.

Also here: central finite differences of the loss in float64 for a few gradient entries,
a check of kiln's gradients that needs no framework.

Needs numpy only; the safetensors package is not used (the format is an 8-byte
little-endian header length, a JSON header, then the raw little-endian tensor bytes)."""
import json
import math
import struct

import numpy as np

_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "U8": "u1", "BOOL": "?"}


def read_safetensors(path):
    """(tensors, metadata): a dict name -> numpy array (a copy, native byte order) and the
    "__metadata__" dict of strings. BF16 is widened to float32. Raises ValueError naming
    the path on a malformed file."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: {len(raw)} bytes is too short for a safetensors file")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8:
        raise ValueError(f"{path}: header length {n} runs past the end of the file ({len(raw)} bytes)")
    try:
        header = json.loads(raw[8:8 + n])
    except ValueError as e:
        raise ValueError(f"{path}: the header is not JSON ({e})")
    data = memoryview(raw)[8 + n:]
    meta = header.pop("__metadata__", {}) or {}
    out = {}
    for name, h in header.items():
        start, end = h["data_offsets"]
        shape = tuple(h["shape"])
        if not (0 <= start <= end <= len(data)):
            raise ValueError(f"{path}: tensor '{name}' has data_offsets {start}..{end} outside {len(data)} bytes")
        buf = data[start:end]
        if h["dtype"] == "BF16":
            a = (np.frombuffer(buf, "<u2").astype(np.uint32) << 16).view(np.float32)
        elif h["dtype"] in _DTYPES:
            a = np.frombuffer(buf, _DTYPES[h["dtype"]])
        else:
            raise ValueError(f"{path}: tensor '{name}' has unknown dtype {h['dtype']}")
        if a.size != math.prod(shape):
            raise ValueError(f"{path}: tensor '{name}' holds {a.size} elements, its shape {list(shape)} needs "
                             f"{math.prod(shape)}")
        out[name] = a.reshape(shape).astype(a.dtype.newbyteorder("="))
    return out, meta


CONFIG_KEYS = ("vocab", "context", "layers", "width", "heads")


def config_of(meta):
    """The model config {vocab, context, layers, width, heads} from kiln's metadata."""
    return {k: int(meta["kiln." + k]) for k in CONFIG_KEYS}


def param_names(cfg):
    """kiln's parameter names in slab order (core/nn/gpt.c, gpt_layout)."""
    names = ["wte.weight", "wpe.weight"]
    for l in range(cfg["layers"]):
        names += [f"h.{l}.{s}.weight" for s in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")]
    for l in range(cfg["layers"]):
        names += [f"h.{l}.{s}" for s in ("ln_1.weight", "ln_1.bias", "attn.c_attn.bias", "attn.c_proj.bias",
                                         "ln_2.weight", "ln_2.bias", "mlp.c_fc.bias", "mlp.c_proj.bias")]
    return names + ["ln_f.weight", "ln_f.bias"]


def _layernorm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def _gelu(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(P, cfg, idx):
    """Logits [B*T, V] in float64 for tokens idx [B, T]; P maps names to arrays."""
    P = {k: np.asarray(v, np.float64) for k, v in P.items()}
    B, T = idx.shape
    D, H = cfg["width"], cfg["heads"]
    hd = D // H
    x = (P["wte.weight"][idx] + P["wpe.weight"][:T]).reshape(B * T, D)
    mask = np.triu(np.ones((T, T), bool), 1)
    for l in range(cfg["layers"]):
        p = lambda s: P[f"h.{l}.{s}"]
        h = _layernorm(x, p("ln_1.weight"), p("ln_1.bias"))
        qkv = (h @ p("attn.c_attn.weight") + p("attn.c_attn.bias")).reshape(B, T, 3, H, hd)
        q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))          # [B, H, T, hd]
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd)
        s = np.where(mask, -np.inf, s)
        s = np.exp(s - s.max(-1, keepdims=True))
        y = (s / s.sum(-1, keepdims=True)) @ v                                    # [B, H, T, hd]
        y = y.transpose(0, 2, 1, 3).reshape(B * T, D)
        x = x + y @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
        h = _layernorm(x, p("ln_2.weight"), p("ln_2.bias"))
        x = x + _gelu(h @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias")) @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias")
    x = _layernorm(x, P["ln_f.weight"], P["ln_f.bias"])
    return x @ P["wte.weight"].T


def cross_entropy(logits, targets):
    """Mean cross-entropy (float64) of logits [N, V] against targets (N ints)."""
    m = logits.max(-1, keepdims=True)
    lse = (m + np.log(np.exp(logits - m).sum(-1, keepdims=True)))[:, 0]
    t = np.asarray(targets).reshape(-1)
    return float(np.mean(lse - logits[np.arange(len(t)), t]))


def finite_difference(P, cfg, idx, targets, name, index, h=1e-5):
    """d loss / d P[name][index] by central differences in float64 (P is not changed)."""
    Q = {k: np.asarray(v, np.float64) for k, v in P.items()}
    base = Q[name]
    vals = []
    for sgn in (1.0, -1.0):
        w = base.copy()
        w[index] += sgn * h
        Q[name] = w
        vals.append(cross_entropy(forward(Q, cfg, idx), targets))
    Q[name] = base
    return (vals[0] - vals[1]) / (2.0 * h)
