/* pp_sim.c — `kiln pp-sim`: a pipeline schedule on a clock. Prints each rank's list of
 * forwards and backwards (lab 11's kn_pp_schedule), replays them with kn_pp_simulate (a
 * forward costs tf, a backward tb, communication free; each action as early as its
 * dependencies allow) and prints the step's time, the bubble beside its formula and the
 * micro-batches each rank keeps alive; --timeline writes every action's start and end, the
 * data of lesson 11's figure (plots/pp_schedules.sh draws it with gnuplot). It needs no
 * MPI and no GPU: it is what `make run LAB=11` runs with the student's schedule.
 *
 *   kiln pp-sim [--schedule gpipe|1f1b|interleaved] [--pp P] [--microbatches M]
 *               [--chunks V] [--tf X] [--tb Y] [--timeline FILE] [--quiet]
 *
 * tf and tb are one stage's costs; an interleaved chunk is 1/V of a stage, so it costs
 * tf/V and tb/V, and the step's work is the same whatever the schedule. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "kiln/pipeline.h"

static void pp_usage(FILE *f) {
    fprintf(f,
            "usage: kiln pp-sim [--schedule gpipe|1f1b|interleaved] [--pp P] [--microbatches M] [--chunks V]\n"
            "                   [--tf X] [--tb Y] [--timeline FILE] [--quiet]\n"
            "  --schedule S       the pipeline schedule (default 1f1b)\n"
            "  --pp P             stages, one per rank (default 4)\n"
            "  --microbatches M   micro-batches per step (default 8)\n"
            "  --chunks V         model chunks per rank, interleaved only (default 2 there, 1 otherwise)\n"
            "  --tf X, --tb Y     a stage's forward and backward time (default 1 and 2)\n"
            "  --timeline FILE    write every action: rank, F or B, micro-batch, chunk, start, end (TSV)\n"
            "  --quiet            no per-rank lists\n");
}

static int pp_int(const char *opt, const char *s, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) {
        fprintf(stderr, "kiln pp-sim: %s '%s': expected an integer in %d..%d\n", opt, s, lo, hi);
        return 2;
    }
    *out = (int)v;
    return 0;
}

static int pp_double(const char *opt, const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s || !(v >= 0) || v > 1e9) {
        fprintf(stderr, "kiln pp-sim: %s '%s': expected a time >= 0\n", opt, s);
        return 2;
    }
    *out = v;
    return 0;
}

/* Every rank's list and live peak, the step, the bubble, the timeline. */
static int pp_report(kn_pp_kind k, int p, int m, int v, double tf, double tb, const char *timeline, bool quiet) {
    int per = 2 * m * v, rc = 1;
    int *live = calloc((size_t)p, sizeof(int));
    kn_pp_event *ev = calloc((size_t)p * per, sizeof(kn_pp_event));
    kn_pp_sim s = {.peak_live = live, .events = ev};
    if (!live || !ev) {
        fprintf(stderr, "kiln pp-sim: out of memory\n");
        goto done;
    }
    if (kn_pp_simulate(k, p, m, v, tf / v, tb / v, &s) != KN_OK) {
        fprintf(stderr, "kiln pp-sim: %s\n", kn_last_error());
        goto done;
    }
    printf("kiln pp-sim: %s, %d stage%s, %d micro-batch%s, %d chunk%s per rank; a stage's forward %g, backward %g\n",
           kn_pp_kind_name(k), p, p == 1 ? "" : "s", m, m == 1 ? "" : "es", v, v == 1 ? "" : "s", tf, tb);
    for (int r = 0; r < p; r++) {
        if (!quiet) {
            printf("rank %d:", r);
            for (int i = 0; i < per; i++) {
                const kn_pp_action *a = &ev[r * per + i].a;
                printf(" %c%d", a->op == KN_PP_FWD ? 'F' : 'B', a->micro);
                if (v > 1) printf(".%d", a->chunk);
            }
            printf("\n");
        }
    }
    double ideal = m * (tf + tb), formula = (double)(p - 1) / ((double)v * m + p - 1);
    printf("step time %g (each rank computes for %g of it); bubble %.2f%% of the ranks' time, "
           "(p-1)/(%sm+p-1) = %.2f%%\n",
           s.makespan, ideal, 100 * s.bubble, v > 1 ? "v" : "", 100 * formula);
    printf("micro-batch%s alive at most, per rank:", v > 1 ? " chunks" : "es");
    for (int r = 0; r < p; r++) printf(" %d", live[r]);
    printf("\n");
    if (timeline) {
        FILE *f = fopen(timeline, "w");
        if (!f) {
            fprintf(stderr, "kiln pp-sim: --timeline %s: %s\n", timeline, strerror(errno));
            goto done;
        }
        fprintf(f, "# kiln pp-sim --schedule %s --pp %d --microbatches %d --chunks %d --tf %g --tb %g\n"
                   "# rank\top\tmicro\tchunk\tstart\tend\n",
                kn_pp_kind_name(k), p, m, v, tf, tb);
        for (int e = 0; e < s.nevents; e++)
            fprintf(f, "%d\t%c\t%d\t%d\t%.6g\t%.6g\n", ev[e].rank, ev[e].a.op == KN_PP_FWD ? 'F' : 'B', ev[e].a.micro,
                    ev[e].a.chunk, ev[e].start, ev[e].end);
        if (fclose(f) != 0) {
            fprintf(stderr, "kiln pp-sim: --timeline %s: write failed\n", timeline);
            goto done;
        }
        printf("timeline: %s\n", timeline);
    }
    rc = 0;
done:
    free(live);
    free(ev);
    return rc;
}

int kn_cli_pp_sim(int argc, char **argv) {
    kn_pp_kind k = KN_PP_1F1B;
    int p = 4, m = 8, v = 0;
    double tf = 1, tb = 2;
    const char *timeline = NULL;
    bool quiet = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            pp_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--quiet")) {
            quiet = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "kiln pp-sim: %s needs a value (kiln pp-sim --help)\n", a);
            return 2;
        }
        const char *val = argv[++i];
        int rc = 0;
        if (!strcmp(a, "--schedule")) {
            if (kn_pp_kind_parse(val, &k) != KN_OK) {
                fprintf(stderr, "kiln pp-sim: --schedule: %s\n", kn_last_error());
                return 2;
            }
        } else if (!strcmp(a, "--pp")) rc = pp_int(a, val, 1, 64, &p);
        else if (!strcmp(a, "--microbatches")) rc = pp_int(a, val, 1, 4096, &m);
        else if (!strcmp(a, "--chunks")) rc = pp_int(a, val, 1, 16, &v);
        else if (!strcmp(a, "--tf")) rc = pp_double(a, val, &tf);
        else if (!strcmp(a, "--tb")) rc = pp_double(a, val, &tb);
        else if (!strcmp(a, "--timeline")) timeline = val;
        else {
            fprintf(stderr, "kiln pp-sim: unknown option %s (kiln pp-sim --help)\n", a);
            return 2;
        }
        if (rc) return rc;
    }
    if (v == 0) v = k == KN_PP_INTERLEAVED ? 2 : 1;
    return pp_report(k, p, m, v, tf, tb, timeline, quiet);
}
