/* test_operators.c: unit tests of the built-in sources and operators
 * (operators/gen.c, file_source.c, transform.c, keyed.c).
 *
 * Each test builds a tiny job with the public API, ends it in a collecting
 * sink (a weir_operator_vt that copies every record into a mutex-protected
 * array in its arg), runs it with one worker and checks the exact output.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "weir/weir.h"

/* ------------------------------------------------------------------------ */
/* The collecting sink                                                      */

typedef struct rec {
  uint64_t key;
  int64_t ts;
  uint64_t id;
  uint32_t len;
  char *payload; /* NUL-terminated copy, NULL when len is 0 */
} rec;

typedef struct collector {
  pthread_mutex_t mu;
  rec *v;
  size_t n, cap;
  weir_job *stop_job; /* when set: weir_job_stop() after stop_after records */
  size_t stop_after;
} collector;

static void coll_init(collector *c) {
  memset(c, 0, sizeof *c);
  pthread_mutex_init(&c->mu, NULL);
}

static void coll_free(collector *c) {
  for (size_t i = 0; i < c->n; i++) free(c->v[i].payload);
  free(c->v);
  pthread_mutex_destroy(&c->mu);
}

static int collect_process(weir_ctx *ctx, const weir_record *r) {
  collector *c = weir_ctx_arg(ctx);
  pthread_mutex_lock(&c->mu);
  if (c->n == c->cap) {
    c->cap = c->cap ? 2 * c->cap : 64;
    c->v = realloc(c->v, c->cap * sizeof *c->v);
  }
  rec *x = &c->v[c->n++];
  x->key = r->key;
  x->ts = r->ts;
  x->id = r->id;
  x->len = r->len;
  x->payload = NULL;
  if (r->len) {
    x->payload = malloc(r->len + 1);
    memcpy(x->payload, r->payload, r->len);
    x->payload[r->len] = '\0';
  }
  if (c->stop_job && c->n == c->stop_after) weir_job_stop(c->stop_job);
  pthread_mutex_unlock(&c->mu);
  return 0;
}

static const weir_operator_vt collect_vt = {
    .size = sizeof(weir_operator_vt), .name = "collect", .process = collect_process};

static int run1(weir_job *job) {
  weir_run_opts o = {.workers = 1};
  return weir_job_run(job, &o);
}

static weir_job *new_job(void) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "test"), 0);
  return job;
}

static uint64_t u64_of(const rec *x) {
  weir_record r = {.payload = x->payload, .len = x->len};
  return weir_payload_u64(&r);
}

static int by_ts(const void *a, const void *b) {
  const rec *x = a, *y = b;
  return x->ts < y->ts ? -1 : x->ts > y->ts;
}

static int by_key(const void *a, const void *b) {
  const rec *x = a, *y = b;
  return x->key < y->key ? -1 : x->key > y->key;
}

static int by_key_value(const void *a, const void *b) {
  const rec *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  uint64_t u = u64_of(x), v = u64_of(y);
  return u < v ? -1 : u > v;
}

static int u64_cmp(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* ------------------------------------------------------------------------ */
/* gen                                                                      */

/* gen with P subtasks into one collector: every i below `records` exactly
 * once, with key i % keys, timestamp i, no payload and distinct ids. */
static void check_gen(uint64_t records, uint64_t keys, uint64_t rate, int p) {
  collector c;
  coll_init(&c);
  weir_job *job = new_job();
  weir_gen_opts g = {.records = records, .keys = keys, .rate = rate};
  weir_stream *s = weir_gen(job, "gen", &g, p);
  if (p > 1) s = weir_rebalance(s);
  cr_assert_eq(weir_sink(s, "collect", &collect_vt, &c, 1), 0);
  cr_assert_eq(run1(job), 0, "%s", weir_job_error(job));
  cr_assert_eq(c.n, records, "got %zu records, want %llu", c.n, (unsigned long long)records);
  qsort(c.v, c.n, sizeof *c.v, by_ts);
  uint64_t k = keys ? keys : 1;
  uint64_t *ids = malloc((c.n + 1) * sizeof *ids);
  for (size_t i = 0; i < c.n; i++) {
    cr_assert_eq(c.v[i].ts, (int64_t)i);
    cr_assert_eq(c.v[i].key, i % k);
    cr_assert_eq(c.v[i].len, 0);
    ids[i] = c.v[i].id;
  }
  qsort(ids, c.n, sizeof *ids, u64_cmp);
  for (size_t i = 1; i < c.n; i++) cr_assert_neq(ids[i - 1], ids[i], "duplicate id");
  free(ids);
  weir_job_destroy(job);
  coll_free(&c);
}

Test(gen, exact_records_one_subtask) {
  check_gen(10, 3, 0, 1);
  cr_assert_eq(th_leak_check(), 0);
}

Test(gen, keys_zero_is_one) {
  check_gen(5, 0, 0, 1);
  cr_assert_eq(th_leak_check(), 0);
}

Test(gen, every_record_once_with_two_and_three_subtasks) {
  check_gen(1001, 7, 0, 2);
  check_gen(10, 4, 0, 3);
  check_gen(2, 5, 0, 3); /* a subtask with nothing to emit */
  check_gen(50000, 1000, 0, 2);
  cr_assert_eq(th_leak_check(), 0);
}

Test(gen, rate_limited_delivers_everything) {
  check_gen(20, 3, 200, 2); /* ~100 ms */
  check_gen(3, 3, 20, 1);   /* one record per 50 ms */
  check_gen(2000, 10, 100000, 2);
  cr_assert_eq(th_leak_check(), 0);
}

Test(gen, unbounded_stops_when_asked) {
  collector c;
  coll_init(&c);
  weir_job *job = new_job();
  c.stop_job = job;
  c.stop_after = 5000;
  weir_gen_opts g = {.records = 0, .keys = 10};
  weir_stream *s = weir_gen(job, "gen", &g, 1);
  cr_assert_eq(weir_sink(s, "collect", &collect_vt, &c, 1), 0);
  int rc = run1(job);
  cr_assert(rc == 0 || rc == WEIR_ECANCELED, "rc %d: %s", rc, weir_job_error(job));
  cr_assert_geq(c.n, 5000);
  qsort(c.v, c.n, sizeof *c.v, by_ts);
  for (size_t i = 0; i < c.n; i++) cr_assert_eq(c.v[i].ts, (int64_t)i);
  weir_job_destroy(job);
  coll_free(&c);
  cr_assert_eq(th_leak_check(), 0);
}

Test(gen, null_opts_is_a_build_error) {
  weir_job *job = new_job();
  cr_assert_null(weir_gen(job, "gen", NULL, 1));
  cr_assert_eq(run1(job), WEIR_EINVAL);
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}

/* ------------------------------------------------------------------------ */
/* file source                                                              */

typedef struct fixture {
  char *dir;
  char path[512];
} fixture;

static void fixture_file(fixture *f, const char *data, size_t len) {
  f->dir = th_tmpdir();
  cr_assert_not_null(f->dir);
  snprintf(f->path, sizeof f->path, "%s/in.txt", f->dir);
  cr_assert_eq(th_write_file(f->path, data, len), 0);
}

static void fixture_free(fixture *f) {
  th_rmrf(f->dir);
  free(f->dir);
}

/* Runs path through a file source with P subtasks into c; returns run's rc. */
static int run_file(weir_job *job, collector *c, const char *path, const weir_file_source_opts *o,
                    int p) {
  weir_stream *s = weir_file_source(job, "lines", path, o, p);
  if (p > 1) s = weir_rebalance(s);
  cr_assert_eq(weir_sink(s, "collect", &collect_vt, c, 1), 0, "%s", weir_job_error(job));
  return run1(job);
}

Test(file_source, lines_offsets_and_final_line_without_newline) {
  fixture f;
  const char data[] = "a\nbb\n\nccc";
  fixture_file(&f, data, sizeof data - 1);
  collector c;
  coll_init(&c);
  weir_job *job = new_job();
  cr_assert_eq(run_file(job, &c, f.path, NULL, 1), 0, "%s", weir_job_error(job));
  cr_assert_eq(c.n, 4);
  qsort(c.v, c.n, sizeof *c.v, by_key);
  static const struct {
    uint64_t off;
    const char *line;
  } want[] = {{0, "a"}, {2, "bb"}, {5, ""}, {6, "ccc"}};
  for (size_t i = 0; i < 4; i++) {
    cr_assert_eq(c.v[i].key, want[i].off);
    cr_assert_eq(c.v[i].len, strlen(want[i].line));
    if (c.v[i].len) cr_assert_str_eq(c.v[i].payload, want[i].line);
  }
  cr_assert_neq(c.v[0].id, c.v[1].id);
  weir_job_destroy(job);
  coll_free(&c);
  fixture_free(&f);
  cr_assert_eq(th_leak_check(), 0);
}

Test(file_source, empty_file_ends_at_once) {
  fixture f;
  fixture_file(&f, "", 0);
  for (int p = 1; p <= 3; p++) {
    collector c;
    coll_init(&c);
    weir_job *job = new_job();
    cr_assert_eq(run_file(job, &c, f.path, NULL, p), 0, "%s", weir_job_error(job));
    cr_assert_eq(c.n, 0);
    weir_job_destroy(job);
    coll_free(&c);
  }
  fixture_free(&f);
  cr_assert_eq(th_leak_check(), 0);
}

/* A file of n lines of varied lengths (empty ones too); *offs gets each
 * line's offset. Returns the malloc'd text. */
static char *make_lines(size_t n, size_t *len, uint64_t **offs, int final_newline) {
  size_t cap = n * 64 + 16, o = 0;
  char *t = malloc(cap);
  *offs = malloc(n * sizeof **offs);
  for (size_t i = 0; i < n; i++) {
    (*offs)[i] = o;
    size_t w = (i * 7919) % 37; /* 0 .. 36 bytes */
    for (size_t k = 0; k < w; k++) t[o++] = (char)('a' + (i + k) % 26);
    o += (size_t)snprintf(t + o, cap - o, "%zu", i);
    if (i % 11 == 5) o -= (size_t)snprintf(NULL, 0, "%zu", i) + w; /* an empty line */
    if (final_newline || i + 1 < n) t[o++] = '\n';
  }
  *len = o;
  return t;
}

Test(file_source, splitting_gives_every_line_once) {
  for (int nl = 0; nl <= 1; nl++) {
    size_t len, n = 2000;
    uint64_t *offs;
    char *text = make_lines(n, &len, &offs, nl);
    fixture f;
    fixture_file(&f, text, len);
    for (int p = 1; p <= 8; p++) {
      collector c;
      coll_init(&c);
      weir_job *job = new_job();
      cr_assert_eq(run_file(job, &c, f.path, NULL, p), 0, "P=%d: %s", p, weir_job_error(job));
      cr_assert_eq(c.n, n, "P=%d: %zu lines, want %zu", p, c.n, n);
      qsort(c.v, c.n, sizeof *c.v, by_key);
      for (size_t i = 0; i < n; i++) {
        cr_assert_eq(c.v[i].key, offs[i], "P=%d line %zu", p, i);
        const char *line = text + offs[i];
        const char *end = memchr(line, '\n', len - offs[i]);
        size_t ll = end ? (size_t)(end - line) : len - offs[i];
        cr_assert_eq(c.v[i].len, ll, "P=%d line %zu", p, i);
        if (ll) cr_assert_eq(memcmp(c.v[i].payload, line, ll), 0);
      }
      weir_job_destroy(job);
      coll_free(&c);
    }
    fixture_free(&f);
    free(text);
    free(offs);
  }
  cr_assert_eq(th_leak_check(), 0);
}

Test(file_source, long_lines_across_reads) {
  /* Lines longer than the read chunk (128 KiB) but within max_line. */
  size_t n = 5, each = 300000, len = n * (each + 1);
  char *text = malloc(len);
  for (size_t i = 0; i < n; i++) {
    memset(text + i * (each + 1), 'a' + (int)i, each);
    text[i * (each + 1) + each] = '\n';
  }
  fixture f;
  fixture_file(&f, text, len);
  for (int p = 1; p <= 3; p++) {
    collector c;
    coll_init(&c);
    weir_job *job = new_job();
    cr_assert_eq(run_file(job, &c, f.path, NULL, p), 0, "%s", weir_job_error(job));
    cr_assert_eq(c.n, n);
    qsort(c.v, c.n, sizeof *c.v, by_key);
    for (size_t i = 0; i < n; i++) {
      cr_assert_eq(c.v[i].key, i * (each + 1));
      cr_assert_eq(c.v[i].len, each);
      cr_assert_eq(c.v[i].payload[0], 'a' + (int)i);
      cr_assert_eq(c.v[i].payload[each - 1], 'a' + (int)i);
    }
    weir_job_destroy(job);
    coll_free(&c);
  }
  fixture_free(&f);
  free(text);
  cr_assert_eq(th_leak_check(), 0);
}

Test(file_source, over_long_line_stops_the_job_naming_the_offset) {
  fixture f;
  const char data[] = "short\n0123456789abcdefghij\nok\n";
  fixture_file(&f, data, sizeof data - 1);
  collector c;
  coll_init(&c);
  weir_job *job = new_job();
  weir_file_source_opts o = {.max_line = 10};
  cr_assert_eq(run_file(job, &c, f.path, &o, 1), WEIR_EBADREC);
  const char *e = weir_job_error(job);
  cr_assert(strstr(e, "byte offset 6"), "error: %s", e);
  cr_assert(strstr(e, f.path), "error: %s", e);
  weir_job_destroy(job);
  coll_free(&c);
  fixture_free(&f);
  cr_assert_eq(th_leak_check(), 0);
}

Test(file_source, nul_byte_stops_the_job) {
  fixture f;
  const char data[] = "ab\nc\0d\n";
  fixture_file(&f, data, sizeof data - 1);
  collector c;
  coll_init(&c);
  weir_job *job = new_job();
  cr_assert_eq(run_file(job, &c, f.path, NULL, 1), WEIR_EBADREC);
  cr_assert(strstr(weir_job_error(job), "byte offset 3"), "%s", weir_job_error(job));
  weir_job_destroy(job);
  coll_free(&c);
  fixture_free(&f);
  cr_assert_eq(th_leak_check(), 0);
}

Test(file_source, skip_bad_counts_and_writes_dead_letters) {
  /* A huge over-long line (far beyond the buffer), a short over-long one
   * with a tab and a backslash, a NUL line, and good lines around them. */
  size_t huge = 1000000;
  size_t cap = huge + 256;
  char *data = malloc(cap);
  size_t o = 0;
  o += (size_t)snprintf(data + o, cap - o, "good1\n");
  size_t off_huge = o;
  memset(data + o, 'x', huge);
  o += huge;
  data[o++] = '\n';
  size_t off_tab = o;
  o += (size_t)snprintf(data + o, cap - o, "t\\ab\tcdefghijklmnop\n");
  size_t off_nul = o;
  memcpy(data + o, "n\0l\n", 4);
  o += 4;
  size_t off_good2 = o;
  o += (size_t)snprintf(data + o, cap - o, "good2");
  fixture f;
  fixture_file(&f, data, o);
  char dl[600], summary[600];
  snprintf(dl, sizeof dl, "%s/dead.txt", f.dir);
  snprintf(summary, sizeof summary, "%s/summary.json", f.dir);

  collector c;
  coll_init(&c);
  weir_job *job = new_job();
  weir_file_source_opts opt = {.max_line = 12, .skip_bad = 1, .dead_letter_path = dl};
  cr_assert_eq(run_file(job, &c, f.path, &opt, 1), 0, "%s", weir_job_error(job));
  cr_assert_eq(c.n, 2);
  qsort(c.v, c.n, sizeof *c.v, by_key);
  cr_assert_str_eq(c.v[0].payload, "good1");
  cr_assert_eq(c.v[1].key, off_good2);
  cr_assert_str_eq(c.v[1].payload, "good2");

  char want[1024];
  char xs[201];
  memset(xs, 'x', 200);
  xs[200] = '\0';
  snprintf(want, sizeof want, "%zu\t%s\n%zu\tt\\\\ab\\tcdefghijklmnop\n%zu\tn\\x00l\n", off_huge,
           xs, off_tab, off_nul);
  char *got = th_read_file(dl, NULL);
  cr_assert_not_null(got);
  cr_assert_str_eq(got, want);
  free(got);

  cr_assert_eq(weir_job_write_summary(job, summary), 0);
  char *js = th_read_file(summary, NULL);
  cr_assert_not_null(js);
  cr_assert(strstr(js, "bad_records"), "summary: %s", js);
  free(js);
  weir_job_destroy(job);
  coll_free(&c);
  fixture_free(&f);
  free(data);
  cr_assert_eq(th_leak_check(), 0);
}

Test(file_source, missing_file_fails_naming_the_path) {
  char *dir = th_tmpdir();
  char path[512];
  snprintf(path, sizeof path, "%s/no-such-file.txt", dir);
  collector c;
  coll_init(&c);
  weir_job *job = new_job();
  cr_assert_eq(run_file(job, &c, path, NULL, 2), WEIR_ENOENT);
  cr_assert(strstr(weir_job_error(job), path), "%s", weir_job_error(job));
  weir_job_destroy(job);
  coll_free(&c);
  th_rmrf(dir);
  free(dir);
  cr_assert_eq(th_leak_check(), 0);
}

/* ------------------------------------------------------------------------ */
/* map, filter, flat_map                                                    */

/* Doubles the key; payload = the u64 key + 100 (in the per-subtask buffer
 * `user`, valid until the next call). */
static int double_key(void *user, const weir_record *in, weir_record *out) {
  uint8_t *b = user;
  uint64_t v = in->key + 100;
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
  out->key = in->key * 2;
  out->payload = b;
  out->len = 8;
  return 0;
}

Test(transform, map) {
  uint8_t buf[8];
  collector c;
  coll_init(&c);
  weir_job *job = new_job();
  weir_gen_opts g = {.records = 20, .keys = 5};
  weir_stream *s = weir_map(weir_gen(job, "gen", &g, 1), "double", double_key, buf, 1);
  cr_assert_eq(weir_sink(s, "collect", &collect_vt, &c, 1), 0);
  cr_assert_eq(run1(job), 0, "%s", weir_job_error(job));
  cr_assert_eq(c.n, 20);
  qsort(c.v, c.n, sizeof *c.v, by_ts);
  for (size_t i = 0; i < c.n; i++) {
    cr_assert_eq(c.v[i].ts, (int64_t)i, "map keeps the timestamp");
    cr_assert_eq(c.v[i].key, (i % 5) * 2);
    cr_assert_eq(u64_of(&c.v[i]), i % 5 + 100);
  }
  weir_job_destroy(job);
  coll_free(&c);
  cr_assert_eq(th_leak_check(), 0);
}

static int fails_at_7(void *user, const weir_record *in, weir_record *out) {
  return in->ts == 7 ? WEIR_EINVAL : 0;
}

Test(transform, map_error_stops_the_job) {
  collector c;
  coll_init(&c);
  weir_job *job = new_job();
  weir_gen_opts g = {.records = 20};
  weir_stream *s = weir_map(weir_gen(job, "gen", &g, 1), "boom", fails_at_7, NULL, 1);
  cr_assert_eq(weir_sink(s, "collect", &collect_vt, &c, 1), 0);
  cr_assert_eq(run1(job), WEIR_EINVAL);
  cr_assert(strstr(weir_job_error(job), "boom"), "%s", weir_job_error(job));
  weir_job_destroy(job);
  coll_free(&c);
  cr_assert_eq(th_leak_check(), 0);
}

static int keep_even(void *user, const weir_record *in) {
  return in->ts % 2 == 0;
}

Test(transform, filter_passes_kept_records_unchanged) {
  collector all, kept;
  coll_init(&all);
  coll_init(&kept);
  weir_gen_opts g = {.records = 30, .keys = 4};
  weir_job *job = new_job();
  cr_assert_eq(weir_sink(weir_gen(job, "gen", &g, 1), "all", &collect_vt, &all, 1), 0);
  cr_assert_eq(run1(job), 0, "%s", weir_job_error(job));
  weir_job_destroy(job);
  job = new_job();
  weir_stream *s = weir_filter(weir_gen(job, "gen", &g, 1), "even", keep_even, NULL, 1);
  cr_assert_eq(weir_sink(s, "collect", &collect_vt, &kept, 1), 0);
  cr_assert_eq(run1(job), 0, "%s", weir_job_error(job));
  cr_assert_eq(kept.n, 15);
  qsort(all.v, all.n, sizeof *all.v, by_ts);
  qsort(kept.v, kept.n, sizeof *kept.v, by_ts);
  for (size_t i = 0; i < kept.n; i++) {
    const rec *x = &kept.v[i], *y = &all.v[2 * i];
    cr_assert_eq(x->ts, (int64_t)(2 * i));
    cr_assert_eq(x->key, y->key);
    cr_assert_eq(x->id, y->id, "a kept record keeps its id");
  }
  weir_job_destroy(job);
  coll_free(&all);
  coll_free(&kept);
  cr_assert_eq(th_leak_check(), 0);
}

/* Emits record i (key k) k times, as (k, j) for j = 0 .. k-1. */
static int repeat_key(weir_ctx *ctx, void *user, const weir_record *in) {
  for (uint64_t j = 0; j < in->key; j++) {
    int rc = weir_emit_u64(ctx, in->key, j);
    if (rc < 0) return rc;
  }
  return 0;
}

Test(transform, flat_map) {
  collector c;
  coll_init(&c);
  weir_job *job = new_job();
  weir_gen_opts g = {.records = 8, .keys = 4}; /* keys 0 1 2 3 0 1 2 3 */
  weir_stream *s = weir_flat_map(weir_gen(job, "gen", &g, 1), "repeat", repeat_key, NULL, 1);
  cr_assert_eq(weir_sink(s, "collect", &collect_vt, &c, 1), 0);
  cr_assert_eq(run1(job), 0, "%s", weir_job_error(job));
  cr_assert_eq(c.n, 2 * (0 + 1 + 2 + 3));
  qsort(c.v, c.n, sizeof *c.v, by_key_value);
  size_t i = 0;
  for (uint64_t k = 1; k < 4; k++)
    for (uint64_t j = 0; j < k; j++)
      for (int twice = 0; twice < 2; twice++, i++) {
        cr_assert_eq(c.v[i].key, k);
        cr_assert_eq(u64_of(&c.v[i]), j);
      }
  weir_job_destroy(job);
  coll_free(&c);
  cr_assert_eq(th_leak_check(), 0);
}

Test(transform, null_function_is_a_build_error) {
  weir_job *job = new_job();
  weir_gen_opts g = {.records = 1};
  cr_assert_null(weir_map(weir_gen(job, "gen", &g, 1), "m", NULL, NULL, 1));
  cr_assert_eq(run1(job), WEIR_EINVAL);
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}

/* ------------------------------------------------------------------------ */
/* count, reduce                                                            */

/* Checks that for every key k < keys the emitted values are exactly
 * first(k, 1), ..., first(k, n_k) in some order, n_k = the number of i <
 * records with i % keys == k, and value(k, j) given by fn. */
static void check_per_key(collector *c, uint64_t records, uint64_t keys,
                          uint64_t (*value)(uint64_t key, uint64_t nth, uint64_t keys)) {
  cr_assert_eq(c->n, records);
  qsort(c->v, c->n, sizeof *c->v, by_key_value);
  size_t i = 0;
  for (uint64_t k = 0; k < keys; k++) {
    uint64_t nk = records / keys + (k < records % keys);
    for (uint64_t j = 1; j <= nk; j++, i++) {
      cr_assert_eq(c->v[i].key, k);
      cr_assert_eq(u64_of(&c->v[i]), value(k, j, keys), "key %llu nth %llu: %llu",
                   (unsigned long long)k, (unsigned long long)j,
                   (unsigned long long)u64_of(&c->v[i]));
    }
  }
}

static uint64_t nth_count(uint64_t key, uint64_t nth, uint64_t keys) {
  return nth;
}

Test(keyed, count_exact_per_key) {
  for (int p = 1; p <= 2; p++) {
    collector c;
    coll_init(&c);
    weir_job *job = new_job();
    weir_gen_opts g = {.records = 10007, .keys = 13};
    weir_stream *s = weir_count(weir_key_by(weir_gen(job, "gen", &g, p)), "count", p);
    if (p > 1) s = weir_rebalance(s);
    cr_assert_eq(weir_sink(s, "collect", &collect_vt, &c, 1), 0);
    cr_assert_eq(run1(job), 0, "%s", weir_job_error(job));
    check_per_key(&c, 10007, 13, nth_count);
    weir_job_destroy(job);
    coll_free(&c);
  }
  cr_assert_eq(th_leak_check(), 0);
}

static uint64_t add_u64(void *user, uint64_t acc, uint64_t v) {
  (void)user;
  return acc + v;
}

/* count and reduce declare keyed state: on an input that is not keyed the
 * build fails, naming the operator and the remedy, before anything runs. */
Test(keyed, count_on_unkeyed_input_fails_at_build) {
  weir_job *job = new_job();
  weir_gen_opts g = {.records = 10, .keys = 3};
  weir_stream *s = weir_count(weir_gen(job, "gen", &g, 1), "count", 1);
  cr_assert_null(s);
  cr_assert_eq(weir_sink(s, "collect", &collect_vt, NULL, 1), WEIR_EPLAN);
  const char *e = weir_job_error(job);
  cr_assert(strstr(e, "operator 'count' keeps keyed state") && strstr(e, "weir_key_by"),
            "error: %s", e);
  weir_job_destroy(job);
  job = new_job();
  cr_assert_null(weir_reduce(weir_gen(job, "gen", &g, 1), "sum", add_u64, NULL, 1));
  cr_assert(strstr(weir_job_error(job), "operator 'sum' keeps keyed state"), "error: %s",
            weir_job_error(job));
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}

/* An operator that keeps keyed state without declaring it is found at its
 * first state call (WEIR_ENOTKEYED), with the operator named. */
static int undeclared_state(weir_ctx *ctx, const weir_record *r) {
  uint64_t n;
  return weir_state_add_u64(ctx, r->key, 1, &n);
}

Test(keyed, undeclared_keyed_state_fails_at_first_call) {
  static const weir_operator_vt vt = {
      .size = sizeof vt, .name = "mine", .process = undeclared_state};
  weir_job *job = new_job();
  weir_gen_opts g = {.records = 10, .keys = 3};
  weir_stream *s = weir_process(weir_gen(job, "gen", &g, 1), "mine", &vt, NULL, 1);
  cr_assert_eq(weir_sink(s, "collect", &collect_vt, NULL, 1), 0);
  cr_assert_eq(run1(job), WEIR_ENOTKEYED);
  cr_assert(strstr(weir_job_error(job), "mine"), "error: %s", weir_job_error(job));
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}

/* payload = the u64 timestamp (i). */
static int ts_payload(void *user, const weir_record *in, weir_record *out) {
  uint8_t *b = user;
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)in->ts >> (8 * i));
  out->payload = b;
  out->len = 8;
  return 0;
}

static uint64_t sum(void *user, uint64_t acc, uint64_t v) {
  (*(int *)user)++;
  return acc + v;
}

/* The nth (1-based) running sum of key k: k + (k + K) + ... (n terms). */
static uint64_t nth_sum(uint64_t k, uint64_t n, uint64_t keys) {
  return n * k + keys * n * (n - 1) / 2;
}

Test(keyed, reduce_exact_per_key) {
  for (int p = 1; p <= 2; p++) {
    uint8_t buf[8];
    int calls = 0;
    collector c;
    coll_init(&c);
    weir_job *job = new_job();
    weir_gen_opts g = {.records = 5000, .keys = 7};
    weir_stream *s = weir_gen(job, "gen", &g, p);
    if (p > 1) s = weir_rebalance(s);
    s = weir_map(s, "value", ts_payload, buf, 1); /* one subtask: one buffer */
    s = weir_reduce(weir_key_by(s), "sum", sum, &calls, 1);
    cr_assert_eq(weir_sink(s, "collect", &collect_vt, &c, 1), 0);
    cr_assert_eq(run1(job), 0, "%s", weir_job_error(job));
    /* With one gen subtask a key's values arrive in increasing i, so the
     * running sums are exact; with two the order between them varies, so
     * only the final sums are. */
    if (p == 1) {
      check_per_key(&c, 5000, 7, nth_sum);
    } else {
      cr_assert_eq(c.n, 5000);
      qsort(c.v, c.n, sizeof *c.v, by_key_value);
      for (uint64_t k = 0; k < 7; k++) {
        uint64_t nk = 5000 / 7 + (k < 5000 % 7), max = 0;
        for (size_t i = 0; i < c.n; i++)
          if (c.v[i].key == k && u64_of(&c.v[i]) > max) max = u64_of(&c.v[i]);
        cr_assert_eq(max, nth_sum(k, nk, 7));
      }
    }
    cr_assert_eq(calls, 5000 - 7, "fn is not called for a key's first value");
    weir_job_destroy(job);
    coll_free(&c);
  }
  cr_assert_eq(th_leak_check(), 0);
}
