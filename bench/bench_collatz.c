/* bench_collatz.c: the collatz loop job's throughput without checkpoints and
 * with aligned checkpoints (ABS with back-edge logging) every 100 ms and
 * every second, and the size of the back-edge logs those checkpoints hold.
 *
 * In one invocation, interleaved per repetition (off, 100 ms, 1 s, off,
 * 100 ms, 1 s, ...) so machine drift cancels, it runs the `weir` binary
 * (WEIR_BINARY, the real CLI job):
 *   weir run collatz --records N --parallelism P --workers W --sink null
 *        --quiet --summary-json F  (--state-dir none | --state-dir D
 *        --checkpoint-interval I --retain 1000000)
 * and takes the run's time from the summary's elapsed_s (the engine's run,
 * without process start-up and store opening). Throughput is numbers/s and
 * loop trips/s (a number n makes steps(n) + 1 trips round the loop); the
 * ratio checkpointed/off is taken per repetition, then the median.
 *
 * After each checkpointed run it opens the store read-only and, for every
 * retained checkpoint but the final one (taken after the loop drained,
 * with nothing in flight), adds up the state of the iteration head 'loop'
 * over its subtasks: the back-edge log of that checkpoint. It reports the
 * number of checkpoints per run, and the median and largest log and the
 * median checkpoint size over all runs of a configuration.
 *
 *   bench_collatz [--records N] [--parallelism P] [--workers W] [--reps R]
 *                 [--json FILE]
 */
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "snapshot/store.h"

extern char **environ;

enum { OFF, MS100, S1, NCFG };
static const char *const cfg_name[NCFG] = {"off", "aligned 100 ms", "aligned 1 s"};
static const char *const cfg_interval[NCFG] = {NULL, "100", "1000"};

/* Runs argv (argv[0] a path) with stdout and stderr kept; returns the exit
 * status or -1. */
static int run(const char *const argv[]) {
  pid_t pid;
  fflush(NULL);
  if (posix_spawn(&pid, argv[0], NULL, NULL, (char *const *)argv, environ) != 0) return -1;
  int st = 0;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void rm_rf(const char *path) {
  const char *argv[] = {"/bin/rm", "-rf", path, NULL};
  run(argv);
}

/* elapsed_s from a summary JSON file; -1 if absent. */
static double summary_elapsed(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char buf[4096];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *p = strstr(buf, "\"elapsed_s\": ");
  double s = -1;
  if (!p || sscanf(p, "\"elapsed_s\": %lf", &s) != 1) return -1;
  return s;
}

typedef struct sizes {
  double *log, *ckpt; /* per non-final checkpoint, over all runs */
  size_t n, cap;
  size_t checkpoints; /* all, final included */
} sizes;

static void sizes_add(sizes *z, double log, double ckpt) {
  if (z->n == z->cap) {
    z->cap = z->cap ? z->cap * 2 : 64;
    z->log = weir_realloc(z->log, z->cap * sizeof *z->log);
    z->ckpt = weir_realloc(z->ckpt, z->cap * sizeof *z->ckpt);
  }
  z->log[z->n] = log;
  z->ckpt[z->n++] = ckpt;
}

/* Adds the back-edge log ('loop' state) and the size of every checkpoint
 * of the store in `state` to z. Returns 0 or -1. */
static int read_store(const char *state, sizes *z) {
  weir_store *st = NULL;
  weir_store_opts so = {.read_only = 1};
  if (weir_store_open(&st, state, &so) != 0) return -1;
  weir_store_ckpt *list = NULL;
  size_t n = 0;
  int rc = weir_store_list(st, &list, &n);
  for (size_t i = 0; i < n && rc == 0; i++) {
    z->checkpoints++;
    if (list[i].final) continue;
    weir_store_ckpt_info *info = NULL;
    if ((rc = weir_store_info(st, list[i].id, &info)) != 0) break;
    uint64_t log = 0;
    for (uint32_t k = 0; k < info->nsubtasks; k++)
      if (strcmp(info->subtasks[k].op, "loop") == 0) log += info->subtasks[k].blob_len;
    sizes_add(z, (double)log, (double)list[i].bytes);
    weir_store_ckpt_info_free(info);
  }
  weir_free(list);
  weir_store_close(st);
  return rc ? -1 : 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(const double *v, size_t n) {
  if (!n) return 0;
  double *c = weir_malloc(n * sizeof *c);
  memcpy(c, v, n * sizeof *c);
  qsort(c, n, sizeof *c, cmp_double);
  double m = n % 2 ? c[n / 2] : (c[n / 2 - 1] + c[n / 2]) / 2;
  weir_free(c);
  return m;
}

static double maximum(const double *v, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++)
    if (v[i] > m) m = v[i];
  return m;
}

/* Loop trips of 1..n: every number goes round once per step and once more
 * to leave. */
static uint64_t collatz_trips(uint64_t records) {
  uint64_t trips = 0;
  for (uint64_t n = 1; n <= records; n++) {
    uint64_t c = n;
    trips++;
    while (c != 1) {
      c = c % 2 ? 3 * c + 1 : c / 2;
      trips++;
    }
  }
  return trips;
}

int main(int argc, char **argv) {
  uint64_t records = 1000000;
  int reps = 5, par = 2, workers = 2;
  const char *json = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--records") && i + 1 < argc)
      records = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--parallelism") && i + 1 < argc)
      par = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--workers") && i + 1 < argc)
      workers = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--json") && i + 1 < argc)
      json = argv[++i];
    else {
      fprintf(stderr, "usage: bench_collatz [--records N] [--parallelism P] [--workers W] "
                      "[--reps R] [--json FILE]\n");
      return 2;
    }
  }
  if (reps < 1 || reps > 100 || par < 1 || par > 64 || workers < 1 || workers > 64 || !records ||
      records > 100000000) {
    fprintf(stderr, "bench_collatz: bad arguments\n");
    return 2;
  }
  setenv("WEIR_LOG", "warn", 1); /* no per-checkpoint lines from the runs */
  char tmpl[] = "/tmp/bench-collatz-XXXXXX";
  char *dir = mkdtemp(tmpl);
  if (!dir) {
    perror("bench_collatz: mkdtemp");
    return 1;
  }
  char state[256], summary[256], rec_s[32], par_s[16], w_s[16];
  snprintf(state, sizeof state, "%s/state", dir);
  snprintf(summary, sizeof summary, "%s/summary.json", dir);
  snprintf(rec_s, sizeof rec_s, "%llu", (unsigned long long)records);
  snprintf(par_s, sizeof par_s, "%d", par);
  snprintf(w_s, sizeof w_s, "%d", workers);
  uint64_t trips = collatz_trips(records);

  double *secs = weir_calloc((size_t)(NCFG * reps), sizeof(double));
  sizes z[NCFG];
  memset(z, 0, sizeof z);
  printf("collatz: %llu numbers (%llu loop trips), parallelism %d, %d workers, %d repetitions "
         "(interleaved)\n",
         (unsigned long long)records, (unsigned long long)trips, par, workers, reps);
  int status = 0;
  for (int r = 0; r < reps && !status; r++) {
    for (int c = 0; c < NCFG && !status; c++) {
      rm_rf(state);
      const char *a[32];
      int n = 0;
      const char *fixed[] = {
          WEIR_BINARY, "run",     "collatz",        "--records", rec_s,        "--sink",
          "null",      "--quiet", "--parallelism",  par_s,       "--workers",  w_s,
          "--retain",  "1000000", "--summary-json", summary,     "--state-dir"};
      for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) a[n++] = fixed[i];
      a[n++] = cfg_interval[c] ? state : "none";
      if (cfg_interval[c]) {
        a[n++] = "--checkpoint-interval";
        a[n++] = cfg_interval[c];
      }
      a[n] = NULL;
      int rc = run(a);
      double s = summary_elapsed(summary);
      if (rc != 0 || s <= 0) {
        fprintf(stderr, "bench_collatz: %s: exit %d\n", cfg_name[c], rc);
        status = 1;
        break;
      }
      secs[c * reps + r] = s;
      size_t before = z[c].checkpoints;
      if (cfg_interval[c] && read_store(state, &z[c]) < 0) {
        fprintf(stderr, "bench_collatz: cannot read the store in %s\n", state);
        status = 1;
      }
      printf("  rep %d  %-15s %7.3f s  %7.1fk numbers/s  %6.2fM trips/s", r + 1, cfg_name[c], s,
             (double)records / s / 1e3, (double)trips / s / 1e6);
      if (cfg_interval[c]) printf("  %zu checkpoints", z[c].checkpoints - before);
      putchar('\n');
      fflush(stdout);
    }
  }
  rm_rf(dir);
  if (status) return status;

  FILE *jf = json ? fopen(json, "w") : NULL;
  if (jf)
    fprintf(jf,
            "{\"records\": %llu, \"trips\": %llu, \"parallelism\": %d, \"workers\": %d, "
            "\"reps\": %d, \"results\": [",
            (unsigned long long)records, (unsigned long long)trips, par, workers, reps);
  printf("%-15s %12s %12s %9s %7s %12s %12s %12s\n", "checkpoints", "numbers/s", "trips/s",
         "vs off", "ckpts", "log median", "log max", "ckpt median");
  for (int c = 0; c < NCFG; c++) {
    double *s = secs + c * reps;
    double ratio[100];
    for (int r = 0; r < reps; r++) ratio[r] = secs[OFF * reps + r] / s[r]; /* throughput ratio */
    double ms = median(s, (size_t)reps), mr = median(ratio, (size_t)reps);
    double lmed = median(z[c].log, z[c].n), lmax = maximum(z[c].log, z[c].n);
    double cmed = median(z[c].ckpt, z[c].n);
    printf("%-15s %11.1fk %11.2fM %9.3f", cfg_name[c], (double)records / ms / 1e3,
           (double)trips / ms / 1e6, mr);
    if (cfg_interval[c])
      printf(" %7.1f %11.0fB %11.0fB %11.0fB", (double)z[c].checkpoints / reps, lmed, lmax, cmed);
    putchar('\n');
    if (jf)
      fprintf(jf,
              "%s{\"checkpoints\": \"%s\", \"numbers_per_s\": %.0f, \"trips_per_s\": %.0f, "
              "\"ratio_vs_off\": %.4f, \"checkpoints_per_run\": %.1f, \"log_bytes_median\": %.0f, "
              "\"log_bytes_max\": %.0f, \"checkpoint_bytes_median\": %.0f}",
              c ? ", " : "", cfg_name[c], (double)records / ms, (double)trips / ms, mr,
              (double)z[c].checkpoints / reps, lmed, lmax, cmed);
  }
  printf("(ratio: throughput with checkpoints / without, per repetition, median; log: the "
         "back-edge log of a non-final checkpoint, all heads)\n");
  if (jf) {
    fprintf(jf, "]}\n");
    fclose(jf);
  }
  for (int c = 0; c < NCFG; c++) {
    weir_free(z[c].log);
    weir_free(z[c].ckpt);
  }
  weir_free(secs);
  return 0;
}
