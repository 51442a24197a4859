#!/usr/bin/env python3
"""plant.py OUT_DIR — the hostile lab 10 submissions of the grader's self-test (issue 36).

Run from the repository root (tests/grader/hostile-lab.sh does, into a temporary folder). Each
case folder OUT_DIR/<case>/ gets lab 10's three units: the SKELETON's (labs/), with one
attack on the grader planted in ring.c, so that each case must score no more than the
untouched skeleton (an attack that worked would add points). Cases:
  lib_allreduce   kn_ring_all_reduce calls the library's all-reduce (right sums, no ring)
                  and adjusts the communicator's counters (c->seq) to look like a ring's
                  2 (N-1) sends and receives; the harness counts what reaches MPI instead
  harness_counts  kn_ring_all_reduce calls the library's all-reduce, then finds the harness's
                  own message counters in its process's writable memory (the 4 words of
                  which the last, the collectives, grew by one across the call) and rewrites
                  them to a ring's 2 (N-1) messages of one chunk each and no collective; the
                  ring's tests are relay tests, so the counts that decide are the relay's,
                  in another process (tests/harness/mpi/kn_mpi_relay.c)
  forge_record    looks for the grader's record path and token where earlier graders put
                  them (any process's /proc/PID/cmdline and environ, its own environment,
                  the test folder's secret files), writes a forged record and TAP "ok" lines
                  with whatever it finds, and _exit(0)s
  patch_fail      overwrites the first byte of the harness's kn_mpi_test_fail with `ret`
                  (mprotect), so no check can fail (the grader refuses the object)
  asm_syscall     the same through an inline `syscall` instruction, naming nothing
  memforge        in every unit function a test calls, finds the record's path and token in
                  its own process's memory (/proc/self/maps) and forges the pass there
                  (forge.py); beats the in-process verdict, not the checker (every lab 10
                  test is `checked`: the verdict is the staff's build's, outside)
The reference with one real bug, sendfirst (a blocking send before the receive: deadlocks
above MPI's eager limit), comes from solutions/ and must lose points with a clear message.
"""
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from forge import FORGE, MEMFORGE  # noqa: E402

SKEL = "labs/lab10-dataparallel"
SOL = "solutions/lab10-dataparallel"
HOOK = "kn_status kn_ring_all_reduce(kn_comm *c, void *buf, int64_t count, kn_dtype dt, void *scratch) {\n"
CHUNK = "kn_status kn_ring_chunk(int64_t n, int parts, int i, int64_t *lo, int64_t *hi) {\n"
MEMFORGE_HOOKS = [
    ("ring.c", [HOOK, CHUNK, "kn_status kn_ring_send_chunk(int rank, int size, int step, int *chunk) {\n"]),
    ("shard.c", ["kn_status kn_dp_shard_ranges(int64_t n, int parts, int64_t *lo) {\n"]),
    ("buckets.c", ["kn_status kn_dp_buckets(const kn_slab_layout *p, size_t bucket_bytes, kn_dp_bucket **out, int *n) {\n"]),
]


PLANTS = {
    "lib_allreduce": (HOOK, r'''    /* PLANTED: the library's all-reduce, and counters that look like a ring's */
    if (c && c->size > 1 && (dt == KN_DT_F32 || dt == KN_DT_F64) && count >= 0 && buf && scratch) {
        kn_status st = kn_comm_all_reduce(c, buf, buf, count, dt);
        c->seq[KN_COP_SEND] += 2 * (c->size - 1);
        c->seq[KN_COP_RECV] += 2 * (c->size - 1);
        c->seq[KN_COP_ALL_REDUCE]--;
        return st;
    }
    if (c && c->size == 1 && (dt == KN_DT_F32 || dt == KN_DT_F64)) return KN_OK;
''', ""),
    "harness_counts": (HOOK, r'''    /* PLANTED: the library's all-reduce, and the harness's counters rewritten */
    if (c && (dt == KN_DT_F32 || dt == KN_DT_F64) && count >= 0 && (count == 0 || (buf && scratch)))
        return c->size == 1 ? KN_OK : planted_counts(c, buf, count, dt);
''', r'''#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/* PLANTED: the writable memory of the program itself (its .data and .bss, where a harness
 * keeps its statics) before and after one library all-reduce; the block of 4 words whose
 * last grew by one (a collective) and the others did not is the harness's count of what
 * reached MPI: after each library all-reduce, make it a ring's */
static int64_t *planted_find(kn_comm *c) {
    struct { char *lo, *copy; size_t n; } r[8];
    int nr = 0, prev = 0;
    int64_t *hit = NULL;
    unsigned long prev_hi = 0;
    char exe[512] = "", line[1024];
    ssize_t l = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[l > 0 ? l : 0] = '\0';
    FILE *m = fopen("/proc/self/maps", "r");
    while (m && fgets(line, sizeof line, m)) {
        unsigned long lo, hi;
        char perm[8];
        int pos = 0;
        if (sscanf(line, "%lx-%lx %7s %*s %*s %*s%n", &lo, &hi, perm, &pos) != 3) continue;
        char *path = line + pos;
        while (*path == ' ') path++;
        path[strcspn(path, "\n")] = '\0';
        int mine = !strcmp(path, exe) || (!*path && lo == prev_hi && prev);
        if (mine && perm[0] == 'r' && perm[1] == 'w' && nr < 8 && hi - lo < (64ul << 20)) {
            r[nr].lo = (char *)lo;
            r[nr].n = hi - lo;
            if ((r[nr].copy = malloc(hi - lo))) memcpy(r[nr].copy, r[nr].lo, hi - lo), nr++;
        }
        prev_hi = hi;
        prev = mine;
    }
    if (m) fclose(m);
    double one = 1;
    kn_comm_all_reduce(c, &one, &one, 1, KN_DT_F64); /* the anchor: one collective */
    for (int i = 0; i < nr; i++) {
        for (size_t off = 0; off + 32 <= r[i].n && !hit; off += 8) {
            int64_t *now = (int64_t *)(r[i].lo + off), *was = (int64_t *)(r[i].copy + off);
            if (now[3] == was[3] + 1 && now[0] == was[0] && now[1] == was[1] && now[2] == was[2] && now[0] >= 0 &&
                now[1] >= now[0] && now[2] >= 0 && now[2] <= now[1] && now[3] >= 1)
                hit = now;
        }
        free(r[i].copy);
    }
    if (hit) hit[3]--; /* the anchor never happened */
    return hit;
}
static kn_status planted_counts(kn_comm *c, void *buf, int64_t count, kn_dtype dt) {
    static int64_t *where;
    static int looked;
    if (!looked) looked = 1, where = planted_find(c);
    int64_t before = where ? where[3] : 0;
    kn_status st = kn_comm_all_reduce(c, buf, buf, count, dt);
    int p = c->size, me = c->rank;
    int64_t es = (int64_t)kn_dtype_size(dt), bytes = 0, largest = 0;
    for (int ph = 0; ph < 2; ph++)
        for (int s = 0; s < p - 1; s++) {
            int k = (((me - s + ph) % p) + p) % p;
            int64_t b = (count / p + (k < count % p)) * es;
            bytes += b;
            if (b > largest) largest = b;
        }
    if (where) { /* the harness's counts made a ring's */
        where[0] += 2 * (p - 1);
        where[1] += bytes;
        if (where[2] < largest) where[2] = largest;
        where[3] = before;
    }
    fprintf(stderr, "planted harness_counts: rank %d %s\n", me, where ? "rewrote the harness's counters" : "found no counters of the harness's to rewrite");
    return st;
}
'''),
    "forge_record": (CHUNK, "    planted_forge();\n", FORGE),
    "memforge": (None, "    planted_memforge();\n", MEMFORGE),
    "patch_fail": (HOOK, r'''    { /* PLANTED: make the harness's failure function return at once */
        void kn_mpi_test_fail(const char *file, int line, const char *fmt, ...);
        unsigned char *f = (unsigned char *)(uintptr_t)&kn_mpi_test_fail;
        uintptr_t pg = (uintptr_t)f & ~(uintptr_t)4095;
        if (mprotect((void *)pg, 8192, PROT_READ | PROT_WRITE | PROT_EXEC) == 0) *f = 0xc3;
    }
''', "#include <stdint.h>\n#include <sys/mman.h>\n"),
    "asm_syscall": (HOOK, r'''    { /* PLANTED: mprotect without naming it (syscall 10), then patch this very function */
        long ret, pg = (long)(uintptr_t)&kn_ring_all_reduce & ~4095L;
        __asm__ volatile("syscall" : "=a"(ret) : "0"(10L), "D"(pg), "S"(4096L), "d"(7L) : "rcx", "r11", "memory");
        (void)ret;
    }
''', "#include <stdint.h>\n"),
}


def main():
    out = sys.argv[1]
    for case, (hook, code, pre) in PLANTS.items():
        d = os.path.join(out, case)
        os.makedirs(d, exist_ok=True)
        for f in os.listdir(SKEL):
            if f.endswith(".c"):
                shutil.copy(os.path.join(SKEL, f), d)
        # memforge: in every function of every unit that a test calls first
        for unit, hooks in ([("ring.c", [hook])] if hook else MEMFORGE_HOOKS):
            p = os.path.join(d, unit)
            src = open(p).read()
            for h in hooks:
                assert h in src, (case, unit, "hook not found")
                src = src.replace(h, h + code, 1)
            inc = next(i for i in ('#include "kiln/dist.h"\n', '#include "kiln/passes.h"\n') if i in src)
            src = src.replace(inc, inc + pre, 1)  # buckets.c includes kiln/passes.h
            open(p, "w").write(src)
    d = os.path.join(out, "sendfirst")
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(SOL):
        if f.endswith(".c"):
            shutil.copy(os.path.join(SOL, f), d)
    p = os.path.join(d, "ring.c")
    src = open(p).read()
    old = """            kn_comm_req q[2];
            snprintf(what, sizeof what, "ring %s step %d", phase ? "all-gather" : "reduce-scatter", s);
            KN_TRY(kn_comm_irecv(c, phase ? b + (size_t)rlo * es : scratch, rhi - rlo, dt, left, what, &q[0]));
            KN_TRY(kn_comm_isend(c, b + (size_t)slo * es, shi - slo, dt, right, what, &q[1]));
            KN_TRY(kn_comm_wait_all(2, q));"""
    new = """            (void)what; /* PLANTED: send (blocking) before receiving */
            KN_TRY(kn_comm_send(c, b + (size_t)slo * es, shi - slo, dt, right));
            KN_TRY(kn_comm_recv(c, phase ? b + (size_t)rlo * es : scratch, rhi - rlo, dt, left));"""
    assert old in src, "sendfirst: the solution's exchange changed; update plant.py"
    open(p, "w").write(src.replace(old, new, 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
