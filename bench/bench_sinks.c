/* bench_sinks.c: effects per second of the exactly-once sinks, against the
 * null sink, in one invocation.
 *
 * The counter job (generator -> hash by key -> keyed count -> sink) through
 * the public API, with a state directory and 1 s checkpoints, into:
 *   null       nothing written (the engine's cost with checkpoints);
 *   file       file:DIR, two-phase commit: a part per subtask and epoch,
 *              fsynced at the barrier, renamed when the checkpoint completed;
 *   http       http://127.0.0.1:PORT/effects on a `weir receiver` started
 *              here: one POST per record with Idempotency-Key, sent after
 *              the checkpoint completed (each a SQLite transaction there).
 *   nats       nats://$NATS_URL/SUBJECT (only when NATS_URL is set): JetStream
 *              publishes with Nats-Msg-Id, acks awaited per epoch after the
 *              checkpoint completed; and then the NATS source reading that
 *              stream back (nats -> hash by key -> count -> null), in
 *              records/s. The streams are deleted at the end.
 *   pg         postgresql://?table=weir_bench_<pid>_<rep> (libpq takes the server
 *              from PGHOST...; only when PGHOST is set): rows COPYed in a
 *              transaction per subtask and epoch, PREPARE TRANSACTION at the
 *              barrier, COMMIT PREPARED when the checkpoint completed; the
 *              table's row count is checked to equal the records, then it is
 *              dropped. With NATS_URL too: the NATS source reading the nats
 *              stream into PostgreSQL (messages in -> weir -> rows), in
 *              records/s, its rows counted likewise.
 * Repetitions are interleaved (null, file, http, null, ...) so machine drift
 * cancels; it prints each run and the medians, effects/s = records / wall
 * time of weir_job_run (for http the receiver's effect count is checked to
 * equal the records). HTTP runs far fewer records: it is bound by one
 * request per effect.
 *
 *   bench_sinks [--records N] [--http-records N] [--nats-records N] [--pg-records N]
 *               [--keys K] [--reps R]
 *               [--workers W] [--weir PATH] [--json FILE]
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "receiver.h"
#include "weir/nats.h"
#include "weir/weir.h"

#ifdef WEIR_BENCH_NATS
#include <nats/nats.h>
#endif

#ifdef WEIR_HAVE_PQ
#include <libpq-fe.h>

/* Rows in table (-1 on error); the table and the job's marker and fence
 * rows are dropped. */
static long long pg_rows_and_drop(const char *table) {
  PGconn *c = PQconnectdb("");
  long long n = -1;
  char sql[600];
  snprintf(sql, sizeof sql, "SELECT count(*) FROM %s", table);
  PGresult *r = PQstatus(c) == CONNECTION_OK ? PQexec(c, sql) : NULL;
  if (PQresultStatus(r) == PGRES_TUPLES_OK) n = atoll(PQgetvalue(r, 0, 0));
  PQclear(r);
  snprintf(sql, sizeof sql,
           "DELETE FROM weir_markers WHERE job IN (SELECT split_part(opid, '/', 1) FROM %s "
           "LIMIT 1); DELETE FROM weir_fence WHERE job IN (SELECT split_part(opid, '/', 1) "
           "FROM %s LIMIT 1); DROP TABLE %s",
           table, table, table);
  if (PQstatus(c) == CONNECTION_OK) PQclear(PQexec(c, sql));
  PQfinish(c);
  return n;
}
#endif

#ifndef WEIR_BINARY
#define WEIR_BINARY "weir"
#endif

static char tmpl[] = "/tmp/weir-bench-sinks-XXXXXX";

static void rmrf(const char *p) {
  char cmd[4200]; /* rm -rf and a path of up to PATH_MAX */
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", p);
  if (system(cmd) != 0) fprintf(stderr, "bench_sinks: could not remove %s\n", p);
}

/* One run; returns effects/s, or a negative number on failure. */
static double run(const char *base, const char *spec, uint64_t records, uint64_t keys, int workers,
                  int rep) {
  char state[600];
  snprintf(state, sizeof state, "%s/state-%d", base, rep);
  weir_job *job = NULL;
  if (weir_job_create(&job, "bench") != 0) return -1;
  weir_gen_opts g = {.records = records, .keys = keys};
  weir_stream *s = weir_gen(job, "gen", &g, workers);
  s = weir_count(weir_key_by(s), "count", workers);
  weir_sink_conf sc = {.opid = weir_opid_key_count};
  int rc = weir_sink_to_conf(s, "sink", spec, &sc, workers);
  weir_run_opts o = {.workers = workers, .state_dir = state, .checkpoint_interval_ms = 1000};
  uint64_t t0 = weir_clock_mono_ns();
  if (!rc) rc = weir_job_run(job, &o);
  double secs = (double)(weir_clock_mono_ns() - t0) / 1e9;
  if (rc) fprintf(stderr, "bench_sinks: %s: %s\n", spec, weir_job_error(job));
  weir_job_destroy(job);
  rmrf(state);
  return rc ? -1 : (double)records / secs;
}

/* The NATS source reading `url` to its end -> count -> the sink `spec`;
 * records/s. */
static double run_nats_source(const char *base, const char *url, const char *spec, uint64_t records,
                              int workers, int rep) {
  char state[600];
  snprintf(state, sizeof state, "%s/state-src-%d", base, rep);
  weir_job *job = NULL;
  if (weir_job_create(&job, "bench") != 0) return -1;
  weir_stream *s = weir_nats_source(job, "nats", url);
  s = weir_count(weir_key_by(s), "count", workers);
  int rc = weir_sink_to(s, "sink", spec, NULL, workers);
  weir_run_opts o = {.workers = workers, .state_dir = state, .checkpoint_interval_ms = 1000};
  uint64_t t0 = weir_clock_mono_ns();
  if (!rc) rc = weir_job_run(job, &o);
  double secs = (double)(weir_clock_mono_ns() - t0) / 1e9;
  uint64_t in = 0, out = 0;
  if (!rc && weir_job_operator_counts(job, "nats", &in, &out) == 0 && out != records) {
    fprintf(stderr, "bench_sinks: the nats source read %llu of %llu\n", (unsigned long long)out,
            (unsigned long long)records);
    rc = -1;
  }
  if (rc) fprintf(stderr, "bench_sinks: %s: %s\n", url, weir_job_error(job));
  weir_job_destroy(job);
  rmrf(state);
  return rc ? -1 : (double)records / secs;
}

/* Deletes the benchmark's streams (BENCH_<pid>_<rep>). */
static void nats_cleanup(const char *server, int reps) {
#ifdef WEIR_BENCH_NATS
  natsConnection *nc = NULL;
  jsCtx *js = NULL;
  if (natsConnection_ConnectTo(&nc, server) != NATS_OK) return;
  if (natsConnection_JetStream(&js, nc, NULL) == NATS_OK) {
    for (int r = 0; r < reps; r++) {
      char name[64];
      snprintf(name, sizeof name, "BENCH_%d_%d", (int)getpid(), r);
      js_DeleteStream(js, name, NULL, NULL);
    }
  }
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
#else
  (void)server;
  (void)reps;
  fprintf(stderr, "bench_sinks: built without libnats: streams BENCH_%d_* are left\n",
          (int)getpid());
#endif
}

static pid_t recv_pid;

static long long receiver_effects(const char *weir, const char *db) {
  return bench_receiver_stat(weir, db, "effects");
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
  uint64_t records = 20000000, http_records = 20000, nats_records = 200000, pg_records = 2000000,
           keys = 1000000;
  int reps = 3, workers = 2;
  const char *weir = WEIR_BINARY, *json = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--records"))
      records = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--http-records"))
      http_records = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--nats-records"))
      nats_records = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--pg-records"))
      pg_records = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--keys"))
      keys = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--reps"))
      reps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--workers"))
      workers = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--weir"))
      weir = argv[i + 1];
    else if (!strcmp(argv[i], "--json"))
      json = argv[i + 1];
    else {
      fprintf(stderr, "bench_sinks: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (reps < 1 || reps > 50 || workers < 1) return 2;
  setenv("WEIR_LOG", "warn", 0);
  char *base = mkdtemp(tmpl);
  if (!base) return 1;
  char db[600], out[600], file_spec[700], http_spec[700];
  snprintf(db, sizeof db, "%s/recv.db", base);
  int port = bench_receiver_start(weir, db, NULL, &recv_pid);
  if (port <= 0) {
    fprintf(stderr, "bench_sinks: cannot start '%s receiver'\n", weir);
    rmrf(base);
    return 1;
  }
  snprintf(http_spec, sizeof http_spec, "http://127.0.0.1:%d/effects", port);
  const char *nats = getenv("NATS_URL");
  if (nats && !*nats) nats = NULL;
  char nats_spec[700];
  double v[7][50]; /* null, file, http, pg, nats, nats source, nats source -> pg */
  int pg = 0;
#ifdef WEIR_HAVE_PQ
  pg = getenv("PGHOST") && *getenv("PGHOST") && pg_records > 0;
#endif
  long long want_effects = 0;
  int bad = 0;
  for (int r = 0; r < reps && !bad; r++) {
    snprintf(out, sizeof out, "%s/out-%d", base, r);
    snprintf(file_spec, sizeof file_spec, "file:%s", out);
    v[0][r] = run(base, "null", records, keys, workers, r);
    v[1][r] = run(base, file_spec, records, keys, workers, r);
    v[2][r] = run(base, http_spec, http_records, keys, workers, r);
    want_effects += (long long)http_records;
    rmrf(out);
    v[3][r] = 0;
#ifdef WEIR_HAVE_PQ
    if (pg) {
      char table[64], pg_spec[128];
      snprintf(table, sizeof table, "weir_bench_%d_%d", (int)getpid(), r);
      snprintf(pg_spec, sizeof pg_spec, "postgresql://?table=%s", table);
      v[3][r] = run(base, pg_spec, pg_records, keys, workers, r);
      long long rows = pg_rows_and_drop(table);
      if (rows != (long long)pg_records) {
        fprintf(stderr, "bench_sinks: pg: %lld rows for %llu records\n", rows,
                (unsigned long long)pg_records);
        v[3][r] = -1;
      }
      printf("rep %d: pg %.0f effects/s\n", r + 1, v[3][r]);
    }
#endif
    v[4][r] = v[5][r] = v[6][r] = 0;
    if (nats) {
      snprintf(nats_spec, sizeof nats_spec, "%s/bench.%d.%d?stream=BENCH_%d_%d", nats,
               (int)getpid(), r, (int)getpid(), r);
      v[4][r] = run(base, nats_spec, nats_records, keys, workers, r);
      if (v[4][r] > 0) v[5][r] = run_nats_source(base, nats_spec, "null", nats_records, workers, r);
#ifdef WEIR_HAVE_PQ
      /* Messages in -> weir -> PostgreSQL rows. */
      if (pg && v[4][r] > 0) {
        char table[64], pg_spec[128];
        snprintf(table, sizeof table, "weir_bench_src_%d_%d", (int)getpid(), r);
        snprintf(pg_spec, sizeof pg_spec, "postgresql://?table=%s", table);
        v[6][r] = run_nats_source(base, nats_spec, pg_spec, nats_records, workers, r);
        long long rows = pg_rows_and_drop(table);
        if (rows != (long long)nats_records) {
          fprintf(stderr, "bench_sinks: nats -> pg: %lld rows for %llu messages\n", rows,
                  (unsigned long long)nats_records);
          v[6][r] = -1;
        }
        printf("rep %d: nats source -> pg %.0f records/s\n", r + 1, v[6][r]);
      }
#endif
    }
    printf("rep %d: null %.0f effects/s, file %.0f effects/s, http %.0f effects/s, nats %.0f "
           "effects/s, nats source %.0f records/s\n",
           r + 1, v[0][r], v[1][r], v[2][r], v[4][r], v[5][r]);
    fflush(stdout);
    bad = v[0][r] < 0 || v[1][r] < 0 || v[2][r] < 0 || v[3][r] < 0 || v[4][r] < 0 || v[5][r] < 0 ||
          v[6][r] < 0;
  }
  long long effects = receiver_effects(weir, db);
  bench_receiver_stop(recv_pid);
  rmrf(base);
  if (nats) nats_cleanup(nats, reps);
  if (bad) return 1;
  double m[6] = {median(v[0], reps), median(v[1], reps), median(v[2], reps), 0,
                 median(v[4], reps), median(v[5], reps)};
  printf("counter job, %d workers, 1 s checkpoints, medians of %d: null %.0f records/s; "
         "file %.0f effects/s (%.2fx null); http %.0f effects/s (%.4fx null); receiver "
         "effects %lld of %lld\n",
         workers, reps, m[0], m[1], m[1] / m[0], m[2], m[2] / m[0], effects, want_effects);
  if (nats)
    printf("nats (%llu records): sink %.0f effects/s (%.4fx null), source -> count -> null %.0f "
           "records/s\n",
           (unsigned long long)nats_records, m[4], m[4] / m[0], m[5]);
  double mpg = pg ? median(v[3], reps) : 0;
  if (pg) printf("pg %.0f effects/s (%.3fx null)\n", mpg, mpg / m[0]);
  double msp = pg && nats ? median(v[6], reps) : 0;
  if (pg && nats)
    printf("nats source -> count -> pg %.0f records/s (%.3fx the nats source into null)\n", msp,
           m[5] > 0 ? msp / m[5] : 0);
  if (json) {
    FILE *f = fopen(json, "w");
    if (f) {
      fprintf(f,
              "{\"workers\": %d, \"reps\": %d, \"records\": %llu, \"http_records\": %llu, "
              "\"null_per_s\": %.1f, \"file_per_s\": %.1f, \"http_per_s\": %.1f, "
              "\"receiver_effects\": %lld, \"nats_records\": %llu, \"nats_per_s\": %.1f, "
              "\"nats_source_per_s\": %.1f, \"pg_records\": %llu, \"pg_per_s\": %.1f, "
              "\"nats_source_pg_per_s\": %.1f}\n",
              workers, reps, (unsigned long long)records, (unsigned long long)http_records, m[0],
              m[1], m[2], effects, (unsigned long long)nats_records, m[4], m[5],
              pg ? (unsigned long long)pg_records : 0ull, mpg, msp);
      fclose(f);
    }
  }
  return effects == want_effects ? 0 : 1;
}
