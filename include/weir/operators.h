/* weir/operators.h: built-in sources and operators.
 *
 * Each constructor adds one node to the job of its input stream (or `job`)
 * and returns the new stream, or NULL after recording a build error in the
 * job (see weir/job.h). Arguments are copied: nothing needs to outlive the
 * call except `user` pointers, which are borrowed for the job's lifetime.
 */
#ifndef WEIR_OPERATORS_H
#define WEIR_OPERATORS_H

#include "weir/job.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Deterministic generator: records i = 0 .. records-1 (records = 0: never
 * ends), key = i mod keys, timestamp = i, no payload. The records form
 * WEIR_GEN_SPLITS splits (split j: i = j, j + S, j + 2S, ...); subtask s of P
 * owns the splits j with j mod P == s, so with P dividing S it emits the i
 * with i mod P == s, and with P = 1 all i in order. Checkpoints store the
 * position of every split. rate: records/s over all subtasks together (0 =
 * as fast as possible). */
#define WEIR_GEN_SPLITS 128
typedef struct weir_gen_opts {
  uint64_t records;
  uint64_t keys; /* 0 is treated as 1 */
  uint64_t rate;
} weir_gen_opts;
weir_stream *weir_gen(weir_job *job, const char *name, const weir_gen_opts *opts, int parallelism);

/* The generator in event time: the records of weir_gen (same keys, ids,
 * splits, rate and positions) with event-time timestamps in milliseconds,
 * out of order by up to disorder_ms, a fraction of them far later, and a
 * watermark strategy of bounded out-of-orderness disorder_ms. Record i:
 *
 *   base_i = floor(i * 1000 / E)              E = event_rate (0: 10 * keys)
 *   h_i    = splitmix64(splitmix64(seed) ^ i)
 *   late_i = (splitmix64(h_i) >> 11) < F * 2^53         F = late_fraction
 *   ts_i   = base_i - h_i mod (D + 1) - (late_i ? D + L : 0)
 *
 * where D = disorder_ms, L = late_lag_ms (0: 1000) and splitmix64(x) is
 * the splitmix64 output for state x: z = x + 0x9e3779b97f4a7c15,
 * z = (z ^ z >> 30) * 0xbf58476d1ce4e5b9, z = (z ^ z >> 27) *
 * 0x94d049bb133111eb, z ^ z >> 31 (unsigned 64-bit arithmetic; ts_i may
 * be negative; the seed is mixed first, so that two seeds choose
 * unrelated records rather than the same ones in another order). So E
 * records share each event-time second, and a key has about E / keys
 * records per second. Each of the WEIR_GEN_SPLITS splits is a watermark
 * split of its own (weir_source_split) with the watermark "largest ts it
 * emitted - D - 1": a record with late_i = 0 is never behind it, also
 * after a restore at another parallelism; a record with late_i = 1 is
 * behind it once its split emitted records whose base is more than L + 1
 * ms later (event time downstream can lag the source, so whether an
 * operator finds it late depends on timing). Watermarks are sent at most
 * every watermark_interval_ms (0: 200); no split is ever idle.
 *
 * Bursts (session_gap_ms G > 0): the same timestamps, but keys that come
 * in per-key bursts, for session windows of gap G. Event time is cut into
 * slots of 2G ms; record i falls in slot s_i = floor(base_i / 2G), and key
 * k is on in slot s when
 *
 *   on(k, s) = splitmix64(splitmix64(seed) ^ splitmix64(k ^ splitmix64(s))) & 1
 *
 * (about half the keys in each slot, independently). Record i's key is the
 * first of k_i, k_i + 1, ..., k_i + K - 1 (mod K), k_i = i mod K, that is
 * on in s_i (k_i when none is): the records of a key that rests go to the
 * next key that is on. So every record is still emitted (ids, splits and
 * positions as without bursts), a key is on for runs of slots (2 on
 * average) and off for runs of slots, and between its bursts it rests
 * more than 2G - D ms of event time: its sessions separate while D < G.
 * Within a burst its records are at most about K * 1000 / E + D ms apart
 * (its own records, k_i = k), so a burst is one session when that is below
 * G. With K = 1 there is no other key: one session. G = 0: key i mod K.
 *
 * WEIR_EINVAL (a build error) for a late_fraction outside 0 .. 1, a struct
 * without its size or session_gap_ms above INT64_MAX / 4. A struct sized before
 * session_gap_ms (size = offsetof(weir_gen_time, session_gap_ms)) is taken
 * with G = 0. */
typedef struct weir_gen_time {
  size_t size;                    /* sizeof(weir_gen_time) */
  uint64_t event_rate;            /* E: records per event-time second; 0 = 10 * keys */
  uint64_t disorder_ms;           /* D: the bound of the disorder, and of the watermarks */
  double late_fraction;           /* F: 0 .. 1 */
  uint64_t late_lag_ms;           /* L: how much further than D a late record lags; 0 = 1000 */
  uint64_t seed;                  /* of the disorder and of the choice of late records */
  uint32_t watermark_interval_ms; /* 0 = 200 */
  uint64_t session_gap_ms;        /* G > 0: per-key bursts (sessions); 0 = none */
} weir_gen_time;
weir_stream *weir_gen_timed(weir_job *job, const char *name, const weir_gen_opts *opts,
                            const weir_gen_time *t, int parallelism);

/* Line-oriented file source: one record per line (without the newline; a
 * final line without newline counts), payload = the line, key = the line's
 * byte offset, id from (0, offset). Position = byte offset. With parallelism
 * P the file is split into P byte ranges; a subtask reads the lines that
 * start in its range.
 *
 * A bad record is a line longer than max_line bytes or one containing a NUL
 * byte. By default it stops the job with an error naming the file and the
 * byte offset (WEIR_EBADREC); with skip_bad it is counted ("bad_records")
 * and written, with its offset, to dead_letter_path (if set) instead, one
 * line per bad record: "<offset>\t<its first 200 bytes>\n", with backslash
 * and control bytes escaped (\\, \t, \r, \xHH). The dead-letter file is
 * created at the first bad record and appended to, never truncated.
 * Memory per subtask is about max_line + 128 KiB, however long a line is.
 * A missing or unreadable file fails the job when the source opens. */
typedef struct weir_file_source_opts {
  uint32_t max_line; /* 0 or above the job's maximum record size: that size */
  int skip_bad;
  const char *dead_letter_path; /* copied; NULL = none */
} weir_file_source_opts;
weir_stream *weir_file_source(weir_job *job, const char *name, const char *path,
                              const weir_file_source_opts *opts, int parallelism);

/* map: `out` starts as a copy of `in`; fn may change key, payload and len
 * (a new payload must stay valid until fn is called again). The result is
 * emitted derived from `in`: it keeps in's timestamp and gets an id derived
 * from in's id, whatever fn writes into out->ts and out->id. Return 0 or a
 * negative error. */
typedef int (*weir_map_fn)(void *user, const weir_record *in, weir_record *out);
weir_stream *weir_map(weir_stream *s, const char *name, weir_map_fn fn, void *user,
                      int parallelism);

/* filter: fn returns 1 to keep the record, 0 to drop it, or a negative error.
 * A kept record goes on unchanged (same key, timestamp, id and payload). */
typedef int (*weir_filter_fn)(void *user, const weir_record *in);
weir_stream *weir_filter(weir_stream *s, const char *name, weir_filter_fn fn, void *user,
                         int parallelism);

/* flat_map: fn emits any number of records with weir_emit*(ctx, ...). */
typedef int (*weir_flat_map_fn)(weir_ctx *ctx, void *user, const weir_record *in);
weir_stream *weir_flat_map(weir_stream *s, const char *name, weir_flat_map_fn fn, void *user,
                           int parallelism);

/* Keyed count (input must be keyed): for every record, emits (key,
 * new count of key) with the count as a u64 payload. On an input that is not
 * keyed, the job's build fails (WEIR_EPLAN, naming the operator). */
weir_stream *weir_count(weir_stream *s, const char *name, int parallelism);

/* Keyed reduce over u64 payloads (input must be keyed): the first value of a
 * key is its accumulator; each later value v makes acc = fn(user, acc, v).
 * Emits (key, acc) for every record. A payload shorter than 8 bytes counts
 * as the value 0 (weir_payload_u64). */
typedef uint64_t (*weir_reduce_fn)(void *user, uint64_t acc, uint64_t value);
weir_stream *weir_reduce(weir_stream *s, const char *name, weir_reduce_fn fn, void *user,
                         int parallelism);

/* ------------------------------------------------------------------------ */
/* Windows (docs/event-time.md §8)                                          */

typedef enum weir_window_kind {
  WEIR_WINDOW_TUMBLING = 1,
  WEIR_WINDOW_SLIDING = 2,
  /* Event time: a record at ts makes [ts, ts + length) (length: the gap);
   * windows of a key that overlap merge into one session (half-open: a
   * record one whole gap after the last one starts a new session). */
  WEIR_WINDOW_SESSION = 3
} weir_window_kind;
typedef struct weir_window_spec {
  size_t size; /* sizeof(weir_window_spec) */
  weir_window_kind kind;
  weir_time_domain time; /* WEIR_PROCESSING_TIME: tumbling only, no lateness */
  int64_t length;        /* > 0; sessions: the gap */
  int64_t slide;         /* sliding: 0 < slide <= length (tumbling, session: ignored) */
  int64_t offset;        /* windows start at offset + k * slide (tumbling: k * length) */
  /* Event time: a window fires when the clock reaches its end - 1 and
   * keeps its state until end - 1 + allowed_lateness: a record that comes
   * meanwhile joins it and fires it again at once (firing number + 1). */
  int64_t allowed_lateness;
} weir_window_spec;
/* The side output of records late for every window they belong to (the
 * window operator declares it; consume it with weir_side_output). */
#define WEIR_TAG_LATE "late"
/* Sliding windows also declare this one: a record late for some of its
 * windows but not all counts in the others and comes here once per window
 * it missed, its payload after that window's header (firing 0; read with
 * weir_window_missed_parse). So, per window, the last fired value plus its
 * late and missed records is what it would have counted on time. */
#define WEIR_TAG_MISSED "missed"

/* An incremental aggregate: the window keeps one accumulator of acc_len
 * bytes, not its records. */
typedef struct weir_aggregate_vt {
  size_t size; /* sizeof(weir_aggregate_vt) */
  const char *name;
  uint32_t acc_len; /* 1 .. 4096 */
  void (*init)(void *user, void *acc);
  int (*add)(void *user, void *acc, const weir_record *r); /* 0 or an error */
  /* The result into out (cap bytes); returns its length, called again with
   * more room when that is more than cap. */
  size_t (*result)(void *user, const void *acc, void *out, size_t cap);
  /* acc += other (another accumulator): required for session windows,
   * whose sessions merge. A table sized before this field is taken
   * without it. */
  void (*merge)(void *user, void *acc, const void *other);
} weir_aggregate_vt;
/* Records per window; the sum, minimum and maximum of the records' u64
 * payloads (weir_payload_u64). Results: a u64 (8 bytes). */
extern const weir_aggregate_vt weir_agg_count, weir_agg_sum_u64, weir_agg_min_u64, weir_agg_max_u64;

/* Keyed windows (the input must be keyed; event time needs a watermark
 * strategy upstream). One record per firing: the window's key, timestamp
 * end - 1, payload a 24-byte header (start i64, end i64, firing u32, 0
 * u32, little-endian) and the aggregate's result. Fired from a timer, its
 * id is stable on replay and across a rescale; fired again by a late
 * record, derived from that record's. Window state and timers are managed
 * keyed state: restored exactly, moved by key on a rescale. */
weir_stream *weir_window_aggregate(weir_stream *s, const char *name, const weir_window_spec *w,
                                   const weir_aggregate_vt *agg, void *user, int parallelism);

typedef struct weir_window_result {
  int64_t start, end;
  uint32_t firing; /* 1, then + 1 at every firing under allowed lateness */
  const void *value;
  uint32_t len;
} weir_window_result;
/* Reads a window result record. 0, or WEIR_EBADREC if r is not one. */
int weir_window_result_parse(const weir_record *r, weir_window_result *out);
/* Full-window functions (weir_window_apply). */
typedef struct weir_window {
  int64_t start, end;
  uint32_t firing; /* 1, then + 1 at every firing under allowed lateness */
} weir_window;
/* The records of one key in one window, in arrival order. */
typedef struct weir_window_records weir_window_records;
/* The next record into *r (payload valid during the call): 1, or 0 at the
 * end. */
int weir_window_next(weir_window_records *it, weir_record *r);
/* Writes the window's result into out (cap bytes) and its length into
 * *len; a *len above cap asks for a call with that much room (the records
 * start over). 0 or an error, as process. Must not emit. */
typedef int (*weir_window_fn)(void *user, uint64_t key, const weir_window *w,
                              weir_window_records *it, void *out, size_t cap, size_t *len);
/* As weir_window_aggregate (tumbling or sliding, event or processing time,
 * lateness, "late" and "missed"), but the window keeps its records and
 * fn makes the result from all of them when it fires (a median, a top-N).
 * Costs the records' bytes in state until the window is purged. */
weir_stream *weir_window_apply(weir_stream *s, const char *name, const weir_window_spec *w,
                               weir_window_fn fn, void *user, int parallelism);

/* A window result as a sink writes it (a weir_format_fn): "<key> <start>
 * <end> <value>", the value a u64 when 8 bytes, else its bytes; a record
 * that is no window result as "<key> ?". */
size_t weir_format_window(const weir_record *r, char *buf, size_t cap);
/* Its content operation id (a weir_opid_fn): "<key>.<end>.<firing>", so that
 * a window fired again under allowed lateness is a new effect at an
 * idempotent destination, and a replayed firing the same one. */
size_t weir_opid_window(const weir_record *r, char *buf, size_t cap);

/* Reads a "missed" record: the window it missed, value/len the record's
 * own payload, firing 0. 0, or WEIR_EBADREC. */
int weir_window_missed_parse(const weir_record *r, weir_window_result *out);

/* ------------------------------------------------------------------------ */
/* Joins (docs/event-time.md §9)                                            */

/* Called once per matching pair (a of the first input, b of the second),
 * on the join's subtask thread with their key current: emits with
 * weir_emit* (timestamp max(a->ts, b->ts) by default; ids derived from the
 * pair, the same whichever record came first). Must not keep the pointers;
 * 0 or an error, as process. */
typedef int (*weir_join_fn)(weir_ctx *ctx, void *user, const weir_record *a, const weir_record *b);
/* Records late for the join (at or below its clock when they come): they
 * join nothing and go, unchanged, to these side outputs (one per input). */
#define WEIR_TAG_LATE1 "late1"
#define WEIR_TAG_LATE2 "late2"
/* Keyed interval join (both inputs keyed, event time: a watermark strategy
 * upstream of both): a matches every b of its key with
 * a.ts - lo <= b.ts <= a.ts + hi (lo + hi >= 0). Each side's records are
 * kept (managed keyed state) until no record of the other side can match
 * them any more, as the clock tells. */
weir_stream *weir_interval_join(weir_stream *a, weir_stream *b, const char *name, int64_t lo,
                                int64_t hi, weir_join_fn fn, void *user, int parallelism);
/* Keyed window join (both inputs keyed, event time): every pair of one key
 * in one window (tumbling or sliding, no allowed lateness), handed to fn
 * when the window fires, at timestamp end - 1. A record that comes after
 * all of its windows fired goes to "late1" or "late2". */
weir_stream *weir_window_join(weir_stream *a, weir_stream *b, const char *name,
                              const weir_window_spec *w, weir_join_fn fn, void *user,
                              int parallelism);

#ifdef __cplusplus
}
#endif
#endif
