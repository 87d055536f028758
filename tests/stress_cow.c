/* stress_cow.c: copy-on-write views of the u64 keyed-state map
 * (engine/src/state.c, weir__u64_cow_*), read by another thread while the
 * owner keeps writing; for ThreadSanitizer and AddressSanitizer.
 *
 * The owner thread applies random operations (add to a key, insert, delete,
 * the EMPTY-sentinel key too) to a map and to a plain reference array. At a
 * random moment it opens a view and records the reference as the expected
 * snapshot; a reader thread then extracts the view (after a random delay, or
 * lets go of it unread) while the owner goes on writing, growing the table
 * through doublings, deleting with backward shifts, and in the last rounds
 * closing the map while the reader is still at work. Every extraction must
 * equal the expected snapshot exactly: each key once, with its value at the
 * moment the view opened, in strictly ascending hash order. One round in
 * four, the owner reads the view itself in parts (weir__cow_read_some),
 * writing between them. Also: a second view while one is unread
 * is refused (NULL), and one is granted again once the first was read.
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
#include <time.h>

#include "state.h"
#include "base/alloc.h"

#define KEYS 40000u /* key space; EMPTY is the extra key KEYS */
#define ROUNDS 120

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void) {
  uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t key_of(uint64_t i) {
  return i == KEYS ? WEIR__U64_EMPTY : i * 7919u + 3u;
}

typedef struct model {
  uint8_t present[KEYS + 1];
  uint64_t value[KEYS + 1];
} model;

static model ref, expect;

/* One random operation on map and model. `span` limits the keys used, so
 * tables grow round by round. */
static void op(weir__u64map *m, uint64_t span) {
  uint64_t i = rnd() % 100 == 0 ? KEYS : rnd() % span;
  uint64_t k = key_of(i);
  unsigned what = (unsigned)(rnd() % 10);
  if (what < 7) {
    uint64_t *v = weir__u64_upsert(m, k);
    *v += i + 1;
    ref.present[i] = 1;
    ref.value[i] += i + 1;
  } else {
    weir__u64_del(m, k);
    ref.present[i] = 0;
    ref.value[i] = 0;
  }
}

typedef struct reader {
  weir__cow *view;
  int unread; /* let go without extracting */
  unsigned delay_us;
  uint64_t *keys, *values, n;
  pthread_t thread;
} reader;

static void *reader_main(void *arg) {
  reader *r = arg;
  if (r->delay_us) {
    struct timespec ts = {0, (long)r->delay_us * 1000};
    nanosleep(&ts, NULL);
  }
  if (!r->unread) weir__cow_extract(r->view, &r->keys, &r->values, &r->n);
  weir__cow_release(r->view);
  return NULL;
}

static int failures, passes;

static int check(const reader *r, int round) {
  static uint8_t seen[KEYS + 1];
  memset(seen, 0, sizeof seen);
  uint64_t want = 0;
  for (uint64_t i = 0; i <= KEYS; i++) want += expect.present[i];
  if (r->n != want) {
    fprintf(stderr, "round %d: %llu entries in the view, expected %llu\n", round,
            (unsigned long long)r->n, (unsigned long long)want);
    return 0;
  }
  for (uint64_t e = 0; e < r->n; e++) {
    uint64_t k = r->keys[e], i;
    if (e > 0 && r->keys[e - 1] * WEIR__U64_HASH_MUL >= k * WEIR__U64_HASH_MUL) {
      fprintf(stderr, "round %d: entry %llu (key %llu) is not after entry %llu in hash order\n",
              round, (unsigned long long)e, (unsigned long long)k, (unsigned long long)e - 1);
      return 0;
    }
    if (k == WEIR__U64_EMPTY) {
      i = KEYS;
    } else {
      if (k < 3 || (k - 3) % 7919u != 0 || (k - 3) / 7919u >= KEYS) {
        fprintf(stderr, "round %d: unknown key %llu\n", round, (unsigned long long)k);
        return 0;
      }
      i = (k - 3) / 7919u;
    }
    if (seen[i]++ || !expect.present[i] || expect.value[i] != r->values[e]) {
      fprintf(stderr, "round %d: key index %llu: %s value %llu, expected %s%llu\n", round,
              (unsigned long long)i, seen[i] > 1 ? "again," : "", (unsigned long long)r->values[e],
              expect.present[i] ? "" : "absent ", (unsigned long long)expect.value[i]);
      return 0;
    }
  }
  return 1;
}

int main(void) {
  weir__state st;
  weir__state_init(&st);
  weir__u64map *m = &st.u;
  for (int round = 0; round < ROUNDS; round++) {
    /* Grow the key space over the rounds: tables double during views. */
    uint64_t span = 200 + (uint64_t)round * (KEYS - 200) / ROUNDS;
    unsigned before = (unsigned)(rnd() % 3000);
    for (unsigned i = 0; i < before; i++) op(m, span);
    reader r = {0};
    r.view = weir__u64_cow_begin(m);
    if (!r.view) {
      fprintf(stderr, "round %d: no view granted with none open\n", round);
      failures++;
      break;
    }
    memcpy(&expect, &ref, sizeof ref);
    if (round % 4 == 1) {
      /* The owner reads the view itself, a few pages at a time, writing
       * between the parts (as a task reads its own views). */
      weir__cow_reader cr;
      weir__cow_read_begin(&cr, r.view);
      while (!weir__cow_read_some(&cr, 1 + rnd() % 8)) {
        unsigned between = (unsigned)(rnd() % 200);
        for (unsigned i = 0; i < between; i++) op(m, span * 2 < KEYS ? span * 2 : KEYS);
      }
      weir__cow_read_end(&cr, &r.keys, &r.values, &r.n);
      weir__cow_release(r.view);
      if (check(&r, round))
        passes++;
      else
        failures++;
      weir_pool_free(r.keys);
      weir_pool_free(r.values);
      continue;
    }
    r.unread = round % 11 == 5;
    r.delay_us = (unsigned)(rnd() % 4) * 250;
    if (pthread_create(&r.thread, NULL, reader_main, &r) != 0) {
      perror("pthread_create");
      return 2;
    }
    /* A second view while this one may still be unread: refused or, if the
     * reader already finished, granted (then let go of at once). */
    weir__cow *again = weir__u64_cow_begin(m);
    if (again) {
      weir__cow_release(again);
    }
    int closing = round >= ROUNDS - 3;
    unsigned during = (unsigned)(rnd() % 20000);
    for (unsigned i = 0; i < during && !closing; i++) op(m, span * 2 < KEYS ? span * 2 : KEYS);
    if (closing) {
      /* The owner goes away while the view may still be read. */
      weir__state_close(&st);
      memset(&ref, 0, sizeof ref);
      weir__state_init(&st);
    }
    pthread_join(r.thread, NULL);
    if (!r.unread) {
      if (check(&r, round))
        passes++;
      else
        failures++;
    }
    weir_pool_free(r.keys);
    weir_pool_free(r.values);
  }
  /* After a view was read, the next is granted. */
  weir__cow *v = weir__u64_cow_begin(m);
  if (v) {
    weir__cow_release(v);
    passes++;
  } else {
    fprintf(stderr, "no view granted after every earlier one was read\n");
    failures++;
  }
  weir__state_close(&st);
  printf("stress_cow: %d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
