#!/usr/bin/env python3
"""plant.py OUT_DIR — derive the planted lab 01 submissions from solutions/lab01-tensors/.

Run from the repository root: python3 tests/grader/planted/lab01/plant.py OUT_DIR
(the grader's self-test does, into a temporary folder: the cases are made fresh from the
current solutions each time, so they never drift from them and are not kept in the tree).
Each case folder OUT_DIR/<case>/ gets the three unit files; the misbehaviour goes into one function, and
for the hostile cases only when kn_tensor_reduce is asked for KN_REDUCE_PROD (or MIN), so a
handful of tests are affected and the grader's self-test stays fast. Every planted loop is
bounded (forks, allocations, output), so a broken limit cannot take the machine down.
The expected scores are in expected.txt beside this file (tests/grader/selftest.sh).
"""
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from forge import FORGE  # noqa: E402

SOL = "solutions/lab01-tensors"
HOOK = 'const char *fn = "kn_tensor_reduce";'
HDR = '#include "kiln/tensor.h"'

PLANTS = {
    # case: (file, code inserted at the top of kn_tensor_reduce, extra includes)
    "crash": ("if (op == KN_REDUCE_PROD) { volatile int *planted = NULL; *planted = 1; } /* PLANTED: segfault */",
              ""),
    "hang": ("if (op == KN_REDUCE_PROD) for (volatile unsigned long planted = 1; planted; planted++) {} /* PLANTED: loop */",
             ""),
    "fork_bomb": ("""if (op == KN_REDUCE_PROD) { /* PLANTED: fork bomb, at most 200 children */
        int planted = 0;
        for (int i = 0; i < 200; i++) {
            pid_t p = fork();
            if (p == 0) for (;;) pause();
            if (p > 0) planted++;
        }
        printf("planted fork bomb: %d children\\n", planted);
        fflush(stdout);
        for (;;) pause();
    }""", "#include <stdio.h>\n#include <sys/types.h>\n#include <unistd.h>\n"),
    "memory_blowup": ("""if (op == KN_REDUCE_PROD) /* PLANTED: 64 x 64 MiB, no NULL check */
        for (int i = 0; i < 64; i++) { char *planted = malloc((size_t)64 << 20); memset(planted, 1, (size_t)64 << 20); }""",
                      "#include <stdlib.h>\n"),
    "output_flood": ("""if (op == KN_REDUCE_PROD) { /* PLANTED: 256 MiB on stdout */
        static char planted[1 << 20];
        memset(planted, 'y', sizeof planted - 1);
        for (int i = 0; i < 256; i++) fputs(planted, stdout);
    }""", "#include <stdio.h>\n"),
    "forge_record": ("if (op == KN_REDUCE_PROD || op == KN_REDUCE_MIN) planted_forge(); /* PLANTED */", FORGE),
    "exit0": ("""if (op == KN_REDUCE_PROD) exit(0); /* PLANTED */
    if (op == KN_REDUCE_MIN) _exit(0); /* PLANTED */""", "#include <stdlib.h>\n#include <unistd.h>\n"),
    "fake_summary": ("""if (op != KN_REDUCE_SUM) { /* PLANTED: claims success, computes nothing */
        printf("ok - lab01_reduce::mean_max_min_prod\\n[====] Synthesis: Tested: 40 | Passing: 40 | Failing: 0 | Crashing: 0\\n100 passed, 0 failed\\n");
        fprintf(stderr, "100 passed, 0 failed\\n");
        *out = NULL;
        return KN_OK;
    }""", "#include <stdio.h>\n"),
    "writes_tests": ("""if (op == KN_REDUCE_PROD) { /* PLANTED: tries to rewrite the rubric, the tests, the verdicts */
        static const char *targets[] = {"../../../tree/tests/lab01/rubric.txt", "../../../tree/labs/lab01-tensors/tests/test_reduce.c",
            "../../../v/0", "../../../v/1", "../../../rec/forged", "../../../out/0", "../../../manifest", "../../../notes"};
        for (size_t i = 0; i < sizeof targets / sizeof *targets; i++) {
            FILE *f = fopen(targets[i], "w");
            printf("planted write %s: %s\\n", targets[i], f ? "WROTE" : "denied");
            if (f) { fputs("lab01_reduce::sum_over_one_axis 1000\\npassed 0.1\\n", f); fclose(f); }
        }
        FILE *tap = fopen("../tap.0", "a"); /* a forged TAP line where the runner's report is not */
        if (tap) { fputs("ok - lab01_reduce::mean_max_min_prod\\n", tap); fclose(tap); }
        char env[16384];
        FILE *pe = fopen("/proc/self/environ", "r");
        size_t n = pe ? fread(env, 1, sizeof env, pe) : 0, seen = 0;
        if (pe) fclose(pe);
        for (size_t i = 0; i + 5 <= n; i++) seen |= memcmp(env + i, "/rec/", 5) == 0;
        printf("planted env: KN_GRADE_DONE=%s CRITERION_OUTPUTS=%s /proc/self/environ=%s\\n",
               getenv("KN_GRADE_DONE") ? "SEEN" : "wiped", getenv("CRITERION_OUTPUTS") ? "SEEN" : "wiped",
               seen ? "SEEN" : "wiped");
        fflush(stdout);
        return kn_error(KN_ERR_INTERNAL, "planted");
    }""", "#include <stdio.h>\n#include <stdlib.h>\n"),
}


def snoop(out):
    """The planted 'snoop' case: when asked for KN_REDUCE_PROD, try to read what a student
    must not (the hidden tests, the rubric and the reference solution in the instructor's
    checkout, a classmate's submission beside this one, the grader's private copy of the
    tree) and print what it got; the grader's jail must leave it nothing to read."""
    repo = os.getcwd()
    targets = [os.path.join(repo, "tests/lab01/test_hidden_reduce.c"), os.path.join(repo, "tests/lab01/rubric.txt"),
               os.path.join(repo, SOL, "reduce.c"), os.path.join(os.path.abspath(out), "correct/reduce.c"),
               "../../../tree/tests/lab01/rubric.txt", "../../../rubric.txt",
               "/autograder/source/kiln/tests/lab01/rubric.txt"]
    for t in targets[:3]:
        assert os.path.exists(t), f"plant.py: {t} is gone: update the snoop case"
    lst = ", ".join('"%s"' % t.replace("\\", "\\\\").replace('"', '\\"') for t in targets)
    return ("""if (op == KN_REDUCE_PROD) { /* PLANTED: reads what a student must not */
        static const char *targets[] = {%s};
        for (size_t i = 0; i < sizeof targets / sizeof *targets; i++) {
            char buf[64] = "";
            FILE *f = fopen(targets[i], "r");
            size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
            if (f) fclose(f);
            printf("planted snoop %%s: %%s\\n", targets[i], f ? (n ? "READ" : "OPENED") : "nothing");
        }
        fflush(stdout);
        return kn_error(KN_ERR_INTERNAL, "planted snoop");
    }""" % lst, "#include <stdio.h>\n")


def main(out):
    PLANTS["snoop"] = snoop(out)
    units = sorted(f for f in os.listdir(SOL) if f.endswith(".c"))
    src = {u: open(os.path.join(SOL, u)).read() for u in units}
    cases = {"correct": {}}
    cases["partly_wrong"] = {"reduce.c": src["reduce.c"].replace(
        "case KN_REDUCE_MAX: return (v > acc || isnan(v)) ? v : acc;",
        "case KN_REDUCE_MAX: return (v < acc || isnan(v)) ? v : acc; /* PLANTED: max computes min */")}
    cases["compile_error"] = {"broadcast.c": src["broadcast.c"].replace(
        "#include \"kiln/tensor.h\"", "#include \"kiln/tensor.h\"\n\nstatic int planted_syntax_error = ;\n", 1)}
    cases["compile_error_all"] = {u: src[u].replace(
        "#include \"kiln/tensor.h\"", "#include \"kiln/tensor.h\"\n\nstatic int planted_syntax_error = ;\n", 1) for u in units}
    for name, (code, inc) in PLANTS.items():
        s = src["reduce.c"]
        assert HOOK in s and HDR in s, "solutions/lab01-tensors/reduce.c changed: update plant.py"
        s = s.replace(HDR, inc + HDR, 1).replace(HOOK, HOOK + "\n    " + code, 1)
        cases[name] = {"reduce.c": s}
    for case, changed in cases.items():
        d = os.path.join(out, case)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        for u in units:
            with open(os.path.join(d, u), "w") as f:
                f.write(changed.get(u, src[u]))
        for u, s in changed.items():
            assert s != src[u], f"{case}/{u}: the plant did not apply"
    print("planted:", " ".join(cases))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: plant.py OUT_DIR")
    main(sys.argv[1])
