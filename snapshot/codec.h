/* codec.h (private to snapshot/): encoding and validated decoding of every
 * stored value (weir.proto inside the envelope of envelope.h).
 *
 * The generated protobuf-c structs never leave codec.c: callers see the plain
 * structs below. Every decode checks the envelope (checksum, version, kind),
 * unpacks, and then checks the message's meaning (see each function), so a
 * value that decodes is one the store could have written. Errors are
 * WEIR_ECORRUPT or WEIR_EFORMAT with a message in err naming what is wrong
 * (and, for metadata, the checkpoint and operator), or WEIR_ENOMEM when the
 * test hook weir__codec_fail_alloc_after (test builds) made an allocation
 * fail; whatever the error, the decode has freed everything it allocated.
 */
#ifndef WEIR_SNAPSHOT_CODEC_H
#define WEIR_SNAPSHOT_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "envelope.h"
#include "snapshot/store.h"

/* The largest stored chunk value, envelope included: 65,536 bytes would take
 * 17 LMDB pages of 4 KiB with the page header, 65,520 takes 16. */
#define WEIR__CHUNK_MAX 65520u
/* Payload bytes a chunk planner may fill with entries and data; the rest of
 * the chunk is reserved for the envelope and the protobuf field overhead
 * (ids, tags, length prefixes: at most 39 bytes). */
#define WEIR__CHUNK_BUDGET (WEIR__CHUNK_MAX - WEIR__ENV_HDR - 64u)
/* The most entries the u64 chunk planner puts in one chunk: few enough
 * that their values alone (10 bytes at most each) always fit a values-only
 * chunk, so a later checkpoint can share the chunk's keys whatever its
 * values then are. */
#define WEIR__U64_SHAREABLE (WEIR__CHUNK_BUDGET / 10u)
/* Upper bounds used to reject absurd metadata before allocating for it. */
#define WEIR__MAX_U64_PER_CHUNK (WEIR__CHUNK_BUDGET / 9u)
#define WEIR__MAX_BYTES_PER_CHUNK (WEIR__CHUNK_BUDGET / 10u)
/* A timer takes 17 bytes: key and timestamp fixed, a one-byte domain. */
#define WEIR__TIMER_BYTES 17u
#define WEIR__MAX_TIMERS_PER_CHUNK (WEIR__CHUNK_BUDGET / WEIR__TIMER_BYTES)
/* A namespaced entry takes at least 17 bytes: key and ns fixed, a varint
 * value of one byte or more. */
#define WEIR__NS_BYTES 17u
#define WEIR__MAX_NS_PER_CHUNK (WEIR__CHUNK_BUDGET / WEIR__NS_BYTES)
#define WEIR__MAX_OP_NAME 1024u

/* Bytes of the protobuf varint encoding of v (1..10). */
static inline unsigned weir__varint_len(uint64_t v) {
  return 1u + (unsigned)(63 - __builtin_clzll(v | 1)) / 7u;
}

#ifdef WEIR_TEST_HOOKS
/* Test hook (fault injection, as SQLite fails the Nth allocation): after the
 * next n allocations that protobuf-c makes for decoding on the calling
 * thread succeed, the one after fails, and the hook disarms itself; the
 * decode then returns WEIR_ENOMEM. n < 0 disarms. Returns 1 if the failure
 * armed by the previous call fired since then, else 0. Compiled into test
 * builds only (WEIR_TEST_HOOKS: the tests' variant of the library, the
 * fuzzers). The codec's own allocations (weir_malloc) are not affected:
 * real exhaustion aborts, the one policy of weir/alloc.h. Thread-local:
 * other threads' decodes never see it. */
int weir__codec_fail_alloc_after(long n);
#endif

/* ---- job record ---------------------------------------------------------- */

typedef struct weir__job_rec {
  char job_id[40];
  uint64_t instance;
  uint64_t id_limit; /* ids below this may have been handed out */
  uint64_t latest;
  int finished;
  int64_t created_ms;
  char name[WEIR_STORE_NAME_MAX + 1]; /* "": not recorded (older stores) */
} weir__job_rec;

/* Encodes into a weir_malloc'd value (*out, *len; the caller frees). */
void weir__job_encode(const weir__job_rec *j, uint8_t **out, size_t *len);
/* Checks: a UUID job id, instance >= 1, id_limit >= 1, latest < id_limit,
 * finished only with a latest checkpoint, a name of at most
 * WEIR_STORE_NAME_MAX bytes. */
int weir__job_decode(const void *value, size_t len, weir__job_rec *out, char *err, size_t errlen);

/* Is s a UUID in text form (8-4-4-4-12 lower-case hex digits)? */
int weir__uuid_valid(const char *s);

/* ---- checkpoint metadata ------------------------------------------------- */

typedef struct weir__sub_entry {
  char *op;
  uint32_t subtask, parallelism;
  uint32_t record; /* chunk keys [ckpt][record][0 .. chunks) */
  uint32_t u64_chunks, bytes_chunks, blob_chunks;
  uint64_t bytes; /* stored bytes of the chunks, envelopes included */
  uint64_t u64_entries, bytes_entries, bytes_data_len, blob_len;
  uint32_t npos;
  weir_snap_position *pos;
  /* Shared keys (format 3): the u64 keys are those of record keys_record of
   * checkpoint keys_ckpt (0: none), and the u64 chunks hold values only. */
  uint64_t keys_ckpt;
  uint32_t keys_record;
  /* Namespaced u64 state (format 4). */
  uint32_t ns_chunks;
  uint64_t ns_entries;
  /* Timers and the event-time clock (format 4). */
  uint32_t timer_chunks;
  uint64_t timer_entries;
  int has_clock;
  int64_t clock;
  uint32_t state_version; /* the operator's declared state version (0: none) */
  /* Broadcast state (format 4): a byte-string stream, every route 0. */
  uint32_t bcast_chunks;
  uint64_t bcast_entries;
} weir__sub_entry;

static inline uint64_t weir__sub_chunks(const weir__sub_entry *e) {
  return (uint64_t)e->u64_chunks + e->bytes_chunks + e->blob_chunks + e->ns_chunks +
         e->timer_chunks + e->bcast_chunks;
}

typedef struct weir__ckpt_meta {
  uint32_t format_version, min_reader_version;
  char job_id[40];
  uint64_t instance, id, epoch;
  int64_t trigger_ms, complete_ms;
  uint64_t duration_ms, alignment_ms;
  uint32_t key_groups; /* 0: not recorded (older checkpoints) */
  int final;
  uint64_t total_bytes, total_chunks;
  uint32_t nsub;
  weir__sub_entry *subs; /* ordered by (op, subtask) */
  /* The identity of the job that took it (NULL / 0 / none: not recorded,
   * checkpoints of older stores). Encoding borrows them; decoding owns. */
  char *job_name;
  uint64_t fingerprint;
  uint32_t ndest;
  weir_store_dest *dests; /* ordered by op, no duplicates */
} weir__ckpt_meta;

/* Encodes m as it is (no checks: the writer builds valid metadata; tests
 * build invalid metadata on purpose). */
void weir__meta_encode(const weir__ckpt_meta *m, uint8_t **out, size_t *len);
/* Decodes the metadata stored under checkpoint `key_id`. Checks: format
 * (min_reader_version > WEIR_STORE_FORMAT: WEIR_EFORMAT), id == key_id, job id
 * a UUID and == job_id when job_id != NULL, instance >= 1; every entry: a
 * non-empty operator name, parallelism >= 1, subtask < parallelism, the same
 * parallelism for every subtask of an operator, entries strictly ordered by
 * (op, subtask) (so no duplicates), record numbers distinct, chunk counts
 * consistent with entry counts and lengths, no duplicate split; totals equal
 * the sums of the entries; a job name of at most WEIR_STORE_NAME_MAX bytes,
 * destinations with non-empty operator names in strict order and ids of at
 * most WEIR_STORE_DEST_MAX bytes. On success *out owns its strings and arrays
 * (free with weir__meta_free); on error *out is empty. */
int weir__meta_decode(const void *value, size_t len, uint64_t key_id, const char *job_id,
                      weir__ckpt_meta *out, char *err, size_t errlen);
void weir__meta_free(weir__ckpt_meta *m);

/* ---- chunks ------------------------------------------------------------------ */

typedef struct weir__chunk_id {
  uint64_t ckpt;
  uint32_t record, seq;
} weir__chunk_id;

/* Each encoder writes one complete value (envelope included) of at most
 * WEIR__CHUNK_MAX bytes into buf (WEIR__CHUNK_MAX bytes) and returns its
 * length. The caller plans the content within WEIR__CHUNK_BUDGET:
 *   u64:   sum over entries of 8 + varint_len(value);
 *   bytes: sum over entries of 8 + varint_len(klen) + varint_len(vlen), plus
 *          data_len;
 *   blob:  data_len. */
size_t weir__u64_chunk_encode(weir__chunk_id id, const uint64_t *keys, const uint64_t *values,
                              size_t n, uint8_t *buf);
/* Encodes the longest prefix of entries [0, avail) that keeps within the
 * budget (the greedy cut the u64 rule above plans) as one u64 chunk into
 * buf; *taken = the entries it holds. */
size_t weir__u64_chunk_fill(weir__chunk_id id, const uint64_t *keys, const uint64_t *values,
                            size_t avail, uint8_t *buf, size_t *taken);
/* weir__u64_chunk_fill in two steps, for a destination that must be sized
 * first (a value LMDB reserves in its page: no copy of the chunk):
 * plan returns the length of the chunk fill would make from [0, avail),
 * with *taken its entries and *vlen the bytes of their values; write
 * encodes exactly that into buf (the returned length's bytes). */
size_t weir__u64_chunk_plan(weir__chunk_id id, const uint64_t *values, size_t avail, size_t *taken,
                            size_t *vlen);
void weir__u64_chunk_write(weir__chunk_id id, const uint64_t *keys, const uint64_t *values,
                           size_t n, size_t vlen, uint8_t *buf);
/* The values-only chunk of a subtask whose keys are shared: the n values
 * (n >= 1) as one U64Values value, encoded into buf in one pass over them;
 * returns its length. Their varints must fit WEIR__CHUNK_BUDGET (any n up
 * to WEIR__U64_SHAREABLE does). */
size_t weir__u64_values_encode(weir__chunk_id id, const uint64_t *values, size_t n, uint8_t *buf);
/* The same value as weir__u64_chunk_encode, made by protobuf-c's generic
 * packer: for tests, which check that the two agree byte for byte. */
size_t weir__u64_chunk_encode_pb(weir__chunk_id id, const uint64_t *keys, const uint64_t *values,
                                 size_t n, uint8_t *buf);
size_t weir__bytes_chunk_encode(weir__chunk_id id, const uint64_t *route, const uint32_t *klen,
                                const uint32_t *vlen, size_t n, const uint8_t *data,
                                size_t data_len, uint8_t *buf);
size_t weir__blob_chunk_encode(weir__chunk_id id, const uint8_t *data, size_t data_len,
                               uint8_t *buf);
/* n namespaced entries (n >= 1; planned as 16 + varint_len(value) bytes
 * each within WEIR__CHUNK_BUDGET). */
size_t weir__ns_chunk_encode(weir__chunk_id id, const uint64_t *keys, const uint64_t *ns,
                             const uint64_t *values, size_t n, uint8_t *buf);
/* n timers (1 .. WEIR__MAX_TIMERS_PER_CHUNK). */
size_t weir__timer_chunk_encode(weir__chunk_id id, const uint64_t *keys, const int64_t *ts,
                                const uint32_t *domain, size_t n, uint8_t *buf);
/* The same blob chunk in two steps, for a value LMDB reserves (no copy
 * of the data through a buffer): len returns its length, write encodes it
 * into buf. The bytes are weir__blob_chunk_encode's (tests compare). */
size_t weir__blob_chunk_len(weir__chunk_id id, size_t data_len);
void weir__blob_chunk_write(weir__chunk_id id, const uint8_t *data, size_t data_len, uint8_t *buf);

/* A decoded chunk: views into the decoded message, valid until
 * weir__chunk_free. */
typedef struct weir__chunk {
  uint16_t kind;   /* WEIR__KIND_U64, _U64_VALUES, _BYTES, _BLOB, _NS or _TIMERS */
  uint16_t format; /* the store format it was written in */
  weir__chunk_id id;
  size_t n;                      /* entries (u64, bytes) */
  const uint64_t *keys, *values; /* u64 (keys NULL in U64_VALUES), ns; timers: keys */
  const uint64_t *ns;            /* ns */
  const int64_t *ts;             /* timers */
  const uint32_t *domain;        /* timers */
  const uint64_t *route;         /* bytes */
  const uint32_t *klen, *vlen;   /* bytes */
  const uint8_t *data;           /* bytes, blob */
  size_t data_len;               /* bytes, blob */
  void *msg_;                    /* the decoded message (private) */
} weir__chunk;

/* Decodes a chunk value. Checks: a chunk kind, the (checkpoint, record, seq)
 * inside the value equal `expect` (a value found under another key is
 * corrupt), parallel arrays of equal length (a values-only chunk: at least
 * one value), u64 keys strictly ascending in
 * the chunk's order (weir__u64_order) and
 * at least one entry, a bytes or blob chunk not empty. On error *out is
 * empty. */
int weir__chunk_decode(const void *value, size_t len, weir__chunk_id expect, weir__chunk *out,
                       char *err, size_t errlen);
void weir__chunk_free(weir__chunk *c);

/* Where `key` sorts among the u64 keys of a chunk written in store format
 * `format`: its hash rank from format 2 on, the key itself in format 1. */
static inline uint64_t weir__u64_order(uint16_t format, uint64_t key) {
  return format >= 2 ? weir_store_u64_rank(key) : key;
}

#endif
