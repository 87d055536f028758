/* store_impl.h (private to snapshot/): the store's internals shared by
 * store.c (the public API: opening, the job record, queueing writes,
 * reading), load.c (reading chunks back), verify.c (the checks in a child
 * process), reader.c (the view readers) and the writer thread's files
 * (writer.c and those of writer_impl.h), and the test hooks (testhooks.c,
 * test builds only).
 */
#ifndef WEIR_SNAPSHOT_STORE_IMPL_H
#define WEIR_SNAPSHOT_STORE_IMPL_H

#include <lmdb.h>
#include <pthread.h>
#include <stdint.h>

#include "codec.h"
#include "snapshot/store.h"

#define WEIR__ID_BLOCK 64u      /* checkpoint ids reserved per durable write */
#define WEIR__TXN_CHUNKS 64u    /* chunk puts per write transaction (~4 MB) */
#define WEIR__TXN_DELETES 1024u /* chunk deletes per write transaction */
#define WEIR__CHUNK_KEY 16u     /* [ckpt BE u64][record BE u32][seq BE u32] */

/* A queued request to the writer thread. */
typedef enum {
  WEIR__REQ_WRITE,
  WEIR__REQ_COMMIT,
  WEIR__REQ_ABORT,
  WEIR__REQ_JOB_BEGIN,
  WEIR__REQ_RESERVE,
  WEIR__REQ_FLUSH,
  WEIR__REQ_IMPORT,
  WEIR__REQ_STOP
} weir__req_type;

typedef struct weir__req {
  struct weir__req *next;
  weir__req_type type;
  uint64_t id;                   /* WRITE, COMMIT, ABORT */
  weir_subtask_snapshot snap;    /* WRITE (owned) */
  weir_store_commit_info commit; /* COMMIT */
  weir_store_done_fn done;
  void *user;
  /* Synchronous requests (JOB_BEGIN, RESERVE, FLUSH, STOP): the caller waits
   * on done_cv for `finished`; the request lives on the caller's stack. */
  int sync, finished, status;
  int new_instance; /* JOB_BEGIN */
  /* WRITE with a deferred fill: the view readers' part (reader.c; under
   * the store's rd_mu). */
  int rd_offered; /* set when offered, cleared when claimed (never by a reader) */
  int rd_filled;  /* a reader has filled it (under rd_mu) */
  struct weir__req *rd_next;
  weir__job_rec job;       /* JOB_BEGIN: result */
  uint64_t from, limit;    /* RESERVE: lowest id wanted; new durable limit */
  const char *path, *name; /* IMPORT: the savepoint file, the job's name */
  weir_savepoint_info sp;  /* IMPORT: result */
} weir__req;

/* What the writer thread remembers about a checkpoint being written. */
typedef struct weir__pending {
  struct weir__pending *next;
  uint64_t id;
  int status; /* 0, or the first failure of a write for this checkpoint */
  uint32_t next_record;
  uint32_t nsub, cap;
  weir__sub_entry *subs; /* in the order written */
} weir__pending;

/* What the writer thread remembers of an operator subtask's last write
 * that stored its u64 keys (the holder): see "shared keys" in writer.c. */
typedef struct weir__keys_memo {
  char *op;
  uint32_t subtask, parallelism;
  uint64_t n;              /* entries */
  uint64_t version;        /* weir_subtask_snapshot.u64_keys_version */
  uint64_t *keys;          /* debug builds: the n keys in hash order, which
                              a write that shares them is checked against
                              (owned: release); else NULL */
  void (*release)(void *); /* frees keys */
  uint64_t holder;         /* the checkpoint that stored them */
  uint32_t record;         /* its record */
  uint32_t nchunks;        /* its u64 chunks */
  uint32_t *counts;        /* entries of each */
  int committed;           /* the holder is committed: writes may share */
} weir__keys_memo;

/* The store. Owning thread: the one that opened it (open, close); the
 * fields under "writer thread" belong to the store-writer thread once it
 * runs; the rest is immutable after open or guarded by the named mutex. */
struct weir_store {
  char *dir, *path, *data_path; /* <dir>, <dir>/store, <dir>/store/data.mdb */
  int read_only;
  uint32_t retain, verify_timeout_s;
  uint64_t map_size;
  struct weir_lease *lease; /* fencing; NULL: none */
  MDB_env *env;
  MDB_dbi dbi_job, dbi_meta, dbi_chunks;

  pthread_mutex_t err_mu; /* guards err */
  char err[1024];

  pthread_mutex_t q_mu;   /* guards head, tail */
  pthread_cond_t q_cv;    /* the writer waits for requests */
  pthread_cond_t done_cv; /* synchronous callers wait for `finished` */
  weir__req *head, *tail;
  pthread_t writer;
  int writer_running;

  /* view readers (reader.c) */
  pthread_mutex_t rd_mu;     /* guards rd_head, rd_tail, rd_stop, rd_cpu, rd_fills and
                                every offered request's rd_filled */
  pthread_cond_t rd_cv;      /* readers wait for work */
  pthread_cond_t rd_done_cv; /* the writer waits for a fill in progress */
  weir__req *rd_head, *rd_tail;
  pthread_t *readers;
  int nreaders, rd_stop;
  uint64_t rd_cpu, rd_fills; /* the readers' CPU (ns) and fills, for the debug line */

  pthread_mutex_t id_mu; /* guards next, limit, reserving, have_job, first_id */
  pthread_cond_t id_cv;
  uint64_t next, limit; /* ids in [next, limit) are reserved durably */
  int reserving;
  int have_job;
  uint64_t first_id; /* the first id this store handed out or could have:
                        lower ids belong to earlier runs */

  /* The identity recorded (weir_store_set_identity): set by the opening
   * thread before the job begins, read by the writer thread afterwards
   * (the request queue's mutex orders the two). ident.job_name NULL: none. */
  weir__ckpt_meta ident;
  char new_job_id[40]; /* a new job's id (weir_store_identity.job_id); "": random */

  /* writer thread */
  weir__pending *pending;
  uint64_t (*fin)[2]; /* ids committed, aborted or failed by this store:
                         sorted disjoint closed ranges (few: ids finish
                         nearly in order) */
  size_t nfin, fin_cap;
  uint8_t *chunk_buf;     /* WEIR__CHUNK_MAX bytes */
  weir__keys_memo **memo; /* one per operator subtask that stored keys */
  size_t nmemo;

  /* writer thread (read after it is joined): where its time went, for the
   * debug line at close. CPU from weir_clock_thread_cpu_ns, ns. */
  struct {
    uint64_t writes, chunks, bytes, commits;
    uint64_t commits_with_writes; /* of commits: in the transaction of their last writes */
    uint64_t read_cpu, encode_cpu, txn_cpu, txn_wall, commit_cpu, commit_wall;
    uint64_t shared_writes, shared_entries;
    uint64_t fill_cpu; /* of encode_cpu: writing planned chunks' bytes (chunker_write) */
  } stats;

#ifdef WEIR_TEST_HOOKS
  int test_child_signal;    /* verify's child raises this signal */
  uint64_t test_chunk_txns; /* writer thread: chunk transactions committed */
#endif
};

/* Sets the store's error message and returns rc (for `return fail(...)`). */
int weir__store_fail(weir_store *s, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Maps an LMDB or errno return code to a WEIR_E* code. */
int weir__mdb_err(int rc);
/* A short text for an LMDB return code, with a hint for the common ones. */
const char *weir__mdb_text(int rc);

void weir__key_meta(uint8_t k[8], uint64_t id);
void weir__key_chunk(uint8_t k[WEIR__CHUNK_KEY], uint64_t id, uint32_t record, uint32_t seq);
uint64_t weir__be64(const uint8_t *p);
uint32_t weir__be32(const uint8_t *p);

/* Reads the job record in txn: 1 (and *out), 0 (none) or an error (message
 * set). */
int weir__txn_job(weir_store *s, MDB_txn *txn, MDB_dbi dbi, weir__job_rec *out);
/* weir__txn_job without a store (in a child): the message goes to err. */
int weir__read_job(MDB_txn *txn, MDB_dbi dbi, weir__job_rec *out, char *err, size_t errlen);
/* Begins a read transaction: 0 or an error (message set). */
int weir__read_txn(weir_store *s, MDB_txn **txn);

/* handover.c: the name of dir's current environment ("store.<N>" of the
 * highest complete handover, else "store") into name; 0 or -errno. */
int weir__store_env_name(const char *dir, char *name, size_t cap);

/* writer.c */
int weir__writer_start(weir_store *s);
/* Is the caller the store-writer thread (in a done() callback)? */
int weir__on_writer(weir_store *s);
/* Stops the thread after every queued request; frees pending state. */
void weir__writer_stop(weir_store *s);
/* Queues an asynchronous request (takes ownership of the heap request). */
void weir__writer_post(weir_store *s, weir__req *r);
/* Runs a synchronous request: inline when called on the writer thread (or
 * before it runs), otherwise queued and waited for. Returns r->status. */
int weir__writer_call(weir_store *s, weir__req *r);

/* retention.c */
/* Deletes the chunks of checkpoints that have neither metadata nor a
 * pending write (never completed), in short transactions. Writer thread (or
 * open, before it runs). */
int weir__collect_orphans(weir_store *s, uint64_t *chunks, uint64_t *ckpts);

/* savepoint.c: runs an IMPORT request (writer thread). */
int weir__exec_import(weir_store *s, weir__req *r);

/* reader.c */
/* Starts the view reader threads (none on one core). */
void weir__readers_start(weir_store *s);
/* Offers a queued write's deferred fill, if it has one, to the readers (the
 * writer must weir__readers_claim it before touching its snapshot). */
void weir__readers_offer(weir_store *s, weir__req *r);
/* Writer thread: makes r's snapshot the writer's again, once a reader
 * has filled it. */
void weir__readers_claim(weir_store *s, weir__req *r);
/* Stops the readers (every offered write claimed). */
void weir__readers_stop(weir_store *s);

/* load.c */
/* Reads and checks every chunk of entry e of checkpoint id, into out and
 * sink (either may be NULL); with fd >= 0 the values are read from the
 * store file. 0 or an error with its message in err. Safe in a child. */
int weir__read_entry(MDB_txn *txn, MDB_dbi dbi, uint64_t id, const weir__sub_entry *e,
                     uint64_t file_size, int fd, const weir_store_u64_sink *sink,
                     weir_subtask_snapshot *out, char *err, size_t errlen);
/* Looks up every chunk weir__read_entry would read, without decoding, each
 * value within [map, map + file_size) (map NULL: its pages touched). */
int weir__walk_entry(MDB_txn *txn, MDB_dbi dbi, uint64_t id, const weir__sub_entry *e,
                     const uint8_t *map, uint64_t file_size, char *err, size_t errlen);
/* The start of this process's mapping that holds p, or NULL. */
const uint8_t *weir__mapping_of(const void *p);
/* The size of env's data file (UINT64_MAX when it cannot be seen). */
uint64_t weir__env_file_size(MDB_env *env);

/* verify.c */
/* Walks, in a child process, every page that open and the writer's scans
 * read: 0, or an error (message set) when the store is damaged. */
int weir__verify_structure(weir_store *s);

#ifdef WEIR_TEST_HOOKS
/* testhooks.c (test builds only) */
/* Tests: makes verify's child raise `sig` before reading (0: off). */
void weir__store_test_child_signal(weir_store *s, int sig);
/* Tests: how many write transactions holding chunks the writer committed
 * (subtask writes grouped into one count once). Read it after
 * weir_store_flush, which orders it after the writer's updates. */
uint64_t weir__store_test_chunk_txns(weir_store *s);
/* Tests: how many checkpoint commits went into the transaction of their
 * last writes (writer.c, exec_writes). After weir_store_flush. */
uint64_t weir__store_test_commits_with_writes(weir_store *s);
/* Tests: the largest chunk value size and the number of chunk values of
 * checkpoint id (read transaction). */
int weir__store_test_chunk_stats(weir_store *s, uint64_t id, size_t *max_len, uint64_t *count);
/* Tests: rewrites the job record and every checkpoint's metadata without
 * the job's identity (name, fingerprint, destinations), as a weir before
 * identities wrote them: an older store, in place. Call it with nothing
 * queued. Returns 0 or an error (message set). */
int weir__store_test_strip_identity(weir_store *s);
#endif

#endif
