/* bench_stage.c: the counter job in one process against the same job cut
 * into two processes by a stage edge through JetStream (docs/scale-out.md
 * §2.1), in one invocation, runs interleaved so that machine drift cancels.
 *
 *   one   weir run counter --records N --keys K --sink null
 *   two   weir run counter --records N --keys K --stage-out E   (producer)
 *         weir run counter --source E --sink null                (consumer)
 *         started together; E = $NATS_URL/SUBJECT?tasks=W
 * Both at parallelism and workers W, with 1 s checkpoints into their own
 * state directories. Figures: records/s over the wall time until every
 * process of the run exited, and records per CPU second of those processes
 * (their user + system time, getrusage): on a machine with few cores the
 * processes compete for them, so the CPU figure says what the edge costs
 * and the wall figure what a host gives. Needs NATS_URL; the streams are
 * deleted at the end.
 *
 *   bench_stage [--records N] [--keys K] [--workers W] [--reps R] [--weir PATH]
 *               [--json FILE]
 */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"

#ifdef WEIR_BENCH_NATS
#include <nats/nats.h>
#endif

extern char **environ;

static char tmpl[] = "/tmp/weir-bench-stage-XXXXXX";

static void rmrf(const char *dir) {
  pid_t pid;
  char *argv[] = {"rm", "-rf", (char *)dir, NULL};
  if (posix_spawnp(&pid, "rm", NULL, NULL, argv, environ) == 0) waitpid(pid, NULL, 0);
}

static double cpu_of_children(void) {
  struct rusage ru;
  getrusage(RUSAGE_CHILDREN, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* Runs the argument vectors together; returns the wall seconds until all
 * exited (every one with 0), or -1. *cpu: their CPU seconds. */
static double run_all(char **argvs[], int n, double *cpu) {
  pid_t pids[4];
  double c0 = cpu_of_children();
  uint64_t t0 = weir_clock_mono_ns();
  for (int i = 0; i < n; i++)
    if (posix_spawn(&pids[i], argvs[i][0], NULL, NULL, argvs[i], environ) != 0) return -1;
  int ok = 1;
  for (int i = 0; i < n; i++) {
    int st = 0;
    if (waitpid(pids[i], &st, 0) != pids[i] || !WIFEXITED(st) || WEXITSTATUS(st) != 0) ok = 0;
  }
  double secs = (double)(weir_clock_mono_ns() - t0) / 1e9;
  *cpu = cpu_of_children() - c0;
  return ok ? secs : -1;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void drop_stream(const char *server, const char *name) {
#ifdef WEIR_BENCH_NATS
  natsConnection *nc = NULL;
  jsCtx *js = NULL;
  if (natsConnection_ConnectTo(&nc, server) != NATS_OK) return;
  if (natsConnection_JetStream(&js, nc, NULL) == NATS_OK) js_DeleteStream(js, name, NULL, NULL);
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
#else
  fprintf(stderr, "bench_stage: built without libnats: stream %s is left\n", name);
  (void)server;
#endif
}

int main(int argc, char **argv) {
  unsigned long long records = 5000000, keys = 100000;
  int workers = 2, reps = 3;
  const char *weir = WEIR_BINARY, *json = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--records"))
      records = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--keys"))
      keys = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--workers"))
      workers = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--reps"))
      reps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--weir"))
      weir = argv[i + 1];
    else if (!strcmp(argv[i], "--json"))
      json = argv[i + 1];
    else {
      fprintf(stderr, "bench_stage: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  const char *nats = getenv("NATS_URL");
  if (!nats || !*nats) {
    fprintf(stderr, "bench_stage: NATS_URL is not set (scripts/services starts nats-server)\n");
    return 3;
  }
  if (reps < 1 || reps > 50 || workers < 1 || workers > 64 || !records) return 2;
  setenv("WEIR_LOG", "warn", 0);
  char *base = mkdtemp(tmpl);
  if (!base) return 1;
  char rec[32], key[32], par[16];
  snprintf(rec, sizeof rec, "%llu", records);
  snprintf(key, sizeof key, "%llu", keys);
  snprintf(par, sizeof par, "%d", workers);
  double one[50], two[50], one_cpu[50], two_cpu[50];
  int bad = 0;
  for (int r = 0; r < reps && !bad; r++) {
    char s1[600], sa[600], sb[600], edge[700], stream[64];
    snprintf(s1, sizeof s1, "%s/one-%d", base, r);
    snprintf(sa, sizeof sa, "%s/producer-%d", base, r);
    snprintf(sb, sizeof sb, "%s/consumer-%d", base, r);
    snprintf(stream, sizeof stream, "BSTAGE_%d_%d", (int)getpid(), r);
    snprintf(edge, sizeof edge, "%s/bstage.%d.%d?tasks=%d&stream=%s", nats, (int)getpid(), r,
             workers, stream);
    char *v1[] = {(char *)weir, "run",         "counter", "--records",
                  rec,          "--keys",      key,       "--parallelism",
                  par,          "--workers",   par,       "--sink",
                  "null",       "--state-dir", s1,        "--checkpoint-interval",
                  "1000",       "--quiet",     NULL};
    char *va[] = {(char *)weir, "run",         "counter", "--records",
                  rec,          "--keys",      key,       "--parallelism",
                  par,          "--workers",   par,       "--stage-out",
                  edge,         "--state-dir", sa,        "--checkpoint-interval",
                  "1000",       "--quiet",     NULL};
    char *vb[] = {(char *)weir, "run",
                  "counter",    "--source",
                  edge,         "--parallelism",
                  par,          "--workers",
                  par,          "--sink",
                  "null",       "--state-dir",
                  sb,           "--checkpoint-interval",
                  "1000",       "--quiet",
                  NULL};
    char **g1[] = {v1}, **g2[] = {va, vb};
    double c1 = 0, c2 = 0;
    double w1 = run_all(g1, 1, &c1);
    double w2 = run_all(g2, 2, &c2);
    drop_stream(nats, stream);
    rmrf(s1);
    rmrf(sa);
    rmrf(sb);
    if (w1 <= 0 || w2 <= 0) {
      fprintf(stderr, "bench_stage: rep %d: a run failed\n", r + 1);
      bad = 1;
      break;
    }
    one[r] = (double)records / w1;
    two[r] = (double)records / w2;
    one_cpu[r] = (double)records / c1;
    two_cpu[r] = (double)records / c2;
    printf("rep %d: one process %.0f records/s (%.0f per CPU s), two through the edge %.0f "
           "records/s (%.0f per CPU s)\n",
           r + 1, one[r], one_cpu[r], two[r], two_cpu[r]);
    fflush(stdout);
  }
  rmrf(base);
  if (bad) return 1;
  double m1 = median(one, reps), m2 = median(two, reps), mc1 = median(one_cpu, reps),
         mc2 = median(two_cpu, reps);
  printf("counter job, %llu records, %llu keys, %d workers, 1 s checkpoints, medians of %d: "
         "one process %.0f records/s, two processes through a stage edge %.0f records/s "
         "(%.3fx); per CPU second %.0f vs %.0f (%.3fx)\n",
         records, keys, workers, reps, m1, m2, m2 / m1, mc1, mc2, mc2 / mc1);
  if (json) {
    FILE *f = fopen(json, "w");
    if (f) {
      fprintf(f,
              "{\"records\": %llu, \"keys\": %llu, \"workers\": %d, \"reps\": %d, "
              "\"one_per_s\": %.1f, \"two_per_s\": %.1f, \"one_per_cpu_s\": %.1f, "
              "\"two_per_cpu_s\": %.1f}\n",
              records, keys, workers, reps, m1, m2, mc1, mc2);
      fclose(f);
    }
  }
  return 0;
}
