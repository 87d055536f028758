/* tests/test_nats.c: owns the tests of the NATS JetStream sink and source
 * (nats://HOST:PORT/SUBJECT) against the nats-server of scripts/services
 * (NATS_URL), through the real `weir` binary, with libnats on the test's
 * side to fill and read streams.
 *
 * Sink: the stream is created, every (key, count) lands exactly once with
 * Nats-Msg-Id = its operation id; a replay after a kill is deduplicated by
 * JetStream and its duplicate acks are counted; kills at failpoints around
 * publish and commit and at seeded random times, then --restore latest:
 * the stream holds exactly N messages, each expected pair once; a replay
 * older than the stream's duplicate window is refused (exit 5).
 * Source: positions are stream sequences (weir inspect); a restore resumes
 * exactly after the cut (exact file-sink output after kills); a position
 * the stream no longer holds (purged) stops the job with a clear error; the
 * wordcount job reads text lines from messages. With splits: six
 * subjects under a wildcard, splits=12, parallelism 3: exact output; killed
 * after a checkpoint and restored at 3, rescaled 3 -> 2 and 2 -> 3, killed
 * at random and restored at 2 or 3: exact; another splits= is refused;
 * in process with a watermark strategy, no record is late (a watermark
 * per split).
 * End to end: JetStream input of N messages -> counter -> NATS sink, killed
 * repeatedly: the output stream holds exactly the expected pairs. And a
 * private nats-server killed and restarted under a running sink: lost acks,
 * reconnect, republished epochs deduplicated.
 *
 * Every test uses streams and subjects named after its pid and a counter,
 * and deletes them at the end. Without NATS_URL the tests skip (fail
 * under CI=true).
 */
#include "sinks_tx.h"

#include <nats/nats.h>
#include <stdatomic.h>

#include "nats_server.h"
#include "weir/nats.h"
#include "weir/sinks.h"
#ifdef WEIR_TEST_PQ
#include <libpq-fe.h>
#endif

static void nats_fini(void);
TestSuite(nats, .timeout = 120, .fini = nats_fini);

#define N_RECORDS 800u
#define N_KEYS 20u
#define N_RATE "2000"
#define N_INTERVAL "50"

typedef struct tnats {
  natsConnection *nc;
  jsCtx *js;
  char stream[64], subject[96]; /* the output stream */
  char in_stream[64], in_subject[96];
} tnats;

static int names_made;
static tnats live_nats; /* a copy: its streams are deleted by the fini if a test failed */
static int live_nats_set;

static void tn_open(tnats *t) {
  const char *u = nats_url();
  memset(t, 0, sizeof *t);
  cr_assert_eq(natsConnection_ConnectTo(&t->nc, u), NATS_OK, "cannot connect to %s", u);
  cr_assert_eq(natsConnection_JetStream(&t->js, t->nc, NULL), NATS_OK);
  int n = names_made++;
  snprintf(t->stream, sizeof t->stream, "WT_%d_%d", (int)getpid(), n);
  snprintf(t->subject, sizeof t->subject, "weirtest.%d.%d.out", (int)getpid(), n);
  snprintf(t->in_stream, sizeof t->in_stream, "WTIN_%d_%d", (int)getpid(), n);
  snprintf(t->in_subject, sizeof t->in_subject, "weirtest.%d.%d.in", (int)getpid(), n);
  live_nats = *t;
  live_nats_set = 1;
}

static void tn_close(tnats *t) {
  live_nats_set = 0;
  js_DeleteStream(t->js, t->stream, NULL, NULL);
  js_DeleteStream(t->js, t->in_stream, NULL, NULL);
  jsCtx_Destroy(t->js);
  natsConnection_Close(t->nc);
  natsConnection_Destroy(t->nc);
}

static void nats_fini(void) {
  if (live_nats_set) tn_close(&live_nats);
  fini();
}

/* The job's sink is the NATS sink on t's output stream, with params. */
static void nats_sink(crash_job *j, const tnats *t, const char *params) {
  snprintf(j->sink, sizeof j->sink, "%s/%s?stream=%s%s", nats_url(), t->subject, t->stream,
           params ? params : "");
}

/* The source URL of t's input stream into buf. */
static const char *src_url(const tnats *t, char *buf, size_t cap, const char *rate) {
  snprintf(buf, cap, "%s/%s?stream=%s&rate=%s", nats_url(), t->in_subject, t->in_stream, rate);
  return buf;
}

/* Creates stream `name` holding `subject`. */
static void add_stream(tnats *t, const char *name, const char *subject) {
  jsStreamConfig cfg;
  jsStreamConfig_Init(&cfg);
  const char *subs[1] = {subject};
  cfg.Name = name;
  cfg.Subjects = subs;
  cfg.SubjectsLen = 1;
  jsStreamInfo *si = NULL;
  cr_assert_eq(js_AddStream(&si, t->js, &cfg, NULL, NULL), NATS_OK, "%s", nats_GetLastError(NULL));
  jsStreamInfo_Destroy(si);
}

/* Creates t's input stream and publishes the counter's input: message i =
 * "<i mod keys>", i = 0 .. records-1. */
static void publish_input(tnats *t, uint64_t records, uint64_t keys) {
  add_stream(t, t->in_stream, t->in_subject);
  for (uint64_t i = 0; i < records; i++) {
    char b[32];
    int n = snprintf(b, sizeof b, "%llu", (ull)(i % keys));
    cr_assert_eq(js_PublishAsync(t->js, t->in_subject, b, n, NULL), NATS_OK);
  }
  jsPubOptions po;
  jsPubOptions_Init(&po);
  po.MaxWait = 20000;
  cr_assert_eq(js_PublishAsyncComplete(t->js, &po), NATS_OK);
}

/* Stream state of `stream`: returns 0 if it exists. */
static int stream_state(tnats *t, const char *stream, uint64_t *msgs, uint64_t *first,
                        uint64_t *last, int64_t *dup_ns) {
  jsStreamInfo *si = NULL;
  if (js_GetStreamInfo(&si, t->js, stream, NULL, NULL) != NATS_OK) return -1;
  if (msgs) *msgs = si->State.Msgs;
  if (first) *first = si->State.FirstSeq;
  if (last) *last = si->State.LastSeq;
  if (dup_ns) *dup_ns = si->Config->Duplicates;
  jsStreamInfo_Destroy(si);
  return 0;
}

/* The output stream holds exactly N messages, each expected pair once, and
 * each with Nats-Msg-Id "<job>/sink/c/<key>.<count>". */
static void check_stream(crash_job *j, tnats *t) {
  uint64_t msgs = 0, first = 0, last = 0;
  cr_assert_eq(stream_state(t, t->stream, &msgs, &first, &last, NULL), 0, "no stream %s",
               t->stream);
  cr_assert_eq(msgs, j->records, "stream %s holds %llu messages for %llu records\nhistory: %s",
               t->stream, (ull)msgs, (ull)j->records, j->history);
  crash_tally tally;
  crash_tally_init(j, &tally, 1);
  for (uint64_t seq = first; seq <= last; seq++) {
    natsMsg *m = NULL;
    natsStatus s = js_GetMsg(&m, t->js, t->stream, seq, NULL, NULL);
    if (s == NATS_NOT_FOUND) continue;
    cr_assert_eq(s, NATS_OK, "seq %llu: %s", (ull)seq, nats_GetLastError(NULL));
    char line[128];
    int n = natsMsg_GetDataLength(m);
    cr_assert(n > 0 && n < (int)sizeof line);
    memcpy(line, natsMsg_GetData(m), (size_t)n);
    line[n] = '\0';
    crash_tally_line(j, &tally, line, t->stream);
    const char *id = NULL;
    cr_assert_eq(natsMsgHeader_Get(m, "Nats-Msg-Id", &id), NATS_OK, "no Nats-Msg-Id");
    ull k = 0, c = 0;
    cr_assert_eq(sscanf(line, "%llu %llu", &k, &c), 2);
    char want[64];
    snprintf(want, sizeof want, "/sink/c/%llu.%llu", k, c);
    size_t il = strlen(id), wl = strlen(want);
    cr_assert(il > wl && !strcmp(id + il - wl, want), "message '%s' has Nats-Msg-Id %s", line, id);
    natsMsg_Destroy(m);
  }
  crash_tally_check(j, &tally, t->stream);
  crash_tally_free(&tally);
}

/* The sum of counter `name` over the sink subtasks in a summary file. */
static ull summary_sum(const char *path, const char *name) {
  char *text = th_read_file(path, NULL);
  cr_assert_not_null(text, "no summary %s", path);
  char key[64];
  snprintf(key, sizeof key, "\"%s\": ", name);
  ull sum = 0;
  for (const char *p = strstr(text, key); p; p = strstr(p + 1, key))
    sum += strtoull(p + strlen(key), NULL, 10);
  free(text);
  return sum;
}

/* ---- sink ---------------------------------------------------------------- */

Test(nats, sink_creates_stream_exactly_once) {
  tnats t;
  tn_open(&t);
  crash_job *j = tx_job(N_RECORDS, N_KEYS, "0", N_INTERVAL);
  nats_sink(j, &t, "&duplicates=90s&pending=16");
  cr_assert_neq(stream_state(&t, t.stream, NULL, NULL, NULL, NULL), 0);
  char sum[700], *err = NULL;
  snprintf(sum, sizeof sum, "%s/summary.json", j->dir);
  int rc = crash_run(j, NULL, -1, &err, "--summary-json", sum, NULL);
  cr_assert_eq(rc, 0, "%s", err);
  cr_assert(strstr(err, "created stream") != NULL, "%s", err);
  free(err);
  int64_t dup_ns = 0;
  cr_assert_eq(stream_state(&t, t.stream, NULL, NULL, NULL, &dup_ns), 0);
  cr_assert_eq(dup_ns, 90ll * 1000000000ll, "duplicates= sets the window: %lld", (long long)dup_ns);
  check_stream(j, &t);
  cr_assert_eq(summary_sum(sum, "requests"), j->records);
  cr_assert_eq(summary_sum(sum, "responses"), j->records);
  cr_assert_eq(summary_sum(sum, "duplicates"), 0);
  crash_free(j);
  tn_close(&t);
  cr_assert_eq(th_leak_check(), 0);
}

/* The subject is held by a stream of another name: the sink cannot create
 * its own, says which subject and how to name the stream, and publishes
 * nothing. */
Test(nats, sink_subject_held_by_another_stream_is_clear) {
  tnats t;
  tn_open(&t);
  add_stream(&t, t.in_stream, t.subject); /* deleted by tn_close */
  crash_job *j = tx_job(N_RECORDS, N_KEYS, "0", N_INTERVAL);
  nats_sink(j, &t, NULL);
  char *err = NULL;
  int rc = crash_run(j, NULL, -1, &err, NULL);
  cr_assert_neq(rc, 0, "%s", err);
  cr_assert(strstr(err, "another stream holds subject") && strstr(err, t.subject) &&
                strstr(err, "stream="),
            "%s", err);
  free(err);
  uint64_t msgs = 1;
  cr_assert_eq(stream_state(&t, t.in_stream, &msgs, NULL, NULL, NULL), 0);
  cr_assert_eq(msgs, 0, "%llu messages published", (ull)msgs);
  cr_assert_neq(stream_state(&t, t.stream, NULL, NULL, NULL, NULL), 0, "the sink made its stream");
  crash_free(j);
  tn_close(&t);
  cr_assert_eq(th_leak_check(), 0);
}

/* Killed right after an epoch's commit (every message acknowledged) but
 * before the task heard of it: the restore publishes the epoch again, with
 * the same Nats-Msg-Ids: JetStream stores none twice, and the acks it marks
 * duplicate are counted (summary and log). */
Test(nats, sink_replay_is_deduplicated_and_counted) {
  tnats t;
  tn_open(&t);
  crash_job *j = tx_job(N_RECORDS, N_KEYS, N_RATE, N_INTERVAL);
  nats_sink(j, &t, "&pending=16");
  char *err = NULL;
  crash_kill_at(j, "sink.after_commit", 2, 0, NULL, NULL);
  char sum[700];
  snprintf(sum, sizeof sum, "%s/summary.json", j->dir);
  int rc = crash_run(j, NULL, -1, &err, "--restore", "latest", "--summary-json", sum, NULL);
  cr_assert_eq(rc, 0, "%s", err);
  cr_assert(strstr(err, "were duplicates") != NULL, "no duplicate log line: %s", err);
  free(err);
  check_stream(j, &t);
  cr_assert_gt(summary_sum(sum, "duplicates"), 0, "no duplicate ack counted");
  crash_free(j);
  tn_close(&t);
  cr_assert_eq(th_leak_check(), 0);
}

/* Killed at failpoint NAME@hit with parallelism `from`, restored with `to`
 * until done: the stream holds exactly the expected pairs. */
static void sink_kill_at(const char *name, unsigned hit, const char *from, const char *to) {
  tnats t;
  tn_open(&t);
  crash_job *j = tx_job(N_RECORDS, N_KEYS, N_RATE, N_INTERVAL);
  j->par = from;
  nats_sink(j, &t, NULL);
  crash_kill_at(j, name, hit, 0, NULL, NULL);
  j->par = to;
  restore_until_done(j);
  check_stream(j, &t);
  crash_free(j);
  tn_close(&t);
}

static void sink_kill(const char *name, unsigned hit) {
  sink_kill_at(name, hit, "2", "2");
}

/* Epochs pending (and one half published) at parallelism 3, restored at 2
 * and at 1: the subtasks that took them over publish them with their
 * operation ids, and JetStream keeps one copy. */
Test(nats, sink_restored_with_another_parallelism) {
  sink_kill_at("sink.after_send", 300, "3", "2");
  sink_kill_at("ckpt.after_meta_commit", 2, "3", "1");
  cr_assert_eq(th_leak_check(), 0);
}

/* Around publish: after a message was published (its ack not yet read),
 * after write, after pre_commit, after the checkpoint's metadata commit
 * but before the sink's commit, during a recovery. */
Test(nats, sink_kill_at_failpoints) {
  sink_kill("sink.after_send", 10);
  sink_kill("sink.after_send", 600);
  sink_kill("sink.after_write", 3);
  sink_kill("sink.after_pre_commit", 3);
  sink_kill("ckpt.after_meta_commit", 2);
  sink_kill("sink.before_commit", 2);
  sink_kill("sink.after_commit", 2);
}

Test(nats, sink_kill_during_recover) {
  tnats t;
  tn_open(&t);
  crash_job *j = tx_job(N_RECORDS, N_KEYS, N_RATE, N_INTERVAL);
  nats_sink(j, &t, NULL);
  crash_kill_at(j, "sink.after_send", 300, 0, NULL, NULL);
  crash_kill_at(j, "sink.during_recover", 1, 0, NULL, "--restore", "latest", NULL);
  restore_until_done(j);
  check_stream(j, &t);
  crash_free(j);
  tn_close(&t);
  cr_assert_eq(th_leak_check(), 0);
}

Test(nats, sink_random_kills) {
  uint64_t seed = rng = crash_seed("nats::sink_random_kills");
  int kills = 0;
  for (int n = 0; n < 10; n++) {
    tnats t;
    tn_open(&t);
    crash_job *j = tx_job(N_RECORDS, N_KEYS, N_RATE, N_INTERVAL);
    crash_hist(j, "seed %llu, job %d: ", (ull)seed, n);
    nats_sink(j, &t, NULL);
    kills += kill_at_random(j, 1 + (int)(rnd() % 2), 20, 320, NULL);
    restore_until_done(j);
    check_stream(j, &t);
    crash_free(j);
    tn_close(&t);
  }
  fprintf(stderr, "nats::sink_random_kills: 10 jobs, %d kills\n", kills);
  cr_assert_geq(kills, 5, "too few kills landed: %d", kills);
  cr_assert_eq(th_leak_check(), 0);
}

/* The stream's duplicate window is 1 s: a replay 1.5 s later could be
 * stored twice, so it is refused (exit 5, naming the window), and the
 * stream gets nothing more. */
Test(nats, sink_refuses_replay_beyond_duplicate_window) {
  tnats t;
  tn_open(&t);
  crash_job *j = tx_job(N_RECORDS, N_KEYS, N_RATE, N_INTERVAL);
  nats_sink(j, &t, "&duplicates=1s");
  char *err = NULL;
  crash_kill_at(j, "sink.after_send", 50, 0, NULL, NULL);
  th_sleep_ms(300);
  uint64_t before = 0, after = 0;
  cr_assert_eq(stream_state(&t, t.stream, &before, NULL, NULL, NULL), 0);
  th_sleep_ms(1500); /* the subject of this test is time: beyond the window */
  int rc = crash_run(j, NULL, -1, &err, "--restore", "latest", NULL);
  cr_assert_eq(rc, 5, "exit %d: %s", rc, err);
  cr_assert(strstr(err, "duplicate window") != NULL, "stderr: %s", err);
  free(err);
  cr_assert_eq(stream_state(&t, t.stream, &after, NULL, NULL, NULL), 0);
  cr_assert_eq(after, before, "a refused replay added messages: %llu -> %llu", (ull)before,
               (ull)after);
  crash_free(j);
  tn_close(&t);
  cr_assert_eq(th_leak_check(), 0);
}

Test(nats, unreachable_server_names_url) {
  crash_job *j = tx_job(100, 10, "0", N_INTERVAL);
  snprintf(j->sink, sizeof j->sink, "nats://127.0.0.1:1/weirtest.nowhere");
  char *err = NULL;
  int rc = crash_run(j, NULL, -1, &err, NULL);
  cr_assert_neq(rc, 0);
  cr_assert(strstr(err, "cannot connect to NATS at nats://127.0.0.1:1") != NULL, "%s", err);
  free(err);
  snprintf(j->sink, sizeof j->sink, "null");
  rc = crash_run(j, NULL, -1, &err, "--fresh", "--source", "nats://127.0.0.1:1/weirtest.nowhere",
                 NULL);
  cr_assert_neq(rc, 0);
  cr_assert(strstr(err, "cannot connect to NATS at nats://127.0.0.1:1") != NULL, "%s", err);
  free(err);
  crash_free(j);
}

/* ---- source -------------------------------------------------------------- */

/* Reads split `split`'s position of operator "nats" in the latest
 * checkpoint (weir inspect --json). Returns 0 if found. */
static int latest_position(crash_job *j, unsigned split, ull *pos) {
  const char *la[] = {WEIR_BINARY, "checkpoints", "--state-dir", j->state, "--json", NULL};
  char *out = NULL;
  cr_assert_eq(th_run(la, NULL, &out, NULL, RUN_TIMEOUT_S), 0);
  ull id = 0;
  for (const char *p = strstr(out, "\"id\": "); p; p = strstr(p + 1, "\"id\": "))
    id = strtoull(p + 6, NULL, 10);
  free(out);
  if (!id) return -1;
  char ids[32];
  snprintf(ids, sizeof ids, "%llu", id);
  const char *ia[] = {WEIR_BINARY, "inspect", ids, "--state-dir", j->state, "--json", NULL};
  cr_assert_eq(th_run(ia, NULL, &out, NULL, RUN_TIMEOUT_S), 0);
  const char *op = strstr(out, "\"operator\": \"nats\"");
  cr_assert_not_null(op, "%s", out);
  const char *ps = strstr(op, "\"positions\": [");
  cr_assert_not_null(ps, "%s", out);
  char want[48];
  snprintf(want, sizeof want, "\"split\": %u, ", split);
  const char *sp = strstr(ps, want);
  int rc = -1;
  if (sp && sscanf(sp + strlen(want), "\"offset\": %llu", pos) == 1) rc = 0;
  if (rc) fprintf(stderr, "positions: %.300s\n", ps);
  free(out);
  return rc;
}

/* NATS input -> counter -> file sink, killed right after checkpoint 2's
 * metadata commit: the positions are stream sequences (next to read, and
 * the end fixed at the first start), and the restore resumes exactly after
 * the cut: the committed files hold every (key, count) once. */
Test(nats, source_positions_and_resume_after_cut) {
  tnats t;
  tn_open(&t);
  crash_job *j = tx_job(N_RECORDS, N_KEYS, "0", N_INTERVAL);
  publish_input(&t, j->records, j->keys);
  char url[512], *err = NULL;
  src_url(&t, url, sizeof url, N_RATE);
  crash_kill_at(j, "ckpt.after_meta_commit", 2, 0, NULL, "--source", url, NULL);
  ull next = 0, end = 0;
  cr_assert_eq(latest_position(j, 0, &next), 0);
  cr_assert_eq(latest_position(j, 1, &end), 0);
  cr_assert_eq(end, j->records, "end %llu", end);
  cr_assert(next > 1 && next <= j->records, "next %llu", next);
  /* More input after the start does not change what the job reads. */
  cr_assert_eq(js_Publish(NULL, t.js, t.in_subject, "0", 1, NULL, NULL), NATS_OK);
  int rc = crash_run(j, NULL, -1, &err, "--restore", "latest", "--source", url, NULL);
  cr_assert_eq(rc, 0, "%s", err);
  cr_assert(strstr(err, "resumed") || strstr(err, "restor"), "%s", err);
  free(err);
  crash_check_counter(j);
  crash_free(j);
  tn_close(&t);
  cr_assert_eq(th_leak_check(), 0);
}

/* The checkpoint resumes at a sequence the stream no longer holds (purged):
 * the job stops with a clear error instead of skipping. */
Test(nats, source_position_removed_by_retention_is_an_error) {
  tnats t;
  tn_open(&t);
  crash_job *j = tx_job(N_RECORDS, N_KEYS, "0", N_INTERVAL);
  publish_input(&t, j->records, j->keys);
  char url[512], *err = NULL;
  src_url(&t, url, sizeof url, N_RATE);
  crash_kill_at(j, "ckpt.after_meta_commit", 2, 0, NULL, "--source", url, NULL);
  cr_assert_eq(js_PurgeStream(t.js, t.in_stream, NULL, NULL), NATS_OK);
  int rc = crash_run(j, NULL, -1, &err, "--restore", "latest", "--source", url, NULL);
  cr_assert_eq(rc, 5, "exit %d: %s", rc, err);
  cr_assert(strstr(err, "no longer holds") != NULL, "stderr: %s", err);
  cr_assert(strstr(err, "refusing to skip") != NULL, "stderr: %s", err);
  free(err);
  crash_free(j);
  tn_close(&t);
  cr_assert_eq(th_leak_check(), 0);
}

/* Restores j (--restore latest, reading url) to its end: exit 0. */
static void restore_to_end(crash_job *j, const char *url) {
  char *err = NULL;
  int rc = crash_run(j, NULL, -1, &err, "--restore", "latest", "--source", url, NULL);
  cr_assert_eq(rc, 0, "%s\nhistory: %s", err, j->history);
  free(err);
}

/* The last message the job reads is deleted while the job is down: the
 * restored job would wait for it forever; it stops with a clear error. */
Test(nats, source_end_removed_while_reading_is_an_error) {
  tnats t;
  tn_open(&t);
  crash_job *j = tx_job(N_RECORDS, N_KEYS, "0", N_INTERVAL);
  publish_input(&t, j->records, j->keys);
  char url[512], *err = NULL;
  src_url(&t, url, sizeof url, N_RATE);
  crash_kill_at(j, "ckpt.after_meta_commit", 2, 0, NULL, "--source", url, NULL);
  cr_assert_eq(js_DeleteMsg(t.js, t.in_stream, j->records, NULL, NULL), NATS_OK);
  int rc = crash_run(j, NULL, -1, &err, "--restore", "latest", "--source", url, NULL);
  cr_assert_eq(rc, 5, "exit %d: %s", rc, err);
  cr_assert(strstr(err, "messages were removed while the job read it") != NULL, "stderr: %s", err);
  free(err);
  crash_free(j);
  tn_close(&t);
  cr_assert_eq(th_leak_check(), 0);
}

Test(nats, source_random_kills_exact_files) {
  uint64_t seed = rng = crash_seed("nats::source_random_kills_exact_files");
  int kills = 0;
  for (int n = 0; n < 4; n++) {
    tnats t;
    tn_open(&t);
    crash_job *j = tx_job(N_RECORDS, N_KEYS, "0", N_INTERVAL);
    publish_input(&t, j->records, j->keys);
    char url[512];
    src_url(&t, url, sizeof url, N_RATE);
    crash_hist(j, "seed %llu, job %d: ", (ull)seed, n);
    kills += kill_at_random(j, 2, 50, 290, url);
    restore_to_end(j, url);
    crash_check_counter(j);
    crash_free(j);
    tn_close(&t);
  }
  fprintf(stderr, "nats::source_random_kills_exact_files: 4 jobs, %d kills\n", kills);
  cr_assert_geq(kills, 3, "too few kills landed: %d", kills);
}

/* ---- source with splits -------------------------------------------------- */

#define N_SUBJECTS 6
#define N_SPLITS 12

/* The input of a split source: stream t->in_stream holds
 * <in_subject>.*, and message i of the counter's input ("<i mod keys>")
 * goes to one of N_SUBJECTS concrete subjects, chosen at random. The
 * subjects' last tokens are picked so that, with splits=N_SPLITS, every
 * subtask at parallelism 3 and at 2 reads some of them, and one split
 * reads two (its consumers merged): the splits come from a hash of the
 * subject's name, so arbitrary names could leave a subtask idle and the
 * test would not cover what it says. */
typedef struct split_input {
  char subj[N_SUBJECTS][128];
  char filter[128];
} split_input;

static int spread_ok(const unsigned *split) {
  unsigned seen3 = 0, seen2 = 0, count[N_SPLITS] = {0};
  int shared = 0;
  for (int i = 0; i < N_SUBJECTS; i++) {
    seen3 |= 1u << (split[i] % 3);
    seen2 |= 1u << (split[i] % 2);
    if (++count[split[i]] == 2) shared = 1;
  }
  return seen3 == 7 && seen2 == 3 && shared;
}

static void publish_split_input(tnats *t, split_input *in, uint64_t records, uint64_t keys) {
  snprintf(in->filter, sizeof in->filter, "%s.*", t->in_subject);
  unsigned split[N_SUBJECTS];
  int found = 0;
  for (int base = 0; base < 1000 && !found; base++) {
    for (int i = 0; i < N_SUBJECTS; i++) {
      snprintf(in->subj[i], sizeof in->subj[i], "%s.s%d", t->in_subject, base + i);
      split[i] = (unsigned)(weir_hash_bytes(in->subj[i], strlen(in->subj[i])) % N_SPLITS);
    }
    found = spread_ok(split);
  }
  cr_assert(found, "no spread of %d subjects over %d splits found", N_SUBJECTS, N_SPLITS);
  add_stream(t, t->in_stream, in->filter);
  for (uint64_t i = 0; i < records; i++) {
    char b[32];
    int n = snprintf(b, sizeof b, "%llu", (ull)(i % keys));
    cr_assert_eq(js_PublishAsync(t->js, in->subj[rnd() % N_SUBJECTS], b, n, NULL), NATS_OK);
  }
  jsPubOptions po;
  jsPubOptions_Init(&po);
  po.MaxWait = 20000;
  cr_assert_eq(js_PublishAsyncComplete(t->js, &po), NATS_OK);
}

static const char *split_url(const tnats *t, const split_input *in, char *buf, size_t cap,
                             const char *rate) {
  snprintf(buf, cap, "%s/%s?stream=%s&rate=%s&splits=%d", nats_url(), in->filter, t->in_stream,
           rate, N_SPLITS);
  return buf;
}

/* The latest checkpoint's positions of every split: each split that has
 * subjects has (next, end, N_SPLITS), and together they are a cut inside
 * the input. Returns how many splits had read part of their subjects. */
static int check_split_positions(crash_job *j) {
  int mid = 0, with_end = 0;
  for (unsigned s = 0; s < N_SPLITS; s++) {
    ull next = 0, end = 0, n = 0;
    if (latest_position(j, 3 * s + 1, &end) != 0) continue; /* not started at the cut */
    cr_assert_eq(latest_position(j, 3 * s, &next), 0, "split %u", s);
    cr_assert_eq(latest_position(j, 3 * s + 2, &n), 0, "split %u", s);
    cr_assert_eq(n, N_SPLITS, "split %u: %llu splits", s, n);
    cr_assert_leq(end, j->records, "split %u: end %llu", s, end);
    if (end) with_end++;
    if (end && next > 1 && next <= end) mid++;
  }
  cr_assert_geq(with_end, 2, "too few splits with subjects in the checkpoint");
  return mid;
}

/* NATS input over 6 subjects -> counter at parallelism p1 (3 subtasks
 * read splits) -> file sink, killed right after checkpoint 2's metadata
 * commit, restored at parallelism p2: every split resumes exactly after
 * the cut, whichever subtask owns it now, and the committed files hold
 * every (key, count) once. */
static void split_source_kill_restore(int p1, int p2) {
  rng = crash_seed("nats::split_source");
  tnats t;
  tn_open(&t);
  crash_job *j = tx_job(N_RECORDS, N_KEYS, "0", N_INTERVAL);
  crash_par(j, p1);
  split_input in;
  publish_split_input(&t, &in, j->records, j->keys);
  char url[512];
  split_url(&t, &in, url, sizeof url, N_RATE);
  crash_kill_at(j, "ckpt.after_meta_commit", 2, 0, NULL, "--source", url, NULL);
  int mid = check_split_positions(j);
  cr_assert_geq(mid, 1, "no split was cut in the middle");
  crash_hist(j, "restore at parallelism %d; ", p2);
  crash_par(j, p2);
  restore_to_end(j, url);
  crash_check_counter(j);
  crash_free(j);
  tn_close(&t);
  cr_assert_eq(th_leak_check(), 0);
}

/* Without a kill, at parallelism 3: exactly the input. */
Test(nats, source_splits_parallel_exact) {
  rng = crash_seed("nats::source_splits_parallel_exact");
  tnats t;
  tn_open(&t);
  crash_job *j = tx_job(N_RECORDS, N_KEYS, "0", N_INTERVAL);
  crash_par(j, 3);
  split_input in;
  publish_split_input(&t, &in, j->records, j->keys);
  char url[512], *err = NULL;
  split_url(&t, &in, url, sizeof url, "0");
  int rc = crash_run(j, NULL, -1, &err, "--source", url, NULL);
  cr_assert_eq(rc, 0, "%s", err);
  free(err);
  crash_check_counter(j);
  crash_free(j);
  tn_close(&t);
  cr_assert_eq(th_leak_check(), 0);
}

Test(nats, source_splits_killed_and_restored) {
  split_source_kill_restore(3, 3);
}

Test(nats, source_splits_rescaled_3_to_2) {
  split_source_kill_restore(3, 2);
}

Test(nats, source_splits_rescaled_2_to_3) {
  split_source_kill_restore(2, 3);
}

/* Killed at random times at parallelism 3, restored at 3 or 2 in turn:
 * exact files. */
Test(nats, source_splits_random_kills_exact_files) {
  uint64_t seed = rng = crash_seed("nats::source_splits_random_kills_exact_files");
  int kills = 0;
  for (int n = 0; n < 3; n++) {
    tnats t;
    tn_open(&t);
    crash_job *j = tx_job(N_RECORDS, N_KEYS, "0", N_INTERVAL);
    crash_par(j, 3);
    split_input in;
    publish_split_input(&t, &in, j->records, j->keys);
    char url[512];
    split_url(&t, &in, url, sizeof url, N_RATE);
    crash_hist(j, "seed %llu, job %d: ", (ull)seed, n);
    kills += kill_at_random(j, 2, 50, 290, url);
    crash_par(j, 2 + n % 2);
    restore_to_end(j, url);
    crash_check_counter(j);
    crash_free(j);
    tn_close(&t);
  }
  fprintf(stderr, "nats::source_splits_random_kills_exact_files: 3 jobs, %d kills\n", kills);
  cr_assert_geq(kills, 2, "too few kills landed: %d", kills);
}

/* Records of a split source checked against their subtask's event-time
 * clock (chained to the source: the source's own watermark). */
typedef struct wm_watch {
  atomic_uint_fast64_t records, late;
} wm_watch;

static int wm_process(weir_ctx *ctx, const weir_record *r) {
  wm_watch *w = weir_ctx_arg(ctx);
  atomic_fetch_add(&w->records, 1);
  if (r->ts <= weir_ctx_watermark(ctx)) atomic_fetch_add(&w->late, 1);
  return weir_emit(ctx, r->key, NULL, 0);
}

static const weir_operator_vt wm_vt = {
    .size = sizeof(weir_operator_vt), .name = "watch", .process = wm_process};

/* In process, parallelism 3, a watermark strategy with no disorder bound
 * (D = 0, a tick every millisecond): timestamps are stream sequences,
 * which grow within a split but not across the splits a subtask reads in
 * turn, so only a watermark per split leaves every record on time. */
Test(nats, source_splits_watermark_per_split) {
  rng = crash_seed("nats::source_splits_watermark_per_split");
  tnats t;
  tn_open(&t);
  split_input in;
  publish_split_input(&t, &in, 3000, N_KEYS);
  char url[512];
  split_url(&t, &in, url, sizeof url, "6000");
  wm_watch w;
  atomic_init(&w.records, 0);
  atomic_init(&w.late, 0);
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "nats_wm"), 0);
  weir_watermark_strategy ws = {.size = sizeof ws, .out_of_orderness = 0, .interval_ms = 1};
  weir_stream *s = weir_with_watermarks(weir_nats_source_par(job, "nats", url, 3), &ws);
  s = weir_process(s, "watch", &wm_vt, &w, 3);
  cr_assert_eq(weir_sink_to(s, "out", "null", NULL, 3), 0, "%s", weir_job_error(job));
  weir_run_opts o = {.workers = 2};
  cr_assert_eq(weir_job_run(job, &o), 0, "%s", weir_job_error(job));
  weir_job_destroy(job);
  cr_assert_eq(atomic_load(&w.records), 3000);
  cr_assert_eq(atomic_load(&w.late), 0, "%llu of 3000 records late",
               (unsigned long long)atomic_load(&w.late));
  tn_close(&t);
}

/* A checkpoint of splits=12 restored with splits=4: refused, naming both. */
Test(nats, source_splits_changed_is_refused) {
  rng = crash_seed("nats::source_splits_changed_is_refused");
  tnats t;
  tn_open(&t);
  crash_job *j = tx_job(N_RECORDS, N_KEYS, "0", N_INTERVAL);
  crash_par(j, 3);
  split_input in;
  publish_split_input(&t, &in, j->records, j->keys);
  char url[512], url4[600], *err = NULL;
  split_url(&t, &in, url, sizeof url, N_RATE);
  crash_kill_at(j, "ckpt.after_meta_commit", 2, 0, NULL, "--source", url, NULL);
  snprintf(url4, sizeof url4, "%s/%s?stream=%s&splits=4", nats_url(), in.filter, t.in_stream);
  int rc = crash_run(j, NULL, -1, &err, "--restore", "latest", "--source", url4, NULL);
  cr_assert_neq(rc, 0, "%s", err);
  cr_assert(strstr(err, "splits=12") && strstr(err, "splits=4"), "%s", err);
  free(err);
  crash_free(j);
  tn_close(&t);
}

/* splits= needs a wildcard subject; the URL check says so. */
Test(nats, source_splits_need_a_wildcard) {
  char err[512];
  cr_assert_eq(weir_nats_source_check("nats://127.0.0.1:4222/a.b?splits=3", err, sizeof err),
               WEIR_ESINK);
  cr_assert(strstr(err, "wildcard") != NULL, "%s", err);
  cr_assert_eq(weir_nats_source_check("nats://127.0.0.1:4222/a.*?splits=0", err, sizeof err),
               WEIR_ESINK);
  cr_assert_eq(weir_nats_source_check("nats://127.0.0.1:4222/a.>?splits=8", err, sizeof err), 0,
               "%s", err);
}

/* replicas= takes 1 to 5 on the sink and a stage edge, and is refused on
 * the plain source (it creates no stream); the server may be a list. */
Test(nats, replicas_and_server_lists_are_checked) {
  char err[512];
  cr_assert_eq(weir_sink_spec_check("nats://127.0.0.1:4222/a.b?replicas=3", err, sizeof err), 0,
               "%s", err);
  cr_assert_eq(
      weir_nats_source_check("nats://127.0.0.1:4222/a?tasks=2&replicas=5", err, sizeof err), 0,
      "%s", err);
  const char *bad[] = {"0", "6", "x", "3x", "-1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char spec[128];
    snprintf(spec, sizeof spec, "nats://127.0.0.1:4222/a?tasks=2&replicas=%s", bad[i]);
    cr_assert_eq(weir_sink_spec_check(spec, err, sizeof err), WEIR_ESINK, "%s", spec);
    cr_assert(strstr(err, "replicas= takes a number from 1 to 5") != NULL, "%s", err);
    cr_assert_eq(weir_nats_source_check(spec, err, sizeof err), WEIR_ESINK, "%s", spec);
    cr_assert(strstr(err, "replicas= takes a number from 1 to 5") != NULL, "%s", err);
  }
  cr_assert_eq(weir_nats_source_check("nats://127.0.0.1:4222/a?replicas=3", err, sizeof err),
               WEIR_ESINK);
  cr_assert(strstr(err, "not the source's") != NULL, "%s", err);
  cr_assert_eq(weir_sink_spec_check("nats://127.0.0.1:4222/a?replica=3", err, sizeof err),
               WEIR_ESINK);
  cr_assert(strstr(err, "unknown parameter") && strstr(err, "replicas="), "%s", err);
  cr_assert_eq(weir_sink_spec_check("nats://127.0.0.1:1,127.0.0.1:2,localhost:3/a.b?replicas=3",
                                    err, sizeof err),
               0, "%s", err);
  cr_assert_eq(weir_nats_source_check("nats://127.0.0.1:1,127.0.0.1:2/a?tasks=1", err, sizeof err),
               0, "%s", err);
  const char *lists[] = {"nats://127.0.0.1:1,,127.0.0.1:3/a", "nats://127.0.0.1:1,/a",
                         "nats://,127.0.0.1:1/a", "nats://127.0.0.1:1,nats://127.0.0.1:2/a",
                         "nats://u:p@127.0.0.1:1,127.0.0.1:2/a"};
  for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++) {
    cr_assert_eq(weir_sink_spec_check(lists[i], err, sizeof err), WEIR_ESINK, "%s", lists[i]);
    cr_assert(strstr(err, "a list of servers") != NULL, "%s: %s", lists[i], err);
  }
}

Test(nats, source_missing_stream_is_clear) {
  tnats t;
  tn_open(&t);
  crash_job *j = tx_job(10, 10, "0", N_INTERVAL);
  char url[512], *err = NULL;
  src_url(&t, url, sizeof url, "0");
  int rc = crash_run(j, NULL, -1, &err, "--source", url, NULL);
  cr_assert_neq(rc, 0);
  cr_assert(strstr(err, "no stream") != NULL && strstr(err, t.in_stream) != NULL, "%s", err);
  free(err);
  crash_free(j);
  tn_close(&t);
}

/* wordcount: message bodies are text lines. */
Test(nats, wordcount_from_nats) {
  tnats t;
  tn_open(&t);
  publish_input(&t, 0, 1);
  const char *msgs[] = {"the cat\nthe dog", "a cat", "the end\n"};
  for (int i = 0; i < 3; i++)
    cr_assert_eq(js_Publish(NULL, t.js, t.in_subject, msgs[i], (int)strlen(msgs[i]), NULL, NULL),
                 NATS_OK);
  char *dir = th_tmpdir();
  char state[600], sink[600], url[512];
  snprintf(state, sizeof state, "%s/state", dir);
  snprintf(sink, sizeof sink, "file:%s/out", dir);
  src_url(&t, url, sizeof url, "0");
  const char *argv[] = {WEIR_BINARY, "run",         "wordcount", "--source",      url, "--sink",
                        sink,        "--state-dir", state,       "--parallelism", "2", NULL};
  char *err = NULL;
  int rc = th_run(argv, dir, NULL, &err, RUN_TIMEOUT_S);
  cr_assert_eq(rc, 0, "%s", err);
  free(err);
  char cat[800];
  snprintf(cat, sizeof cat, "cat %s/out/*.txt | sort > %s/all", dir, dir);
  cr_assert_eq(system(cat), 0);
  snprintf(cat, sizeof cat, "%s/all", dir);
  char *all = th_read_file(cat, NULL);
  cr_assert_not_null(all);
  cr_assert_str_eq(all, "a 1\ncat 1\ncat 2\ndog 1\nend 1\nthe 1\nthe 2\nthe 3\n");
  free(all);
  th_rmrf(dir);
  free(dir);
  tn_close(&t);
}

/* ---- end to end ---------------------------------------------------------- */

/* JetStream input of N messages -> counter -> NATS sink, killed repeatedly
 * at seeded random times: the output stream holds exactly the expected
 * pairs, once each. */
Test(nats, end_to_end_random_kills) {
  uint64_t seed = rng = crash_seed("nats::end_to_end_random_kills");
  int kills = 0;
  for (int n = 0; n < 4; n++) {
    tnats t;
    tn_open(&t);
    crash_job *j = tx_job(N_RECORDS, N_KEYS, "0", N_INTERVAL);
    crash_hist(j, "seed %llu, job %d: ", (ull)seed, n);
    publish_input(&t, j->records, j->keys);
    nats_sink(j, &t, NULL);
    char url[512];
    src_url(&t, url, sizeof url, N_RATE);
    kills += kill_at_random(j, 3, 50, 290, url);
    restore_to_end(j, url);
    check_stream(j, &t);
    crash_free(j);
    tn_close(&t);
  }
  fprintf(stderr, "nats::end_to_end_random_kills: 4 jobs, %d kills\n", kills);
  cr_assert_geq(kills, 3, "too few kills landed: %d", kills);
  cr_assert_eq(th_leak_check(), 0);
}

#ifdef WEIR_TEST_PQ
/* Every (key, count) of j once in `table`, and no prepared transaction of
 * j's job left (a job that failed earlier, e.g. in another stage of the
 * suite, may have left its own: not this test's business). */
static void check_pg_table(crash_job *j, PGconn *c, const char *table) {
  char sql[200];
  snprintf(sql, sizeof sql, "SELECT key, value FROM %s", table);
  PGresult *r = PQexec(c, sql);
  cr_assert(PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", sql, PQerrorMessage(c));
  crash_tally tally;
  crash_tally_init(j, &tally, 1);
  int n = PQntuples(r);
  for (int i = 0; i < n; i++) {
    char line[128];
    snprintf(line, sizeof line, "%s %s", PQgetvalue(r, i, 0), PQgetvalue(r, i, 1));
    crash_tally_line(j, &tally, line, table);
  }
  PQclear(r);
  crash_tally_check(j, &tally, table);
  crash_tally_free(&tally);
  char id[64];
  crash_job_id(j, id, sizeof id);
  snprintf(sql, sizeof sql, "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'weir:%s:%%'",
           id);
  r = PQexec(c, sql);
  cr_assert(PQresultStatus(r) == PGRES_TUPLES_OK, "%s", PQerrorMessage(c));
  cr_assert_str_eq(PQgetvalue(r, 0, 0), "0", "prepared transactions of job %s remain\nhistory: %s",
                   id, j->history);
  PQclear(r);
  snprintf(sql, sizeof sql, "DROP TABLE %s", table);
  PQclear(PQexec(c, sql));
}

/* JetStream input of N messages -> counter -> PostgreSQL (two-phase
 * commit), killed repeatedly at seeded random times: the table holds every
 * expected (key, count) once and no prepared transaction remains. */
Test(nats, end_to_end_into_postgresql) {
  if (!th_service("PGHOST")) {
    cr_assert(!th_in_ci(), "PGHOST is not set: PostgreSQL is required under CI");
    cr_skip_test("PGHOST is not set (scripts/services starts PostgreSQL)");
  }
  uint64_t seed = rng = crash_seed("nats::end_to_end_into_postgresql");
  PGconn *c = PQconnectdb(""); /* PGHOST, PGPORT, PGUSER, PGDATABASE */
  cr_assert_eq(PQstatus(c), CONNECTION_OK, "%s", PQerrorMessage(c));
  const char *user = getenv("PGUSER"), *db = getenv("PGDATABASE"), *port = getenv("PGPORT");
  int kills = 0;
  for (int n = 0; n < 3; n++) {
    tnats t;
    tn_open(&t);
    crash_job *j = tx_job(N_RECORDS, N_KEYS, "0", N_INTERVAL);
    char table[64];
    snprintf(table, sizeof table, "weir_e2e_%d_%d", (int)getpid(), n);
    snprintf(j->sink, sizeof j->sink, "postgresql://%s@%s:%s/%s?table=%s",
             user && *user ? user : "postgres", th_service("PGHOST"), port ? port : "5432",
             db && *db ? db : "postgres", table);
    crash_hist(j, "seed %llu, job %d: ", (ull)seed, n);
    publish_input(&t, j->records, j->keys);
    char url[512];
    src_url(&t, url, sizeof url, N_RATE);
    kills += kill_at_random(j, 3, 50, 290, url);
    restore_to_end(j, url);
    check_pg_table(j, c, table);
    crash_free(j);
    tn_close(&t);
  }
  PQfinish(c);
  fprintf(stderr, "nats::end_to_end_into_postgresql: 3 jobs, %d kills\n", kills);
  cr_assert_geq(kills, 2, "too few kills landed: %d", kills);
  cr_assert_eq(th_leak_check(), 0);
}
#endif

/* ---- a private nats-server, restarted under a running job ----------------- */

/* The server is killed (SIGKILL) while the job publishes and restarted 1 s
 * later on the same port and store: acknowledgements are lost, libnats
 * reconnects, the sink publishes the unacknowledged epochs again, and
 * JetStream (its duplicate window survives a restart with file storage)
 * keeps one copy: the job ends normally and the stream holds exactly the
 * expected pairs. */
Test(nats, server_killed_and_restarted_under_the_sink) {
  nats_url();
  crash_job *j = tx_job(20000, 200, "20000", "100");
  psrv srv = {0};
  snprintf(srv.dir, sizeof srv.dir, "%s/nats", j->dir);
  if (psrv_start(&srv, 0) != 0) {
    cr_assert(!th_in_ci(), "cannot start nats-server under CI");
    cr_skip_test("cannot start nats-server");
  }
  char url[128];
  snprintf(url, sizeof url, "nats://127.0.0.1:%d", srv.port);
  snprintf(j->sink, sizeof j->sink, "%s/weirtest.restart?stream=RESTART", url);
  char errpath[700];
  snprintf(errpath, sizeof errpath, "%s/stderr.txt", j->dir);
  pid_t pid = crash_spawnv(j, NULL, errpath, NULL);
  /* Kill the server once the sink publishes (not while the job starts). */
  natsConnection *nc = NULL;
  jsCtx *js = NULL;
  cr_assert_eq(natsConnection_ConnectTo(&nc, url), NATS_OK);
  cr_assert_eq(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
  for (int i = 0; i < 3000; i++) {
    jsStreamInfo *si = NULL;
    uint64_t msgs = 0;
    if (js_GetStreamInfo(&si, js, "RESTART", NULL, NULL) == NATS_OK) {
      msgs = si->State.Msgs;
      jsStreamInfo_Destroy(si);
    }
    if (msgs >= 2000 || waitpid(pid, NULL, WNOHANG) != 0) break;
    th_sleep_ms(10);
  }
  jsCtx_Destroy(js);
  natsConnection_Close(nc);
  natsConnection_Destroy(nc);
  psrv_kill(&srv, SIGKILL);
  th_sleep_ms(1000);
  int port = srv.port;
  srv.port = 0;
  int started = psrv_start(&srv, port);
  int rc = crash_wait(pid, 60000, 0);
  char *err = th_read_file(errpath, NULL);
  if (started == 0) {
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    tnats t = {0};
    cr_assert_eq(natsConnection_ConnectTo(&t.nc, url), NATS_OK);
    cr_assert_eq(natsConnection_JetStream(&t.js, t.nc, NULL), NATS_OK);
    snprintf(t.stream, sizeof t.stream, "RESTART");
    check_stream(j, &t);
    jsCtx_Destroy(t.js);
    natsConnection_Close(t.nc);
    natsConnection_Destroy(t.nc);
    psrv_kill(&srv, SIGTERM);
  }
  cr_assert_eq(started, 0, "nats-server did not restart on port %d", port);
  int again = 0, dups = 0;
  for (const char *p = strstr(err, "publishing it again"); p;
       p = strstr(p + 1, "publishing it again"))
    again++;
  for (const char *p = strstr(err, "were duplicates"); p; p = strstr(p + 1, "were duplicates"))
    dups++;
  fprintf(stderr,
          "nats::server_killed_and_restarted_under_the_sink: %d epochs published again, %d "
          "with duplicates\n",
          again, dups);
  free(err);
  crash_free(j);
  cr_assert_eq(th_leak_check(), 0);
}

TX_MAIN
