/* profile.c — the step profile of a kn_program (kn_program_set_profile, KILN_PROFILE_STEPS;
 * kiln/program.h): the clock around each step of a run. What the times say is read by
 * report.c (kn_program_print_profile, kn_program_roofline_tsv).
 *
 * A profiled step's clock: events (kiln/device.h) recorded on the device's default stream
 * before the first step and after every step, without holding the run up: a GPU runs the
 * steps back to back as in an unprofiled run, and after the last step the run's end waits
 * once and adds the time between consecutive events to each step (no launch latency or
 * host wait in a kernel's time). On the CPU an event is the wall clock, so the same code
 * times the steps there. Without events (they could not be made) the wall clock, the host
 * waiting for a GPU on both sides of a step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln/device.h"
#include "kiln/program.h"
#include "program/program_impl.h"

double kn_program_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static void prof_events_free(kn_program *p) {
    for (int i = 0; p->prof_ev && i <= p->nsteps; i++) kn_event_free(p->prof_ev[i]);
    kn_free(p->prof_ev);
    p->prof_ev = NULL;
}
/* The events of a GPU program's profile, made once; false (and none) when they cannot be. */
static bool prof_events(kn_program *p) {
    if (p->prof_ev) return true;
    p->prof_ev = kn_calloc((size_t)p->nsteps + 1, sizeof *p->prof_ev);
    for (int i = 0; p->prof_ev && i <= p->nsteps; i++)
        if (kn_event_new(p->dev, &p->prof_ev[i]) != KN_OK) {
            prof_events_free(p);
            kn_clear_error();
        }
    return p->prof_ev != NULL;
}

void kn_program_profile_run_begin(kn_program *p) {
    if (!p->step_ms && getenv("KILN_PROFILE_STEPS")) {
        p->step_ms = kn_calloc((size_t)p->nsteps + 1, sizeof *p->step_ms);
        p->env_profile = true;
    }
    if (p->step_ms) (void)prof_events(p); /* a step profile: events between the steps */
}

/* The start of step s (0 with events: the run's end adds their times). */
double kn_program_profile_begin(kn_program *p, int s) {
    if (p->prof_ev) {
        if (s == 0 && kn_event_record(p->prof_ev[0], NULL) != KN_OK) kn_clear_error(); /* collect then fails: 0 ms */
        return 0;
    }
    if (p->dev.type != KN_DEVICE_CPU) (void)kn_device_synchronize(p->dev);
    return kn_program_now_ms();
}
/* Step s's ms since t0 (0 with events). */
double kn_program_profile_end(kn_program *p, int s, double t0) {
    if (p->prof_ev) {
        if (kn_event_record(p->prof_ev[s + 1], NULL) != KN_OK) kn_clear_error();
        return 0;
    }
    if (p->dev.type != KN_DEVICE_CPU) (void)kn_device_synchronize(p->dev);
    return kn_program_now_ms() - t0;
}

void kn_program_profile_run_end(kn_program *p) {
    if (p->prof_ev && p->step_ms) /* one wait, then the time between consecutive events */
        for (int s = 0; s < p->nsteps; s++) {
            double ms = 0;
            if (kn_event_elapsed_ms(p->prof_ev[s], p->prof_ev[s + 1], &ms) == KN_OK) p->step_ms[s] += ms;
            else kn_clear_error();
        }
    if (p->env_profile) { /* the first run warms up cuBLAS and the allocators: not counted */
        memset(p->step_ms, 0, sizeof *p->step_ms * (size_t)p->nsteps);
        p->runs = 0;
        p->env_profile = false;
    }
}

void kn_program_profile_free(kn_program *p) {
    if (p->step_ms && p->runs > 0 && getenv("KILN_PROFILE_STEPS")) /* =N: the N costliest (1: 15) */
        kn_program_print_profile(stderr, p, atoi(getenv("KILN_PROFILE_STEPS")) > 1 ? atoi(getenv("KILN_PROFILE_STEPS")) : 15, 0);
    kn_free(p->step_ms);
    p->step_ms = NULL;
    prof_events_free(p);
}

void kn_program_set_profile(kn_program *p, bool on) {
    if (!p) return;
    kn_free(p->step_ms);
    p->step_ms = on ? kn_calloc((size_t)p->nsteps + 1, sizeof *p->step_ms) : NULL;
    p->runs = 0;
}
