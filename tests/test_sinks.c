/* test_sinks.c: unit tests of the built-in sinks (sinks/): the default
 * record format, sink specifications, the null, print and file sinks run
 * in tiny jobs, and the decoding of a two-phase sink's state.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"
#include "weir/weir.h"
#include "weir/sink.h"

static weir_job *new_job(void) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "test"), 0);
  return job;
}

static int run1(weir_job *job) {
  weir_run_opts o = {.workers = 1};
  return weir_job_run(job, &o);
}

static int exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* ------------------------------------------------------------------------ */
/* weir_format_default                                                      */

static weir_record u64_rec(uint64_t key, uint64_t v, uint8_t b[8]) {
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
  weir_record r = {.key = key, .payload = b, .len = 8};
  return r;
}

Test(format, key_only_key_value_and_bytes) {
  char buf[64];
  weir_record r = {.key = 42};
  cr_assert_eq(weir_format_default(&r, buf, sizeof buf), 2);
  cr_assert_str_eq(buf, "42");

  uint8_t b[8];
  r = u64_rec(7, 1234567890123ull, b);
  cr_assert_eq(weir_format_default(&r, buf, sizeof buf), 15);
  cr_assert_str_eq(buf, "7 1234567890123");

  r = u64_rec(UINT64_MAX, 0, b);
  cr_assert_eq(weir_format_default(&r, buf, sizeof buf), 22);
  cr_assert_str_eq(buf, "18446744073709551615 0");

  r = (weir_record){.key = 0, .payload = "hello", .len = 5};
  cr_assert_eq(weir_format_default(&r, buf, sizeof buf), 7);
  cr_assert_str_eq(buf, "0 hello");

  /* 8 bytes are always a u64, even if they look like text. */
  r = (weir_record){.key = 1, .payload = "AAAAAAAA", .len = 8};
  weir_format_default(&r, buf, sizeof buf);
  cr_assert_str_eq(buf, "1 4702111234474983745");
  cr_assert_eq(th_leak_check(), 0);
}

Test(format, too_small_buffer_reports_the_length) {
  uint8_t b[8];
  weir_record r = u64_rec(123, 456, b);
  char buf[8];
  cr_assert_eq(weir_format_default(&r, NULL, 0), 7);
  cr_assert_eq(weir_format_default(&r, buf, 7), 7); /* no room for the NUL */
  cr_assert_eq(weir_format_default(&r, buf, 8), 7);
  cr_assert_str_eq(buf, "123 456");
  cr_assert_eq(th_leak_check(), 0);
}

/* ------------------------------------------------------------------------ */
/* Specifications                                                           */

Test(spec, valid_specs) {
  char err[128] = "";
  cr_assert_eq(weir_sink_spec_check("null", err, sizeof err), 0);
  cr_assert_eq(weir_sink_spec_check("print", err, sizeof err), 0);
  cr_assert_eq(weir_sink_spec_check("file:out", err, sizeof err), 0);
  cr_assert_eq(weir_sink_spec_check("file:/tmp/a/b", NULL, 0), 0);
  cr_assert_eq(th_leak_check(), 0);
}

Test(spec, invalid_specs_name_the_problem) {
  char err[128];
  cr_assert_eq(weir_sink_spec_check("", err, sizeof err), WEIR_ESINK);
  cr_assert(strstr(err, "empty"), "%s", err);
  cr_assert_eq(weir_sink_spec_check(NULL, err, sizeof err), WEIR_ESINK);
  cr_assert(strstr(err, "empty"), "%s", err);
  cr_assert_eq(weir_sink_spec_check("file:", err, sizeof err), WEIR_ESINK);
  cr_assert(strstr(err, "directory"), "%s", err);
  cr_assert_eq(weir_sink_spec_check("bogus", err, sizeof err), WEIR_ESINK);
  cr_assert(strstr(err, "bogus") && strstr(err, "file:DIR"), "%s", err);
  cr_assert_eq(weir_sink_spec_check("bogus", NULL, 0), WEIR_ESINK);
  char tiny[4];
  cr_assert_eq(weir_sink_spec_check("bogus", tiny, sizeof tiny), WEIR_ESINK);
  cr_assert_eq(strlen(tiny), 3);
  cr_assert_eq(th_leak_check(), 0);
}

/* http://: weir's own parameters (retention=, idempotency=, inflight=,
 * buffer=) are checked; others stay in the URL. */
Test(spec, http_specs) {
  char err[256] = "";
  cr_assert_eq(weir_sink_spec_check("http://127.0.0.1:8080/effects", err, sizeof err), 0, "%s",
               err);
  cr_assert_eq(
      weir_sink_spec_check("http://h:1/p?a=b&retention=24h&idempotency=off", err, sizeof err), 0,
      "%s", err);
  cr_assert_eq(weir_sink_spec_check("http://h:1/p?retention=250ms", err, sizeof err), 0);
  cr_assert_eq(weir_sink_spec_check("http://h:1/p?retention=5", err, sizeof err), WEIR_ESINK);
  cr_assert(strstr(err, "retention"), "%s", err);
  cr_assert_eq(weir_sink_spec_check("http://h:1/p?retention=0s", err, sizeof err), WEIR_ESINK);
  cr_assert_eq(weir_sink_spec_check("http://h:1/p?idempotency=maybe", err, sizeof err), WEIR_ESINK);
  cr_assert(strstr(err, "idempotency"), "%s", err);
  cr_assert_eq(weir_sink_spec_check("http://h:1/p?inflight=1", err, sizeof err), 0, "%s", err);
  cr_assert_eq(weir_sink_spec_check("http://h:1/p?a=b&inflight=1024&retention=1h", err, sizeof err),
               0, "%s", err);
  const char *bad_inflight[] = {"0", "1025", "x", "", "4k", "-2", "18446744073709551617"};
  for (size_t i = 0; i < sizeof bad_inflight / sizeof bad_inflight[0]; i++) {
    char spec[96];
    snprintf(spec, sizeof spec, "http://h:1/p?inflight=%s", bad_inflight[i]);
    cr_assert_eq(weir_sink_spec_check(spec, err, sizeof err), WEIR_ESINK, "%s", spec);
    cr_assert(strstr(err, "inflight must be a whole number from 1 to 1024"), "%s", err);
  }
  const char *good_buffer[] = {"4096", "64k", "64M", "1G", "1g"};
  for (size_t i = 0; i < sizeof good_buffer / sizeof good_buffer[0]; i++) {
    char spec[96];
    snprintf(spec, sizeof spec, "http://h:1/p?buffer=%s&inflight=8", good_buffer[i]);
    cr_assert_eq(weir_sink_spec_check(spec, err, sizeof err), 0, "%s: %s", spec, err);
  }
  const char *bad_buffer[] = {"", "4095", "x", "64KB", "-1", "1T", "99999999999999999999"};
  for (size_t i = 0; i < sizeof bad_buffer / sizeof bad_buffer[0]; i++) {
    char spec[96];
    snprintf(spec, sizeof spec, "http://h:1/p?buffer=%s", bad_buffer[i]);
    cr_assert_eq(weir_sink_spec_check(spec, err, sizeof err), WEIR_ESINK, "%s", spec);
    cr_assert(strstr(err, "buffer must be a size of at least 4096 bytes"), "%s", err);
  }
  cr_assert_eq(weir_sink_spec_check("http://", err, sizeof err), WEIR_ESINK);
  cr_assert(strstr(err, "host"), "%s", err);
  /* https goes through libcurl like http; credentials come from a file or
   * the environment, never from the URL, and never into a message. */
  cr_assert_eq(weir_sink_spec_check("https://h:443/p?cacert=/etc/ca.pem", err, sizeof err), 0, "%s",
               err);
  cr_assert_eq(weir_sink_spec_check("https://", err, sizeof err), WEIR_ESINK);
  cr_assert(strstr(err, "host"), "%s", err);
  cr_assert_eq(weir_sink_spec_check("http://u:secret@h:1/p", err, sizeof err), WEIR_ESINK);
  cr_assert(strstr(err, "auth_file=PATH or auth_env=NAME") && !strstr(err, "secret"), "%s", err);
  setenv("WEIR_TEST_AUTH", "Bearer s3cret-value\n", 1);
  cr_assert_eq(weir_sink_spec_check("http://h:1/p?auth_env=WEIR_TEST_AUTH", err, sizeof err), 0,
               "%s", err);
  unsetenv("WEIR_TEST_AUTH");
  cr_assert_eq(weir_sink_spec_check("http://h:1/p?auth_env=WEIR_TEST_AUTH", err, sizeof err),
               WEIR_ESINK);
  cr_assert(strstr(err, "no variable WEIR_TEST_AUTH"), "%s", err);
  cr_assert_eq(weir_sink_spec_check("http://h:1/p?auth_file=/nonexistent/auth", err, sizeof err),
               WEIR_ESINK);
  cr_assert(strstr(err, "cannot read '/nonexistent/auth'"), "%s", err);
  setenv("WEIR_TEST_AUTH", "Bearer a\nb", 1); /* two lines: header injection */
  cr_assert_eq(weir_sink_spec_check("http://h:1/p?auth_env=WEIR_TEST_AUTH", err, sizeof err),
               WEIR_ESINK);
  cr_assert(strstr(err, "not one line") && !strstr(err, "Bearer a"), "%s", err);
  unsetenv("WEIR_TEST_AUTH");
  cr_assert_eq(th_leak_check(), 0);
}

/* The counter job's operation id content: "<key>.<count>". */
Test(spec, opid_key_count) {
  uint8_t b[8];
  weir_record r = u64_rec(42, 7, b);
  char buf[32];
  cr_assert_eq(weir_opid_key_count(&r, buf, sizeof buf), 4);
  cr_assert_str_eq(buf, "42.7");
  cr_assert_eq(weir_opid_key_count(&r, NULL, 0), 4);
  cr_assert_eq(th_leak_check(), 0);
}

Test(spec, sink_to_with_a_bad_spec_is_a_build_error) {
  weir_job *job = new_job();
  weir_gen_opts g = {.records = 3};
  cr_assert_eq(weir_sink_to(weir_gen(job, "gen", &g, 1), "out", "bogus", NULL, 1), WEIR_ESINK);
  cr_assert_eq(run1(job), WEIR_ESINK);
  cr_assert(strstr(weir_job_error(job), "bogus"), "%s", weir_job_error(job));
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}

static int nd_open(weir_ctx *ctx, void **dest) {
  (void)ctx;
  *dest = NULL;
  return 0;
}
static int nd_write(weir_ctx *ctx, void *dest, const weir_record *r) {
  (void)ctx, (void)dest, (void)r;
  return 0;
}
static int nd_pre_commit(weir_ctx *ctx, void *dest, uint64_t epoch, weir_sink_buf *h) {
  (void)ctx, (void)dest, (void)epoch, (void)h;
  return 1;
}
static int nd_commit(void *dest, weir_sink_commit *c) {
  (void)dest, (void)c;
  return 0;
}

Test(spec, destination_without_a_size_is_a_build_error) {
  static const weir_sink_dest_vt nosize = {.name = "nosize",
                                           .open = nd_open,
                                           .write = nd_write,
                                           .pre_commit = nd_pre_commit,
                                           .commit = nd_commit};
  weir_job *job = new_job();
  weir_gen_opts g = {.records = 3};
  cr_assert_eq(weir_sink_twophase(weir_gen(job, "gen", &g, 1), "out", &nosize, NULL, 1), WEIR_EABI);
  cr_assert(strstr(weir_job_error(job), "'out'") && strstr(weir_job_error(job), ".size"), "%s",
            weir_job_error(job));
  cr_assert_eq(run1(job), WEIR_EABI);
  weir_job_destroy(job);

  weir_sink_dest_vt sized = nosize;
  sized.size = sizeof sized;
  job = new_job();
  cr_assert_eq(weir_sink_twophase(weir_gen(job, "gen", &g, 1), "out", &sized, NULL, 1), 0);
  cr_assert_eq(run1(job), 0, "%s", weir_job_error(job));
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}

/* ------------------------------------------------------------------------ */
/* null                                                                     */

Test(null_sink, counts_everything) {
  weir_job *job = new_job();
  weir_gen_opts g = {.records = 10000, .keys = 10};
  cr_assert_eq(weir_sink_to(weir_gen(job, "gen", &g, 2), "out", "null", NULL, 2), 0);
  cr_assert_eq(run1(job), 0, "%s", weir_job_error(job));
  uint64_t in = 0, out = 0;
  cr_assert_eq(weir_job_operator_counts(job, "out", &in, &out), 0);
  cr_assert_eq(in, 10000);
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}

/* ------------------------------------------------------------------------ */
/* print                                                                    */

/* Runs gen(records) -> print with stdout redirected to a file; returns the
 * text printed. */
static char *print_job(uint64_t records, weir_format_fn fmt) {
  char *dir = th_tmpdir();
  char path[512];
  snprintf(path, sizeof path, "%s/stdout.txt", dir);
  fflush(stdout);
  int saved = dup(1);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  cr_assert(saved >= 0 && fd >= 0);
  dup2(fd, 1);
  close(fd);
  weir_job *job = new_job();
  weir_gen_opts g = {.records = records, .keys = 1000};
  int rc = weir_sink_to(weir_gen(job, "gen", &g, 1), "out", "print", fmt, 1);
  if (rc == 0) rc = run1(job);
  fflush(stdout);
  dup2(saved, 1);
  close(saved);
  cr_assert_eq(rc, 0, "%s", weir_job_error(job));
  weir_job_destroy(job);
  char *text = th_read_file(path, NULL);
  cr_assert_not_null(text);
  th_rmrf(dir);
  free(dir);
  return text;
}

Test(print_sink, prints_one_line_per_record) {
  char *text = print_job(3, NULL);
  cr_assert_str_eq(text, "0\n1\n2\n");
  free(text);
  cr_assert_eq(th_leak_check(), 0);
}

Test(print_sink, many_records_in_order) {
  uint64_t n = 50000; /* several 64 KiB flushes */
  char *text = print_job(n, NULL);
  char *p = text;
  for (uint64_t i = 0; i < n; i++) {
    char *end;
    unsigned long long k = strtoull(p, &end, 10);
    cr_assert_eq(k, i % 1000);
    cr_assert_eq(*end, '\n');
    p = end + 1;
  }
  cr_assert_eq(*p, '\0');
  free(text);
  cr_assert_eq(th_leak_check(), 0);
}

/* ------------------------------------------------------------------------ */
/* file                                                                     */

static int ts_payload(void *user, const weir_record *in, weir_record *out) {
  uint8_t *b = user;
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)in->ts >> (8 * i));
  out->payload = b;
  out->len = 8;
  return 0;
}

Test(file_sink, writes_exact_lines_per_subtask) {
  char *dir = th_tmpdir();
  char spec[512], path[600];
  snprintf(spec, sizeof spec, "file:%s/a/b", dir); /* parents are created */
  weir_job *job = new_job();
  uint8_t buf[8];
  weir_gen_opts g = {.records = 1000, .keys = 7};
  weir_stream *s = weir_gen(job, "gen", &g, 2);
  s = weir_map(weir_rebalance(s), "v", ts_payload, buf, 1); /* one subtask: one buffer */
  cr_assert_eq(weir_sink_to(s, "out", spec, NULL, 1), 0, "%s", weir_job_error(job));
  cr_assert_eq(run1(job), 0, "%s", weir_job_error(job));
  weir_job_destroy(job);

  snprintf(path, sizeof path, "%s/a/b/out-0.txt", dir);
  size_t len;
  char *text = th_read_file(path, &len);
  cr_assert_not_null(text, "%s missing", path);
  /* One line per record "<i % 7> <i>"; the order between gen subtasks
   * varies, so compare as a set. */
  char *seen = calloc(1000, 1);
  size_t lines = 0;
  for (char *p = text; *p; lines++) {
    char *end;
    unsigned long long k = strtoull(p, &end, 10);
    cr_assert_eq(*end, ' ');
    unsigned long long v = strtoull(end + 1, &end, 10);
    cr_assert_eq(*end, '\n');
    cr_assert_lt(v, 1000);
    cr_assert_eq(k, v % 7);
    cr_assert_eq(seen[v], 0);
    seen[v] = 1;
    p = end + 1;
  }
  cr_assert_eq(lines, 1000);
  free(seen);
  free(text);
  snprintf(path, sizeof path, "%s/a/b/out-0.txt.pending", dir);
  cr_assert(!exists(path), "a .pending file remains");
  th_rmrf(dir);
  free(dir);
  cr_assert_eq(th_leak_check(), 0);
}

Test(file_sink, one_file_per_subtask_in_order) {
  char *dir = th_tmpdir();
  char spec[512], path[600];
  snprintf(spec, sizeof spec, "file:%s", dir);
  weir_job *job = new_job();
  weir_gen_opts g = {.records = 100, .keys = 1000};
  cr_assert_eq(weir_sink_to(weir_gen(job, "gen", &g, 2), "out", spec, NULL, 2), 0);
  cr_assert_eq(run1(job), 0, "%s", weir_job_error(job));
  weir_job_destroy(job);
  for (int s = 0; s < 2; s++) {
    char want[1024] = "";
    size_t o = 0;
    for (int i = s; i < 100; i += 2) o += (size_t)snprintf(want + o, sizeof want - o, "%d\n", i);
    snprintf(path, sizeof path, "%s/out-%d.txt", dir, s);
    char *text = th_read_file(path, NULL);
    cr_assert_not_null(text, "%s missing", path);
    cr_assert_str_eq(text, want);
    free(text);
    snprintf(path, sizeof path, "%s/out-%d.txt.pending", dir, s);
    cr_assert(!exists(path));
  }
  th_rmrf(dir);
  free(dir);
  cr_assert_eq(th_leak_check(), 0);
}

/* A formatter with lines of 300 bytes (over the 256-byte first try of a
 * stack buffer) and, for key 3, 3 MB (over the file sink's whole buffer). */
static size_t long_format(const weir_record *r, char *buf, size_t cap) {
  size_t n = r->key == 3 ? 3000000 : 300;
  if (n >= cap) return n;
  memset(buf, 'a' + (int)(r->key % 26), n);
  buf[n] = '\0';
  return n;
}

Test(file_sink, long_lines_from_a_custom_formatter) {
  char *dir = th_tmpdir();
  char spec[512], path[600];
  snprintf(spec, sizeof spec, "file:%s", dir);
  weir_job *job = new_job();
  weir_gen_opts g = {.records = 5000, .keys = 5000};
  cr_assert_eq(weir_sink_to(weir_gen(job, "gen", &g, 1), "out", spec, long_format, 1), 0);
  cr_assert_eq(run1(job), 0, "%s", weir_job_error(job));
  weir_job_destroy(job);
  snprintf(path, sizeof path, "%s/out-0.txt", dir);
  size_t len;
  char *text = th_read_file(path, &len);
  cr_assert_not_null(text);
  cr_assert_eq(len, 4999 * 301 + 3000001);
  size_t o = 0;
  for (uint64_t k = 0; k < 5000; k++) {
    size_t n = k == 3 ? 3000000 : 300;
    cr_assert_eq(text[o], 'a' + (int)(k % 26), "line %llu", (unsigned long long)k);
    cr_assert_eq(text[o + n - 1], 'a' + (int)(k % 26));
    cr_assert_eq(text[o + n], '\n');
    o += n + 1;
  }
  free(text);
  th_rmrf(dir);
  free(dir);
  cr_assert_eq(th_leak_check(), 0);
}

static int fail_at_50(void *user, const weir_record *in, weir_record *out) {
  return in->ts == 50 ? WEIR_EINVAL : 0;
}

Test(file_sink, failed_job_leaves_the_pending_file) {
  char *dir = th_tmpdir();
  char spec[512], path[600];
  snprintf(spec, sizeof spec, "file:%s", dir);
  weir_job *job = new_job();
  weir_gen_opts g = {.records = 100};
  weir_stream *s = weir_map(weir_gen(job, "gen", &g, 1), "boom", fail_at_50, NULL, 1);
  cr_assert_eq(weir_sink_to(s, "out", spec, NULL, 1), 0);
  cr_assert_eq(run1(job), WEIR_EINVAL);
  weir_job_destroy(job);
  snprintf(path, sizeof path, "%s/out-0.txt", dir);
  cr_assert(!exists(path), "the final file must not appear after an error");
  snprintf(path, sizeof path, "%s/out-0.txt.pending", dir);
  cr_assert(exists(path), "the .pending file stays after an error");
  th_rmrf(dir);
  free(dir);
  cr_assert_eq(th_leak_check(), 0);
}

Test(file_sink, unwritable_directory_fails_in_open) {
  char *dir = th_tmpdir();
  char spec[600], path[512];
  snprintf(path, sizeof path, "%s/plainfile", dir);
  cr_assert_eq(th_write_file(path, "x", 1), 0);
  snprintf(spec, sizeof spec, "file:%s/sub", path); /* a file as a parent */
  weir_job *job = new_job();
  weir_gen_opts g = {.records = 10};
  cr_assert_eq(weir_sink_to(weir_gen(job, "gen", &g, 1), "out", spec, NULL, 1), 0);
  int rc = run1(job);
  cr_assert_lt(rc, 0);
  cr_assert(strstr(weir_job_error(job), path), "%s", weir_job_error(job));
  weir_job_destroy(job);
  th_rmrf(dir);
  free(dir);
  cr_assert_eq(th_leak_check(), 0);
}

/* ---- the two-phase sink's state ------------------------------------------ */

#include "weir/sink.h"

/* One record of a two-phase sink's state: v1 ("WSK1", no origins) or the
 * current form, for checkpoint id, every counter = c, pending epochs e[0..n)
 * with handles of hlen bytes. */
static void state_record(weir_sink_buf *b, int v1, uint64_t id, uint64_t c, const uint64_t *e,
                         uint32_t n, size_t hlen) {
  weir_sink_buf_put(b, v1 ? "WSK1" : "WSK2", 4);
  weir_sink_buf_u64(b, id);
  for (int k = 0; k < WEIR_SINK_NCOUNTERS; k++) weir_sink_buf_u64(b, c);
  weir_sink_buf_u32(b, n);
  for (uint32_t i = 0; i < n; i++) {
    weir_sink_buf_u64(b, e[i]);
    weir_sink_buf_u64(b, 1000 + e[i]);
    if (!v1) weir_sink_buf_u32(b, 7);
    weir_sink_buf_u64(b, hlen);
    for (size_t k = 0; k < hlen; k++) weir_sink_buf_put(b, "h", 1);
  }
}

/* A restore with another parallelism appends the records of the subtasks
 * a subtask takes over: they decode as one state (counters added up,
 * every pending epoch), the subtask's own first record possibly in the old
 * form; anything else is refused. */
Test(sink_state, appended_records_decode_as_one) {
  weir_sink_buf b = {0};
  uint64_t e1[] = {5, 9}, e2[] = {9};
  state_record(&b, 1, 9, 3, e1, 2, 10);
  size_t end1 = b.len;
  state_record(&b, 0, 9, 4, e2, 1, 8);
  size_t end2 = b.len;
  state_record(&b, 0, 9, 5, NULL, 0, 0);
  weir_sink_state_info info;
  cr_assert_eq(weir_sink_state_decode(b.data, b.len, &info), 0);
  cr_assert_eq(info.checkpoint, 9);
  for (int k = 0; k < WEIR_SINK_NCOUNTERS; k++) cr_assert_eq(info.counters[k], 12);
  cr_assert_eq(info.npending, 3);
  cr_assert_eq(info.pending_epochs[0], 5);
  cr_assert_eq(info.pending_epochs[1], 9);
  cr_assert_eq(info.pending_epochs[2], 9);
  cr_assert_eq(info.pending_bytes, 28);
  /* Cut inside a record: corrupt (the store's envelope already refuses a
   * truncated blob; a cut between records is a state of fewer subtasks). */
  for (size_t cut = 1; cut < b.len; cut++)
    cr_assert_eq(weir_sink_state_decode(b.data, cut, &info),
                 cut == end1 || cut == end2 ? 0
                 : cut < 4                  ? WEIR_ENOENT
                                            : WEIR_ECORRUPT,
                 "cut at %zu of %zu", cut, b.len);
  /* Records of different checkpoints, or trailing bytes: corrupt. */
  weir_sink_buf c = {0};
  state_record(&c, 0, 9, 1, e1, 2, 3);
  state_record(&c, 0, 10, 1, e2, 1, 3);
  cr_assert_eq(weir_sink_state_decode(c.data, c.len, &info), WEIR_ECORRUPT);
  weir_sink_buf_free(&c);
  state_record(&c, 0, 9, 1, e1, 2, 3);
  weir_sink_buf_put(&c, "WS", 2);
  cr_assert_eq(weir_sink_state_decode(c.data, c.len, &info), WEIR_ECORRUPT);
  weir_sink_buf_free(&c);
  cr_assert_eq(weir_sink_state_decode("XXXXYYYY", 8, &info), WEIR_ENOENT);
  /* An old record (no origins) appended after another: whose epochs they
   * are is not known, so it is refused (only a subtask's own may be old). */
  state_record(&c, 0, 9, 1, e1, 2, 3);
  state_record(&c, 1, 9, 1, e2, 1, 3);
  cr_assert_eq(weir_sink_state_decode(c.data, c.len, &info), WEIR_EPLAN);
  weir_sink_buf_free(&c);
  weir_sink_buf_free(&b);
}
