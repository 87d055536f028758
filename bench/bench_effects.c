/* bench_effects.c: what the HTTP sink delivers against a destination that
 * takes its time: the counter job (`weir run counter`, parallelism P, 1 s
 * checkpoints) into `weir receiver --latency L` for each latency and each
 * `inflight` value, as effects/s and as the ratio to the ideal P x
 * inflight / latency (the receiver answers every request L ms after its
 * commit, all of them side by side).
 *
 *   bench_effects [--latencies 20,2] [--inflight 1,8,64,256] [--seconds S]
 *                 [--parallelism P] [--reps R] [--weir PATH]
 *
 * Each run sends about S seconds' worth of effects at the ideal rate (at
 * least 200, at most 40000), timed over the whole run (start, checkpoints
 * and the last commit included); medians of R. The receiver is started
 * per run with a fresh database; its effect count must equal the records.
 * Where the ideal rate passes what the receiver takes on this machine
 * (bench_receiver measures that), the ratio says so rather than the sink.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "receiver.h"

#ifndef WEIR_BINARY
#define WEIR_BINARY "weir"
#endif

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Parses "a,b,c" into v (at most cap); returns the count, 0 if bad. */
static int parse_list(const char *s, long *v, int cap) {
  int n = 0;
  for (char *end; *s && n < cap; s = *end == ',' ? end + 1 : end) {
    v[n] = strtol(s, &end, 10);
    if (end == s || v[n] < 0) return 0;
    n++;
    if (!*end) break;
  }
  return n;
}

/* Runs `weir run counter` into the receiver at port; its exit status. */
static int run_counter(const char *weir, const char *dir, int port, long inflight, long records,
                       int par) {
  char sink[200], rec[32], p[16];
  snprintf(sink, sizeof sink, "http://127.0.0.1:%d/effects?inflight=%ld", port, inflight);
  snprintf(rec, sizeof rec, "%ld", records);
  snprintf(p, sizeof p, "%d", par);
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    if (chdir(dir) != 0 || !freopen("weir.log", "w", stderr)) _exit(127);
    execl(weir, weir, "run", "counter", "--records", rec, "--keys", "1000", "--parallelism", p,
          "--workers", "2", "--checkpoint-interval", "1000", "--state-dir", "state", "--sink", sink,
          "--quiet", (char *)NULL);
    _exit(127);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int usage(void) {
  fprintf(stderr, "usage: bench_effects [--latencies L,...] [--inflight N,...] [--seconds S] "
                  "[--parallelism P] [--reps R] [--weir PATH]\n");
  return 2;
}

int main(int argc, char **argv) {
  const char *weir = WEIR_BINARY;
  long lat[8] = {20, 2}, inf[8] = {1, 8, 64, 256};
  int nlat = 2, ninf = 4, par = 2, reps = 3;
  double seconds = 3;
  for (int i = 1; i < argc; i += 2) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) return usage();
    if (!strcmp(argv[i], "--latencies"))
      nlat = parse_list(v, lat, 8);
    else if (!strcmp(argv[i], "--inflight"))
      ninf = parse_list(v, inf, 8);
    else if (!strcmp(argv[i], "--seconds"))
      seconds = atof(v);
    else if (!strcmp(argv[i], "--parallelism"))
      par = atoi(v);
    else if (!strcmp(argv[i], "--reps"))
      reps = atoi(v);
    else if (!strcmp(argv[i], "--weir"))
      weir = v;
    else
      return usage();
  }
  if (!nlat || !ninf || par < 1 || reps < 1 || reps > 99 || seconds <= 0) return usage();
  printf("bench_effects: counter job, parallelism %d, into weir receiver --latency L; "
         "median of %d\n",
         par, reps);
  printf("  %8s %8s %10s %12s %10s %8s\n", "latency", "inflight", "records", "effects/s", "ideal",
         "ratio");
  for (int a = 0; a < nlat; a++)
    for (int b = 0; b < ninf; b++) {
      double ideal = lat[a] ? (double)par * (double)inf[b] * 1000.0 / (double)lat[a] : 0;
      long records = (long)(ideal * seconds);
      if (records < 200) records = 200;
      if (records > 40000 || !lat[a]) records = 40000;
      double rate[99];
      for (int r = 0; r < reps; r++) {
        char dir[] = "/tmp/bench_effects.XXXXXX";
        if (!mkdtemp(dir)) return 1;
        char db[300], lats[32];
        snprintf(db, sizeof db, "%s/recv.db", dir);
        snprintf(lats, sizeof lats, "%ld", lat[a]);
        const char *extra[] = {"--latency", lats, NULL};
        pid_t rp;
        int port = bench_receiver_start(weir, db, extra, &rp);
        if (port <= 0) {
          fprintf(stderr, "bench_effects: cannot start '%s receiver'\n", weir);
          return 1;
        }
        double t0 = now_s();
        int rc = run_counter(weir, dir, port, inf[b], records, par);
        double took = now_s() - t0;
        long long effects = bench_receiver_stat(weir, db, "effects");
        bench_receiver_stop(rp);
        if (rc != 0 || effects != records) {
          fprintf(stderr,
                  "bench_effects: latency %ld inflight %ld: exit %d, %lld effects of %ld "
                  "(its log was %s/weir.log)\n",
                  lat[a], inf[b], rc, effects, records, dir);
          return 1;
        }
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "bench_effects: cannot remove %s\n", dir);
        rate[r] = (double)records / took;
      }
      qsort(rate, (size_t)reps, sizeof *rate, cmp_d);
      double m = reps % 2 ? rate[reps / 2] : (rate[reps / 2 - 1] + rate[reps / 2]) / 2;
      printf("  %6ld ms %8ld %10ld %12.0f %10.0f %8.2f\n", lat[a], inf[b], records, m, ideal,
             ideal > 0 ? m / ideal : 0);
      fflush(stdout);
    }
  return 0;
}
