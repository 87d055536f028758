/* test_state.c: the keyed-state hash tables (engine/src/state.c) and the
 * weir_state_* calls that reach them (engine/src/ctx.c).
 *
 * Covers, for the u64 map: insert, find, upsert, delete, including key 0 and
 * the key UINT64_MAX (the table's EMPTY sentinel, stored on the side);
 * growth through many doublings (1M keys) with every value intact;
 * backward-shift deletion keeping the other keys reachable, on probe chains
 * that wrap around the end of the table, and in randomized runs against a
 * simple reference array (seeded; the seed is printed, WEIR_TEST_SEED
 * replays one). For the bytes map: exact keys (prefixes "a", "aa", "ab", the
 * empty key, binary keys with NUL bytes), many keys through growth,
 * overwriting with longer and shorter values, delete, randomized against a
 * reference; the empty key given as (NULL, 0). Through the API: keyed state
 * in a keyed job (u64 and bytes, weir_state_each_u64 from finish), every
 * weir_state_* call from a non-keyed operator returning WEIR_ENOTKEYED, and
 * the routing key recorded with a bytes entry (the key group it moves with
 * on rescaling) being the record's key, from process and process_batch.
 */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "helpers.h"
#include "state.h"
#include "task.h" /* struct weir_ctx, to look at a subtask's bytes entries */
#include "base/alloc.h"
#include "weir/job.h"

static uint64_t test_seed(void) {
  const char *e = getenv("WEIR_TEST_SEED");
  uint64_t seed = e && *e ? strtoull(e, NULL, 0) : (uint64_t)time(NULL) ^ (uint64_t)clock();
  if (!seed) seed = 1;
  return seed;
}

static uint64_t rnd(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* The home slot of a key in a table of `cap` slots (state.c's Fibonacci
 * hashing), to build colliding keys on purpose. */
static uint64_t home_of(uint64_t key, uint64_t cap) {
  unsigned lg = 0;
  while ((1ULL << lg) < cap) lg++;
  return (key * 0x9e3779b97f4a7c15ULL) >> (64 - lg);
}

/* ------------------------------------------------------------------------ */
/* u64 map                                                                  */

Test(state, u64_basic_and_sentinels) {
  weir__state s;
  weir__state_init(&s);
  weir__u64map *m = &s.u;
  cr_assert_null(weir__u64_find(m, 0));
  cr_assert_null(weir__u64_find(m, UINT64_MAX));
  cr_assert_eq(weir__u64_del(m, 5), 0);
  cr_assert_eq(weir__u64_del(m, UINT64_MAX), 0);

  *weir__u64_upsert(m, 0) = 100;
  *weir__u64_upsert(m, UINT64_MAX) = 200;
  *weir__u64_upsert(m, UINT64_MAX - 1) = 300;
  *weir__u64_upsert(m, 1) = 400;
  cr_assert_eq(*weir__u64_find(m, 0), 100);
  cr_assert_eq(*weir__u64_find(m, UINT64_MAX), 200);
  cr_assert_eq(*weir__u64_find(m, UINT64_MAX - 1), 300);
  cr_assert_eq(*weir__u64_find(m, 1), 400);
  cr_assert_null(weir__u64_find(m, 2));

  /* Upsert of an existing key returns its slot; of a new key a zero. */
  uint64_t *v = weir__u64_upsert(m, 0);
  cr_assert_eq(*v, 100);
  *v += 1;
  cr_assert_eq(*weir__u64_find(m, 0), 101);
  cr_assert_eq(*weir__u64_upsert(m, 77), 0);
  uint64_t *mx = weir__u64_upsert(m, UINT64_MAX);
  cr_assert_eq(*mx, 200);
  /* A value of UINT64_MAX is an ordinary value. */
  *weir__u64_upsert(m, 5) = UINT64_MAX;
  cr_assert_eq(*weir__u64_find(m, 5), UINT64_MAX);

  /* The sentinel key does not count as a table entry. */
  cr_assert_eq(m->n, 5);
  cr_assert_eq(weir__u64_del(m, UINT64_MAX), 1);
  cr_assert_null(weir__u64_find(m, UINT64_MAX));
  cr_assert_eq(weir__u64_del(m, UINT64_MAX), 0);
  cr_assert_eq(*weir__u64_upsert(m, UINT64_MAX), 0, "a re-inserted sentinel key starts at 0");
  cr_assert_eq(weir__u64_del(m, 0), 1);
  cr_assert_null(weir__u64_find(m, 0));
  cr_assert_eq(weir__u64_del(m, 0), 0);
  cr_assert_eq(*weir__u64_find(m, UINT64_MAX - 1), 300);
  cr_assert_eq(*weir__u64_find(m, 1), 400);
  cr_assert_eq(m->n, 4);
  weir__state_close(&s);
  cr_assert_null(s.u.slots);
  weir__state_close(&s); /* closing twice is harmless */
  cr_assert_eq(th_leak_check(), 0);
}

Test(state, u64_growth_1m_keys) {
  weir__state s;
  weir__state_init(&s);
  weir__u64map *m = &s.u;
  const uint64_t n = 1000000;
  /* Keys spread over the whole range, plus small ones, plus both ends. */
  for (uint64_t i = 0; i < n; i++) {
    uint64_t k = i * 0x2545f4914f6cdd1dULL; /* odd multiplier: distinct keys */
    *weir__u64_upsert(m, k) = i ^ 0x5555;
    cr_assert_leq(m->n * 2, m->cap, "load factor over 1/2");
  }
  cr_assert_eq(m->n, n);
  cr_assert_geq(m->cap, 2 * n);
  for (uint64_t i = 0; i < n; i++) {
    uint64_t *v = weir__u64_find(m, i * 0x2545f4914f6cdd1dULL);
    cr_assert_not_null(v, "key %llu lost after growth", (unsigned long long)i);
    cr_assert_eq(*v, i ^ 0x5555);
  }
  /* Deleting every other key keeps the rest reachable. */
  for (uint64_t i = 0; i < n; i += 2) cr_assert_eq(weir__u64_del(m, i * 0x2545f4914f6cdd1dULL), 1);
  cr_assert_eq(m->n, n / 2);
  for (uint64_t i = 0; i < n; i++) {
    uint64_t *v = weir__u64_find(m, i * 0x2545f4914f6cdd1dULL);
    if (i % 2 == 0)
      cr_assert_null(v);
    else
      cr_assert(v && *v == (i ^ 0x5555), "key %llu after deletes", (unsigned long long)i);
  }
  weir__state_close(&s);

  /* Sequential keys (the common record key) through growth too. */
  weir__state_init(&s);
  for (uint64_t i = 0; i < n; i++) *weir__u64_upsert(&s.u, i) += i + 1;
  for (uint64_t i = 0; i < n; i++) cr_assert_eq(*weir__u64_find(&s.u, i), i + 1);
  weir__state_close(&s);
  cr_assert_eq(th_leak_check(), 0);
}

/* Reference checks: every candidate key's presence and value agree. */
static void check_against(weir__u64map *m, const uint64_t *keys, const uint64_t *vals,
                          const uint8_t *present, size_t nkeys, uint64_t seed, long step) {
  uint64_t count = 0;
  for (size_t i = 0; i < nkeys; i++) {
    uint64_t *v = weir__u64_find(m, keys[i]);
    if (present[i]) {
      cr_assert_not_null(v, "seed %llu step %ld: key %#llx lost", (unsigned long long)seed, step,
                         (unsigned long long)keys[i]);
      cr_assert_eq(*v, vals[i], "seed %llu step %ld: key %#llx value", (unsigned long long)seed,
                   step, (unsigned long long)keys[i]);
      if (keys[i] != WEIR__U64_EMPTY) count++;
    } else {
      cr_assert_null(v, "seed %llu step %ld: deleted key %#llx still found",
                     (unsigned long long)seed, step, (unsigned long long)keys[i]);
    }
  }
  cr_assert_eq(m->n, count, "seed %llu step %ld: n", (unsigned long long)seed, step);
}

/* Random operations on a fixed set of candidate keys, against a reference. */
static void u64_random_run(const uint64_t *keys, size_t nkeys, long steps, uint64_t seed,
                           long check_every) {
  weir__state s;
  weir__state_init(&s);
  uint64_t *vals = calloc(nkeys, sizeof *vals);
  uint8_t *present = calloc(nkeys, 1);
  uint64_t r = seed;
  for (long step = 0; step < steps; step++) {
    size_t i = rnd(&r) % nkeys;
    unsigned op = (unsigned)(rnd(&r) % 10);
    if (op < 5) { /* upsert: add */
      uint64_t d = rnd(&r) % 1000;
      *weir__u64_upsert(&s.u, keys[i]) += d;
      vals[i] = present[i] ? vals[i] + d : d;
      present[i] = 1;
    } else if (op < 8) { /* delete */
      cr_assert_eq(weir__u64_del(&s.u, keys[i]), present[i], "seed %llu step %ld: del",
                   (unsigned long long)seed, step);
      present[i] = 0;
    } else { /* find */
      uint64_t *v = weir__u64_find(&s.u, keys[i]);
      cr_assert_eq(v != NULL, present[i], "seed %llu step %ld: find", (unsigned long long)seed,
                   step);
      if (v) cr_assert_eq(*v, vals[i]);
    }
    if (step % check_every == 0) check_against(&s.u, keys, vals, present, nkeys, seed, step);
  }
  check_against(&s.u, keys, vals, present, nkeys, seed, steps);
  free(vals);
  free(present);
  weir__state_close(&s);
}

Test(state, u64_delete_backward_shift_randomized) {
  uint64_t seed = test_seed();
  printf("test_state: u64_delete_backward_shift_randomized seed %llu (WEIR_TEST_SEED)\n",
         (unsigned long long)seed);
  fflush(stdout);
  /* Keys that crowd a few home slots at the very end and the very start of
   * a 1024-slot table (the first size), so probe chains are long and wrap
   * around; at most 400 keys, so the table never grows. */
  uint64_t g = seed, keys[400];
  size_t nkeys = 0;
  while (nkeys < 390) {
    uint64_t k = rnd(&g);
    uint64_t h = home_of(k, 1024);
    if (h >= 1018 || h < 4) keys[nkeys++] = k;
  }
  keys[nkeys++] = 0;
  keys[nkeys++] = UINT64_MAX;
  /* Keys that share one home slot exactly. */
  while (nkeys < 400) {
    uint64_t k = rnd(&g);
    if (home_of(k, 1024) == 1023) keys[nkeys++] = k;
  }
  u64_random_run(keys, nkeys, 200000, seed, 97);

  /* Many keys with growth and shrinking populations. */
  static uint64_t wide[20000];
  for (size_t i = 0; i < 20000; i++) wide[i] = i % 3 ? rnd(&g) : i;
  wide[7] = UINT64_MAX;
  u64_random_run(wide, 20000, 400000, seed + 1, 50000);
  cr_assert_eq(th_leak_check(), 0);
}

Test(state, u64_delete_wrapping_chain) {
  /* Deterministic: fill the last slots and the first slots with keys whose
   * home is the last slot, then delete from the middle of the chain. */
  weir__state s;
  weir__state_init(&s);
  uint64_t g = 12345, keys[12];
  size_t n = 0;
  while (n < 12) {
    uint64_t k = rnd(&g);
    if (home_of(k, 1024) == 1022) keys[n++] = k;
  }
  for (size_t i = 0; i < 12; i++) *weir__u64_upsert(&s.u, keys[i]) = i + 1;
  cr_assert_eq(s.u.cap, 1024);
  for (size_t d = 0; d < 12; d += 3) {
    cr_assert_eq(weir__u64_del(&s.u, keys[d]), 1);
    for (size_t i = 0; i < 12; i++) {
      uint64_t *v = weir__u64_find(&s.u, keys[i]);
      if (i <= d && i % 3 == 0)
        cr_assert_null(v);
      else
        cr_assert(v && *v == i + 1, "after deleting %zu: key %zu lost", d, i);
    }
  }
  /* No key was left behind in a slot outside its chain: reinserting all
   * gives back exactly 12 entries. */
  for (size_t i = 0; i < 12; i++) *weir__u64_upsert(&s.u, keys[i]) = 7;
  cr_assert_eq(s.u.n, 12);
  weir__state_close(&s);
  cr_assert_eq(th_leak_check(), 0);
}

static int cmp_rank(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a * 0x9e3779b97f4a7c15ULL;
  uint64_t y = *(const uint64_t *)b * 0x9e3779b97f4a7c15ULL;
  return x < y ? -1 : x > y;
}

/* weir__u64_load lays out entries in hash order in one pass: every key is
 * found with its value, including a last cluster that wraps around the
 * table's end and the EMPTY key; the table then works as any other
 * (deletes, inserts, growth). Input out of hash order is inserted. */
Test(state, u64_load_hash_order) {
  uint64_t seed = test_seed(), g = seed;
  for (int round = 0; round < 40; round++) {
    size_t n = 1 + rnd(&g) % (round < 20 ? 600 : 20000);
    uint64_t *keys = weir_malloc((n + 16) * 8), *vals = weir_malloc((n + 16) * 8);
    uint8_t *present = weir_malloc(n + 16);
    size_t k = 0;
    uint64_t cap = 1024;
    while (n * 2 > cap) cap *= 2;
    /* A cluster at the table's end (it wraps), and the EMPTY key. */
    while (k < 6) {
      uint64_t key = rnd(&g);
      if (home_of(key, cap) >= cap - 2) keys[k++] = key;
    }
    if (round % 2) keys[k++] = WEIR__U64_EMPTY;
    while (k < n) keys[k++] = rnd(&g);
    n = k;
    qsort(keys, n, 8, cmp_rank);
    for (size_t i = 1; i < n; i++)
      cr_assert_neq(keys[i], keys[i - 1], "seed %llu", (unsigned long long)seed);
    for (size_t i = 0; i < n; i++) {
      vals[i] = rnd(&g);
      present[i] = 1;
    }
    weir__state s;
    weir__state_init(&s);
    if (n > 1) {
      /* Out of order: built all the same (inserts from the first key out
       * of order on). */
      uint64_t t = keys[0];
      keys[0] = keys[1];
      keys[1] = t;
      cr_assert_eq(weir__u64_load(&s.u, keys, vals, n), 1);
      check_against(&s.u, keys, vals, present, n, seed, round);
      weir__state_close(&s);
      weir__state_init(&s);
      keys[1] = keys[0];
      keys[0] = t;
    }
    cr_assert_eq(weir__u64_load(&s.u, keys, vals, n), 1, "seed %llu", (unsigned long long)seed);
    cr_assert_eq(s.u.cap, cap);
    check_against(&s.u, keys, vals, present, n, seed, round);
    /* A table exists now: refused. */
    cr_assert_eq(weir__u64_load(&s.u, keys, vals, n), 0);
    /* It behaves: delete every third key, change the others, then grow. */
    for (size_t i = 0; i < n; i += 3) {
      cr_assert_eq(weir__u64_del(&s.u, keys[i]), 1);
      present[i] = 0;
    }
    for (size_t i = 0; i < n; i++)
      if (present[i]) *weir__u64_upsert(&s.u, keys[i]) = vals[i] = vals[i] + 1;
    check_against(&s.u, keys, vals, present, n, seed, round);
    uint64_t before = s.u.cap;
    for (uint64_t i = 0; i <= cap / 2; i++) *weir__u64_upsert(&s.u, rnd(&g) | 1) = 1;
    cr_assert_gt(s.u.cap, before, "the table grew");
    for (size_t i = 0; i < n; i++) {
      uint64_t *v = weir__u64_find(&s.u, keys[i]);
      cr_assert(present[i] ? v && *v == vals[i] : v == NULL, "seed %llu: key %zu after growth",
                (unsigned long long)seed, i);
    }
    weir__state_close(&s);
    weir_free(keys);
    weir_free(vals);
    weir_free(present);
  }
  cr_assert_eq(th_leak_check(), 0);
}

/* weir__u64_build_* as a restore drives it, chunk by chunk: entries in
 * hash order in batches of random sizes (a cluster wrapping around the
 * end, the EMPTY key), in order up to a point and then in random order (as
 * a key-order checkpoint would: inserts take over), more or fewer entries
 * than announced, and a key given twice (the later value wins). The table
 * then holds exactly the entries given. */
Test(state, u64_build_in_batches) {
  uint64_t seed = test_seed(), g = seed;
  for (int round = 0; round < 60; round++) {
    size_t n = 1 + rnd(&g) % (round < 30 ? 700 : 30000);
    uint64_t *keys = weir_malloc((n + 16) * 8), *vals = weir_malloc((n + 16) * 8);
    uint8_t *present = weir_malloc(n + 16);
    uint64_t cap = 1024;
    while (n * 2 > cap) cap *= 2;
    size_t k = 0;
    while (k < 5) {
      uint64_t key = rnd(&g);
      if (home_of(key, cap) >= cap - 2) keys[k++] = key;
    }
    if (round % 3 == 0) keys[k++] = WEIR__U64_EMPTY;
    while (k < n) keys[k++] = rnd(&g);
    n = k;
    qsort(keys, n, 8, cmp_rank);
    int mode = round % 4; /* 0 in order, 1 disorder after a point, 2 a repeat, 3 miscounted */
    if (mode == 1 && n > 2) {
      size_t from = rnd(&g) % n;
      for (size_t i = n - 1; i > from; i--) { /* shuffle the tail */
        size_t j = from + rnd(&g) % (i - from + 1);
        uint64_t t = keys[i];
        keys[i] = keys[j];
        keys[j] = t;
      }
    }
    for (size_t i = 0; i < n; i++) {
      vals[i] = rnd(&g);
      present[i] = 1;
    }
    size_t given = n;
    if (mode == 2 && n > 3) { /* key 1 again, later, with another value */
      keys[n] = keys[1];
      vals[n] = vals[1] ^ 0x5555;
      given = n + 1;
    }
    uint64_t announced = mode == 3 ? (round % 8 == 3 ? n / 3 : 2 * n) : n;
    weir__state s;
    weir__state_init(&s);
    weir__u64_build b;
    /* Into prefaulted memory every other round (of the wrong size when
     * miscounted: freed, a table of the right size made). */
    uint64_t bytes = 0, *mem = round % 2 ? weir__u64_table_prefault(n, &bytes) : NULL;
    weir__u64_build_begin(&b, &s.u, announced, mem, bytes);
    for (size_t at = 0; at < given;) {
      size_t take = 1 + rnd(&g) % 300;
      if (take > given - at) take = given - at;
      weir__u64_build_add(&b, keys + at, vals + at, take);
      at += take;
    }
    weir__u64_build_end(&b);
    if (given > n) vals[1] = vals[n];
    check_against(&s.u, keys, vals, present, n, seed, round);
    if (mode == 0) cr_assert_eq(s.u.cap, cap, "seed %llu", (unsigned long long)seed);
    /* Every slot is initialised: a key absent from the table is not found
     * (it probes to an EMPTY slot), inserts work. */
    for (int i = 0; i < 200; i++) {
      uint64_t key = rnd(&g) | 1;
      int known = 0;
      for (size_t j = 0; j < n && !known; j++) known = keys[j] == key;
      if (!known) cr_assert_null(weir__u64_find(&s.u, key));
    }
    weir__state_close(&s);
    weir_free(keys);
    weir_free(vals);
    weir_free(present);
  }
  cr_assert_eq(th_leak_check(), 0);
}

/* ------------------------------------------------------------------------ */
/* bytes map                                                                */

static void put_str(weir__bmap *m, const void *k, size_t klen, const char *v) {
  weir__bent *e = weir__bytes_put(m, 0, k, klen, v, strlen(v));
  cr_assert_not_null(e);
  cr_assert_eq(e->klen, klen);
  cr_assert_eq(e->vlen, strlen(v));
}

static void expect_str(weir__bmap *m, const void *k, size_t klen, const char *v) {
  weir__bent *e = weir__bytes_find(m, k, klen);
  if (!v) {
    cr_assert_null(e, "key of %zu bytes should be absent", klen);
    return;
  }
  cr_assert_not_null(e, "key of %zu bytes (\"%.*s\") not found", klen, (int)klen, (const char *)k);
  cr_assert_eq(e->klen, klen);
  cr_assert_eq(memcmp(weir__bent_key(e), k, klen), 0);
  cr_assert_eq(e->vlen, strlen(v));
  cr_assert_eq(memcmp(weir__bent_val(e), v, e->vlen), 0, "value of \"%.*s\"", (int)klen,
               (const char *)k);
}

Test(state, bytes_exact_keys) {
  weir__state s;
  weir__state_init(&s);
  weir__bmap *m = &s.b;
  cr_assert_null(weir__bytes_find(m, "a", 1));
  cr_assert_eq(weir__bytes_del(m, "a", 1), 0);
  put_str(m, "a", 1, "A");
  put_str(m, "aa", 2, "AA");
  put_str(m, "ab", 2, "AB");
  put_str(m, "", 0, "EMPTY");
  put_str(m, "\0", 1, "NUL");
  put_str(m, "\0\0", 2, "NULNUL");
  put_str(m, "a\0b", 3, "A0B");
  put_str(m, "a\0c", 3, "A0C");
  put_str(m, "b", 1, "");
  cr_assert_eq(m->n, 9);
  expect_str(m, "a", 1, "A");
  expect_str(m, "aa", 2, "AA");
  expect_str(m, "ab", 2, "AB");
  expect_str(m, "", 0, "EMPTY");
  expect_str(m, "\0", 1, "NUL");
  expect_str(m, "\0\0", 2, "NULNUL");
  expect_str(m, "a\0b", 3, "A0B");
  expect_str(m, "a\0c", 3, "A0C");
  expect_str(m, "b", 1, "");
  expect_str(m, "aaa", 3, NULL);
  expect_str(m, "a\0", 2, NULL);
  expect_str(m, "\0\0\0", 3, NULL);

  /* Overwrite with a longer value (the entry moves), then a shorter one. */
  const char *longv = "a value much longer than the eight bytes an entry starts with";
  put_str(m, "ab", 2, longv);
  expect_str(m, "ab", 2, longv);
  put_str(m, "ab", 2, "x");
  expect_str(m, "ab", 2, "x");
  put_str(m, "", 0, longv);
  expect_str(m, "", 0, longv);
  cr_assert_eq(m->n, 9);
  expect_str(m, "a", 1, "A");
  expect_str(m, "aa", 2, "AA");

  /* Route key is kept and updated. */
  weir__bent *e = weir__bytes_put(m, 42, "route", 5, "v", 1);
  cr_assert_eq(e->route_key, 42);
  e = weir__bytes_put(m, 43, "route", 5, "w", 1);
  cr_assert_eq(e->route_key, 43);

  cr_assert_eq(weir__bytes_del(m, "aa", 2), 1);
  cr_assert_eq(weir__bytes_del(m, "aa", 2), 0);
  expect_str(m, "aa", 2, NULL);
  expect_str(m, "a", 1, "A");
  expect_str(m, "ab", 2, "x");
  cr_assert_eq(weir__bytes_del(m, "", 0), 1);
  expect_str(m, "", 0, NULL);
  expect_str(m, "\0", 1, "NUL");
  cr_assert_eq(weir__bytes_del(m, "a\0b", 3), 1);
  expect_str(m, "a\0c", 3, "A0C");
  cr_assert_eq(m->n, 7);
  weir__state_close(&s);
  cr_assert_eq(th_leak_check(), 0);
}

/* Key i of the bytes tests: a decimal string, with binary and NUL-holding
 * variants, and lengths from 0 up. buf: 64 bytes. */
static size_t bkey(uint64_t i, uint8_t *buf) {
  switch (i % 4) {
  case 0:
    return (size_t)snprintf((char *)buf, 64, "k%llu", (unsigned long long)i);
  case 1:
    memcpy(buf, &i, 8);
    return 8; /* binary, often with NULs */
  case 2: {
    size_t n = (size_t)(i % 37);
    memset(buf, 0, n + 9);
    memcpy(buf + n, &i, 8);
    return n + 9; /* leading NULs of varying length */
  }
  default:
    return (size_t)snprintf((char *)buf, 64, "%llu", (unsigned long long)(i / 4)); /* prefixes */
  }
}

Test(state, bytes_many_keys_randomized) {
  uint64_t seed = test_seed();
  printf("test_state: bytes_many_keys_randomized seed %llu (WEIR_TEST_SEED)\n",
         (unsigned long long)seed);
  fflush(stdout);
  weir__state s;
  weir__state_init(&s);
  const uint64_t n = 20000;
  uint32_t *vlen = calloc(n, sizeof *vlen); /* 0: absent; else value length + 1 */
  uint8_t key[64], val[300];
  uint64_t r = seed;
  for (long step = 0; step < 200000; step++) {
    uint64_t i = rnd(&r) % n;
    size_t kl = bkey(i, key);
    unsigned op = (unsigned)(rnd(&r) % 10);
    if (op < 6) {
      uint32_t vl = (uint32_t)(rnd(&r) % 300);
      memset(val, (int)(i + vl), vl);
      weir__bytes_put(&s.b, i, key, kl, val, vl);
      vlen[i] = vl + 1;
    } else if (op < 8) {
      cr_assert_eq(weir__bytes_del(&s.b, key, kl), vlen[i] != 0, "seed %llu step %ld: del",
                   (unsigned long long)seed, step);
      vlen[i] = 0;
    }
    if (op >= 8 || step % 10007 == 0) {
      uint64_t present = 0;
      for (uint64_t j = (op >= 8 ? i : 0); j < (op >= 8 ? i + 1 : n); j++) {
        size_t jl = bkey(j, key);
        weir__bent *e = weir__bytes_find(&s.b, key, jl);
        cr_assert_eq(e != NULL, vlen[j] != 0, "seed %llu step %ld: key %llu presence",
                     (unsigned long long)seed, step, (unsigned long long)j);
        if (!e) continue;
        present++;
        cr_assert_eq(e->vlen + 1, vlen[j], "seed %llu step %ld: key %llu value length",
                     (unsigned long long)seed, step, (unsigned long long)j);
        cr_assert_eq(e->route_key, j);
        for (uint32_t b = 0; b < e->vlen; b++)
          cr_assert_eq(weir__bent_val(e)[b], (uint8_t)(j + e->vlen));
      }
      if (op < 8) {
        uint64_t want = 0;
        for (uint64_t j = 0; j < n; j++) want += vlen[j] != 0;
        cr_assert_eq(present, want);
        cr_assert_eq(s.b.n, want);
      }
    }
  }
  free(vlen);
  weir__state_close(&s);
  cr_assert_eq(th_leak_check(), 0);
}

/* ------------------------------------------------------------------------ */
/* Through the API                                                          */

/* Source: `n` records with key i % 10 and payload the record number. */
static int src_open(weir_ctx *ctx) {
  weir_ctx_set_user(ctx, calloc(1, sizeof(uint64_t)));
  return 0;
}
static int src_run(weir_ctx *ctx, uint32_t budget) {
  uint64_t n = *(const uint64_t *)weir_ctx_arg(ctx), *next = weir_ctx_user(ctx);
  for (uint32_t k = 0; k < budget && *next < n; k++) {
    uint64_t i = (*next)++;
    uint8_t pl[8];
    for (int b = 0; b < 8; b++) pl[b] = (uint8_t)(i >> (8 * b));
    weir_record r = {.key = i % 10, .id = i, .payload = pl, .len = 8};
    int rc = weir_emit_record(ctx, &r);
    if (rc) return rc;
  }
  return *next == n ? WEIR_SOURCE_DONE : WEIR_SOURCE_MORE;
}
static void src_close(weir_ctx *ctx) {
  free(weir_ctx_user(ctx));
}
static const weir_source_vt src_vt = {.size = sizeof(weir_source_vt),
                                      .name = "n",
                                      .open = src_open,
                                      .run = src_run,
                                      .close = src_close};

/* Non-keyed operator: calls every weir_state_* once and records the codes. */
typedef struct codes {
  int rc[8];
  int called;
} codes;

static int nokey_process(weir_ctx *ctx, const weir_record *r) {
  codes *c = weir_ctx_arg(ctx);
  if (c->called++) return 0;
  uint64_t out = 99;
  const void *v = NULL;
  size_t vl = 0;
  c->rc[0] = weir_state_get_u64(ctx, r->key, &out);
  c->rc[1] = weir_state_put_u64(ctx, r->key, 1);
  c->rc[2] = weir_state_add_u64(ctx, r->key, 1, &out);
  c->rc[3] = weir_state_del_u64(ctx, r->key);
  c->rc[4] = weir_state_get_bytes(ctx, "k", 1, &v, &vl);
  c->rc[5] = weir_state_put_bytes(ctx, "k", 1, "v", 1);
  c->rc[6] = weir_state_del_bytes(ctx, "k", 1);
  c->rc[7] = weir_state_each_u64(ctx, NULL, NULL);
  weir_state_prefetch_u64(ctx, r->key); /* a hint: must not crash */
  return 0;
}
static const weir_operator_vt nokey_vt = {
    .size = sizeof(weir_operator_vt), .name = "nokey", .process = nokey_process};

Test(state, api_not_keyed) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "notkeyed"), 0);
  uint64_t n = 10;
  codes c = {0};
  weir_stream *s = weir_source(job, "src", &src_vt, &n, 1);
  cr_assert_eq(weir_sink(weir_rebalance(s), "nokey", &nokey_vt, &c, 1), 0);
  weir_run_opts o = {.workers = 1};
  cr_assert_eq(weir_job_run(job, &o), 0, "%s", weir_job_error(job));
  cr_assert_eq(c.called, 10);
  for (int i = 0; i < 8; i++)
    cr_assert_eq(c.rc[i], WEIR_ENOTKEYED, "call %d returned %d (%s)", i, c.rc[i],
                 weir_err_name(c.rc[i]));
  weir_job_destroy(job);

  /* Chained after the source (forward) is not keyed either. */
  cr_assert_eq(weir_job_create(&job, "notkeyed2"), 0);
  memset(&c, 0, sizeof c);
  s = weir_source(job, "src", &src_vt, &n, 1);
  cr_assert_eq(weir_sink(s, "nokey", &nokey_vt, &c, 1), 0);
  cr_assert_eq(weir_job_run(job, &o), 0);
  for (int i = 0; i < 8; i++) cr_assert_eq(c.rc[i], WEIR_ENOTKEYED);
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}

/* Keyed operator: counts per key in u64 state, keeps the largest payload per
 * key in bytes state under a binary key, and in finish emits (key, count)
 * from weir_state_each_u64 after checking the bytes state. */
typedef struct keyed_out {
  uint64_t count[10];
  uint64_t emitted;
  int bad;
  char why[200];
} keyed_out;

static int keyed_process(weir_ctx *ctx, const weir_record *r) {
  uint64_t c = 0, payload = weir_payload_u64(r);
  int rc = weir_state_add_u64(ctx, r->key, 1, &c);
  if (rc) return rc;
  uint8_t bk[3] = {'\0', (uint8_t)r->key, '\0'};
  const void *v;
  size_t vl;
  rc = weir_state_get_bytes(ctx, bk, sizeof bk, &v, &vl);
  if (rc < 0) return rc;
  if (rc == 1 && vl != (size_t)c - 1) return weir_ctx_fail(ctx, WEIR_EBADREC, "bytes state lost");
  /* The value grows by one byte per record: exercises regrowth. */
  uint8_t buf[1000];
  memset(buf, (int)r->key, sizeof buf);
  if (c > sizeof buf) return weir_ctx_fail(ctx, WEIR_EBADREC, "too many");
  rc = weir_state_put_bytes(ctx, bk, sizeof bk, buf, (size_t)c);
  (void)payload;
  return rc;
}

static int emit_each(void *user, uint64_t key, uint64_t value) {
  return weir_emit_u64(user, key, value);
}

static int keyed_finish(weir_ctx *ctx) {
  for (uint64_t k = 0; k < 10; k++) {
    uint8_t bk[3] = {'\0', (uint8_t)k, '\0'};
    const void *v;
    size_t vl;
    uint64_t c;
    int have = weir_state_get_u64(ctx, k, &c);
    int hb = weir_state_get_bytes(ctx, bk, sizeof bk, &v, &vl);
    if (have != hb)
      return weir_ctx_fail(ctx, WEIR_EBADREC, "key %llu: u64 %d bytes %d", (unsigned long long)k,
                           have, hb);
    if (have && vl != c)
      return weir_ctx_fail(ctx, WEIR_EBADREC, "key %llu: length", (unsigned long long)k);
  }
  /* Delete then re-add a key to exercise del through the API. */
  uint64_t c0 = 0;
  if (weir_state_get_u64(ctx, 0, &c0) == 1) {
    if (weir_state_del_u64(ctx, 0) != 0) return WEIR_EBADREC;
    uint64_t x = 1;
    if (weir_state_get_u64(ctx, 0, &x) != 0 || x != 0) return WEIR_EBADREC;
    if (weir_state_put_u64(ctx, 0, c0) != 0) return WEIR_EBADREC;
  }
  return weir_state_each_u64(ctx, emit_each, ctx);
}

static const weir_operator_vt keyed_vt = {.size = sizeof(weir_operator_vt),
                                          .name = "keyed",
                                          .process = keyed_process,
                                          .finish = keyed_finish};

static int kout_process(weir_ctx *ctx, const weir_record *r) {
  keyed_out *o = weir_ctx_arg(ctx);
  if (r->key >= 10) return WEIR_EBADREC;
  o->count[r->key] += weir_payload_u64(r);
  o->emitted++;
  return 0;
}
static const weir_operator_vt kout_vt = {
    .size = sizeof(weir_operator_vt), .name = "kout", .process = kout_process};

Test(state, api_keyed_u64_and_bytes) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "keyed"), 0);
  uint64_t n = 5000;
  keyed_out out = {0};
  weir_stream *s = weir_source(job, "src", &src_vt, &n, 2);
  s = weir_process(weir_key_by(s), "count", &keyed_vt, NULL, 3);
  /* One sink subtask, so the collected array has one writer. */
  cr_assert_eq(weir_sink(weir_rebalance(s), "out", &kout_vt, &out, 1), 0);
  weir_run_opts o = {.workers = 2, .batch_records = 16};
  int rc = weir_job_run(job, &o);
  cr_assert_eq(rc, 0, "%s: %s", weir_err_name(rc), weir_job_error(job));
  cr_assert_eq(out.emitted, 10);
  /* Two source subtasks of 5000 records each, keys i % 10. */
  for (int k = 0; k < 10; k++)
    cr_assert_eq(out.count[k], 1000, "key %d: %llu", k, (unsigned long long)out.count[k]);
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}

/* The empty key may come as (NULL, 0), e.g. the payload of an empty record
 * (weir_record: "payload NULL when len is 0"). Fails under UBSan while
 * state.c passes k to memcpy/memcmp even when klen is 0. */
Test(state, bytes_empty_key_as_null) {
  weir__state s;
  weir__state_init(&s);
  weir__bytes_put(&s.b, 0, "x", 1, "X", 1);
  weir__bytes_put(&s.b, 0, NULL, 0, "E", 1);
  weir__bent *e = weir__bytes_find(&s.b, NULL, 0);
  cr_assert_not_null(e);
  cr_assert_eq(e->klen, 0);
  cr_assert_eq(e->vlen, 1);
  weir__bytes_put(&s.b, 0, NULL, 0, NULL, 0); /* overwrite with an empty value */
  cr_assert_eq(weir__bytes_find(&s.b, "", 0)->vlen, 0);
  cr_assert_eq(weir__bytes_del(&s.b, NULL, 0), 1);
  cr_assert_null(weir__bytes_find(&s.b, NULL, 0));
  cr_assert_not_null(weir__bytes_find(&s.b, "x", 1));
  weir__state_close(&s);
  cr_assert_eq(th_leak_check(), 0);
}

/* Checks, right after each put, that the entry's routing key is the key of
 * the record being processed. */
typedef struct route_check {
  atomic_int puts, wrong;
  uint64_t first_wrong_key, first_wrong_route;
} route_check;

static void check_route(weir_ctx *ctx, route_check *rc, uint64_t key) {
  uint8_t k[9] = {'r'};
  memcpy(k + 1, &key, 8);
  weir_state_put_bytes(ctx, k, sizeof k, "v", 1);
  weir__bent *e = weir__bytes_find(&ctx->state.b, k, sizeof k);
  atomic_fetch_add(&rc->puts, 1);
  if (!e || e->route_key != key) {
    if (atomic_fetch_add(&rc->wrong, 1) == 0) {
      rc->first_wrong_key = key;
      rc->first_wrong_route = e ? e->route_key : ~0ULL;
    }
  }
}

static int route_process(weir_ctx *ctx, const weir_record *r) {
  check_route(ctx, weir_ctx_arg(ctx), r->key);
  return 0;
}

static int route_process_batch(weir_ctx *ctx, const weir_batch *b) {
  for (uint32_t i = 0; i < b->len; i++) {
    weir_state_select(ctx, b->keys[i]);
    check_route(ctx, weir_ctx_arg(ctx), b->keys[i]);
  }
  return 0;
}

static void route_case(const weir_operator_vt *vt, const char *what) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, "route"), 0);
  uint64_t n = 200;
  route_check rc = {0};
  weir_stream *s = weir_source(job, "src", &src_vt, &n, 1);
  cr_assert_eq(weir_sink(weir_key_by(s), "router", vt, &rc, 1), 0);
  weir_run_opts o = {.workers = 1, .batch_records = 16};
  cr_assert_eq(weir_job_run(job, &o), 0, "%s", weir_job_error(job));
  cr_assert_eq(atomic_load(&rc.puts), 200);
  cr_expect_eq(atomic_load(&rc.wrong), 0,
               "%s: %d bytes entries got a routing key other than their record's key (first: "
               "record key %llu, routing key %llu)",
               what, atomic_load(&rc.wrong), (unsigned long long)rc.first_wrong_key,
               (unsigned long long)rc.first_wrong_route);
  weir_job_destroy(job);
}

Test(state, api_bytes_route_key_is_record_key) {
  static const weir_operator_vt per_record = {
      .size = sizeof(weir_operator_vt), .name = "r", .process = route_process};
  static const weir_operator_vt per_batch = {
      .size = sizeof(weir_operator_vt), .name = "b", .process_batch = route_process_batch};
  route_case(&per_record, "process");
  /* process_batch selects each record's key with weir_state_select. */
  route_case(&per_batch, "process_batch");
  cr_assert_eq(th_leak_check(), 0);
}
