/* stress_channel.c: the SPSC batch channel (engine/src/channel.c) between two
 * real threads, for ThreadSanitizer and for lost wake-ups.
 *
 * A producer thread and a consumer thread move millions of records through
 * a channel with a tiny bound (1-2 batches) and small batches. Each side
 * SLEEPS on its own condition variable whenever it cannot proceed
 * (weir__chan_writable() == 0, weir__chan_wait() == 0) and is woken ONLY by
 * the channel's notify callback, so a lost wake-up hangs the program; a
 * watchdog (alarm) turns a hang into a failure. The consumer checks FIFO
 * order record by record (keys 0, 1, 2, ... with their payloads) and the
 * final end-of-input event.
 *
 * Scenarios: one batch per step with try_push; bursts of several batches
 * per step with push (pending overflow, like a task step that emits more
 * than the ring holds), with cap 2 and cap 1; and a clean shutdown where the
 * consumer stops while the producer is mid-send (batches in the ring, on the
 * pending list and in the return ring), after which both threads are joined
 * and the channel destroyed (LeakSanitizer checks that nothing leaks).
 *
 * A plain main() program (Criterion cannot start under ThreadSanitizer):
 * prints "N passed, N failed" and exits non-zero on failure.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "channel.h"

#define WATCHDOG_S 60

static volatile const char *g_scenario = "start";

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "stress_channel: watchdog fired: a side never woke up "
                            "(lost wake-up or deadlock)\n0 passed, 1 failed\n";
  ssize_t rc = write(2, msg, sizeof msg - 1);
  (void)rc;
  _exit(1);
}

/* ------------------------------------------------------------------------ */
/* A side's sleep: a binary event set by notify (and only by notify).       */

typedef struct side {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int signaled;
  _Atomic uint64_t notifies; /* notify() calls for this side */
  uint64_t sleeps;           /* times the side blocked (its own thread only) */
} side;

static void side_init(side *s) {
  memset(s, 0, sizeof *s);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
}

static void side_close(side *s) {
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
}

static void side_notify(void *who) {
  side *s = who;
  atomic_fetch_add(&s->notifies, 1);
  pthread_mutex_lock(&s->mu);
  s->signaled = 1;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

/* Blocks until notified (a wake-up that came early is kept). */
static void side_sleep(side *s) {
  pthread_mutex_lock(&s->mu);
  if (!s->signaled) s->sleeps++;
  while (!s->signaled) pthread_cond_wait(&s->cv, &s->mu);
  s->signaled = 0;
  pthread_mutex_unlock(&s->mu);
}

/* ------------------------------------------------------------------------ */
/* One run: a producer and a consumer thread around one channel.           */

typedef struct run {
  const char *name;
  uint32_t cap, batch_records;
  uint64_t nrecords;
  int burst_max; /* 0: one batch per step with try_push; else 1..burst_max with push */
  /* Shutdown scenario: the consumer stops after this many batches (0: never). */
  uint64_t stop_after_batches;
  atomic_int stop;
  weir__chan *ch;
  side prod, cons;
  /* Results. */
  char err[256];  /* consumer's first error */
  char perr[256]; /* producer's first error */
  uint64_t got;   /* records the consumer saw */
  int got_eoi;
  uint32_t npend_at_exit;
} run;

static uint64_t xorshift(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

/* A data batch with up to `max` records starting at key *next; the length
 * varies (partial batches, like a buffer-timeout flush). */
static weir__batch *fill(run *r, uint64_t *next, uint64_t *rng) {
  weir__batch *b = weir__chan_batch(r->ch);
  if (b->len != 0 || b->kind != WEIR__MSG_DATA) snprintf(r->perr, sizeof r->perr, "dirty batch");
  uint32_t n = r->batch_records;
  if (xorshift(rng) % 4 == 0) n = 1 + (uint32_t)(xorshift(rng) % r->batch_records);
  for (uint32_t i = 0; i < n && *next < r->nrecords; i++) {
    uint64_t k = (*next)++;
    if (!weir__batch_fits(b, 8)) break;
    weir__batch_append(b, k, (int64_t)k, ~k, &k, 8);
  }
  return b;
}

static void *producer(void *arg) {
  run *r = arg;
  uint64_t next = 0, rng = 0x9e3779b97f4a7c15ULL ^ r->nrecords;
  int eoi_sent = 0;
  while (!eoi_sent) {
    if (!weir__chan_writable(r->ch)) {
      if (atomic_load(&r->stop)) break; /* shutdown scenario: the consumer is gone */
      side_sleep(&r->prod);
      continue;
    }
    if (!r->burst_max) {
      weir__batch *b;
      if (next < r->nrecords) {
        b = fill(r, &next, &rng);
      } else {
        b = weir__chan_batch(r->ch);
        b->kind = WEIR__MSG_EOI;
        eoi_sent = 1;
      }
      int rc = weir__chan_try_push(r->ch, b);
      if (rc != 0) {
        snprintf(r->perr, sizeof r->perr, "try_push refused after writable(): %d", rc);
        weir__batch_destroy(b);
        break;
      }
    } else {
      int n = 1 + (int)(xorshift(&rng) % (uint64_t)r->burst_max);
      for (int i = 0; i < n && !eoi_sent; i++) {
        weir__batch *b;
        if (next < r->nrecords) {
          b = fill(r, &next, &rng);
        } else {
          b = weir__chan_batch(r->ch);
          b->kind = WEIR__MSG_EOI;
          eoi_sent = 1;
        }
        weir__chan_push(r->ch, b);
      }
    }
  }
  if (atomic_load(&r->stop)) {
    /* Mid-send when the consumer stopped: one more step's emissions, which
     * can only wait on the pending list. */
    for (int i = 0; i < 3; i++) weir__chan_push(r->ch, fill(r, &next, &rng));
  } else {
    /* Wait until the pending list has drained into the ring. */
    while (!weir__chan_writable(r->ch)) side_sleep(&r->prod);
  }
  r->npend_at_exit = r->ch->npend;
  return NULL;
}

static void *consumer(void *arg) {
  run *r = arg;
  uint64_t expect = 0, batches = 0;
  for (;;) {
    weir__batch *b = weir__chan_peek(r->ch);
    if (!b) {
      if (weir__chan_wait(r->ch)) continue; /* data arrived meanwhile */
      side_sleep(&r->cons);
      continue;
    }
    if (r->stop_after_batches && batches == r->stop_after_batches) {
      /* Stop holding a peeked batch: it stays in the ring. Tell the
       * producer (outside the channel's protocol) that nobody will read. */
      atomic_store(&r->stop, 1);
      side_notify(&r->prod);
      break;
    }
    batches++;
    if (b->kind == WEIR__MSG_EOI) {
      r->got_eoi = 1;
      weir__chan_release(r->ch);
      break;
    }
    if (b->kind != WEIR__MSG_DATA && !r->err[0])
      snprintf(r->err, sizeof r->err, "unexpected batch kind %u", b->kind);
    for (uint32_t i = 0; i < b->len && !r->err[0]; i++) {
      uint64_t v;
      memcpy(&v, b->data + b->off[i], sizeof v);
      if (b->keys[i] != expect || b->ids[i] != ~expect || b->ts[i] != (int64_t)expect ||
          b->lens[i] != 8 || v != expect)
        snprintf(r->err, sizeof r->err, "record %llu: got key %llu payload %llu",
                 (unsigned long long)expect, (unsigned long long)b->keys[i], (unsigned long long)v);
      expect++;
    }
    r->got += b->len;
    weir__chan_release(r->ch);
  }
  return NULL;
}

static int g_passed, g_failed;

static void report(const char *name, int ok, const char *why) {
  if (ok) {
    g_passed++;
    printf("ok   %s\n", name);
  } else {
    g_failed++;
    printf("FAIL %s: %s\n", name, why);
  }
  fflush(stdout);
}

/* Runs one scenario; returns 1 if it passed. */
static int run_one(run *r, int verbose) {
  g_scenario = r->name;
  side_init(&r->prod);
  side_init(&r->cons);
  atomic_store(&r->stop, 0);
  r->err[0] = r->perr[0] = '\0';
  r->ch = weir__chan_create(r->cap, r->batch_records, side_notify, &r->prod, &r->cons);
  pthread_t tp, tc;
  if (pthread_create(&tc, NULL, consumer, r) || pthread_create(&tp, NULL, producer, r)) {
    fprintf(stderr, "pthread_create failed\n");
    exit(2);
  }
  pthread_join(tp, NULL);
  pthread_join(tc, NULL);
  char why[512] = "";
  if (r->err[0])
    snprintf(why, sizeof why, "consumer: %s", r->err);
  else if (r->perr[0])
    snprintf(why, sizeof why, "producer: %s", r->perr);
  else if (!r->stop_after_batches && (r->got != r->nrecords || !r->got_eoi))
    snprintf(why, sizeof why, "consumer saw %llu of %llu records, eoi %d",
             (unsigned long long)r->got, (unsigned long long)r->nrecords, r->got_eoi);
  else if (!r->stop_after_batches && r->ch->npend != 0)
    snprintf(why, sizeof why, "%u batches left pending", r->ch->npend);
  else if (r->stop_after_batches && r->npend_at_exit == 0)
    snprintf(why, sizeof why, "shutdown scenario left nothing pending");
  if (verbose || why[0])
    printf("     %s: %llu records, producer slept %llu times (%llu notifies), consumer slept "
           "%llu times (%llu notifies)\n",
           r->name, (unsigned long long)r->got, (unsigned long long)r->prod.sleeps,
           (unsigned long long)atomic_load(&r->prod.notifies), (unsigned long long)r->cons.sleeps,
           (unsigned long long)atomic_load(&r->cons.notifies));
  /* Both sides stopped: destroy frees the ring, pending and return ring. */
  weir__chan_destroy(r->ch);
  r->ch = NULL;
  side_close(&r->prod);
  side_close(&r->cons);
  if (verbose || why[0]) report(r->name, why[0] == 0, why);
  return why[0] == 0;
}

int main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  signal(SIGALRM, on_alarm);
  alarm(WATCHDOG_S);
  setvbuf(stdout, NULL, _IOLBF, 0);

  static run runs[] = {
      {.name = "try_push cap 2, 64-record batches, 2M records",
       .cap = 2,
       .batch_records = 64,
       .nrecords = 2000000},
      {.name = "push bursts of 1-5, cap 2, 64-record batches, 1M records",
       .cap = 2,
       .batch_records = 64,
       .nrecords = 1000000,
       .burst_max = 5},
      {.name = "push bursts of 1-3, cap 1, 16-record batches, 300k records",
       .cap = 1,
       .batch_records = 16,
       .nrecords = 300000,
       .burst_max = 3},
      {.name = "try_push cap 1, 1-record batches, 50k records",
       .cap = 1,
       .batch_records = 1,
       .nrecords = 50000},
  };
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) run_one(&runs[i], 1);

  /* Clean shutdown while the producer is mid-send, many times with
   * different stopping points. */
  int shut_ok = 1;
  for (int i = 0; i < 200 && shut_ok; i++) {
    run r = {.name = "shutdown mid-send",
             .cap = 1 + (uint32_t)(i % 2),
             .batch_records = 8,
             .nrecords = UINT64_MAX / 2, /* unbounded */
             .burst_max = 5,
             .stop_after_batches = 1 + (uint64_t)(i * 7 % 97)};
    shut_ok = run_one(&r, 0);
  }
  if (shut_ok) report("shutdown mid-send (200 rounds): join, then destroy", 1, "");

  alarm(0);
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}
