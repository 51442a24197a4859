#!/usr/bin/env bash
# test_nn_dump_cli.sh KILN — `kiln dump` and plots/torch_agree.py without PyTorch.
#
# On a tiny GPT on the CPU: torch_agree.py --reference numpy runs `kiln dump` and checks
# its logits and loss against a float64 numpy forward pass and its gradients against
# float64 finite differences (exit 0, "PASS"); the same dump with one gradient scaled by
# 1.001 or one logit moved must FAIL (exit 1, naming the tensor), so the check can fail;
# two dumps with the same flags are byte-identical and hold what the file format promises;
# bad flags are usage errors (exit 2) whose message names the flag; without torch,
# the torch reference exits 2 with one line. Prints "ok" and exits 0, or says what failed.
set -eu
kiln=${1:?usage: test_nn_dump_cli.sh PATH/TO/kiln}
here=$(cd "$(dirname "$0")/../.." && pwd)
agree=$here/plots/torch_agree.py
# The interpreter with numpy (core/mk/python.sh), as `make test` exports it.
py=${PYTHON:-$(bash "$here/core/mk/python.sh" numpy)} ||
    { echo "FAIL: no python3 here can import numpy (run: make deps)"; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT; [ -n "${KEEP:-}" ] && trap - EXIT
cfg="--vocab 61 --context 12 --layers 2 --width 24 --heads 3 --batch 2 --steps 3 --seed 7"

# 1. kiln against numpy, end to end (torch_agree.py runs kiln dump)
"$py" "$agree" --reference numpy --kiln "$kiln" $cfg --out "$dir/a.st" > "$dir/agree.out" 2>&1 ||
    { cat "$dir/agree.out"; echo "FAIL: torch_agree.py --reference numpy did not pass"; exit 1; }
grep -q '^PASS ' "$dir/agree.out" || { cat "$dir/agree.out"; echo "FAIL: no PASS line"; exit 1; }
# ... and kiln's compiled program (generated C: the loss, gradients and steps) too
"$py" "$agree" --reference numpy --kiln "$kiln" --kiln-mode compiled $cfg --out "$dir/c.st" > "$dir/agree_c.out" 2>&1 ||
    { cat "$dir/agree_c.out"; echo "FAIL: torch_agree.py --reference numpy --kiln-mode compiled did not pass"; exit 1; }
grep -q 'compiled' "$dir/agree_c.out" || { cat "$dir/agree_c.out"; echo "FAIL: kiln dump did not say compiled"; exit 1; }

# 2. same flags, same bytes; the file holds what dump.c promises
"$kiln" dump $cfg --device cpu --out "$dir/b.st" > /dev/null
cmp "$dir/a.st" "$dir/b.st" || { echo "FAIL: two dumps with the same flags differ"; exit 1; }
PYTHONPATH="$here/plots" "$py" - "$dir/a.st" "$dir/bad_grad.st" "$dir/bad_logits.st" <<'PY'
import json, struct, sys
import numpy as np
from gpt_numpy import read_safetensors, param_names, config_of
T, meta = read_safetensors(sys.argv[1])
cfg = config_of(meta)
assert cfg == dict(vocab=61, context=12, layers=2, width=24, heads=3), cfg
names = param_names(cfg)
assert len(names) == 4 + 12 * 2
for n in names:
    assert T[n].dtype == np.float32 and T["grad." + n].shape == T[n].shape, n
assert T["x"].shape == (4, 2, 12) and T["y"].shape == (4, 2, 12) and T["x"].dtype == np.int32
assert T["x"].min() >= 0 and T["x"].max() < 61 and len(np.unique(T["x"])) > 20
assert T["logits"].shape == (24, 61) and T["loss"].shape == (1,) and T["losses"].shape == (3,)
assert abs(T["loss"][0] - np.log(61)) < 0.1, T["loss"]        # near-uniform predictions at init
assert np.all(T["gnorms"] > 0) and len(set(T["losses"].tolist())) == 3
assert meta["kiln.optim.decay"].split(",") == names[:2 + 4 * 2], meta["kiln.optim.decay"]
assert float(meta["kiln.clip"]) == 1.0 and float(meta["kiln.lr"]) == 1e-3 and meta["kiln.device"] == "cpu"
assert (T["h.0.ln_1.weight"] == 1).all() and (T["h.1.mlp.c_fc.bias"] == 0).all()
# corrupt copies: patch the raw bytes of one tensor
raw = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", raw[:8]); head = json.loads(raw[8:8 + n])
def patched(name, fn):
    s, e = head[name]["data_offsets"]
    a = np.frombuffer(raw[8 + n + s:8 + n + e], "<f4").copy()
    fn(a)
    return raw[:8 + n + s] + a.tobytes() + raw[8 + n + e:]
def scale(a): a *= np.float32(1.001)
def move(a): a[17] += np.float32(0.01) * np.abs(a).max()
open(sys.argv[2], "wb").write(patched("grad.h.1.mlp.c_fc.weight", scale))
open(sys.argv[3], "wb").write(patched("logits", move))
PY
for bad in bad_grad:grad.h.1.mlp.c_fc.weight bad_logits:logits; do
    f=${bad%%:*} t=${bad#*:}
    rc=0; "$py" "$agree" --reference numpy --dump "$dir/$f.st" --fd 2 > "$dir/$f.out" 2>&1 || rc=$?
    [ "$rc" -eq 1 ] || { cat "$dir/$f.out"; echo "FAIL: a corrupted dump ($f) exited $rc, expected 1"; exit 1; }
    grep -q "^FAIL .*'$t'" "$dir/$f.out" || { cat "$dir/$f.out"; echo "FAIL: the verdict does not name $t"; exit 1; }
done

# 3. zero steps is allowed (gradients only)
"$kiln" dump --vocab 8 --context 4 --layers 1 --width 8 --heads 2 --batch 1 --steps 0 --device cpu \
    --out "$dir/z.st" > /dev/null || { echo "FAIL: --steps 0"; exit 1; }

# 4. usage errors: exit 2, the message names the flag
check_usage() { # expected-word args...
    local want=$1; shift
    rc=0; "$kiln" dump "$@" > "$dir/u.out" 2> "$dir/u.err" || rc=$?
    [ "$rc" -eq 2 ] || { echo "FAIL: 'kiln dump $*' exited $rc, expected 2"; cat "$dir/u.err"; exit 1; }
    grep -q -- "$want" "$dir/u.err" ||
        { echo "FAIL: 'kiln dump $*' says '$(head -n 1 "$dir/u.err")', not naming $want"; exit 1; }
}
o="--out $dir/u.st"
check_usage --nope $o --nope 1
check_usage --width $o --width 30 --heads 4
check_usage --steps $o --steps
check_usage --steps $o --steps -1
check_usage --lr $o --lr abc
check_usage --lr $o --lr -1
check_usage --mode $o --mode eager
check_usage --clip $o --clip nan
check_usage --device $o --device gpu
check_usage --seed $o --seed x
check_usage --vocab $o --vocab 1
check_usage --out --layers 1
check_usage stray $o stray
[ ! -e "$dir/u.st" ] || { echo "FAIL: a usage error wrote a file"; exit 1; }
"$kiln" dump --help | grep -q -- '--steps' || { echo "FAIL: kiln dump --help"; exit 1; }

# 5. the PyTorch reference says it cannot run when torch is missing
if ! "$py" -c 'import torch' 2> /dev/null; then
    rc=0; "$py" "$agree" --dump "$dir/a.st" > "$dir/t.out" 2>&1 || rc=$?
    [ "$rc" -eq 2 ] && [ "$(wc -l < "$dir/t.out")" -eq 1 ] && grep -q 'PyTorch is not installed' "$dir/t.out" ||
        { cat "$dir/t.out"; echo "FAIL: without torch, expected exit 2 and one line (got $rc)"; exit 1; }
fi
echo ok
