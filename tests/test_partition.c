/* test_partition.c: routing of records between operators (engine/src/hash.h
 * and the routers of engine/src/task.c).
 *
 * Covers: the key-group hash is stable (fixed values pinned, so an
 * accidental change of the hash, which would scatter stored keyed state, is
 * caught), covers every key group, and weir__kg_subtask maps key groups to
 * contiguous ranges covering every subtask; weir_hash_bytes values pinned;
 * and end to end through small jobs ending in a collecting sink: a hash edge
 * delivers every record of a key to exactly one subtask, the one the key
 * group says; broadcast delivers every record to every subtask; rebalance
 * spreads each producer's records evenly (N/P +- 1 per producer and
 * consumer); forward keeps subtask i -> i (chained and through channels);
 * weir_union of two sources delivers both.
 *
 * Jobs are built from tiny hand-written vtables: a source emitting records
 * whose payload names the producing subtask and its sequence number, and a
 * sink that appends what it sees to its own subtask's slot of an array.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "helpers.h"
#include "weir/job.h"

/* ------------------------------------------------------------------------ */
/* Pure functions                                                           */

typedef struct kg_pin {
  uint64_t key, mix;
  uint32_t kg128, kg1000;
} kg_pin;

/* Computed once from the implementation (MurmurHash3's fmix64; fmix64(1) is
 * the well-known 0xb456bcfc34c2cb2c) and pinned: changing them changes where
 * every stored key lives. */
static const kg_pin pins[] = {
    {0x0000000000000000ULL, 0x0000000000000000ULL, 0, 0},
    {0x0000000000000001ULL, 0xb456bcfc34c2cb2cULL, 90, 704},
    {0x0000000000000002ULL, 0x3abf2a20650683e7ULL, 29, 229},
    {0x0000000000000003ULL, 0x0b5181c509f8d8ceULL, 5, 44},
    {0x000000000000002aULL, 0x810879608e4259ccULL, 64, 504},
    {0x00000000000003e8ULL, 0xaf002c114878da41ULL, 87, 683},
    {0x00000000075bcd15ULL, 0x8f7c29206384f886ULL, 71, 560},
    {0x00000000deadbeefULL, 0xd24bd59f862a1dacULL, 105, 821},
    {0xffffffffffffffffULL, 0x64b5720b4b825f21ULL, 50, 393},
    {0x8000000000000000ULL, 0x8f780810af31a493ULL, 71, 560},
};

Test(partition, key_group_pinned_and_stable) {
  for (size_t i = 0; i < sizeof pins / sizeof pins[0]; i++) {
    const kg_pin *p = &pins[i];
    cr_assert_eq(weir__mix64(p->key), p->mix, "mix64(%#llx)", (unsigned long long)p->key);
    cr_assert_eq(weir__key_group(p->key, 128), p->kg128, "key_group(%#llx, 128) = %u, pinned %u",
                 (unsigned long long)p->key, weir__key_group(p->key, 128), p->kg128);
    cr_assert_eq(weir__key_group(p->key, 1000), p->kg1000);
  }
  /* Same value on every call (no hidden seed or state). */
  for (uint64_t k = 0; k < 10000; k++) {
    uint32_t a = weir__key_group(k * 0x9e3779b97f4a7c15ULL, 128);
    uint32_t b = weir__key_group(k * 0x9e3779b97f4a7c15ULL, 128);
    cr_assert_eq(a, b);
    cr_assert_lt(a, 128);
  }
  cr_assert_eq(weir__key_group(12345, 1), 0);
}

Test(partition, hash_bytes_pinned) {
  static const struct {
    const char *s;
    uint64_t h;
  } hp[] = {
      {"", 0x7acdbb98b1344213ULL},
      {"a", 0xf7fea87520136bf9ULL},
      {"hello", 0x7143f43d157bbfb6ULL},
      {"hello world!", 0x4a059271e9d7698fULL},
      {"0123456789abcdef0", 0x8851d39e780305e0ULL},
  };
  for (size_t i = 0; i < sizeof hp / sizeof hp[0]; i++)
    cr_assert_eq(weir_hash_bytes(hp[i].s, strlen(hp[i].s)), hp[i].h, "weir_hash_bytes(\"%s\")",
                 hp[i].s);
  /* Length is part of the hash: trailing NULs differ. */
  cr_assert_neq(weir_hash_bytes("a\0", 2), weir_hash_bytes("a", 1));
  cr_assert_neq(weir_hash_bytes("\0", 1), weir_hash_bytes("", 0));
  /* Only the bytes matter, not their address or alignment. */
  char buf[40];
  for (int off = 0; off < 8; off++) {
    memcpy(buf + off, "hello world!", 12);
    cr_assert_eq(weir_hash_bytes(buf + off, 12), 0x4a059271e9d7698fULL);
  }
}

static void check_covers_all_groups(uint64_t (*keyf)(uint64_t), const char *what) {
  uint32_t count[128] = {0};
  const uint64_t n = 100000;
  for (uint64_t i = 0; i < n; i++) count[weir__key_group(keyf(i), 128)]++;
  uint32_t lo = UINT32_MAX, hi = 0;
  for (int g = 0; g < 128; g++) {
    cr_assert_gt(count[g], 0, "%s: key group %d got no key", what, g);
    if (count[g] < lo) lo = count[g];
    if (count[g] > hi) hi = count[g];
  }
  /* Mean 781: a decent mix stays well inside [mean/2, 3*mean/2]. */
  cr_assert_gt(lo, 390, "%s: smallest key group has %u keys", what, lo);
  cr_assert_lt(hi, 1170, "%s: largest key group has %u keys", what, hi);
}

static uint64_t key_seq(uint64_t i) {
  return i;
}
static uint64_t key_mul128(uint64_t i) {
  return i * 128;
}
static uint64_t key_high(uint64_t i) {
  return i << 40;
}

Test(partition, key_groups_all_covered) {
  check_covers_all_groups(key_seq, "keys 0..99999");
  check_covers_all_groups(key_mul128, "multiples of 128");
  check_covers_all_groups(key_high, "keys in the high bits");
}

Test(partition, kg_subtask_contiguous_ranges) {
  static const uint32_t maxpars[] = {128, 7, 10, 1000, 4096};
  for (size_t m = 0; m < sizeof maxpars / sizeof maxpars[0]; m++) {
    uint32_t mp = maxpars[m];
    for (uint32_t p = 1; p <= 7 && p <= mp; p++) {
      uint32_t *groups = calloc(p, sizeof *groups);
      uint32_t prev = 0;
      for (uint32_t kg = 0; kg < mp; kg++) {
        uint32_t s = weir__kg_subtask(kg, mp, p);
        cr_assert_lt(s, p, "max_par %u p %u: group %u -> subtask %u", mp, p, kg, s);
        if (kg == 0) cr_assert_eq(s, 0);
        /* Non-decreasing in steps of at most one: contiguous ranges. */
        cr_assert(s == prev || s == prev + 1, "max_par %u p %u: group %u jumps %u -> %u", mp, p, kg,
                  prev, s);
        prev = s;
        groups[s]++;
      }
      cr_assert_eq(prev, p - 1);
      for (uint32_t s = 0; s < p; s++) {
        /* Every subtask gets floor or ceil of max_par / p groups. */
        cr_assert_geq(groups[s], mp / p, "max_par %u p %u: subtask %u has %u groups", mp, p, s,
                      groups[s]);
        cr_assert_leq(groups[s], (mp + p - 1) / p);
      }
      free(groups);
    }
  }
}

/* ------------------------------------------------------------------------ */
/* Job harness                                                              */

#define MAXP 8

/* Source: subtask s emits `n` records; record i has key (s * n + i) % kmod +
 * kbase and an 8-byte payload (s << 32 | i). */
typedef struct src_cfg {
  uint64_t n;
  uint64_t kmod, kbase;
} src_cfg;

static int src_open(weir_ctx *ctx) {
  weir_ctx_set_user(ctx, calloc(1, sizeof(uint64_t)));
  return 0;
}

static int src_run(weir_ctx *ctx, uint32_t budget) {
  const src_cfg *cfg = weir_ctx_arg(ctx);
  uint64_t *next = weir_ctx_user(ctx);
  uint64_t s = weir_ctx_subtask(ctx);
  for (uint32_t k = 0; k < budget && *next < cfg->n; k++) {
    uint64_t i = (*next)++;
    uint64_t v = s << 32 | i;
    uint8_t pl[8];
    for (int b = 0; b < 8; b++) pl[b] = (uint8_t)(v >> (8 * b));
    weir_record r = {.key = (s * cfg->n + i) % cfg->kmod + cfg->kbase,
                     .ts = (int64_t)i,
                     .id = weir_source_record_id(ctx, (uint32_t)s, i),
                     .payload = pl,
                     .len = 8};
    int rc = weir_emit_record(ctx, &r);
    if (rc) return rc;
  }
  return *next == cfg->n ? WEIR_SOURCE_DONE : WEIR_SOURCE_MORE;
}

static void src_close(weir_ctx *ctx) {
  free(weir_ctx_user(ctx));
}

static const weir_source_vt src_vt = {.size = sizeof(weir_source_vt),
                                      .name = "seq",
                                      .open = src_open,
                                      .run = src_run,
                                      .close = src_close};

typedef struct got {
  uint64_t key, payload;
} got;

/* Sink: each subtask appends to its own slot; read after the run. */
typedef struct sinkbuf {
  got *v[MAXP];
  size_t n[MAXP], cap[MAXP];
} sinkbuf;

static int sink_process(weir_ctx *ctx, const weir_record *r) {
  sinkbuf *sb = weir_ctx_arg(ctx);
  uint32_t s = weir_ctx_subtask(ctx);
  if (s >= MAXP) return weir_ctx_fail(ctx, WEIR_EINVAL, "subtask %u out of range", s);
  if (sb->n[s] == sb->cap[s]) {
    sb->cap[s] = sb->cap[s] ? 2 * sb->cap[s] : 256;
    sb->v[s] = realloc(sb->v[s], sb->cap[s] * sizeof *sb->v[s]);
  }
  sb->v[s][sb->n[s]++] = (got){r->key, weir_payload_u64(r)};
  return 0;
}

static const weir_operator_vt sink_vt = {
    .size = sizeof(weir_operator_vt), .name = "collect", .process = sink_process};

static void sink_free(sinkbuf *sb) {
  for (int s = 0; s < MAXP; s++) free(sb->v[s]);
  memset(sb, 0, sizeof *sb);
}

static size_t sink_total(const sinkbuf *sb) {
  size_t t = 0;
  for (int s = 0; s < MAXP; s++) t += sb->n[s];
  return t;
}

static weir_job *new_job(const char *name) {
  weir_job *job = NULL;
  cr_assert_eq(weir_job_create(&job, name), 0);
  return job;
}

static void run_ok(weir_job *job) {
  weir_run_opts o = {.workers = 2, .batch_records = 64, .channel_batches = 2};
  int rc = weir_job_run(job, &o);
  cr_assert_eq(rc, 0, "run: %s (%s)", weir_err_name(rc), weir_job_error(job));
}

/* Checks that every (producer, seq) of `np` producers x `n` records occurs
 * exactly `times` times in subtask slot s (or, with s == -1, across all). */
static void check_each_once(const sinkbuf *sb, int s, uint32_t np, uint64_t n, int times) {
  uint8_t *seen = calloc(np * n, 1);
  for (int t = 0; t < MAXP; t++) {
    if (s >= 0 && t != s) continue;
    for (size_t i = 0; i < sb->n[t]; i++) {
      uint64_t p = sb->v[t][i].payload >> 32, q = sb->v[t][i].payload & 0xffffffffu;
      cr_assert_lt(p, np);
      cr_assert_lt(q, n);
      seen[p * n + q]++;
    }
  }
  for (uint64_t i = 0; i < np * n; i++)
    cr_assert_eq(seen[i], times, "record %llu of producer %llu seen %d times, expected %d",
                 (unsigned long long)(i % n), (unsigned long long)(i / n), seen[i], times);
  free(seen);
}

/* ------------------------------------------------------------------------ */
/* End to end                                                               */

static void hash_edge(uint32_t psrc, uint32_t psink) {
  weir_job *job = new_job("hash");
  src_cfg cfg = {.n = 5000, .kmod = 1000};
  sinkbuf sb = {0};
  weir_stream *s = weir_source(job, "src", &src_vt, &cfg, (int)psrc);
  cr_assert_eq(weir_sink(weir_key_by(s), "sink", &sink_vt, &sb, (int)psink), 0);
  run_ok(job);
  cr_assert_eq(sink_total(&sb), psrc * cfg.n);
  check_each_once(&sb, -1, psrc, cfg.n, 1);
  int owner[1000];
  for (int k = 0; k < 1000; k++) owner[k] = -1;
  for (uint32_t t = 0; t < psink; t++) {
    for (size_t i = 0; i < sb.n[t]; i++) {
      uint64_t k = sb.v[t][i].key;
      cr_assert_lt(k, 1000);
      if (owner[k] < 0) owner[k] = (int)t;
      cr_assert_eq(owner[k], (int)t, "key %llu reached subtasks %d and %u", (unsigned long long)k,
                   owner[k], t);
      cr_assert_eq(t, weir__kg_subtask(weir__key_group(k, 128), 128, psink),
                   "key %llu went to subtask %u, its key group says otherwise",
                   (unsigned long long)k, t);
    }
  }
  for (int k = 0; k < 1000; k++) cr_assert_geq(owner[k], 0, "key %d never arrived", k);
  /* With 1000 keys every subtask owns some. */
  for (uint32_t t = 0; t < psink; t++) cr_assert_gt(sb.n[t], 0);
  sink_free(&sb);
  weir_job_destroy(job);
}

Test(partition, hash_edge_one_owner_per_key) {
  hash_edge(2, 3);
  hash_edge(1, 1);
  hash_edge(3, 1);
  hash_edge(1, 7);
  cr_assert_eq(th_leak_check(), 0);
}

Test(partition, hash_edge_honours_max_parallelism) {
  /* max_parallelism 16: key groups are mix >> 32 mod 16. */
  weir_job *job = new_job("hash16");
  src_cfg cfg = {.n = 2000, .kmod = 500};
  sinkbuf sb = {0};
  weir_stream *s = weir_source(job, "src", &src_vt, &cfg, 2);
  cr_assert_eq(weir_sink(weir_key_by(s), "sink", &sink_vt, &sb, 3), 0);
  weir_run_opts o = {.workers = 2, .batch_records = 32, .max_parallelism = 16};
  cr_assert_eq(weir_job_run(job, &o), 0, "%s", weir_job_error(job));
  for (uint32_t t = 0; t < 3; t++)
    for (size_t i = 0; i < sb.n[t]; i++)
      cr_assert_eq(t, weir__kg_subtask(weir__key_group(sb.v[t][i].key, 16), 16, 3));
  cr_assert_eq(sink_total(&sb), 4000);
  sink_free(&sb);
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}

Test(partition, broadcast_to_every_subtask) {
  weir_job *job = new_job("broadcast");
  src_cfg cfg = {.n = 3000, .kmod = 97};
  sinkbuf sb = {0};
  weir_stream *s = weir_source(job, "src", &src_vt, &cfg, 2);
  cr_assert_eq(weir_sink(weir_broadcast(s), "sink", &sink_vt, &sb, 3), 0);
  run_ok(job);
  cr_assert_eq(sink_total(&sb), 2 * cfg.n * 3);
  for (int t = 0; t < 3; t++) {
    cr_assert_eq(sb.n[t], 2 * cfg.n, "subtask %d got %zu records", t, sb.n[t]);
    check_each_once(&sb, t, 2, cfg.n, 1);
  }
  sink_free(&sb);
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}

static void rebalance_case(uint32_t psrc, uint32_t psink, uint64_t n) {
  weir_job *job = new_job("rebalance");
  src_cfg cfg = {.n = n, .kmod = 1}; /* one key: hashing would send all to one subtask */
  sinkbuf sb = {0};
  weir_stream *s = weir_source(job, "src", &src_vt, &cfg, (int)psrc);
  cr_assert_eq(weir_sink(weir_rebalance(s), "sink", &sink_vt, &sb, (int)psink), 0);
  run_ok(job);
  cr_assert_eq(sink_total(&sb), psrc * n);
  check_each_once(&sb, -1, psrc, n, 1);
  for (uint32_t p = 0; p < psrc; p++) {
    for (uint32_t t = 0; t < psink; t++) {
      uint64_t c = 0;
      for (size_t i = 0; i < sb.n[t]; i++) c += (sb.v[t][i].payload >> 32) == p;
      cr_assert(c == n / psink || c == (n + psink - 1) / psink,
                "rebalance %u->%u: producer %u sent %llu of %llu records to subtask %u", psrc,
                psink, p, (unsigned long long)c, (unsigned long long)n, t);
    }
  }
  sink_free(&sb);
  weir_job_destroy(job);
}

Test(partition, rebalance_spreads_evenly) {
  rebalance_case(2, 3, 3001);
  rebalance_case(1, 4, 4003);
  rebalance_case(3, 2, 999);
  rebalance_case(2, 2, 1);
  cr_assert_eq(th_leak_check(), 0);
}

/* Pass-through operator: re-emits each record unchanged (keeps its payload). */
static int pass_process(weir_ctx *ctx, const weir_record *r) {
  return weir_emit(ctx, r->key, r->payload, r->len);
}
static const weir_operator_vt pass_vt = {
    .size = sizeof(weir_operator_vt), .name = "pass", .process = pass_process};

Test(partition, forward_keeps_subtask) {
  /* Chained: source -> pass -> sink, all parallelism 3. */
  weir_job *job = new_job("forward-chained");
  src_cfg cfg = {.n = 2000, .kmod = 1000};
  sinkbuf sb = {0};
  weir_stream *s = weir_source(job, "src", &src_vt, &cfg, 3);
  s = weir_process(s, "pass", &pass_vt, NULL, 3);
  cr_assert_eq(weir_sink(s, "sink", &sink_vt, &sb, 3), 0);
  run_ok(job);
  for (int t = 0; t < 3; t++) {
    cr_assert_eq(sb.n[t], cfg.n);
    for (size_t i = 0; i < sb.n[t]; i++)
      cr_assert_eq(sb.v[t][i].payload >> 32, (uint64_t)t, "subtask %d got a record of subtask %llu",
                   t, (unsigned long long)(sb.v[t][i].payload >> 32));
  }
  check_each_once(&sb, -1, 3, cfg.n, 1);
  sink_free(&sb);
  weir_job_destroy(job);

  /* Not chained (the source has two outputs): forward through channels,
   * still i -> i, and in order within a subtask. */
  job = new_job("forward-channels");
  sinkbuf a = {0}, b = {0};
  s = weir_source(job, "src", &src_vt, &cfg, 3);
  cr_assert_eq(weir_sink(s, "a", &sink_vt, &a, 3), 0);
  cr_assert_eq(weir_sink(weir_forward(s), "b", &sink_vt, &b, 3), 0);
  run_ok(job);
  for (int t = 0; t < 3; t++) {
    const sinkbuf *x[2] = {&a, &b};
    for (int w = 0; w < 2; w++) {
      cr_assert_eq(x[w]->n[t], cfg.n);
      for (size_t i = 0; i < x[w]->n[t]; i++)
        cr_assert_eq(x[w]->v[t][i].payload, ((uint64_t)t << 32) | i,
                     "sink %d subtask %d record %zu out of place", w, t, i);
    }
  }
  sink_free(&a);
  sink_free(&b);
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}

Test(partition, union_of_two_sources) {
  weir_job *job = new_job("union");
  src_cfg c1 = {.n = 3000, .kmod = 1000, .kbase = 0};
  src_cfg c2 = {.n = 2000, .kmod = 1000, .kbase = 1000};
  sinkbuf sb = {0};
  weir_stream *s1 = weir_source(job, "one", &src_vt, &c1, 2);
  weir_stream *s2 = weir_source(job, "two", &src_vt, &c2, 2);
  cr_assert_eq(weir_sink(weir_union(s1, s2), "sink", &sink_vt, &sb, 2), 0);
  run_ok(job);
  cr_assert_eq(sink_total(&sb), 2 * 3000 + 2 * 2000);
  /* Forward from both: subtask t sees producer t of each source only. */
  uint64_t from1 = 0, from2 = 0;
  for (int t = 0; t < 2; t++)
    for (size_t i = 0; i < sb.n[t]; i++) {
      cr_assert_eq(sb.v[t][i].payload >> 32, (uint64_t)t);
      if (sb.v[t][i].key < 1000)
        from1++;
      else
        from2++;
    }
  cr_assert_eq(from1, 6000);
  cr_assert_eq(from2, 4000);
  sink_free(&sb);
  weir_job_destroy(job);

  /* Each input keeps its own partitioning: keyed union into 3 subtasks. */
  job = new_job("union-keyed");
  weir_stream *k1 = weir_key_by(weir_source(job, "one", &src_vt, &c1, 1));
  weir_stream *k2 = weir_key_by(weir_source(job, "two", &src_vt, &c2, 2));
  cr_assert_eq(weir_sink(weir_union(k1, k2), "sink", &sink_vt, &sb, 3), 0);
  run_ok(job);
  cr_assert_eq(sink_total(&sb), 3000 + 2 * 2000);
  from1 = from2 = 0;
  for (uint32_t t = 0; t < 3; t++)
    for (size_t i = 0; i < sb.n[t]; i++) {
      uint64_t k = sb.v[t][i].key;
      cr_assert_eq(t, weir__kg_subtask(weir__key_group(k, 128), 128, 3));
      if (k < 1000)
        from1++;
      else
        from2++;
    }
  cr_assert_eq(from1, 3000);
  cr_assert_eq(from2, 4000);
  sink_free(&sb);
  weir_job_destroy(job);
  cr_assert_eq(th_leak_check(), 0);
}
