/* stress_savepoint.c: savepoints asked from other threads while a job
 * runs (weir_job_savepoint, engine/src/savepoint.c), for ThreadSanitizer,
 * and their outcome checked.
 *
 * A generator (2 subtasks, paced) feeds a keyed count and a sink that
 * keeps each key's largest count, with checkpoints every 5 ms. Two threads
 * ask for savepoints without pause: one at a time is taken, the other
 * waiting its turn; every savepoint that succeeded names a file that
 * weir_savepoint_check accepts, of a checkpoint id that only grows for
 * each thread. A third thread stops the job with a savepoint (waiting its
 * turn too); requests after that are refused (WEIR_ESTATE: stopping; or
 * WEIR_ECANCELED), and the stop's savepoint is the job's last checkpoint. Then a second run starts
 * from that savepoint in a new state directory and ends exact: each key's count is records / keys.
 * Also: a request before the run and one after it are refused without blocking.
 *
 * A plain main() program (Criterion cannot start under ThreadSanitizer):
 * prints "N passed, N failed" and exits non-zero on failure.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "helpers.h"
#include "snapshot/store.h"
#include "weir/job.h"
#include "weir/operators.h"

#define RECORDS 400000u
#define KEYS 1000u

static int failures;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                         \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

static _Atomic uint64_t maxc[KEYS];

static int max_sink(weir_ctx *ctx, const weir_record *r) {
  (void)ctx;
  uint64_t v = weir_payload_u64(r), k = r->key % KEYS;
  uint64_t cur = atomic_load(&maxc[k]);
  while (v > cur && !atomic_compare_exchange_weak(&maxc[k], &cur, v)) {
  }
  return 0;
}
static const weir_operator_vt sink_vt = {
    .size = sizeof(weir_operator_vt), .name = "max", .process = max_sink};

static weir_job *build(uint64_t rate) {
  weir_job *job = NULL;
  if (weir_job_create(&job, "stress_savepoint") != 0) return NULL;
  weir_gen_opts go = {.records = RECORDS, .keys = KEYS, .rate = rate};
  weir_stream *s = weir_count(weir_key_by(weir_gen(job, "gen", &go, 2)), "count", 2);
  if (weir_sink(s, "sink", &sink_vt, NULL, 2) != 0) {
    weir_job_destroy(job);
    return NULL;
  }
  return job;
}

typedef struct asker {
  weir_job *job;
  atomic_int *stop;
  int taken, refused;
  uint64_t last_id;
} asker;

static void *ask_loop(void *arg) {
  asker *a = arg;
  while (!atomic_load(a->stop)) {
    weir_savepoint_result res;
    int rc = weir_job_savepoint(a->job, NULL, 0, &res);
    if (rc == 0) {
      char err[512];
      weir_savepoint_info info;
      int c = weir_savepoint_check(res.path, &info, err, sizeof err);
      CHECK(c == 0, "savepoint %s: %s", res.path, err);
      CHECK(info.id == res.id, "file of checkpoint %llu, answer says %llu",
            (unsigned long long)info.id, (unsigned long long)res.id);
      CHECK(res.id > a->last_id, "savepoint ids go back: %llu after %llu",
            (unsigned long long)res.id, (unsigned long long)a->last_id);
      a->last_id = res.id;
      a->taken++;
    } else {
      CHECK(rc == WEIR_ESTATE || rc == WEIR_ECANCELED, "savepoint: %s (%s)", weir_strerror(rc),
            res.error);
      a->refused++;
      th_sleep_ms(1);
    }
  }
  return NULL;
}

typedef struct stopper {
  weir_job *job;
  weir_savepoint_result res;
  int rc;
} stopper;

static void *stop_later(void *arg) {
  stopper *s = arg;
  th_sleep_ms(400);
  s->rc = weir_job_savepoint(s->job, NULL, WEIR_SAVEPOINT_STOP, &s->res);
  return NULL;
}

int main(void) {
  char *dir = th_tmpdir(), state1[600], state2[600];
  snprintf(state1, sizeof state1, "%s/one", dir);
  snprintf(state2, sizeof state2, "%s/two", dir);

  weir_job *job = build(RECORDS); /* about 1 s */
  CHECK(job != NULL, "build");
  weir_savepoint_result res;
  CHECK(weir_job_savepoint(job, NULL, 0, &res) == WEIR_ESTATE, "a savepoint before the run");

  atomic_int stop = 0;
  asker a1 = {.job = job, .stop = &stop}, a2 = {.job = job, .stop = &stop};
  stopper st = {.job = job};
  pthread_t t1, t2, t3;
  pthread_create(&t1, NULL, ask_loop, &a1);
  pthread_create(&t2, NULL, ask_loop, &a2);
  pthread_create(&t3, NULL, stop_later, &st);
  weir_run_opts o = {.workers = 2, .state_dir = state1, .checkpoint_interval_ms = 5};
  int rc = weir_job_run(job, &o);
  atomic_store(&stop, 1);
  pthread_join(t1, NULL);
  pthread_join(t2, NULL);
  pthread_join(t3, NULL);
  CHECK(rc == 0, "run 1: %s", weir_job_error(job));
  CHECK(weir_job_stopped(job), "run 1 was not stopped");
  CHECK(a1.taken + a2.taken > 0, "no savepoint taken while the job ran");
  CHECK(st.rc == 0, "stop with savepoint: %s", st.res.error);
  CHECK(st.res.id == weir_job_run_info(job)->last_checkpoint,
        "the stop's savepoint %llu is not the last checkpoint %llu", (unsigned long long)st.res.id,
        (unsigned long long)weir_job_run_info(job)->last_checkpoint);
  CHECK(weir_job_savepoint(job, NULL, 0, &res) == WEIR_ESTATE, "a savepoint after the run");
  weir_job_destroy(job);
  fprintf(stderr, "savepoints: %d taken, %d refused; stopped at %llu\n", a1.taken + a2.taken,
          a1.refused + a2.refused, (unsigned long long)st.res.id);

  /* Run 2 from the stop's savepoint, elsewhere: exact. */
  job = build(0);
  CHECK(job != NULL, "build 2");
  weir_run_opts o2 = {.workers = 2,
                      .state_dir = state2,
                      .checkpoint_interval_ms = 50,
                      .from_savepoint = st.res.path};
  rc = weir_job_run(job, &o2);
  CHECK(rc == 0, "run 2: %s", weir_job_error(job));
  CHECK(weir_job_run_info(job)->restored_from == st.res.id, "run 2 restored %llu",
        (unsigned long long)weir_job_run_info(job)->restored_from);
  weir_job_destroy(job);
  for (uint64_t k = 0; k < KEYS; k++)
    CHECK(atomic_load(&maxc[k]) == RECORDS / KEYS, "key %llu ends at %llu", (unsigned long long)k,
          (unsigned long long)atomic_load(&maxc[k]));

  th_rmrf(dir);
  free(dir);
  printf("%d passed, %d failed\n", failures ? 0 : 1, failures ? 1 : 0);
  return failures ? 1 : 0;
}
