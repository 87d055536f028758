/* store_helpers.c: the helpers of the store's tests (store_helpers.h). */
#include "store_helpers.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envelope.h"
#include "helpers.h"
#include "store_impl.h"
#include "base/alloc.h"

uint64_t rng_state;
uint64_t rnd(void) { /* splitmix64 */
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

char *g_dir;

void setup(void) {
  g_dir = th_tmpdir();
  cr_assert_not_null(g_dir);
  rng_state = 42;
}
void teardown(void) {
  th_rmrf(g_dir);
  free(g_dir);
}

weir_store *open_store(const weir_store_opts *o) {
  weir_store *s = NULL;
  int rc = weir_store_open(&s, g_dir, o);
  cr_assert_eq(rc, 0, "open: %s", weir_strerror(rc));
  return s;
}

char *err_of(weir_store *s) {
  static char buf[1024];
  return (char *)weir_store_error(s, buf, sizeof buf);
}

void on_done(void *user, int status, const weir_store_written *w) {
  seen *r = user;
  r->calls++;
  r->status = status;
  if (w) r->w = *w;
}

char *data_path(void) {
  static char p[512];
  snprintf(p, sizeof p, "%s/store/data.mdb", g_dir);
  return p;
}

/* A snapshot with n u64 entries (distinct keys in scrambled order) and
 * nothing else. The keys depend on n only: n is their version. */
void snap_u64(weir_subtask_snapshot *sn, const char *op, uint32_t sub, uint32_t par, uint64_t n) {
  memset(sn, 0, sizeof *sn);
  sn->op = weir_strdup(op);
  sn->subtask = sub;
  sn->parallelism = par;
  sn->n_u64 = n;
  sn->u64_keys_version = n;
  if (n) {
    sn->u64_keys = weir_malloc(n * 8);
    sn->u64_values = weir_malloc(n * 8);
  }
  for (uint64_t i = 0; i < n; i++) {
    sn->u64_keys[i] = (i + 1) * 0x9e3779b97f4a7c15ull; /* bijective: distinct */
    uint64_t r = rnd();
    sn->u64_values[i] = r >> (r & 63); /* every varint length */
  }
}

weir_subtask_snapshot copy_snap(const weir_subtask_snapshot *a) {
  weir_subtask_snapshot b = *a;
  b.op = weir_strdup(a->op);
#define DUP(f, n)                                                                                  \
  do {                                                                                             \
    if ((n) > 0) {                                                                                 \
      b.f = weir_malloc((n) * sizeof *a->f);                                                       \
      memcpy(b.f, a->f, (n) * sizeof *a->f);                                                       \
    } else {                                                                                       \
      b.f = NULL;                                                                                  \
    }                                                                                              \
  } while (0)
  DUP(u64_keys, a->n_u64);
  DUP(u64_values, a->n_u64);
  DUP(b_route, a->n_bytes);
  DUP(b_klen, a->n_bytes);
  DUP(b_vlen, a->n_bytes);
  DUP(b_data, a->b_data_len);
  DUP(pos, a->npos);
  DUP(blob, a->blob_len);
#undef DUP
  return b;
}

int cmp_pair(const void *a, const void *b) {
  uint64_t x = weir_store_u64_rank(*(const uint64_t *)a),
           y = weir_store_u64_rank(*(const uint64_t *)b);
  return x < y ? -1 : x > y;
}
static int cmp_posn(const void *a, const void *b) {
  const weir_snap_position *x = a, *y = b;
  return x->split < y->split ? -1 : x->split > y->split;
}

/* Asserts that `got` (loaded) holds exactly the state of `want` (as
 * written): u64 state as a set (loaded in hash order), byte-string entries in
 * order, positions as a set (loaded sorted by split), blob. */
void assert_same(const weir_subtask_snapshot *want, const weir_subtask_snapshot *got) {
  cr_assert_str_eq(got->op, want->op);
  cr_assert_eq(got->subtask, want->subtask);
  cr_assert_eq(got->parallelism, want->parallelism);
  cr_assert_eq(got->n_u64, want->n_u64);
  if (want->n_u64) {
    uint64_t *pairs = weir_malloc(want->n_u64 * 16);
    for (uint64_t i = 0; i < want->n_u64; i++) {
      pairs[2 * i] = want->u64_keys[i];
      pairs[2 * i + 1] = want->u64_values[i];
    }
    qsort(pairs, want->n_u64, 16, cmp_pair);
    for (uint64_t i = 0; i < want->n_u64; i++) {
      if (got->u64_keys[i] != pairs[2 * i] || got->u64_values[i] != pairs[2 * i + 1])
        cr_assert_fail("u64 entry %llu differs", (ull)i);
    }
    weir_free(pairs);
  }
  cr_assert_eq(got->n_bytes, want->n_bytes);
  cr_assert_eq(got->b_data_len, want->b_data_len);
  if (want->n_bytes) {
    cr_assert_arr_eq(got->b_route, want->b_route, want->n_bytes * 8);
    cr_assert_arr_eq(got->b_klen, want->b_klen, want->n_bytes * 4);
    cr_assert_arr_eq(got->b_vlen, want->b_vlen, want->n_bytes * 4);
  }
  if (want->b_data_len) cr_assert_arr_eq(got->b_data, want->b_data, want->b_data_len);
  cr_assert_eq(got->npos, want->npos);
  if (want->npos) {
    weir_snap_position *p = weir_malloc(want->npos * sizeof *p);
    memcpy(p, want->pos, want->npos * sizeof *p);
    qsort(p, want->npos, sizeof *p, cmp_posn);
    for (uint32_t i = 0; i < want->npos; i++) {
      cr_assert_eq(got->pos[i].split, p[i].split);
      cr_assert_eq(got->pos[i].offset, p[i].offset);
    }
    weir_free(p);
  }
  cr_assert_eq(got->blob_len, want->blob_len);
  if (want->blob_len) cr_assert_arr_eq(got->blob, want->blob, want->blob_len);
}

/* The job record's latest completed checkpoint. */
uint64_t latest_of(weir_store *s) {
  weir_store_job j;
  cr_assert_eq(weir_store_job_get(s, &j), 1);
  return j.latest;
}

/* Writes sn (ownership taken) for checkpoint id and commits it; asserts
 * both succeed. */
void write_commit(weir_store *s, uint64_t id, weir_subtask_snapshot *sn, int final) {
  seen w = {0}, c = {0};
  if (sn) cr_assert_eq(weir_store_write_subtask(s, id, sn, on_done, &w), 0);
  weir_store_commit_info ci = {.id = id,
                               .trigger_ms = 1000,
                               .duration_ms = 5,
                               .alignment_ms = 2,
                               .final = final,
                               .subtasks = sn ? 1 : 0};
  cr_assert_eq(weir_store_commit(s, &ci, on_done, &c), 0);
  weir_store_flush(s);
  if (sn) cr_assert_eq(w.status, 0, "write: %s", err_of(s));
  cr_assert_eq(c.calls, 1);
  cr_assert_eq(c.status, 0, "commit: %s", err_of(s));
}

uint64_t next_id(weir_store *s) {
  uint64_t id = 0;
  int rc = weir_store_next_id(s, &id);
  cr_assert_eq(rc, 0, "next_id: %s", err_of(s));
  return id;
}

weir_store *open_with_job(const weir_store_opts *o) {
  weir_store *s = open_store(o);
  weir_store_job j;
  cr_assert_eq(weir_store_job_begin(s, 0, &j), 0, "%s", err_of(s));
  return s;
}

/* Byte-string state: empty keys and values, binary bytes, and one entry
 * larger than a chunk. */
void add_bytes(weir_subtask_snapshot *sn, uint64_t n) {
  sn->n_bytes = n;
  sn->b_route = weir_malloc(n * 8);
  sn->b_klen = weir_malloc(n * 4);
  sn->b_vlen = weir_malloc(n * 4);
  uint64_t total = 0;
  for (uint64_t i = 0; i < n; i++) {
    sn->b_route[i] = rnd();
    sn->b_klen[i] = i % 5 == 0 ? 0 : (uint32_t)(rnd() % 40);
    sn->b_vlen[i] = i % 7 == 0 ? 0 : (uint32_t)(rnd() % 200);
    if (i == n / 2) sn->b_vlen[i] = 200000; /* spans several chunks */
    total += sn->b_klen[i] + sn->b_vlen[i];
  }
  sn->b_data_len = total;
  sn->b_data = weir_malloc(total);
  for (uint64_t i = 0; i < total; i++) sn->b_data[i] = (uint8_t)rnd(); /* includes NULs */
}

/* Stored chunks of checkpoint id. */
uint64_t chunks_of(weir_store *s, uint64_t id) {
  size_t max;
  uint64_t count;
  cr_assert_eq(weir__store_test_chunk_stats(s, id, &max, &count), 0);
  return count;
}

/* Edits stored values of `kind` (this format's) in data.mdb in place:
 * edit(value, bytes from it to the file's end) on the first one found (all
 * = 0) or on every one (all = 1). Returns how many it edited (edit returns
 * 1 for an edit, 0 to pass a value by). */
int edit_values(uint16_t kind, int all, int (*edit)(uint8_t *, size_t)) {
  size_t len;
  char *d = th_read_file(data_path(), &len);
  cr_assert_not_null(d);
  int n = 0;
  for (size_t i = 0; i + 64 < len; i++) {
    uint8_t *v = (uint8_t *)d + i;
    if (memcmp(v, "WEIR", 4) != 0 || v[4] != WEIR_STORE_FORMAT || v[5] != 0 || v[6] != kind ||
        v[7] != 0 || !edit(v, len - i))
      continue;
    n++;
    if (!all) break;
  }
  cr_assert_eq(th_write_file(data_path(), d, len), 0);
  free(d);
  return n;
}

/* For edit_values: flips a payload byte. */
static int flip_one(uint8_t *v, size_t room) {
  (void)room; /* at least 64 bytes */
  v[WEIR__ENV_HDR + 20] ^= 0x5a;
  return 1;
}

/* Flips payload bytes of stored values of `kind` in data.mdb: the first
 * one found (all = 0) or every one (all = 1). Returns how many. */
int flip_values(uint16_t kind, int all) {
  return edit_values(kind, all, flip_one);
}
