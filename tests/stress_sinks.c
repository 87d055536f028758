/* stress_sinks.c: the two-phase-commit file sink through the public API
 * under many thread interleavings, for ThreadSanitizer: the sink subtasks'
 * commit threads, their mailboxes (weir_ctx_wake + poll) and the task that
 * holds the end of the job until every commit has landed.
 *
 * The counter job (weir_gen -> weir_key_by -> weir_count -> file:DIR) with
 * checkpoints every 2 ms (so commits race with new epochs and barriers all
 * the time), for parallelism P in {1, 2, 3} x workers W in {1, 2}, and once
 * without a state directory (one epoch, committed at the end of input).
 * Checks that the committed parts hold every (key, count) pair exactly once
 * and that nothing pending is left.
 *
 * A plain main() program (Criterion cannot start under ThreadSanitizer):
 * prints "N passed, N failed" and exits non-zero on failure.
 */
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "weir/weir.h"

#if defined(__SANITIZE_THREAD__)
#define SS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SS_TSAN 1
#endif
#endif

#ifdef SS_TSAN
/* The same narrow suppression as stress_engine.c: libuv (not instrumented)
 * closes descriptors with syscall(SYS_close), which TSan never sees. */
__attribute__((used)) const char *__tsan_default_suppressions(void);
__attribute__((used)) const char *__tsan_default_suppressions(void) {
  return "race:epoll_create1\n"
         "race:eventfd\n"
         "race:pipe2\n";
}
#endif

#define WATCHDOG_S 240
#define RECORDS 60000u
#define KEYS 97u

static int passed, failed;

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "stress_sinks: watchdog: a job did not end\n";
  (void)!write(2, msg, sizeof msg - 1);
  _exit(2);
}

/* Reads every committed part in dir; 0 if every (k, c) is there once. */
static int check_dir(const char *dir, char *why, size_t cap) {
  uint64_t per = RECORDS / KEYS + 1;
  uint8_t *seen = calloc(KEYS * per, 1);
  DIR *d = opendir(dir);
  if (!d || !seen) {
    snprintf(why, cap, "cannot read %.200s", dir);
    free(seen);
    if (d) closedir(d);
    return -1;
  }
  uint64_t lines = 0;
  int rc = 0;
  struct dirent *e;
  while (!rc && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    size_t n = strlen(e->d_name);
    if (n < 4 || strcmp(e->d_name + n - 4, ".txt") != 0) {
      snprintf(why, cap, "left behind: %.200s", e->d_name);
      rc = -1;
      break;
    }
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    char *t = th_read_file(p, NULL);
    for (char *s = t; t && *s && !rc;) {
      unsigned long long k, c;
      char *end;
      k = strtoull(s, &end, 10);
      c = strtoull(end + 1, &end, 10);
      uint64_t nk = RECORDS / KEYS + (k < RECORDS % KEYS ? 1 : 0);
      if (*end != '\n' || k >= KEYS || c < 1 || c > nk || seen[k * per + c - 1]++) {
        snprintf(why, cap, "%s: bad or repeated line at '%.20s'", e->d_name, s);
        rc = -1;
      }
      lines++;
      s = end + 1;
    }
    free(t);
  }
  closedir(d);
  if (!rc && lines != RECORDS) {
    snprintf(why, cap, "%llu lines for %u records", (unsigned long long)lines, RECORDS);
    rc = -1;
  }
  free(seen);
  return rc;
}

static void one(int p, int w, int checkpoints) {
  char *dir = th_tmpdir();
  char out[600], state[600], spec[700], why[256] = "";
  snprintf(out, sizeof out, "%s/out", dir);
  snprintf(state, sizeof state, "%s/state", dir);
  snprintf(spec, sizeof spec, "file:%s", out);
  weir_job *job = NULL;
  int rc = weir_job_create(&job, "stress");
  weir_gen_opts g = {.records = RECORDS, .keys = KEYS, .rate = 300000};
  weir_stream *s = weir_gen(job, "gen", &g, p);
  s = weir_count(weir_key_by(s), "count", p);
  if (!rc) rc = weir_sink_to(s, "sink", spec, NULL, p);
  weir_run_opts o = {.workers = w,
                     .batch_records = 16,
                     .channel_batches = 2,
                     .state_dir = checkpoints ? state : NULL,
                     .checkpoint_interval_ms = 2};
  if (!rc) rc = weir_job_run(job, &o);
  if (rc) snprintf(why, sizeof why, "run: %s: %s", weir_strerror(rc), weir_job_error(job));
  weir_job_destroy(job);
  if (!rc) rc = check_dir(out, why, sizeof why);
  printf("%s P=%d W=%d %s%s%s\n", rc ? "FAIL" : "ok  ", p, w,
         checkpoints ? "checkpoints every 2 ms" : "no checkpoints", rc ? ": " : "", why);
  if (rc)
    failed++;
  else
    passed++;
  th_rmrf(dir);
  free(dir);
}

int main(void) {
  setenv("WEIR_LOG", "warn", 1); /* one line per checkpoint is too many here */
  signal(SIGALRM, on_alarm);
  alarm(WATCHDOG_S);
  for (int p = 1; p <= 3; p++)
    for (int w = 1; w <= 2; w++) one(p, w, 1);
  one(2, 2, 0);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
