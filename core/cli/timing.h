/* timing.h — what kiln's benchmarks (bench.c, bench_attn.c) time with: a stopwatch of
 * device events and the median of the samples. */
#ifndef KILN_CLI_TIMING_H
#define KILN_CLI_TIMING_H

#include "kiln/device.h"

/* A stopwatch of two kn_events on dev's default stream: device time on a GPU (everything
 * queued in between), the wall clock on the CPU. The device is synchronized first, so
 * nothing queued before start counts. Start it again to reuse it; free it once. */
typedef struct kn_stopwatch {
    kn_event *start, *stop;
} kn_stopwatch;
kn_status kn_stopwatch_start(kn_stopwatch *w, kn_device dev);
kn_status kn_stopwatch_stop(kn_stopwatch *w, double *ms);
void kn_stopwatch_free(kn_stopwatch *w);

/* The median of v[0..n) (n >= 1); sorts v. */
double kn_median(double *v, int n);

#endif
