/* bench/stopper.h: the measured window of a benchmark run, shared by the
 * bench programs (each includes it; everything is static).
 *
 * A thread waits until the job's source has emitted its first records,
 * counts what the source emits over the next `seconds`, and then stops the
 * job. Timing from the first record leaves out what happens before it (a
 * state directory's store is opened and checked and the lease taken only
 * in runs with checkpoints), so runs with and without checkpoints compare
 * their steady rates, not their start-up.
 */
#ifndef WEIR_BENCH_STOPPER_H
#define WEIR_BENCH_STOPPER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "base/clock.h"
#include "weir/weir.h"

typedef struct bench_stopper {
  weir_job *job;    /* borrowed */
  const char *src;  /* the operator whose emitted records are counted */
  double seconds;   /* the window to measure */
  uint64_t emitted; /* out: records the source emitted in the window */
  double window;    /* out: the window's length as measured, s */
  atomic_int ended; /* the job returned before the window closed */
  pthread_t th;
} bench_stopper;

static void bench_sleep_ns(uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static void *bench_stopper_main(void *p) {
  bench_stopper *st = p;
  uint64_t c0 = 0, c1 = 0;
  while (!atomic_load(&st->ended)) {
    weir_job_operator_counts(st->job, st->src, NULL, &c0);
    if (c0) break;
    bench_sleep_ns(200000);
  }
  uint64_t t0 = weir_clock_mono_ns(), end = t0 + (uint64_t)(st->seconds * 1e9);
  for (uint64_t now = t0; now < end && !atomic_load(&st->ended); now = weir_clock_mono_ns())
    bench_sleep_ns(end - now < 10000000u ? end - now : 10000000u);
  weir_job_operator_counts(st->job, st->src, NULL, &c1);
  st->window = (double)(weir_clock_mono_ns() - t0) / 1e9;
  st->emitted = c1 - c0;
  weir_job_stop(st->job);
  return NULL;
}

/* Starts the stopper of `job` (call before weir_job_run). */
static void bench_stopper_start(bench_stopper *st, weir_job *job, const char *src, double seconds) {
  st->job = job;
  st->src = src;
  st->seconds = seconds;
  st->emitted = 0;
  st->window = 0;
  atomic_init(&st->ended, 0);
  pthread_create(&st->th, NULL, bench_stopper_main, st);
}

/* After weir_job_run returned: joins the stopper. Returns the source's
 * records per second over the window (0 if it never started). */
static double bench_stopper_join(bench_stopper *st) {
  atomic_store(&st->ended, 1);
  pthread_join(st->th, NULL);
  return st->window > 0 ? (double)st->emitted / st->window : 0;
}

/* The most checkpoints of one run a benchmark looks at. */
#define BENCH_MAX_CHECKPOINTS 4096

/* The checkpoints of the measured window, oldest first, into out (at most
 * cap): not the final checkpoint (after the stop, when sources end), nor
 * one that was still in flight at the stop (it waits for the job to drain).
 * Returns how many. */
static inline uint32_t bench_window_checkpoints(const weir_job *job, weir_checkpoint_stat *out,
                                                uint32_t cap) {
  size_t n = weir_job_checkpoint_stats(job, 0, out, cap);
  uint32_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (!(out[i].flags & (WEIR_CHECKPOINT_FINAL | WEIR_CHECKPOINT_AFTER_STOP))) out[k++] = out[i];
  return k;
}

#endif
