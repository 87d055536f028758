/* snapshot/store.h: the checkpoint store of a job's state directory.
 *
 * One LMDB environment per state directory (<dir>/store; <dir>/store.<epoch>
 * after a handover, see weir_store_handover), holding the job
 * record (job id, instance, checkpoint id high-water mark, finished flag),
 * the metadata of every retained completed checkpoint, and the state chunks
 * they refer to. Every stored value is wrapped in an envelope (magic,
 * format version, kind, length, CRC32C) and decoded with full validation:
 * nothing partly read or unchecked ever reaches the engine.
 *
 * Writes go through one store-writer thread owned by the store: the engine
 * queues a subtask's state (weir_store_write_subtask) as the asynchronous
 * part of a snapshot, then the checkpoint's commit (weir_store_commit),
 * which writes the metadata and the "latest completed" pointer in one write
 * transaction, last. Before that commit the checkpoint does not exist.
 *
 * No LMDB or protobuf-c type appears here. Functions return 0 or a negative
 * WEIR_E* code; store refusals are WEIR_ECORRUPT (damaged or invalid
 * content) or WEIR_EFORMAT (written by a newer weir), with a message naming
 * the checkpoint (and operator) available from weir_store_error().
 */
#ifndef WEIR_STORE_H
#define WEIR_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "weir/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The format this weir writes, and the oldest it reads. Format 2 stores u64
 * state in hash order (below); format 1 stored it in key order. Format 3
 * lets a checkpoint share the u64 keys of an earlier one (a checkpoint that
 * does sets min_reader_version 3). Format 4 adds timers, an operator's
 * event-time clock, broadcast state and namespaced u64 state (a checkpoint
 * that holds any of them sets min_reader_version 4: an older weir would
 * drop them). */
#define WEIR_STORE_FORMAT 4u
#define WEIR_STORE_SHARED_KEYS 3u
#define WEIR_STORE_TIMERS 4u
#define WEIR_STORE_BROADCAST 4u
#define WEIR_STORE_NS 4u
#define WEIR_STORE_MIN_READER 1u

/* A task's channel state (unaligned checkpoints) is stored as the operator
 * subtask "<chain head>" WEIR_STORE_CHANNELS_SUFFIX (operator names may not
 * end with it): a blob of a WEIR_STORE_CHANNELS_HEADER-byte header and the
 * overtaken records (format in engine/src/chanstate.h). The store keeps it
 * as any blob; the names are here for the engine and `weir inspect`. */
#define WEIR_STORE_CHANNELS_SUFFIX "~channels"
#define WEIR_STORE_CHANNELS_HEADER 40u

/* The hash order of u64 state: ascending key * WEIR_STORE_U64_RANK (mod
 * 2^64, a bijection of the keys). It is the order in which the engine's
 * hash tables place keys, so a snapshot read off a table is nearly sorted
 * already, and a restore fills its table front to back. */
#define WEIR_STORE_U64_RANK 0x9e3779b97f4a7c15ull
static inline uint64_t weir_store_u64_rank(uint64_t key) {
  return key * WEIR_STORE_U64_RANK;
}

/* The identity a store records (docs/checkpoints.md §8): job names of at
 * most WEIR_STORE_NAME_MAX bytes (the engine cuts longer ones), destination
 * ids of at most WEIR_STORE_DEST_MAX. */
#define WEIR_STORE_NAME_MAX 255u
#define WEIR_STORE_DEST_MAX 1023u

typedef struct weir_store weir_store;
struct weir_lease;

typedef struct weir_store_opts {
  uint32_t retain;           /* completed checkpoints kept; 0 = 3 */
  int read_only;             /* no writer thread, no collection: for listing and
                                inspecting while a job runs (LMDB readers never block) */
  uint64_t map_size;         /* bytes of address space; 0 = 64 GiB (sparse; 1 GiB on
                                32-bit hosts) */
  uint32_t verify_timeout_s; /* limit for a verifying child process (a damaged
                                store can make a reader loop); 0 = 600 */
  struct weir_lease *lease;  /* fencing (borrowed, outlives the store): every write
                                transaction checks weir_lease_check() after it begins,
                                and a commit again after it is durable; a failed check
                                fails the write with WEIR_EFENCED. NULL: no fencing */
} weir_store_opts;

/* Opens (creating if needed, unless read_only) the store under `dir`: the
 * LMDB environment <dir>/store.<N> of the highest N that a handover
 * completed, or <dir>/store if there is none.
 * Runs mdb_reader_check, checks the store's structure in a forked child (so
 * that damaged LMDB pages give WEIR_ECORRUPT, not a crash), and (unless
 * read_only) collects chunks of checkpoints that never completed and starts
 * the writer thread. read_only on a directory without a store returns
 * WEIR_ENOENT. On failure *out is NULL and, as no store exists to ask, the
 * message is logged (WEIR_LOG_E). Blocks (fsync, fork). */
int weir_store_open(weir_store **out, const char *dir, const weir_store_opts *opts);
/* Moves the store of `dir` into a fresh LMDB environment for lease epoch
 * `epoch` (<dir>/store.<epoch>, chosen from then on as the highest),
 * copying the current environment without taking any of its locks: for a
 * successor that took the lease over from an owner that may still be alive,
 * perhaps stopped inside a write transaction (snapshot/handover.c explains
 * why this is safe). Call it holding the lease, before weir_store_open.
 * Returns 0 or an error with the message in `err`. Blocks (copy, fsync). */
int weir_store_handover(const char *dir, uint64_t epoch, char *err, size_t errlen);
/* Waits for queued writes, stops the writer thread, closes. NULL: no-op.
 * Not from a done() callback (it joins the writer thread). */
void weir_store_close(weir_store *s);
/* The message of the last failed call on this store (thread-safe copy into
 * buf). */
const char *weir_store_error(weir_store *s, char *buf, size_t len);

/* ---- job record ------------------------------------------------------------ */

typedef struct weir_store_job {
  char job_id[40];                    /* UUID text, made at first start */
  uint64_t instance;                  /* 1 for the first run; +1 for each new instance */
  uint64_t next_id;                   /* the next checkpoint id this store would hand out:
                                         ids below it were handed out or skipped (read_only:
                                         the id a new writer would start at) */
  uint64_t latest;                    /* latest completed checkpoint of this instance, 0 if none */
  int finished;                       /* this instance took its final checkpoint */
  char name[WEIR_STORE_NAME_MAX + 1]; /* the job's name; "": not recorded (a store
                                         written before weir recorded it) */
} weir_store_job;

/* A sink's destination as a checkpoint records it: operator name and the
 * destination's identity ("file:/abs/dir"; never credentials). */
typedef struct weir_store_dest {
  char *op;
  char *id;
} weir_store_dest;

/* What identifies the job that writes a store, recorded in the job record
 * (name) and in every checkpoint it commits (all of it). */
typedef struct weir_store_identity {
  const char *name;     /* the job's name (cut to WEIR_STORE_NAME_MAX) */
  uint64_t fingerprint; /* its graph's (never 0: 0 means "not recorded") */
  uint32_t ndests;
  const weir_store_dest *dests; /* ordered by op (strcmp), no duplicates */
  /* The id a job created from now on gets (a UUID in text form, lower
   * case); NULL: a random one. An existing job keeps its own. */
  const char *job_id;
} weir_store_identity;

/* Sets the identity this store records from now on (copied). Call it before
 * weir_store_job_begin, which records the name in the job record of a new
 * job or instance (or of a record that has none); every later commit
 * records all of it in its checkpoint. Without it (a NULL identity), the
 * store writes what a weir before identities wrote: none (tests build such
 * stores). Returns 0, WEIR_EINVAL (a name or id too long, destinations out
 * of order, fingerprint 0, a job id that is not a UUID) or WEIR_ESTATE
 * (read-only store). */
int weir_store_set_identity(weir_store *s, const weir_store_identity *id);

/* Nonzero if s is a job id a store takes (a UUID in text form, lower case). */
int weir_store_job_id_valid(const char *s);

/* Reads the job record: returns 1 and fills *out if there is a job, 0 if
 * the store is empty. */
int weir_store_job_get(weir_store *s, weir_store_job *out);
/* Starts a run: creates the job (a new UUID v4, or the identity's job_id)
 * if none; with new_instance,
 * starts a new instance of an existing job (instance + 1, finished = 0,
 * latest = 0; checkpoint ids continue); otherwise returns the existing job
 * as it is. Synchronous and durable (runs on the writer thread, waited
 * for). WEIR_ESTATE on a read-only store. */
int weir_store_job_begin(weir_store *s, int new_instance, weir_store_job *out);
/* Hands out the next checkpoint id (the first is 1). Ids are monotonic
 * across restarts and instances and never reused: they are reserved durably
 * in blocks of 64, so a crash may leave gaps but never repeats. Blocks (one
 * durable commit) when a block is used up. WEIR_ESTATE before
 * weir_store_job_begin or on a read-only store. Thread-safe. */
int weir_store_next_id(weir_store *s, uint64_t *id);

/* ---- writing a checkpoint ------------------------------------------------- */

typedef struct weir_snap_position {
  uint32_t split;
  uint64_t offset;
} weir_snap_position;

/* The state of one operator subtask in one checkpoint. All arrays are
 * allocated with weir_malloc and owned by the struct. */
typedef struct weir_subtask_snapshot {
  char *op; /* operator name */
  uint32_t subtask, parallelism;
  /* u64 keyed state: keys[i] -> values[i], distinct keys in any order
   * (the store sorts them into hash order; cheapest when they come in it,
   * or nearly). */
  uint64_t n_u64;
  uint64_t *u64_keys, *u64_values;
  /* How u64_keys and u64_values are released: NULL = weir_free; otherwise
   * called with each (e.g. weir_pool_free). */
  void (*u64_release)(void *array);
  /* Set if u64_keys are already in strictly ascending hash order (distinct,
   * as a copy-on-write extract of a table gives them): the store then does
   * not sort them or look for repeats (a debug build checks). */
  int u64_in_order;
  /* The version of the u64 key set (0: none): two snapshots of an operator
   * subtask with the same nonzero version promise the same keys, so the
   * store may keep the keys of the first and write only the values of the
   * second (the engine bumps it whenever a key comes or goes). */
  uint64_t u64_keys_version;
  /* Byte-string keyed state: entry i has routing key b_route[i], key of
   * b_klen[i] bytes then value of b_vlen[i] bytes, entries back to back in
   * b_data. */
  uint64_t n_bytes;
  uint64_t *b_route;
  uint32_t *b_klen, *b_vlen;
  uint8_t *b_data;
  uint64_t b_data_len;
  /* Namespaced u64 state (docs/event-time.md §4.2): entry i is
   * (ns_keys[i], ns_ns[i]) -> ns_values[i], ns_keys[i] the record key it
   * moves with; each (key, ns) once, in any order. */
  uint64_t n_ns;
  uint64_t *ns_keys, *ns_ns, *ns_values;
  /* Timers (docs/event-time.md §5): timer i is at tm_ts[i] for key
   * tm_keys[i] in domain tm_domain[i] (0 event time, 1 processing time),
   * each (key, ts, domain) once, in any order. */
  uint64_t n_timers;
  uint64_t *tm_keys;
  int64_t *tm_ts;
  uint8_t *tm_domain;
  /* The operator keeps an event-time clock (has_clock), which was `clock`
   * at the cut. */
  int has_clock;
  int64_t clock;
  /* The version of the operator's state its job declared (0: none). */
  uint32_t state_version;
  /* Broadcast state (docs/event-time.md §7.2): entry i is a key of
   * bc_klen[i] bytes then a value of bc_vlen[i] bytes, entries back to
   * back in bc_data; each key once, in any order. */
  uint64_t n_bcast;
  uint32_t *bc_klen, *bc_vlen;
  uint8_t *bc_data;
  uint64_t bc_data_len;
  /* Source positions per split. */
  uint32_t npos;
  weir_snap_position *pos;
  /* Operator-managed state (the operator's snapshot callback). */
  uint8_t *blob;
  uint64_t blob_len;
  /* How the blob is released: NULL = weir_free; otherwise called with
   * (blob, blob_len), e.g. to unmap a blob mapped from a file. */
  void (*blob_release)(uint8_t *blob, uint64_t len);
  /* Deferred u64 state (a copy-on-write view, read off the owner's
   * thread): if set, fill(fill_arg, snap, 1) sets n_u64, u64_keys and
   * u64_values before anything reads them (the store does it on one of its
   * own threads, a view reader or the writer, soon after the write is
   * queued), or fill(fill_arg, snap, 0) lets go of the view unread; exactly
   * one of the two happens. */
  void (*fill)(void *arg, struct weir_subtask_snapshot *snap, int run);
  void *fill_arg;
} weir_subtask_snapshot;

/* Frees what the struct owns and zeroes it. */
void weir_subtask_snapshot_free(weir_subtask_snapshot *snap);
/* Lets go of a blob as its blob_release says (NULL: weir_free). */
void weir_blob_free(uint8_t *blob, uint64_t len, void (*release)(uint8_t *, uint64_t));
/* Runs a deferred fill now (no-op without one). */
void weir_subtask_snapshot_fill(weir_subtask_snapshot *snap);

typedef struct weir_store_written {
  uint64_t bytes;  /* stored bytes, envelopes included */
  uint32_t chunks; /* values written */
} weir_store_written;

/* Called on the writer thread when a queued request is done: status 0 or a
 * negative error (e.g. -ENOSPC, with the path and sizes in the store's
 * error message). `w` may be NULL (a failed commit). */
/* Runs on the store's writer thread, which holds forks off meanwhile
 * (weir_fork_hold): a done() callback must not fork. */
typedef void (*weir_store_done_fn)(void *user, int status, const weir_store_written *w);

/* Queues the subtask's state for checkpoint `id`. Takes ownership of *snap
 * on every return (its contents; the struct itself may be on the caller's
 * stack and is zeroed). Chunks are packed parallel arrays of at most 65,520
 * bytes with the envelope, written in short write transactions (at most 64
 * chunks each). Returns 0 (done() will run, on the writer thread) or, without
 * calling done(), WEIR_EINVAL for a malformed snapshot (no operator name,
 * subtask >= parallelism, b_data_len not the sum of the lengths, a split
 * twice in pos) or WEIR_ESTATE on a read-only store. Asynchronous failures,
 * through done(): a u64 key twice (WEIR_EINVAL), the same operator subtask
 * twice for one checkpoint or one operator with two parallelisms
 * (WEIR_EINVAL), an id not handed out by this store (WEIR_EINVAL: not yet;
 * WEIR_ESTATE: by an earlier run), a checkpoint already committed, aborted
 * or failed (WEIR_ESTATE), I/O (-ENOSPC, -EIO, ...). A failed write fails
 * its checkpoint's commit. Never blocks on I/O; thread-safe. */
int weir_store_write_subtask(weir_store *s, uint64_t id, weir_subtask_snapshot *snap,
                             weir_store_done_fn done, void *user);

typedef struct weir_store_commit_info {
  uint64_t id;
  uint64_t epoch;        /* the committing owner's lease epoch (0: no lease) */
  int64_t trigger_ms;    /* wall clock when triggered */
  uint64_t duration_ms;  /* trigger to all subtasks acknowledged */
  uint64_t trigger_ns;   /* if not 0: the trigger on weir_clock_mono_ns, and the
                            store measures duration_ms itself, from it to the
                            moment it writes the metadata (for a commit queued
                            before its writes are done) */
  uint64_t alignment_ms; /* longest alignment of any subtask */
  uint32_t key_groups;   /* key groups (max parallelism) of keyed state */
  int final;             /* the job's final checkpoint: marks it finished */
  uint32_t subtasks;     /* if not 0: the number of subtask writes the
                            checkpoint must hold (the acknowledgements the
                            coordinator counted), else the commit fails */
} weir_store_commit_info;

/* Queues the commit of checkpoint c->id: one write transaction with its
 * metadata (every subtask written for it), the latest pointer and, if
 * final, the finished flag; then retention removes checkpoints beyond the
 * last `retain` (counted over all instances) in later transactions.
 * Requests run in queue order, so the commit may be queued right behind
 * the checkpoint's own subtask writes, before they are done: it then runs
 * once they are durable (and fails if one of them failed), and if it is
 * the next request when the writer has put the last of them, its metadata
 * goes into the transaction that holds them (one durable commit for both;
 * their done() callbacks run first, once it is durable). Fails
 * (without committing, and discarding what was written for c->id) if a
 * subtask write of this checkpoint failed or c->subtasks disagrees with the
 * writes, if it was already committed, aborted or failed, or was handed out
 * before this store was opened (WEIR_ESTATE: a checkpoint is committed once,
 * by the run that wrote it), if the id was never handed out (WEIR_EINVAL) or
 * if the job was not begun (WEIR_ESTATE).
 * done() runs when durable, with w->bytes the stored bytes of the
 * checkpoint's chunks and w->chunks their number. Returns 0 or WEIR_ESTATE
 * (read-only store). */
int weir_store_commit(weir_store *s, const weir_store_commit_info *c, weir_store_done_fn done,
                      void *user);
/* Queues discarding what was written for checkpoint `id` (never committed;
 * a committed checkpoint is left alone); later writes and commits of `id`
 * fail. Returns 0 or WEIR_ESTATE (read-only store). */
int weir_store_abort(weir_store *s, uint64_t id);
/* Waits until every queued request is done (and their done() callbacks
 * returned). From a done() callback: returns at once. */
void weir_store_flush(weir_store *s);

/* ---- reading ---------------------------------------------------------------- */

typedef struct weir_store_ckpt {
  uint64_t id;
  int status;      /* 0, or WEIR_ECORRUPT / WEIR_EFORMAT: the metadata cannot be
                      read (only `id` is set; weir_store_info gives the reason) */
  int64_t time_ms; /* completion wall clock */
  uint64_t bytes;
  uint64_t duration_ms, alignment_ms;
  uint64_t instance;
  uint64_t epoch; /* lease epoch of the owner that committed it (0: none) */
  int final;
} weir_store_ckpt;

/* Completed, retained checkpoints in ascending id order (*out allocated with
 * weir_malloc, caller frees; *n = 0 and *out = NULL when none). A checkpoint
 * whose metadata is damaged is listed with status < 0 rather than hidden or
 * failing the whole list. */
int weir_store_list(weir_store *s, weir_store_ckpt **out, size_t *n);

typedef struct weir_store_subtask_info {
  char *op;
  uint32_t subtask, parallelism;
  uint64_t bytes, chunks, u64_entries, bytes_entries, blob_len;
  uint64_t keys_ckpt;     /* its u64 keys are stored with this earlier checkpoint
                             (not in bytes, chunks); 0: with its own chunks */
  uint64_t ns;            /* namespaced u64 entries (format 4) */
  uint64_t timers;        /* timers (format 4) */
  uint64_t bcast;         /* broadcast state entries (format 4) */
  int has_clock;          /* an event-time operator: its clock at the cut */
  uint32_t state_version; /* the operator's declared state version (0: none) */
  int64_t clock;
  uint32_t npos;
  weir_snap_position *pos;
} weir_store_subtask_info;

typedef struct weir_store_ckpt_info {
  weir_store_ckpt ckpt;
  char job_id[40];
  uint32_t format_version;
  uint32_t key_groups; /* 0: not recorded */
  uint32_t nsubtasks;
  weir_store_subtask_info *subtasks; /* ordered by operator name, subtask */
  /* The identity of the job that took it ("", 0 and none: not recorded). */
  char job_name[WEIR_STORE_NAME_MAX + 1];
  uint64_t fingerprint;
  uint32_t ndests;
  weir_store_dest *dests; /* ordered by op */
} weir_store_ckpt_info;

/* The metadata of completed checkpoint `id` (validated). WEIR_ENOENT if not
 * retained. Free with weir_store_ckpt_info_free. */
int weir_store_info(weir_store *s, uint64_t id, weir_store_ckpt_info **out);
void weir_store_ckpt_info_free(weir_store_ckpt_info *info);

/* Reads and checks every value of checkpoint `id` (envelopes, checksums,
 * decoding, semantic checks, no chunk missing or left over) in a forked
 * child with its own read-only environment, so that a damaged LMDB page that
 * crashes a reader is reported, not suffered: 0, WEIR_ENOENT, WEIR_ECORRUPT
 * (also when the child crashes or exceeds verify_timeout_s) or WEIR_EFORMAT,
 * with the message in weir_store_error(). Blocks until the child is done. */
int weir_store_verify(weir_store *s, uint64_t id);

/* Walks, in a forked child as weir_store_verify does, the LMDB pages that
 * loading checkpoint `id` reads: its metadata, each chunk looked up as a
 * load looks it up (every chunk present, each value inside the store
 * file, so that reading it cannot fault), and the chunk keys of the
 * checkpoint (none may belong to no subtask). A damaged tree page then
 * crashes the child, not the caller. The chunks' contents are not read
 * here: weir_store_load and weir_store_load_stream check every value
 * completely as they read it. Returns as weir_store_verify. Blocks until
 * the child is done. */
int weir_store_probe(weir_store *s, uint64_t id);

/* ---- savepoints (docs/store.md §11) ---------------------------------------- */

/* What a savepoint file holds (weir_savepoint_check, weir_store_import). */
typedef struct weir_savepoint_info {
  char job_id[40];
  char job_name[WEIR_STORE_NAME_MAX + 1];
  uint64_t id;       /* the checkpoint */
  uint64_t epoch;    /* the lease epoch of the owner that committed it */
  uint64_t instance; /* the job instance that took it */
  uint64_t id_limit; /* checkpoint ids below it were handed out by its job */
  int64_t time_ms;   /* completion wall clock */
  uint64_t bytes;    /* the file's size */
  /* weir_store_import: the latest checkpoint the store's job record named
   * before (the same job's; 0: none): above id, the import rewinds it. */
  uint64_t replaced_latest;
} weir_savepoint_info;

/* Writes completed checkpoint `id` of this store into a savepoint file at
 * `path` (replaced if it exists; written beside it and renamed, fsynced):
 * the job record, the checkpoint's metadata and every chunk it reads, so
 * that the file restores without the store. Reads in one read transaction
 * (retention may run meanwhile); any thread. *bytes: the file's size.
 * Returns 0, WEIR_ENOENT (not retained), or an error (message set). */
int weir_store_export(weir_store *s, uint64_t id, const char *path, uint64_t *bytes);
/* Reads a savepoint file whole and checks its framing, checksum, job
 * record and metadata (the chunks' contents are checked when a run
 * restores them). 0 with *info, or WEIR_ENOENT, WEIR_ECORRUPT (damaged,
 * truncated, not a savepoint), WEIR_EFORMAT (a newer format) with the
 * message in err. */
int weir_savepoint_check(const char *path, weir_savepoint_info *info, char *err, size_t errlen);
/* Copies a savepoint file into this store, before weir_store_job_begin:
 * its chunks, its checkpoint's metadata, and a job record of the
 * savepoint's job id whose latest checkpoint is the savepoint's and whose
 * ids continue above every id the savepoint's job handed out (named
 * `name`, if not NULL). A store that holds the same job keeps its record
 * (ids, instance) apart from those; one that holds another job refuses
 * (WEIR_EMISMATCH). A checkpoint already in the store byte for byte (a
 * savepoint taken in this state directory) is not copied again. Runs on
 * the writer thread, waited for; the metadata and job record are written
 * last, in one durable transaction. 0 with *info, or an error (message
 * set). */
int weir_store_import(weir_store *s, const char *path, const char *name, weir_savepoint_info *info);

/* Loads one subtask's state of completed checkpoint `id` into *out (fully
 * validated; on error *out is empty). WEIR_ENOENT if the checkpoint has no
 * such operator subtask. u64 state comes back in the order stored (hash
 * order; key order from format 1 checkpoints), positions
 * sorted by split, byte-string entries in the order they were written.
 * Reads in this process: run weir_store_verify first on a store that may be
 * damaged. */
int weir_store_load(weir_store *s, uint64_t id, const char *op, uint32_t subtask,
                    weir_subtask_snapshot *out);

/* Takes one subtask's u64 state as it is read (weir_store_load_stream). */
typedef struct weir_store_u64_sink {
  /* Called once, before any chunk, with the number of u64 entries the
   * metadata records (0 if none; bounded by the store file's size). */
  void (*begin)(void *user, uint64_t entries);
  /* Called for each u64 chunk in stored order, once the chunk passed every
   * check that concerns it and the chunks before it (envelope, checksum,
   * decoding, its keys ordered and after the previous chunk's, no more
   * entries than recorded). keys and values are valid during the call. */
  void (*chunk)(void *user, const uint64_t *keys, const uint64_t *values, size_t n);
  void *user;
} weir_store_u64_sink;

/* As weir_store_load, but the u64 state goes to `sink` chunk by chunk
 * instead of into out->u64_* (which stay empty; NULL sink: as
 * weir_store_load). Every check of weir_store_load still runs; those of the
 * whole state (totals, nothing after the last chunk) after the last chunk,
 * so on an error the sink may have seen entries: the caller discards them.
 * Opens its own read transaction: several loads may run at once, on
 * different threads. */
int weir_store_load_stream(weir_store *s, uint64_t id, const char *op, uint32_t subtask,
                           const weir_store_u64_sink *sink, weir_subtask_snapshot *out);

#ifdef __cplusplus
}
#endif
#endif
