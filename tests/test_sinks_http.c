/* tests/test_sinks_http.c: owns the exactly-once tests of the HTTP sink
 * (http://...) against `weir receiver`, through the real `weir` binary:
 * kills at failpoints around every sink step (after a request was accepted
 * but before its answer was read, after write, after pre_commit, after the
 * checkpoint's metadata commit but before the sink's commit, during
 * recovery) and at seeded random times, then --restore latest until done:
 * the receiver has effects == N, requests >= N, rejections == 0, and its
 * effects are exactly the expected pairs. Also: a key reused with another
 * payload (422: exit 5, one effect kept), a run whose lease epoch the
 * destination has seen overtaken (409 with Weir-Fenced: exit 4, nothing of
 * it lands), a replay beyond retention=
 * (refused, no new effect), and acknowledgements dropped with p = 0.2
 * (with keys no extra effect; with idempotency=off about p/(1-p) = 0.25
 * extra effects per operation). See test_sinks_tx.c and sinks_tx.h.
 *
 * Many requests in flight (inflight=N; the tests above run with the
 * default, 64, against an immediate receiver): against `weir receiver
 * --latency`, where 64 requests really wait side by side, kills at random
 * moments and right after the destination accepted request k, lost
 * acknowledgements, the concurrency itself (a bound a serial sink cannot
 * meet), inflight=1, and a bad inflight value.
 *
 * Backpressure (buffer=BYTES): a destination that stops answering (the
 * receiver stopped with SIGSTOP) stops the sources once the sink holds its
 * bound, while unaligned checkpoints go on completing; when it answers
 * again, every effect lands once.
 */
#include "sinks_tx.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdatomic.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "weir/weir.h"

/* ---- HTTP --------------------------------------------------------------- */

TestSuite(http_tx, .timeout = 170, .fini = fini);

/* The HTTP job: one request per record, so fewer records. */
#define H_RECORDS 800u
#define H_KEYS 20u
#define H_RATE "2000"
#define H_INTERVAL "50"

Test(http_tx, no_failure) {
  crash_job *j = tx_job(H_RECORDS, H_KEYS, H_RATE, H_INTERVAL);
  receiver r;
  recv_start(&r, j, NULL);
  http_sink(j, &r, NULL);
  char *err = NULL;
  char sum[700];
  snprintf(sum, sizeof sum, "%s/summary.json", j->dir);
  int rc = crash_run(j, NULL, -1, &err, "--summary-json", sum, NULL);
  cr_assert_eq(rc, 0, "%s", err);
  free(err);
  stats s = check_receiver(j, &r);
  cr_assert_eq(s.requests, (long long)j->records);
  /* The counters, kept apart, in the summary. */
  char *text = th_read_file(sum, NULL);
  cr_assert_not_null(text);
  ull req[2] = {0}, resp[2] = {0};
  const char *p = text;
  for (int s2 = 0; s2 < 2; s2++) {
    p = strstr(p, "\"requests\": ");
    cr_assert_not_null(p, "%s", text);
    cr_assert_eq(sscanf(p, "\"requests\": %llu, \"responses\": %llu", &req[s2], &resp[s2]), 2);
    p++;
  }
  cr_assert_eq(req[0] + req[1], j->records, "%s", text);
  cr_assert_eq(resp[0] + resp[1], j->records, "%s", text);
  free(text);
  /* And as totals in the checkpointed state (weir inspect of the last). */
  const char *la[] = {WEIR_BINARY, "checkpoints", "--state-dir", j->state, NULL};
  char *out = NULL;
  cr_assert_eq(th_run(la, NULL, &out, NULL, RUN_TIMEOUT_S), 0);
  char *fin = strstr(out, "final");
  cr_assert_not_null(fin, "%s", out);
  while (fin > out && fin[-1] != '\n') fin--;
  char idbuf[32];
  cr_assert_eq(sscanf(fin, " %31s", idbuf), 1);
  const char *ia[] = {WEIR_BINARY, "inspect", idbuf, "--state-dir", j->state, "--json", NULL};
  char *ins = NULL;
  cr_assert_eq(th_run(ia, NULL, &ins, NULL, RUN_TIMEOUT_S), 0);
  cr_assert(strstr(ins, "\"sink\": {\"checkpoint\": ") != NULL, "%s", ins);
  cr_assert(strstr(ins, "\"rejections\": 0, \"commits\": ") != NULL, "%s", ins);
  free(ins);
  free(out);
  recv_stop(&r);
  crash_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* Stop with a savepoint, then the savepoint run in a new state directory:
 * the receiver has every effect exactly once. */
Test(http_tx, stop_with_savepoint_then_from_savepoint) {
  crash_job *j = tx_job(H_RECORDS, H_KEYS, "400", H_INTERVAL);
  receiver r;
  recv_start(&r, j, NULL);
  http_sink(j, &r, NULL);
  pid_t pid = start(j, NULL);
  th_sleep_ms(700);
  stop_with_savepoint_and_upgrade(j, pid);
  check_receiver(j, &r);
  recv_stop(&r);
  crash_free(j);
}

/* A rewind with write-ahead ids is refused: the collatz job's sink has no
 * id function, so its operation ids are formed from epochs; --restore of
 * an older checkpoint than the job's latest would apply the later epochs'
 * effects again under new epoch numbers. Exit 2 naming both checkpoints,
 * nothing sent. */
Test(http_tx, rewind_with_write_ahead_ids_is_refused) {
  crash_job *j = crash_new("collatz", 0);
  crash_arg(j, "--records", "3000");
  j->interval = "5";
  j->timeout_s = RUN_TIMEOUT_S;
  receiver r;
  recv_start(&r, j, NULL);
  http_sink(j, &r, NULL);
  char *err = NULL;
  int rc = crash_run(j, NULL, -1, &err, "--retain", "5", NULL);
  cr_assert_eq(rc, 0, "%s", err);
  free(err);
  stats before = recv_stats(&r);
  cr_assert_eq(before.effects, 3000, "effects %lld", before.effects);
  char id[32];
  snprintf(id, sizeof id, "%llu", oldest_of_several(j));
  err = NULL;
  rc = crash_run(j, NULL, -1, &err, "--restore", id, NULL);
  cr_assert_eq(rc, 2, "exit %d: %s", rc, err);
  cr_assert_not_null(strstr(err, "rewinds a job that had completed checkpoint"), "%s", err);
  free(err);
  stats after = recv_stats(&r);
  cr_assert_eq(after.requests, before.requests, "requests sent after the refusal");
  recv_stop(&r);
  crash_free(j);
}

/* Killed at failpoint NAME@hit with parallelism `from`, then restored with
 * `to` until done: the receiver has each effect exactly once. */
static void http_kill_at(const char *name, unsigned hit, const char *from, const char *to) {
  crash_job *j = tx_job(H_RECORDS, H_KEYS, H_RATE, H_INTERVAL);
  j->par = from;
  receiver r;
  recv_start(&r, j, NULL);
  http_sink(j, &r, NULL);
  crash_kill_at(j, name, hit, 0, NULL, NULL);
  j->par = to;
  restore_until_done(j);
  check_receiver(j, &r);
  recv_stop(&r);
  crash_free(j);
}

static void http_kill(const char *name, unsigned hit) {
  http_kill_at(name, hit, "2", "2");
}

/* After a request was accepted but before its answer was read, after
 * write, after pre_commit, after the checkpoint's metadata commit but
 * before the sink's commit: the receiver has each effect exactly once. */
Test(http_tx, kill_after_send) {
  http_kill("sink.after_send", 10);
  http_kill("sink.after_send", 600);
}
Test(http_tx, kill_after_write_and_pre_commit) {
  http_kill("sink.after_write", 3);
  http_kill("sink.after_pre_commit", 3);
}
Test(http_tx, kill_after_meta_commit_before_commit) {
  http_kill("ckpt.after_meta_commit", 2);
  http_kill("sink.before_commit", 2);
}

Test(http_tx, kill_during_recover) {
  crash_job *j = tx_job(H_RECORDS, H_KEYS, H_RATE, H_INTERVAL);
  receiver r;
  recv_start(&r, j, NULL);
  http_sink(j, &r, NULL);
  crash_kill_at(j, "sink.after_send", 200, 0, NULL, NULL);
  crash_kill_at(j, "sink.during_recover", 1, 0, NULL, "--restore", "latest", NULL);
  restore_until_done(j);
  stats s = check_receiver(j, &r);
  cr_assert_gt(s.duplicates, 0, "a recovery resends what was sent: duplicates expected");
  recv_stop(&r);
  crash_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* Killed mid-commit at parallelism 3, restored at 2 until done: the epochs
 * of subtask 2 are sent by the subtask that took them over, with the same
 * operation ids (the receiver has every effect once). */
Test(http_tx, restored_with_another_parallelism) {
  http_kill_at("sink.after_send", 200, "3", "2");
  cr_assert_eq(th_leak_check(), 0);
}

Test(http_tx, random_kills) {
  uint64_t seed = rng = crash_seed("http_tx::random_kills");
  int kills = 0;
  for (int n = 0; n < 10; n++) {
    crash_job *j = tx_job(H_RECORDS, H_KEYS, H_RATE, H_INTERVAL);
    crash_hist(j, "seed %llu, job %d: ", (ull)seed, n);
    receiver r;
    recv_start(&r, j, NULL);
    http_sink(j, &r, NULL);
    kills += kill_at_random(j, 1 + (int)(rnd() % 2), 20, 320, NULL);
    restore_until_done(j);
    check_receiver(j, &r);
    recv_stop(&r);
    crash_free(j);
  }
  fprintf(stderr, "http_tx::random_kills: 10 jobs, %d kills\n", kills);
  cr_assert_geq(kills, 5, "too few kills landed: %d", kills);
  cr_assert_eq(th_leak_check(), 0);
}

/* Writes `body` with Idempotency-Key `key` and extra header lines (NULL:
 * none) through the receiver. Returns the HTTP status (0: no answer). A raw
 * HTTP/1.1 request on a socket. */
static int post_h(int port, const char *key, const char *extra, const char *body) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  cr_assert_geq(fd, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  char req[2048];
  int n = snprintf(req, sizeof req,
                   "POST /effects HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: "
                   "text/plain\r\nIdempotency-Key: %s\r\n%sContent-Length: %zu\r\n\r\n%s",
                   key, extra ? extra : "", strlen(body), body);
  cr_assert_eq(write(fd, req, (size_t)n), n);
  char buf[4096];
  size_t len = 0;
  ssize_t k;
  while (len < sizeof buf - 1 && (k = read(fd, buf + len, sizeof buf - 1 - len)) > 0)
    len += (size_t)k;
  buf[len] = '\0';
  close(fd);
  int status = 0;
  sscanf(buf, "HTTP/1.%*d %d", &status);
  return status;
}

static int post(int port, const char *key, const char *body) {
  return post_h(port, key, NULL, body);
}

/* Key <job>/sink/c/0.1 was used with another payload: 422, the job fails
 * with exit code 5 naming the operation id, the first effect is kept. */
Test(http_tx, reused_key_other_payload_is_exit_5) {
  crash_job *j = tx_job(100, 1, "100", "20");
  receiver r;
  recv_start(&r, j, NULL);
  http_sink(j, &r, NULL);
  char *err = NULL;
  int rc = crash_run(j, "ckpt.barrier_injected=kill@1", -1, &err, NULL); /* makes the job id */
  crash_expect_killed(j, rc, err, "ckpt.barrier_injected", 0);
  free(err);
  char id[64], key[160];
  crash_job_id(j, id, sizeof id);
  snprintf(key, sizeof key, "%s/sink/c/0.1", id);
  cr_assert_eq(post(r.port, key, "0 999"), 201);
  rc = crash_run(j, NULL, -1, &err, "--restore", "latest", NULL);
  cr_assert_eq(rc, 5, "exit %d: %s", rc, err);
  cr_assert(strstr(err, key) != NULL, "the operation id is not named: %s", err);
  cr_assert(strstr(err, "422") != NULL, "stderr: %s", err);
  free(err);
  stats s = recv_stats(&r);
  cr_assert_eq(s.rejections, 1);
  cr_assert_eq(s.effects, 1, "effects %lld", s.effects);
  const char *argv[] = {WEIR_BINARY, "receiver", "effects", "--db", r.db, NULL};
  char *out = NULL;
  cr_assert_eq(th_run(argv, NULL, &out, NULL, RUN_TIMEOUT_S), 0);
  cr_assert_str_eq(out, "0 999\n", "the first effect must be kept: %s", out);
  free(out);
  recv_stop(&r);
  crash_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* Credentials: a receiver that wants an Authorization header (--auth)
 * refuses a sink without one and one with another value with 401 (exit 5,
 * nothing applied, the value never in a message); with auth_file every
 * effect lands once. */
Test(http_tx, credentials) {
  crash_job *j = tx_job(200, 4, "1000", "50");
  char auth[700];
  snprintf(auth, sizeof auth, "%s/auth", j->dir);
  FILE *f = fopen(auth, "w");
  cr_assert_not_null(f);
  fputs("Bearer t0ken-right-9f3\n", f);
  fclose(f);
  const char *extra[] = {"--auth", auth, NULL};
  receiver r;
  recv_start(&r, j, extra);
  char *err = NULL;
  crash_job *none = tx_job(200, 4, "1000", "50"), *wrong = tx_job(200, 4, "1000", "50");
  http_sink(none, &r, NULL);
  int rc = crash_run(none, NULL, -1, &err, NULL);
  cr_assert_eq(rc, 5, "exit %d: %s", rc, err);
  cr_assert(strstr(err, "401") && strstr(err, "without credentials"), "%s", err);
  free(err);
  setenv("WEIR_TEST_HTTP_AUTH", "Bearer t0ken-wrong-77a", 1);
  http_sink(wrong, &r, "?auth_env=WEIR_TEST_HTTP_AUTH");
  rc = crash_run(wrong, NULL, -1, &err, NULL);
  unsetenv("WEIR_TEST_HTTP_AUTH");
  cr_assert_eq(rc, 5, "exit %d: %s", rc, err);
  cr_assert(strstr(err, "401") && strstr(err, "did not accept this sink's credentials"), "%s", err);
  cr_assert(!strstr(err, "t0ken"), "a credential in a message: %s", err);
  free(err);
  cr_assert_eq(recv_stats(&r).effects, 0);
  crash_free(none);
  crash_free(wrong);
  char params[800];
  snprintf(params, sizeof params, "?auth_file=%s", auth);
  http_sink(j, &r, params);
  rc = crash_run(j, NULL, -1, &err, NULL);
  cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
  cr_assert(!strstr(err, "t0ken"), "a credential in a message: %s", err);
  free(err);
  check_receiver(j, &r);
  recv_stop(&r);
  crash_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* https: against the receiver serving TLS with a self-signed certificate,
 * the sink verifies it with cacert= and delivers every effect once; without
 * cacert= the certificate is not trusted: a clear failure (exit 1), nothing
 * applied. Needs the openssl command (scripts/setup installs it). */
Test(http_tx, https_with_a_private_ca) {
  crash_job *j = tx_job(200, 4, "1000", "50");
  char cert[600], key[600], cmd[1500];
  snprintf(cert, sizeof cert, "%s/cert.pem", j->dir);
  snprintf(key, sizeof key, "%s/key.pem", j->dir);
  snprintf(cmd, sizeof cmd,
           "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 "
           "-addext subjectAltName=IP:127.0.0.1 -keyout '%s' -out '%s' >/dev/null 2>&1",
           key, cert);
  if (system(cmd) != 0) {
    crash_free(j);
    cr_skip_test("the openssl command cannot make a certificate (scripts/setup installs it)");
  }
  const char *extra[] = {"--tls-cert", cert, "--tls-key", key, NULL};
  receiver r;
  recv_start(&r, j, extra);
  char *err = NULL;
  crash_job *untrusted = tx_job(200, 4, "1000", "50");
  snprintf(untrusted->sink, sizeof untrusted->sink, "https://127.0.0.1:%d/effects", r.port);
  int rc = crash_run(untrusted, NULL, -1, &err, NULL);
  cr_assert_eq(rc, 1, "exit %d: %s", rc, err);
  cr_assert(strstr(err, "certificate") || strstr(err, "SSL"), "%s", err);
  free(err);
  crash_free(untrusted);
  cr_assert_eq(recv_stats(&r).effects, 0);
  cr_assert_lt(strlen(cert), sizeof j->sink - 64);
  snprintf(j->sink, sizeof j->sink, "https://127.0.0.1:%d/effects?cacert=%.600s", r.port, cert);
  rc = crash_run(j, NULL, -1, &err, NULL);
  cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
  free(err);
  check_receiver(j, &r);
  recv_stop(&r);
  crash_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* The destination saw a later epoch of this job (a successor wrote there):
 * every request of this run carries Weir-Epoch 2, which the receiver
 * refuses with 409 and Weir-Fenced; the sink stops at once with exit 4,
 * and nothing of this run lands. */
Test(http_tx, fenced_epoch_is_exit_4) {
  crash_job *j = tx_job(100, 1, "100", "20");
  receiver r;
  recv_start(&r, j, NULL);
  http_sink(j, &r, NULL);
  char *err = NULL;
  int rc = crash_run(j, "ckpt.barrier_injected=kill@1", -1, &err, NULL); /* makes the job id */
  crash_expect_killed(j, rc, err, "ckpt.barrier_injected", 0);
  free(err);
  char id[64], hdr[200];
  crash_job_id(j, id, sizeof id);
  snprintf(hdr, sizeof hdr, "Weir-Job: %s\r\nWeir-Epoch: 99\r\n", id);
  cr_assert_eq(post_h(r.port, "someone-else", hdr, "7 7"), 201);
  rc = crash_run(j, NULL, -1, &err, "--restore", "latest", NULL);
  cr_assert_eq(rc, 4, "exit %d: %s", rc, err);
  cr_assert(strstr(err, "fenced") != NULL, "stderr: %s", err);
  free(err);
  stats s = recv_stats(&r);
  cr_assert_eq(s.effects, 1, "effects %lld", s.effects);
  const char *argv[] = {WEIR_BINARY, "receiver", "stats", "--db", r.db, "--json", NULL};
  char *out = NULL;
  cr_assert_eq(th_run(argv, NULL, &out, NULL, RUN_TIMEOUT_S), 0);
  cr_assert(strstr(out, "\"fenced\": 1,") != NULL, "one request, refused, then the stop: %s", out);
  free(out);
  recv_stop(&r);
  crash_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* A replay beyond retention=1s is refused (exit 5, naming the retention),
 * and adds no effect. One request in flight: with more, requests the
 * killed run had sent could still land after the count taken before the
 * replay. */
Test(http_tx, replay_beyond_retention_is_refused) {
  crash_job *j = tx_job(H_RECORDS, H_KEYS, H_RATE, H_INTERVAL);
  receiver r;
  recv_start(&r, j, NULL);
  http_sink(j, &r, "?retention=1s&inflight=1");
  char *err = NULL;
  crash_kill_at(j, "sink.after_send", 50, 0, NULL, NULL);
  stats before = recv_stats(&r);
  th_sleep_ms(1500); /* the subject of this test is time: beyond the retention */
  int rc = crash_run(j, NULL, -1, &err, "--restore", "latest", NULL);
  cr_assert_eq(rc, 5, "exit %d: %s", rc, err);
  cr_assert(strstr(err, "retention") != NULL, "stderr: %s", err);
  free(err);
  stats after = recv_stats(&r);
  cr_assert_eq(after.effects, before.effects, "a refused replay added effects");
  recv_stop(&r);
  crash_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* Acknowledgements dropped with p = 0.2: with keys, no extra effect; with
 * idempotency=off, about p/(1-p) = 0.25 extra effects per operation. */
Test(http_tx, dropped_acks) {
  const char *const extra[] = {"--drop-acks", "0.2", "--seed", "7", NULL};
  crash_job *j = tx_job(1500, 30, "0", "100");
  receiver r;
  recv_start(&r, j, extra);
  http_sink(j, &r, NULL);
  char *err = NULL;
  int rc = crash_run(j, NULL, -1, &err, NULL);
  cr_assert_eq(rc, 0, "%s", err);
  free(err);
  stats s = check_receiver(j, &r);
  cr_assert_gt(s.duplicates, 0, "no acknowledgement was dropped?");
  long long keyed_requests = s.requests;
  recv_stop(&r);
  crash_free(j);

  j = tx_job(1500, 30, "0", "100");
  recv_start(&r, j, extra);
  http_sink(j, &r, "?idempotency=off");
  rc = crash_run(j, NULL, -1, &err, NULL);
  cr_assert_eq(rc, 0, "%s", err);
  free(err);
  s = recv_stats(&r);
  double extra_per_op = (double)(s.effects - (long long)j->records) / (double)j->records;
  fprintf(stderr,
          "http_tx::dropped_acks: with keys %lld requests, %llu effects; without keys %lld "
          "effects: %.3f extra per operation (p/(1-p) = 0.25)\n",
          keyed_requests, (ull)j->records, s.effects, extra_per_op);
  cr_assert(extra_per_op > 0.17 && extra_per_op < 0.33, "extra per op %.3f", extra_per_op);
  recv_stop(&r);
  crash_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- many requests in flight ---------------------------------------------- */

TestSuite(http_inflight, .timeout = 170, .fini = fini);

static const char *const lat20[] = {"--latency", "20", NULL};

/* SIGKILLed at random moments with 64 requests in flight against a
 * destination that takes 20 ms per request, restored until done: each
 * effect once; what was in flight at a kill is sent again (requests >
 * records over the jobs). */
Test(http_inflight, random_kills_latency) {
  uint64_t seed = rng = crash_seed("http_inflight::random_kills_latency");
  int kills = 0;
  long long requests = 0, records = 0;
  for (int n = 0; n < 6; n++) {
    crash_job *j = tx_job(H_RECORDS, H_KEYS, H_RATE, H_INTERVAL);
    crash_hist(j, "seed %llu, job %d: ", (ull)seed, n);
    receiver r;
    recv_start(&r, j, lat20);
    http_sink(j, &r, "?inflight=64");
    kills += kill_at_random(j, 1 + (int)(rnd() % 2), 20, 320, NULL);
    restore_until_done(j);
    stats s = check_receiver(j, &r);
    requests += s.requests;
    records += (long long)j->records;
    recv_stop(&r);
    crash_free(j);
  }
  fprintf(stderr,
          "http_inflight::random_kills_latency: 6 jobs, %d kills, %lld requests for %lld "
          "records\n",
          kills, requests, records);
  cr_assert_geq(kills, 3, "too few kills landed: %d", kills);
  cr_assert_gt(requests, records, "no kill landed while requests were in flight?");
  cr_assert_eq(th_leak_check(), 0);
}

/* SIGKILLed right after the destination accepted request k (its answer
 * read, the checkpoint not knowing), with up to 63 others in flight and
 * applied but unanswered; restored until done: each effect once, the
 * resent ones recognised as duplicates. */
static void inflight_kill_after_accept(unsigned k) {
  crash_job *j = tx_job(H_RECORDS, H_KEYS, H_RATE, H_INTERVAL);
  receiver r;
  recv_start(&r, j, lat20);
  http_sink(j, &r, "?inflight=64");
  crash_kill_at(j, "http.after_accept", k, 0, NULL, NULL);
  restore_until_done(j);
  stats s = check_receiver(j, &r);
  cr_assert_gt(s.requests, (long long)j->records, "request %u was not sent again", k);
  cr_assert_gt(s.duplicates, 0, "the resent effects must be duplicates");
  recv_stop(&r);
  crash_free(j);
}

Test(http_inflight, kill_after_accept) {
  inflight_kill_after_accept(5);
  inflight_kill_after_accept(300);
  cr_assert_eq(th_leak_check(), 0);
}

/* Acknowledgements dropped with p = 0.2 while 64 requests wait 20 ms each:
 * no extra effect. */
Test(http_inflight, dropped_acks_latency) {
  const char *const extra[] = {"--drop-acks", "0.2", "--seed", "7", "--latency", "20", NULL};
  crash_job *j = tx_job(1500, 30, "0", "100");
  receiver r;
  recv_start(&r, j, extra);
  http_sink(j, &r, "?inflight=64");
  char *err = NULL;
  int rc = crash_run(j, NULL, -1, &err, NULL);
  cr_assert_eq(rc, 0, "%s", err);
  free(err);
  stats s = check_receiver(j, &r);
  cr_assert_gt(s.duplicates, 0, "no acknowledgement was dropped?");
  recv_stop(&r);
  crash_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* The requests really overlap: N = 2000 records against a destination
 * that answers after 50 ms, 2 sink subtasks with 64 in flight each, take
 * far less than a quarter of the N x 50 ms / 2 = 50 s that one request at
 * a time per subtask needs (ideally N / (2 x 64 / 50 ms) = 0.8 s). */
Test(http_inflight, concurrent) {
  const char *const lat50[] = {"--latency", "50", NULL};
  crash_job *j = tx_job(2000, 100, "0", "100");
  receiver r;
  recv_start(&r, j, lat50);
  http_sink(j, &r, "?inflight=64");
  char *err = NULL;
  int64_t ms = 0;
  int rc = crash_runv(j, NULL, -1, &err, &ms, NULL);
  cr_assert_eq(rc, 0, "%s", err);
  free(err);
  stats s = check_receiver(j, &r);
  cr_assert_eq(s.requests, (long long)j->records);
  int64_t serial_ms = (int64_t)j->records * 50 / 2;
  fprintf(stderr, "http_inflight::concurrent: %llu records in %lld ms (serial: %lld ms)\n",
          (ull)j->records, (long long)ms, (long long)serial_ms);
  cr_assert_lt(ms, serial_ms / 4, "%lld ms: not concurrent", (long long)ms);
  recv_stop(&r);
  crash_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* inflight=1 (one request at a time, in order): exact without a failure,
 * and after a kill between a request's acceptance and its answer. */
Test(http_inflight, one_in_flight) {
  crash_job *j = tx_job(H_RECORDS, H_KEYS, H_RATE, H_INTERVAL);
  receiver r;
  recv_start(&r, j, NULL);
  http_sink(j, &r, "?inflight=1");
  char *err = NULL;
  int rc = crash_run(j, NULL, -1, &err, NULL);
  cr_assert_eq(rc, 0, "%s", err);
  free(err);
  stats s = check_receiver(j, &r);
  cr_assert_eq(s.requests, (long long)j->records);
  recv_stop(&r);
  crash_free(j);

  j = tx_job(H_RECORDS, H_KEYS, H_RATE, H_INTERVAL);
  recv_start(&r, j, NULL);
  http_sink(j, &r, "?inflight=1");
  crash_kill_at(j, "sink.after_send", 100, 0, NULL, NULL);
  restore_until_done(j);
  s = check_receiver(j, &r);
  cr_assert_gt(s.duplicates, 0);
  recv_stop(&r);
  crash_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

/* A bad inflight value stops `weir run` before anything runs (exit 2),
 * naming the parameter and its range. */
Test(http_inflight, bad_value_is_spec_error) {
  const char *bad[] = {"0", "1025", "x", "", "8x", "-1", "99999999999999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char sink[128];
    snprintf(sink, sizeof sink, "http://127.0.0.1:1/effects?inflight=%s", bad[i]);
    const char *argv[] = {WEIR_BINARY, "run", "counter", "--records", "10", "--sink", sink, NULL};
    char *err = NULL;
    int rc = th_run(argv, NULL, NULL, &err, RUN_TIMEOUT_S);
    cr_assert_eq(rc, 2, "inflight=%s: exit %d: %s", bad[i], rc, err);
    cr_assert(strstr(err, "inflight must be a whole number from 1 to 1024") != NULL, "%s", err);
    free(err);
  }
  cr_assert_eq(th_leak_check(), 0);
}

TX_MAIN

/* ---- backpressure ------------------------------------------------------------ */

TestSuite(http_backpressure, .timeout = 170, .fini = fini);

typedef struct bp_run {
  weir_job *job;
  weir_run_opts o;
  int rc;
  _Atomic uint64_t emitted, checkpoint;
  uint64_t last; /* the last completed checkpoint */
} bp_run;

static void bp_progress(void *user, const weir_progress *p) {
  bp_run *b = user;
  atomic_store(&b->emitted, p->source_records);
  atomic_store(&b->checkpoint, p->last_checkpoint);
}

static void *bp_main(void *p) {
  bp_run *b = p;
  b->rc = weir_job_run(b->job, &b->o);
  return NULL;
}

static void bp_sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* The counter job in this process (gen -> count -> http sink with a 4 KiB
 * bound, small channels, unaligned checkpoints every 50 ms) at 20000
 * records/s; the receiver stopped for 1.5 s once the job runs: the source
 * emits next to nothing meanwhile (unbounded, it would emit 30000); then
 * checkpoints complete again and every effect lands once. (While the sink
 * takes no input, the barrier of at most one more checkpoint overtakes
 * the records in its full input channel, through the channel's spare
 * slot: docs/sinks.md.) */
Test(http_backpressure, stopped_destination_stops_the_sources) {
  const uint64_t n = 30000, keys = 100;
  crash_job *j = tx_job(n, keys, NULL, "50");
  receiver r;
  recv_start(&r, j, NULL);
  char url[200];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/effects?buffer=4096&inflight=16", r.port);
  bp_run b = {0};
  cr_assert_eq(weir_job_create(&b.job, "backpressure"), 0);
  weir_gen_opts g = {.records = n, .keys = keys, .rate = 20000};
  cr_assert_eq(weir_sink_to(weir_count(weir_key_by(weir_gen(b.job, "gen", &g, 1)), "count", 2),
                            "sink", url, NULL, 2),
               0, "%s", weir_job_error(b.job));
  b.o = (weir_run_opts){.workers = 2,
                        .state_dir = j->state,
                        .checkpoint_interval_ms = 50,
                        .unaligned = 1,
                        .batch_records = 64,
                        .channel_batches = 2,
                        .progress_ms = 20,
                        .progress = bp_progress,
                        .progress_user = &b};
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, bp_main, &b), 0);
  for (int waited = 0; atomic_load(&b.emitted) < 4000 || atomic_load(&b.checkpoint) < 2;
       waited += 10) {
    cr_assert_lt(waited, 30000, "the job did not get going");
    bp_sleep_ms(10);
  }
  cr_assert_eq(kill(r.pid, SIGSTOP), 0);
  bp_sleep_ms(500); /* what is in flight fills the bound */
  uint64_t e1 = atomic_load(&b.emitted), k1 = atomic_load(&b.checkpoint);
  bp_sleep_ms(1500);
  uint64_t e2 = atomic_load(&b.emitted), k2 = atomic_load(&b.checkpoint);
  cr_assert_eq(kill(r.pid, SIGCONT), 0);
  pthread_join(th, NULL);
  cr_assert_eq(b.rc, 0, "%s", weir_job_error(b.job));
  b.last = weir_job_run_info(b.job)->last_checkpoint;
  weir_job_destroy(b.job);
  fprintf(stderr,
          "http_backpressure: destination stopped 1.5 s: source emitted %llu (unbounded: "
          "30000), checkpoints %llu -> %llu\n",
          (ull)(e2 - e1), (ull)k1, (ull)k2);
  cr_assert_lt(e2 - e1, 3000, "the source went on at %llu records in 1.5 s: no backpressure",
               (ull)(e2 - e1));
  cr_assert_gt(b.last, k2, "no checkpoint completed after the destination came back");
  check_receiver(j, &r);
  recv_stop(&r);
  crash_free(j);
}
