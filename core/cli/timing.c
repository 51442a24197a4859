/* timing.c — the benchmarks' stopwatch and median (timing.h). */
#include <stdlib.h>

#include "cli/timing.h"

void kn_stopwatch_free(kn_stopwatch *w) {
    kn_event_free(w->start);
    kn_event_free(w->stop);
    w->start = w->stop = NULL;
}
kn_status kn_stopwatch_start(kn_stopwatch *w, kn_device dev) {
    kn_stopwatch_free(w);
    KN_TRY(kn_device_synchronize(dev));
    KN_TRY(kn_event_new(dev, &w->start));
    KN_TRY(kn_event_new(dev, &w->stop));
    return kn_event_record(w->start, NULL);
}
kn_status kn_stopwatch_stop(kn_stopwatch *w, double *ms) {
    KN_TRY(kn_event_record(w->stop, NULL));
    return kn_event_elapsed_ms(w->start, w->stop, ms);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
double kn_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
