/* bench_ns.c: what namespaced u64 state costs (docs/event-time.md §4.2),
 * beside the u64 map it is modelled on, on one thread.
 *
 * Each table is filled (entries/s from empty, growth included), then
 * updated at random: ns_add   - (key, ns) -> value += 1 over K keys x N
 *                              namespaces (window ends), weir__wtab;
 *                    ns_pf    - the same, each slot prefetched 16 updates
 *                               ahead (weir_state_ns_prefetch, as a batch
 *                               or timer operator does);
 *                    u64_add  - key -> value += 1 over U keys, the u64 map
 *                               (weir_state_add_u64's table);
 *                    u64_pf   - the same, prefetched 16 ahead.
 * Keys are hashes (as record keys are), namespaces multiples of 1000; the
 * operations' keys are drawn before the clock starts (drawing them in the
 * loop would measure the generator, not the tables).
 * Reported: millions of operations per second of the thread's CPU time,
 * the median of --reps.
 *
 *   bench_ns [--keys K] [--ns N] [--u64-keys U] [--ops M] [--reps R]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "state.h"
#include "wtab.h"

static double median(double *v, int n) {
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
      double t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* r scaled into [0, n) by a multiply: a division (%) would take longer
 * than a cached probe, and the loops below would measure it. */
static inline uint64_t below(uint64_t r, uint64_t n) {
  return (uint64_t)(((unsigned __int128)r * n) >> 64);
}

#define AHEAD 16

/* The thread's CPU time, not the wall clock: the machines these run on
 * are shared, and a thread waiting for a core would count as slow. (Page
 * faults count: they are the thread's system time.) */
static uint64_t cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
static double secs(uint64_t t0) {
  return (double)(cpu_ns() - t0) / 1e9;
}

int main(int argc, char **argv) {
  uint64_t nk = 1000000, nn = 10, nu = 10000000, ops = 20000000;
  int reps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    uint64_t v = strtoull(argv[i + 1], NULL, 10);
    if (!strcmp(argv[i], "--keys"))
      nk = v;
    else if (!strcmp(argv[i], "--ns"))
      nn = v;
    else if (!strcmp(argv[i], "--u64-keys"))
      nu = v;
    else if (!strcmp(argv[i], "--ops"))
      ops = v;
    else if (!strcmp(argv[i], "--reps"))
      reps = (int)v;
    else {
      fprintf(stderr, "usage: bench_ns [--keys K] [--ns N] [--u64-keys U] [--ops M] [--reps R]\n");
      return 2;
    }
  }
  if (!nk || !nn || !nu || !ops || reps < 1 || reps > 15) return 2;
  double r_nsfill[15], r_ns[15], r_nspf[15], r_ufill[15], r_u[15], r_upf[15];
  uint64_t sink = 0;
  /* The operations: (ok[i], on[i]) for the ns table, uk[i] for the u64 map
   * (AHEAD more, for the prefetches past the last). */
  uint64_t *ok = malloc((ops + AHEAD) * 8), *on = malloc((ops + AHEAD) * 8),
           *uk = malloc((ops + AHEAD) * 8);
  if (!ok || !on || !uk) return 1;
  for (uint64_t i = 0; i < ops + AHEAD; i++) {
    uint64_t r = mix(i ^ 0x5bd1e995ull);
    ok[i] = mix(below(r, nk));
    on[i] = below(r * 0x9e3779b97f4a7c15ull, nn) * 1000;
    uk[i] = mix(below(mix(r), nu));
  }
  for (int rep = 0; rep < reps; rep++) {
    /* ---- namespaced ---- */
    weir__wtab t = {0};
    uint64_t t0 = cpu_ns();
    for (uint64_t i = 0; i < nk * nn; i++) {
      int c;
      *weir__wtab_upsert(&t, mix(i / nn), (i % nn) * 1000, &c) = i;
    }
    r_nsfill[rep] = (double)(nk * nn) / secs(t0) / 1e6;
    t0 = cpu_ns();
    for (uint64_t i = 0; i < ops; i++) {
      int c;
      *weir__wtab_upsert(&t, ok[i], on[i], &c) += 1;
    }
    r_ns[rep] = (double)ops / secs(t0) / 1e6;
    t0 = cpu_ns();
    for (uint64_t i = 0; i < ops; i++) {
      int c;
      weir__wtab_prefetch(&t, ok[i + AHEAD], on[i + AHEAD]);
      *weir__wtab_upsert(&t, ok[i], on[i], &c) += 1;
    }
    r_nspf[rep] = (double)ops / secs(t0) / 1e6;
    sink += t.n;
    weir__wtab_close(&t);

    /* ---- u64 ---- */
    weir__u64map m;
    memset(&m, 0, sizeof m);
    t0 = cpu_ns();
    for (uint64_t i = 0; i < nu; i++) *weir__u64_upsert(&m, mix(i)) = i;
    r_ufill[rep] = (double)nu / secs(t0) / 1e6;
    t0 = cpu_ns();
    for (uint64_t i = 0; i < ops; i++) *weir__u64_upsert(&m, uk[i]) += 1;
    r_u[rep] = (double)ops / secs(t0) / 1e6;
    t0 = cpu_ns();
    for (uint64_t i = 0; i < ops; i++) {
      weir__u64_prefetch(&m, uk[i + AHEAD]);
      *weir__u64_upsert(&m, uk[i]) += 1;
    }
    r_upf[rep] = (double)ops / secs(t0) / 1e6;
    sink += m.n;
    weir__state s = {.u = m};
    weir__state_close(&s);
  }
  free(ok);
  free(on);
  free(uk);
  printf("bench_ns: one thread, %d reps (median), %llu updates each at random\n", reps,
         (unsigned long long)ops);
  printf("  ns   %llu keys x %llu ns = %llu entries: fill %.1f M/s, ns_add %.1f M ops/s, "
         "prefetched %.1f M ops/s\n",
         (unsigned long long)nk, (unsigned long long)nn, (unsigned long long)(nk * nn),
         median(r_nsfill, reps), median(r_ns, reps), median(r_nspf, reps));
  printf("  u64  %llu keys: fill %.1f M/s, add_u64 %.1f M ops/s, prefetched %.1f M ops/s\n",
         (unsigned long long)nu, median(r_ufill, reps), median(r_u, reps), median(r_upf, reps));
  return sink == 0; /* (keeps the tables' work observable) */
}
