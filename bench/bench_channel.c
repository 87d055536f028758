/* bench_channel.c: the raw hand-off rate between two threads, the ceiling
 * of any channel between tasks (docs/architecture.md §7).
 *
 * A bounded single-producer single-consumer ring of 16-byte records (key,
 * value) with C11 acquire/release indices, producer and consumer spinning
 * (no wake-ups): the producer publishes `batch` records per index update,
 * the consumer takes whatever is published and sums the values (checked).
 * It prints records/s for each batch size and, with --jsonl FILE, appends one
 * JSON object per run.
 *
 *   bench_channel [--records N] [--batches LIST] [--jsonl FILE]
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"

#define RING 4096 /* records; a power of two */

typedef struct rec {
  uint64_t key, value;
} rec;

typedef struct ring {
  _Alignas(64) _Atomic uint64_t head; /* written by the producer */
  _Alignas(64) _Atomic uint64_t tail; /* written by the consumer */
  _Alignas(64) rec slots[RING];
  uint64_t records, batch, sum;
} ring;

static void *consumer(void *p) {
  ring *r = p;
  uint64_t tail = 0, sum = 0;
  while (tail < r->records) {
    uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    for (; tail < head; tail++) sum += r->slots[tail & (RING - 1)].value;
    atomic_store_explicit(&r->tail, tail, memory_order_release);
  }
  r->sum = sum;
  return NULL;
}

/* Returns records/s, or -1 if the consumer's sum is wrong. */
static double run(uint64_t records, uint64_t batch) {
  ring *r = aligned_alloc(64, sizeof(ring));
  memset(r, 0, sizeof *r);
  r->records = records;
  r->batch = batch;
  pthread_t th;
  uint64_t t0 = weir_clock_mono_ns();
  pthread_create(&th, NULL, consumer, r);
  uint64_t head = 0, tail = 0;
  while (head < records) {
    uint64_t n = records - head < batch ? records - head : batch;
    while (head + n - tail > RING) tail = atomic_load_explicit(&r->tail, memory_order_acquire);
    for (uint64_t i = 0; i < n; i++) r->slots[(head + i) & (RING - 1)] = (rec){head + i, head + i};
    head += n;
    atomic_store_explicit(&r->head, head, memory_order_release);
  }
  pthread_join(th, NULL);
  double s = (double)(weir_clock_mono_ns() - t0) / 1e9;
  int ok = r->sum == records * (records - 1) / 2;
  free(r);
  return ok ? (double)records / s : -1;
}

int main(int argc, char **argv) {
  uint64_t records = 100000000;
  char batches[256] = "1,64,1024";
  FILE *jsonl = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--records"))
      records = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--batches"))
      snprintf(batches, sizeof batches, "%s", argv[i + 1]);
    else if (!strcmp(argv[i], "--jsonl"))
      jsonl = fopen(argv[i + 1], "a");
    else
      break;
  }
  if (argc % 2 == 0 || !records) {
    fprintf(stderr, "usage: bench_channel [--records N] [--batches LIST] [--jsonl FILE]\n");
    return 2;
  }
  for (char *t = strtok(batches, ","); t; t = strtok(NULL, ",")) {
    uint64_t b = strtoull(t, NULL, 10);
    if (b < 1 || b > RING) continue;
    double rate = run(records, b);
    if (rate < 0) {
      fprintf(stderr, "bench_channel: wrong sum at batch %llu\n", (unsigned long long)b);
      return 1;
    }
    printf("  channel  batch %5llu  %8.1fM rec/s\n", (unsigned long long)b, rate / 1e6);
    fflush(stdout);
    if (jsonl)
      fprintf(jsonl, "{\"bench\": \"channel\", \"batch\": %llu, \"rate\": %.0f}\n",
              (unsigned long long)b, rate);
  }
  if (jsonl) fclose(jsonl);
  return 0;
}
