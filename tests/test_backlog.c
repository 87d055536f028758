/* test_backlog.c: the back-edge log state machine of a loop head
 * (engine/src/iteration.c, weir__backlog_*: ABS Algorithm 2), driven by
 * scripted events on 1–3 inputs, without threads.
 *
 * Scripts: a barrier before and after feedback records (a record is logged
 * exactly while weir__backlog_logging() is true: between start(n) and the
 * return of barrier n on that edge); several back edges (complete only when
 * every one closed, regular inputs never log); a new checkpoint's start
 * while an older log is open (the older log is dropped); end of input on a
 * back edge closes it; an EARLY barrier (barrier n back on an edge before
 * this head's start(n)) blocks the edge until start(n), which closes it
 * with nothing logged; stale barriers are ignored; the serialized log
 * round-trips ([key u64][ts i64][id u64][len u32][payload]).
 *
 * Spilling: every script and the model also run with a memory bound of a
 * few hundred bytes, so the log continues in a spill file (and is handed
 * over mapped from it), and with the spill file failing to open (the log
 * stays in memory); the logs must be byte-for-byte the same.
 *
 * DESIGN. Besides the scripts, a seeded model test simulates one head with
 * up to three back edges, each fed by its own producer (a loop operator)
 * through a FIFO queue: producers emit records and take their snapshots
 * (pushing barrier n) at any time after checkpoint n was triggered, before
 * or after this head's start(n) (another head of the loop may have been
 * faster); checkpoints run one at a time, and some are aborted (then
 * producers and the head may skip them). Every completed log must hold
 * exactly the records in flight across the cut: emitted before their
 * producer's snapshot n, read by the head after its start(n). The model also
 * checks logging() and blocked() after every event, and that every
 * checkpoint that is not aborted completes.
 */
#include <criterion/criterion.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "iteration.h"
#include "base/alloc.h"
#include "base/failpoint.h"

/* Memory bound of the logs under test (0: never spill). */
static uint64_t spill_bound;

/* Takes the log; *rel says how to let go of it (give_back). */
static uint8_t *take(weir__backlog *l, uint64_t *len, void (**rel)(uint8_t *, uint64_t)) {
  int err = 0;
  uint8_t *p = weir__backlog_take(l, len, rel, &err);
  cr_assert(p || !*len, "a spilled log of %llu bytes could not be read back (%d)",
            (unsigned long long)*len, err);
  return p;
}

static void give_back(uint8_t *p, uint64_t len, void (*rel)(uint8_t *, uint64_t)) {
  if (rel)
    rel(p, len);
  else
    weir_free(p);
}

#define NONE WEIR__LOG_NONE
#define COMPLETE WEIR__LOG_COMPLETE
#define BLOCK WEIR__LOG_BLOCK

/* ---- the serialized log ---------------------------------------------------- */

typedef struct logrec {
  uint64_t key;
  int64_t ts;
  uint64_t id;
  uint32_t len;
  const uint8_t *payload;
} logrec;

/* Decodes a serialized log into out[] (at most max records); returns the
 * number of records, or -1 if the bytes are not a sequence of whole
 * records. */
static int decode(const uint8_t *p, uint64_t len, logrec *out, int max) {
  uint64_t off = 0;
  int n = 0;
  while (off < len) {
    if (len - off < 28 || n == max) return -1;
    logrec r;
    memcpy(&r.key, p + off, 8);
    memcpy(&r.ts, p + off + 8, 8);
    memcpy(&r.id, p + off + 16, 8);
    memcpy(&r.len, p + off + 24, 4);
    off += 28;
    if (len - off < r.len) return -1;
    r.payload = r.len ? p + off : NULL;
    off += r.len;
    out[n++] = r;
  }
  return n;
}

/* Appends a record whose fields all derive from `v` (payload: v as 8
 * bytes). */
static void append_v(weir__backlog *l, uint64_t v) {
  weir__backlog_append(l, v, (int64_t)v * 10, v ^ 0xabcdef, &v, sizeof v);
}

/* Takes the log and asserts it holds exactly the records append_v(want[i]),
 * in order. */
static void take_expect(weir__backlog *l, const uint64_t *want, int n) {
  cr_assert_eq(l->records, (uint64_t)n, "the log counts %llu records, expected %d",
               (unsigned long long)l->records, n);
  uint64_t len = 0;
  void (*rel)(uint8_t *, uint64_t);
  uint8_t *p = take(l, &len, &rel);
  logrec got[64];
  int k = decode(p, len, got, 64);
  cr_assert_eq(k, n, "the log holds %d records (%llu bytes), expected %d", k,
               (unsigned long long)len, n);
  for (int i = 0; i < n; i++) {
    uint64_t v = 0;
    cr_assert_eq(got[i].len, 8);
    memcpy(&v, got[i].payload, 8);
    cr_assert_eq(v, want[i], "record %d: %llu, expected %llu", i, (unsigned long long)v,
                 (unsigned long long)want[i]);
    cr_assert_eq(got[i].key, want[i]);
    cr_assert_eq(got[i].ts, (int64_t)want[i] * 10);
    cr_assert_eq(got[i].id, want[i] ^ 0xabcdef);
  }
  give_back(p, len, rel);
  /* Idle after the hand-over. */
  cr_assert_eq(l->id, 0);
  cr_assert_eq(l->len, 0);
  cr_assert_eq(l->records, 0);
  for (uint32_t i = 0; i < l->nin; i++) cr_assert_not(weir__backlog_logging(l, i));
}

/* The head's part of a record arriving on input i: logged iff logging. */
static void arrive(weir__backlog *l, uint32_t i, uint64_t v) {
  cr_assert_not(weir__backlog_blocked(l, i), "a blocked input is not read");
  if (weir__backlog_logging(l, i)) append_v(l, v);
}

/* ---- scripts ---------------------------------------------------------------- */

Test(backlog, no_back_edge_completes_at_once) {
  uint8_t back[1] = {0};
  weir__backlog l;
  weir__backlog_init(&l, 1, back, spill_bound, NULL);
  cr_assert_eq(weir__backlog_start(&l, 1), COMPLETE);
  cr_assert_not(weir__backlog_logging(&l, 0), "a regular input never logs");
  take_expect(&l, NULL, 0);
  weir__backlog_close(&l);
  cr_assert_eq(th_leak_check(), 0);
}

/* Input 0 regular, input 1 back: records before start(n) and after the
 * barrier returned are not logged; those in between are. */
Test(backlog, logs_only_between_start_and_barrier) {
  uint8_t back[2] = {0, 1};
  weir__backlog l;
  weir__backlog_init(&l, 2, back, spill_bound, NULL);
  cr_assert_eq(l.nback, 1);
  cr_assert_not(weir__backlog_logging(&l, 1), "idle: nothing logged");
  arrive(&l, 1, 100); /* before the snapshot: in the head's state already */
  arrive(&l, 0, 999);
  cr_assert_eq(l.records, 0);
  cr_assert_eq(weir__backlog_start(&l, 1), NONE);
  cr_assert_eq(l.id, 1);
  cr_assert(weir__backlog_logging(&l, 1));
  cr_assert_not(weir__backlog_logging(&l, 0), "a regular input never logs");
  cr_assert_not(weir__backlog_blocked(&l, 1));
  arrive(&l, 1, 101);
  arrive(&l, 0, 998);
  arrive(&l, 1, 102);
  cr_assert_eq(weir__backlog_barrier(&l, 1, 1), COMPLETE);
  cr_assert_not(weir__backlog_logging(&l, 1), "the barrier came back: the cut is closed");
  arrive(&l, 1, 103); /* after the cut: not in checkpoint 1 */
  take_expect(&l, (uint64_t[]){101, 102}, 2);
  /* The next checkpoint logs again, from an empty log. */
  arrive(&l, 1, 104);
  cr_assert_eq(weir__backlog_start(&l, 2), NONE);
  arrive(&l, 1, 105);
  cr_assert_eq(weir__backlog_barrier(&l, 1, 2), COMPLETE);
  take_expect(&l, (uint64_t[]){105}, 1);
  weir__backlog_close(&l);
  cr_assert_eq(th_leak_check(), 0);
}

/* A barrier right after start: nothing in flight, an empty log. */
Test(backlog, barrier_first_gives_an_empty_log) {
  uint8_t back[1] = {1};
  weir__backlog l;
  weir__backlog_init(&l, 1, back, spill_bound, NULL);
  cr_assert_eq(weir__backlog_start(&l, 7), NONE);
  cr_assert_eq(weir__backlog_barrier(&l, 0, 7), COMPLETE);
  arrive(&l, 0, 1);
  take_expect(&l, NULL, 0);
  weir__backlog_close(&l);
  cr_assert_eq(th_leak_check(), 0);
}

/* Three inputs, two of them back edges: complete only when both closed;
 * each edge stops logging at its own barrier. */
Test(backlog, several_back_edges) {
  uint8_t back[3] = {1, 0, 1};
  weir__backlog l;
  weir__backlog_init(&l, 3, back, spill_bound, NULL);
  cr_assert_eq(l.nback, 2);
  cr_assert_eq(weir__backlog_start(&l, 3), NONE);
  cr_assert(weir__backlog_logging(&l, 0));
  cr_assert_not(weir__backlog_logging(&l, 1));
  cr_assert(weir__backlog_logging(&l, 2));
  arrive(&l, 0, 1);
  arrive(&l, 2, 2);
  arrive(&l, 1, 900);
  cr_assert_eq(weir__backlog_barrier(&l, 2, 3), NONE, "one edge is still open");
  cr_assert_not(weir__backlog_logging(&l, 2));
  cr_assert(weir__backlog_logging(&l, 0));
  arrive(&l, 2, 901); /* after edge 2's cut */
  arrive(&l, 0, 3);
  cr_assert_eq(weir__backlog_barrier(&l, 2, 3), NONE, "a duplicate barrier is stale");
  cr_assert_eq(weir__backlog_barrier(&l, 0, 3), COMPLETE);
  take_expect(&l, (uint64_t[]){1, 2, 3}, 3);
  weir__backlog_close(&l);
  cr_assert_eq(th_leak_check(), 0);
}

/* start(n+1) while the log of n is still open (n was given up): the older
 * log is dropped; barrier n arriving later is stale and does not close the
 * edge for n+1. */
Test(backlog, newer_start_drops_older_log) {
  uint8_t back[2] = {1, 1};
  weir__backlog l;
  weir__backlog_init(&l, 2, back, spill_bound, NULL);
  cr_assert_eq(weir__backlog_start(&l, 4), NONE);
  arrive(&l, 0, 1);
  arrive(&l, 1, 2);
  cr_assert_eq(weir__backlog_barrier(&l, 1, 4), NONE);
  arrive(&l, 0, 3);
  cr_assert_eq(l.records, 3);
  cr_assert_eq(weir__backlog_start(&l, 5), NONE);
  cr_assert_eq(l.id, 5);
  cr_assert_eq(l.records, 0, "the log of 4 was dropped");
  cr_assert_eq(l.len, 0);
  cr_assert(weir__backlog_logging(&l, 0));
  cr_assert(weir__backlog_logging(&l, 1), "edge 1 closed for 4, open again for 5");
  arrive(&l, 0, 10);
  cr_assert_eq(weir__backlog_barrier(&l, 0, 4), NONE, "barrier 4 is stale now");
  cr_assert(weir__backlog_logging(&l, 0), "a stale barrier does not close the edge");
  cr_assert_not(weir__backlog_blocked(&l, 0));
  arrive(&l, 0, 11);
  arrive(&l, 1, 12);
  cr_assert_eq(weir__backlog_barrier(&l, 1, 5), NONE);
  cr_assert_eq(weir__backlog_barrier(&l, 0, 5), COMPLETE);
  take_expect(&l, (uint64_t[]){10, 11, 12}, 3);
  weir__backlog_close(&l);
  cr_assert_eq(th_leak_check(), 0);
}

/* End of input on a back edge closes it like its barrier would; an edge
 * that ended before start(n) is closed from the start; when every back
 * edge ended, start completes at once. */
Test(backlog, end_of_input_closes_an_edge) {
  uint8_t back[3] = {1, 1, 0};
  weir__backlog l;
  weir__backlog_init(&l, 3, back, spill_bound, NULL);
  cr_assert_eq(weir__backlog_start(&l, 1), NONE);
  arrive(&l, 0, 1);
  arrive(&l, 1, 2);
  cr_assert_eq(weir__backlog_end(&l, 0), NONE);
  cr_assert_not(weir__backlog_logging(&l, 0));
  arrive(&l, 1, 3);
  cr_assert_eq(weir__backlog_end(&l, 1), COMPLETE);
  take_expect(&l, (uint64_t[]){1, 2, 3}, 3);
  cr_assert_eq(weir__backlog_start(&l, 2), COMPLETE, "no back edge is open any more");
  take_expect(&l, NULL, 0);
  weir__backlog_close(&l);

  /* Ended while idle: NONE, then closed from the next start on. */
  weir__backlog_init(&l, 3, back, spill_bound, NULL);
  cr_assert_eq(weir__backlog_end(&l, 1), NONE);
  cr_assert_eq(weir__backlog_start(&l, 1), NONE);
  cr_assert_not(weir__backlog_logging(&l, 1));
  cr_assert(weir__backlog_logging(&l, 0));
  arrive(&l, 0, 5);
  cr_assert_eq(weir__backlog_barrier(&l, 0, 1), COMPLETE);
  take_expect(&l, (uint64_t[]){5}, 1);
  /* End after the edge's barrier returned: nothing left to close. */
  cr_assert_eq(weir__backlog_start(&l, 2), NONE);
  cr_assert_eq(weir__backlog_barrier(&l, 0, 2), COMPLETE);
  take_expect(&l, NULL, 0);
  cr_assert_eq(weir__backlog_end(&l, 0), NONE);
  cr_assert_eq(weir__backlog_start(&l, 3), COMPLETE);
  take_expect(&l, NULL, 0);
  weir__backlog_close(&l);
  cr_assert_eq(th_leak_check(), 0);
}

/* Barrier n returns on a back edge before this head's start(n) (a parallel
 * head of the loop was faster): BLOCK; the edge stays blocked (what follows
 * is after the cut) until start(n), which closes it with nothing logged. */
Test(backlog, early_barrier_blocks_until_start) {
  uint8_t back[2] = {1, 1};
  weir__backlog l;
  weir__backlog_init(&l, 2, back, spill_bound, NULL);
  arrive(&l, 0, 1);
  cr_assert_eq(weir__backlog_barrier(&l, 0, 1), BLOCK);
  cr_assert(weir__backlog_blocked(&l, 0));
  cr_assert_not(weir__backlog_blocked(&l, 1));
  cr_assert_eq(l.nearly, 1);
  arrive(&l, 1, 2); /* before start: not logged */
  cr_assert_eq(weir__backlog_start(&l, 1), NONE);
  cr_assert_not(weir__backlog_blocked(&l, 0), "start(1) releases the edge");
  cr_assert_eq(l.nearly, 0);
  cr_assert_not(weir__backlog_logging(&l, 0), "closed at start: its cut passed already");
  cr_assert(weir__backlog_logging(&l, 1));
  arrive(&l, 0, 3); /* after the cut on edge 0 */
  arrive(&l, 1, 4);
  cr_assert_eq(weir__backlog_barrier(&l, 1, 1), COMPLETE);
  take_expect(&l, (uint64_t[]){4}, 1);

  /* The only back edge early: start completes at once, with an empty log. */
  cr_assert_eq(weir__backlog_barrier(&l, 1, 2), BLOCK);
  cr_assert(weir__backlog_blocked(&l, 1));
  cr_assert_eq(weir__backlog_barrier(&l, 0, 2), BLOCK);
  cr_assert_eq(l.nearly, 2);
  cr_assert_eq(weir__backlog_start(&l, 2), COMPLETE);
  cr_assert_not(weir__backlog_blocked(&l, 0));
  cr_assert_not(weir__backlog_blocked(&l, 1));
  cr_assert_eq(l.nearly, 0);
  take_expect(&l, NULL, 0);
  weir__backlog_close(&l);
  cr_assert_eq(th_leak_check(), 0);
}

/* An early barrier while an older checkpoint is still logging on another
 * edge: edge 0 closed for 1 and then delivers barrier 2 early. */
Test(backlog, early_barrier_while_logging_older) {
  uint8_t back[2] = {1, 1};
  weir__backlog l;
  weir__backlog_init(&l, 2, back, spill_bound, NULL);
  cr_assert_eq(weir__backlog_start(&l, 1), NONE);
  cr_assert_eq(weir__backlog_barrier(&l, 0, 1), NONE);
  arrive(&l, 0, 50);
  cr_assert_eq(weir__backlog_barrier(&l, 0, 2), BLOCK);
  cr_assert(weir__backlog_blocked(&l, 0));
  arrive(&l, 1, 51);
  cr_assert_eq(weir__backlog_barrier(&l, 1, 1), COMPLETE);
  take_expect(&l, (uint64_t[]){51}, 1);
  cr_assert(weir__backlog_blocked(&l, 0), "still blocked after checkpoint 1 completed");
  arrive(&l, 1, 52);
  cr_assert_eq(weir__backlog_start(&l, 2), NONE);
  cr_assert_not(weir__backlog_blocked(&l, 0));
  cr_assert_not(weir__backlog_logging(&l, 0));
  cr_assert(weir__backlog_logging(&l, 1));
  arrive(&l, 1, 53);
  arrive(&l, 0, 54);
  cr_assert_eq(weir__backlog_barrier(&l, 1, 2), COMPLETE);
  take_expect(&l, (uint64_t[]){53}, 1);
  weir__backlog_close(&l);
  cr_assert_eq(th_leak_check(), 0);
}

/* An early barrier of a checkpoint that was then given up: the head starts
 * a newer one instead, which drops the early mark and logs the edge. */
Test(backlog, early_barrier_of_abandoned_checkpoint) {
  uint8_t back[1] = {1};
  weir__backlog l;
  weir__backlog_init(&l, 1, back, spill_bound, NULL);
  cr_assert_eq(weir__backlog_barrier(&l, 0, 3), BLOCK);
  cr_assert(weir__backlog_blocked(&l, 0));
  cr_assert_eq(weir__backlog_start(&l, 4), NONE);
  cr_assert_not(weir__backlog_blocked(&l, 0));
  cr_assert_eq(l.nearly, 0);
  cr_assert(weir__backlog_logging(&l, 0));
  arrive(&l, 0, 7);
  cr_assert_eq(weir__backlog_barrier(&l, 0, 4), COMPLETE);
  take_expect(&l, (uint64_t[]){7}, 1);
  weir__backlog_close(&l);
  cr_assert_eq(th_leak_check(), 0);
}

/* Barriers of checkpoints the head already logged, or older ones, are
 * stale while idle and while logging a newer checkpoint. */
Test(backlog, stale_barriers_are_ignored) {
  uint8_t back[1] = {1};
  weir__backlog l;
  weir__backlog_init(&l, 1, back, spill_bound, NULL);
  cr_assert_eq(weir__backlog_start(&l, 5), NONE);
  cr_assert_eq(weir__backlog_barrier(&l, 0, 5), COMPLETE);
  take_expect(&l, NULL, 0);
  cr_assert_eq(weir__backlog_barrier(&l, 0, 5), NONE, "a repeat while idle");
  cr_assert_eq(weir__backlog_barrier(&l, 0, 3), NONE, "an older one while idle");
  cr_assert_not(weir__backlog_blocked(&l, 0));
  cr_assert_eq(weir__backlog_start(&l, 6), NONE);
  cr_assert_eq(weir__backlog_barrier(&l, 0, 5), NONE, "an older one while logging");
  cr_assert_eq(weir__backlog_barrier(&l, 0, 2), NONE);
  cr_assert(weir__backlog_logging(&l, 0));
  cr_assert_not(weir__backlog_blocked(&l, 0));
  arrive(&l, 0, 1);
  cr_assert_eq(weir__backlog_barrier(&l, 0, 6), COMPLETE);
  take_expect(&l, (uint64_t[]){1}, 1);
  weir__backlog_close(&l);
  cr_assert_eq(th_leak_check(), 0);
}

/* The serialized log: many records of mixed sizes (empty payloads, large
 * ones, beyond the first 4 KiB buffer) decode to exactly what was
 * appended, in order, and the log's length is the sum of the records'. */
/* Returns 1 if the log was handed over mapped from a spill file. */
static int round_trip(void) {
  uint8_t back[1] = {1};
  weir__backlog l;
  weir__backlog_init(&l, 1, back, spill_bound, NULL);
  cr_assert_eq(weir__backlog_start(&l, 1), NONE);
  enum { N = 300 };
  static uint8_t pay[N][700];
  uint32_t lens[N];
  uint64_t total = 0;
  for (uint32_t i = 0; i < N; i++) {
    lens[i] = i % 5 == 0 ? 0 : (i * 37) % 700;
    for (uint32_t j = 0; j < lens[i]; j++) pay[i][j] = (uint8_t)(i * 13 + j * 7);
    weir__backlog_append(&l, UINT64_MAX - i, (int64_t)i - 150, (uint64_t)i << 40,
                         lens[i] ? pay[i] : NULL, lens[i]);
    total += 28 + lens[i];
  }
  cr_assert_eq(l.records, N);
  cr_assert_eq(weir__backlog_barrier(&l, 0, 1), COMPLETE);
  uint64_t len = 0;
  void (*rel)(uint8_t *, uint64_t);
  uint8_t *p = take(&l, &len, &rel);
  cr_assert_eq(len, total);
  static logrec got[N + 1];
  cr_assert_eq(decode(p, len, got, N + 1), N);
  for (uint32_t i = 0; i < N; i++) {
    cr_assert_eq(got[i].key, UINT64_MAX - i);
    cr_assert_eq(got[i].ts, (int64_t)i - 150);
    cr_assert_eq(got[i].id, (uint64_t)i << 40);
    cr_assert_eq(got[i].len, lens[i]);
    if (lens[i]) cr_assert_eq(memcmp(got[i].payload, pay[i], lens[i]), 0, "record %u", i);
  }
  int mapped = rel != NULL;
  give_back(p, len, rel);
  /* After the hand-over: an empty log, and a new one starts from empty. */
  p = take(&l, &len, &rel);
  cr_assert_eq(len, 0);
  give_back(p, len, rel);
  cr_assert_eq(weir__backlog_start(&l, 2), NONE);
  append_v(&l, 42);
  cr_assert_eq(weir__backlog_barrier(&l, 0, 2), COMPLETE);
  take_expect(&l, (uint64_t[]){42}, 1);
  weir__backlog_close(&l);
  cr_assert_eq(th_leak_check(), 0);
  return mapped;
}

/* ---- the model ---------------------------------------------------------------- */

#define MAXE 3
#define QCAP 4096
#define MAXREC 8192

enum { IT_REC, IT_BARRIER, IT_END };
typedef struct item {
  int kind;
  uint64_t v; /* record: its number; barrier: its id */
} item;

typedef struct model {
  uint32_t nin;
  uint8_t back[MAXE + 1];
  /* Per back input i (a producer feeding it through a FIFO). */
  item q[MAXE + 1][QCAP];
  uint32_t qh[MAXE + 1], qt[MAXE + 1];
  uint64_t snap[MAXE + 1];      /* the producer's latest snapshot */
  int ended[MAXE + 1];          /* the producer sent end of input */
  int read_end[MAXE + 1];       /* the head read it */
  uint64_t last_read[MAXE + 1]; /* the latest barrier the head read on it */
  /* Records: the producer's snapshot when emitted; when the head read it,
   * the checkpoint it had started last. */
  uint64_t epoch[MAXREC];
  uint64_t read_at[MAXREC];
  int read[MAXREC];
  uint64_t nrec;
  uint64_t trig; /* latest triggered checkpoint */
  int pending;   /* trig neither completed nor aborted */
  uint8_t aborted[4096];
  uint64_t started; /* the head's latest start */
  uint64_t logging; /* the checkpoint whose log is open, 0 if none */
  /* Totals over all scripts, so that the test shows it exercised them. */
  uint64_t completed, logged, blocks, nonempty;
} model;

static model mm;

static unsigned mseed;
static unsigned rnd(unsigned n) {
  return (unsigned)(rand_r(&mseed) % n);
}

/* Ids in (from, to) all aborted: a producer or the head may skip them. */
static int may_skip(const model *m, uint64_t from, uint64_t to) {
  for (uint64_t k = from + 1; k < to; k++)
    if (!m->aborted[k]) return 0;
  return 1;
}

static void push(model *m, uint32_t i, int kind, uint64_t v) {
  cr_assert_lt(m->qt[i] - m->qh[i], QCAP);
  m->q[i][m->qt[i]++ % QCAP] = (item){kind, v};
}

/* The log of checkpoint n completed: it must hold exactly the records
 * emitted before their producer's snapshot n and read after start(n). */
static void model_complete(model *m, weir__backlog *l, uint64_t n, const char *ctx) {
  uint64_t records = l->records, len = 0;
  void (*rel)(uint8_t *, uint64_t);
  uint8_t *p = take(l, &len, &rel);
  static logrec got[MAXREC];
  int k = decode(p, len, got, MAXREC);
  cr_assert_eq(k, (int)records, "%s: log of %llu malformed", ctx, (unsigned long long)n);
  static uint8_t in_log[MAXREC];
  memset(in_log, 0, sizeof in_log);
  for (int r = 0; r < k; r++) {
    uint64_t v = got[r].key;
    cr_assert_lt(v, m->nrec, "%s: unknown record %llu", ctx, (unsigned long long)v);
    cr_assert_eq(in_log[v], 0, "%s: record %llu logged twice", ctx, (unsigned long long)v);
    in_log[v] = 1;
  }
  for (uint64_t v = 0; v < m->nrec; v++) {
    int want = m->read[v] && m->read_at[v] == n && m->epoch[v] < n;
    cr_assert_eq(in_log[v], want,
                 "%s: checkpoint %llu: record %llu (emitted after snapshot %llu, read after "
                 "start %llu) %s",
                 ctx, (unsigned long long)n, (unsigned long long)v, (unsigned long long)m->epoch[v],
                 (unsigned long long)m->read_at[v],
                 want ? "missing from the log" : "logged but not in flight across the cut");
  }
  give_back(p, len, rel);
  m->logging = 0;
  m->completed++;
  m->logged += (uint64_t)k;
  m->nonempty += k > 0;
  if (m->trig == n) m->pending = 0;
}

/* logging() and blocked() against the model, for every input. */
static void model_check(model *m, weir__backlog *l, const char *ctx) {
  for (uint32_t i = 0; i < m->nin; i++) {
    if (!m->back[i]) {
      cr_assert_not(weir__backlog_logging(l, i), "%s: regular input %u logs", ctx, i);
      cr_assert_not(weir__backlog_blocked(l, i), "%s: regular input %u blocked", ctx, i);
      continue;
    }
    int blocked = !m->read_end[i] && m->last_read[i] > m->started;
    cr_assert_eq(weir__backlog_blocked(l, i), blocked, "%s: input %u blocked %d, model %d", ctx, i,
                 weir__backlog_blocked(l, i), blocked);
    if (blocked) continue;
    int logging = m->logging && !m->read_end[i] && m->last_read[i] < m->logging;
    cr_assert_eq(weir__backlog_logging(l, i), logging, "%s: input %u logging %d, model %d", ctx, i,
                 weir__backlog_logging(l, i), logging);
  }
}

static void model_start(model *m, weir__backlog *l, uint64_t n, const char *ctx) {
  m->started = n;
  m->logging = n; /* an older open log is dropped */
  if (weir__backlog_start(l, n) == COMPLETE) model_complete(m, l, n, ctx);
}

/* Reads the head of input i; returns 0 if there was nothing to read. */
static int model_read(model *m, weir__backlog *l, uint32_t i, const char *ctx) {
  if (m->read_end[i] || m->qh[i] == m->qt[i] || weir__backlog_blocked(l, i)) return 0;
  item it = m->q[i][m->qh[i]++ % QCAP];
  if (it.kind == IT_REC) {
    m->read[it.v] = 1;
    m->read_at[it.v] = m->started;
    if (weir__backlog_logging(l, i)) {
      uint8_t pay[3] = {1, 2, 3};
      weir__backlog_append(l, it.v, 0, it.v, pay, (uint32_t)(it.v % 4));
    }
  } else if (it.kind == IT_END) {
    m->read_end[i] = 1;
    if (weir__backlog_end(l, i) == COMPLETE) model_complete(m, l, m->logging, ctx);
  } else {
    uint64_t n = it.v;
    uint64_t cur = m->logging;
    m->last_read[i] = n;
    weir__log_result r = weir__backlog_barrier(l, i, n);
    if (n > m->started) {
      cr_assert_eq(r, BLOCK, "%s: barrier %llu before start %llu not blocked", ctx,
                   (unsigned long long)n, (unsigned long long)n);
      m->blocks++;
    } else {
      cr_assert_neq(r, BLOCK, "%s: barrier %llu blocked after start %llu", ctx,
                    (unsigned long long)n, (unsigned long long)m->started);
      if (r == COMPLETE) {
        cr_assert_eq(n, cur, "%s: barrier %llu completed log %llu", ctx, (unsigned long long)n,
                     (unsigned long long)cur);
        model_complete(m, l, n, ctx);
      }
    }
  }
  return 1;
}

/* One random script: `nback` back edges (and a regular input, ignored by
 * the log), `events` random events, then a drain in which every pending
 * checkpoint must complete. */
static void model_run(unsigned seed, uint32_t nback, int events, int with_aborts, int with_ends) {
  model *m = &mm;
  uint64_t completed = m->completed, logged = m->logged, blocks = m->blocks, nonempty = m->nonempty;
  memset(m, 0, sizeof *m);
  m->completed = completed;
  m->logged = logged;
  m->blocks = blocks;
  m->nonempty = nonempty;
  mseed = seed;
  char ctx[96];
  snprintf(ctx, sizeof ctx, "seed %u (%u back edges%s%s)", seed, nback,
           with_aborts ? ", aborts" : "", with_ends ? ", ends" : "");
  m->nin = nback + 1;
  uint32_t reg = rnd(m->nin); /* the regular input's position */
  for (uint32_t i = 0; i < m->nin; i++) m->back[i] = i != reg;
  weir__backlog l;
  weir__backlog_init(&l, m->nin, m->back, spill_bound, NULL);
  for (int e = 0; e < events; e++) {
    uint32_t i = rnd(m->nin);
    unsigned what = rnd(100);
    if (what < 5) { /* the coordinator triggers the next checkpoint */
      if (!m->pending && m->trig + 1 < sizeof m->aborted) {
        m->trig++;
        m->pending = 1;
      }
    } else if (what < 7 && with_aborts) { /* it times out */
      if (m->pending) {
        m->aborted[m->trig] = 1;
        m->pending = 0;
      }
    } else if (what < 15) { /* the head's regular inputs aligned: start */
      uint64_t n = m->started + 1 + rnd(2);
      if (n <= m->trig && may_skip(m, m->started, n)) model_start(m, &l, n, ctx);
    } else if (what < 25) { /* producer i snapshots: barrier n onto its edge */
      if (!m->back[i] || m->ended[i]) continue;
      uint64_t n = m->snap[i] + 1 + rnd(2);
      if (n <= m->trig && may_skip(m, m->snap[i], n)) {
        m->snap[i] = n;
        push(m, i, IT_BARRIER, n);
      }
    } else if (what < 26 && with_ends) { /* producer i ends */
      if (!m->back[i] || m->ended[i]) continue;
      m->ended[i] = 1;
      push(m, i, IT_END, 0);
    } else if (what < 60) { /* producer i emits a record */
      if (!m->back[i] || m->ended[i] || m->nrec == MAXREC) continue;
      m->epoch[m->nrec] = m->snap[i];
      push(m, i, IT_REC, m->nrec++);
    } else { /* the head reads input i */
      if (m->back[i]) model_read(m, &l, i, ctx);
    }
    model_check(m, &l, ctx);
  }
  /* Drain: the pending checkpoint reaches every producer and the head;
   * everything is read; its log must complete. */
  if (m->pending) {
    uint64_t n = m->trig;
    if (m->started < n) {
      cr_assert(may_skip(m, m->started, n));
      model_start(m, &l, n, ctx);
    }
    for (uint32_t i = 0; i < m->nin; i++)
      if (m->back[i] && !m->ended[i] && m->snap[i] < n) {
        m->snap[i] = n;
        push(m, i, IT_BARRIER, n);
      }
    for (int any = 1; any;) {
      any = 0;
      for (uint32_t i = 0; i < m->nin; i++)
        if (m->back[i] && model_read(m, &l, i, ctx)) any = 1;
      model_check(m, &l, ctx);
    }
    cr_assert_not(m->pending, "%s: checkpoint %llu never completed", ctx, (unsigned long long)n);
  }
  weir__backlog_close(&l);
}

Test(backlog, serialized_log_round_trips) {
  cr_assert_not(round_trip());
}

static void model_runs(unsigned runs) {
  const char *env = getenv("WEIR_TEST_SEED");
  unsigned base = env && *env ? (unsigned)strtoul(env, NULL, 10) : 20240601u;
  memset(&mm, 0, sizeof mm);
  for (unsigned r = 0; r < runs; r++)
    model_run(base + r, 1 + r % MAXE, 400 + (int)(r % 7) * 100, r % 3 == 1, r % 4 == 3);
  fprintf(stderr,
          "backlog::model: seeds %u..%u: %llu logs completed (%llu non-empty, %llu records), "
          "%llu early barriers\n",
          base, base + runs - 1, (unsigned long long)mm.completed, (unsigned long long)mm.nonempty,
          (unsigned long long)mm.logged, (unsigned long long)mm.blocks);
  /* Not vacuous: the scripts reached every case many times. */
  cr_assert_gt(mm.completed, runs * 5 / 3);
  cr_assert_gt(mm.nonempty, runs / 2);
  cr_assert_gt(mm.blocks, runs / 6);
  cr_assert_eq(th_leak_check(), 0);
}

Test(backlog, model_random_interleavings) {
  model_runs(600);
}

/* ---- spilling ---------------------------------------------------------------- */

static char *spill_tmp;

static void spill_setup(void) {
  spill_tmp = th_tmpdir();
  cr_assert_not_null(spill_tmp);
  cr_assert_eq(setenv("TMPDIR", spill_tmp, 1), 0);
}

/* No spill file is left behind: each is unlinked as soon as it exists. */
static void spill_teardown(void) {
  th_arm_failpoints(NULL);
  cr_assert_eq(th_count_entries(spill_tmp), 0, "files left in the spill directory");
  th_rmrf(spill_tmp);
  free(spill_tmp);
}

TestSuite(spill, .init = spill_setup, .fini = spill_teardown);

Test(spill, round_trip_through_the_file) {
  spill_bound = 300; /* a few records in memory, then the file */
  cr_assert(round_trip(), "the log was not spilled");
}

Test(spill, model_random_interleavings) {
  spill_bound = 200;
  model_runs(200);
}

Test(spill, file_that_cannot_be_created_keeps_the_log_in_memory) {
  th_arm_failpoints("spill.open=error+");
  spill_bound = 300;
  cr_assert_not(round_trip());
  cr_assert_geq(weir_failpoint_hits("spill.open"), 1, "the log never tried to spill");
}

Test(spill, write_failing_part_way_keeps_the_rest_in_memory) {
  /* The 5th write fails: the first ones are in the file, the rest joins
   * them from memory at the hand-over. */
  th_arm_failpoints("spill.write=error@5+");
  spill_bound = 300;
  cr_assert_not(round_trip());
  cr_assert_geq(weir_failpoint_hits("spill.write"), 5);
}
