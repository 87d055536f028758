/* store_helpers.h: what the store's tests (test_store_*.c) share: a store
 * in a fresh directory per test (the `store` suite's setup and teardown),
 * snapshots to write and the checks of what loads back, and edits of the
 * stored values in the data file.
 */
#ifndef WEIR_TESTS_STORE_HELPERS_H
#define WEIR_TESTS_STORE_HELPERS_H

#include <stddef.h>
#include <stdint.h>

#include "snapshot/store.h"

typedef unsigned long long ull;

/* splitmix64 over rng_state (setup seeds it with 42). */
extern uint64_t rng_state;
uint64_t rnd(void);

/* The test's directory (setup makes it, teardown removes it). */
extern char *g_dir;
void setup(void);
void teardown(void);

/* Opens the store in g_dir (asserts it opens). */
weir_store *open_store(const weir_store_opts *o);
/* open_store, then weir_store_job_begin. */
weir_store *open_with_job(const weir_store_opts *o);
/* The store's last error message (a static buffer). */
char *err_of(weir_store *s);
/* <g_dir>/store/data.mdb (a static buffer). */
char *data_path(void);
uint64_t next_id(weir_store *s);
/* The job record's latest completed checkpoint. */
uint64_t latest_of(weir_store *s);
/* Stored chunks of checkpoint id. */
uint64_t chunks_of(weir_store *s, uint64_t id);

/* What a done() callback saw. Read after weir_store_flush (which
 * synchronises with the writer thread). */
typedef struct seen {
  int calls, status;
  weir_store_written w;
} seen;
void on_done(void *user, int status, const weir_store_written *w);

/* A snapshot with n u64 entries (distinct keys in scrambled order) and
 * nothing else. The keys depend on n only: n is their version. */
void snap_u64(weir_subtask_snapshot *sn, const char *op, uint32_t sub, uint32_t par, uint64_t n);
/* Adds n byte-string entries to sn (empty keys and values, binary bytes,
 * one entry larger than a chunk). */
void add_bytes(weir_subtask_snapshot *sn, uint64_t n);
/* (key, value) pairs in hash order, the order the store keeps (qsort). */
int cmp_pair(const void *a, const void *b);
/* A deep copy of a. */
weir_subtask_snapshot copy_snap(const weir_subtask_snapshot *a);
/* Asserts that `got` (loaded) holds exactly the state of `want` (as
 * written). */
void assert_same(const weir_subtask_snapshot *want, const weir_subtask_snapshot *got);
/* Writes sn (ownership taken; NULL: none) for checkpoint id and commits
 * it; asserts both succeed. */
void write_commit(weir_store *s, uint64_t id, weir_subtask_snapshot *sn, int final);

/* Edits stored values of `kind` in data.mdb in place (edit returns 1 for an
 * edit, 0 to pass a value by): the first one found (all = 0) or every one.
 * Returns how many it edited. */
int edit_values(uint16_t kind, int all, int (*edit)(uint8_t *, size_t));
/* Flips a payload byte of stored values of `kind`: edit_values. */
int flip_values(uint16_t kind, int all);

#endif
