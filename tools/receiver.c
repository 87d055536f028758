/* tools/receiver.c: owns `weir receiver`, a reference HTTP destination for the
 * sinks' tests: a libmicrohttpd server that applies every POSTed text body as
 * an *effect*, honours `Idempotency-Key` the way a careful provider does
 * (Stripe, the IETF httpapi draft), and keeps its facts in a SQLite database;
 * plus the read-only `weir receiver stats` and `weir receiver effects`.
 *
 * DESIGN. The receiver exists to make the difference between requests and
 * effects visible (docs/sinks.md §6). So it logs
 * *every* request that reaches its handler (answered, or cut off before its
 * answer) in the table `requests`, apart from the table `effects`, which has
 * one row per accepted effect. With a key, the first
 * request creates the effect and a *completion record* (key, SHA-256 of the
 * body, the first response, time) and answers 201; a repeat with the same
 * body gets the stored response again, as status 200 with
 * `Idempotent-Replayed: true` (a duplicate); a repeat with another body gets
 * 422 (a rejection, no effect); a request whose key is still in flight gets
 * 409; a request without a key is always a new effect.
 *
 * Fencing (docs/leases.md §4) is apart from deduplication: a request may carry
 * `Weir-Job: J` and `Weir-Epoch: E` (weir's http sink sends its job id and
 * lease epoch). The receiver keeps, per job, the highest epoch it has seen
 * (table `fences`, written in the request's transaction); a request with a
 * lower epoch is answered 409 with `Weir-Fenced: <highest>` and creates
 * nothing (outcome "fenced"), whatever its key. So an owner that was paused
 * and taken over can land nothing once its successor has written here; what
 * it sent *before* the successor's first request stays applied, and only a
 * key can make the successor's resend of it a duplicate. --no-dedup leaves
 * fencing on.
 *
 * The effect, its completion record and the request's log row are written in
 * ONE SQLite transaction, and the answer is sent only after it commits. The
 * two other write orders are both wrong, at a crash between the two writes:
 * effect first leaves an effect without a record, so the client's retry finds
 * no record and applies the effect a second time (effect counts 1,2,1 over the
 * three crash points); record first leaves a record without an effect, so the
 * retry is answered as a replay and the effect is lost (1,0,1). Atomic gives
 * 1,1,1. (A crash of this process loses nothing committed; in WAL mode with
 * synchronous=NORMAL, the default, a power loss may lose the last
 * transactions, but always effect and record together. --fsync sets
 * synchronous=FULL: the WAL reaches the disk at every commit, before any of
 * its answers, as at a destination that is durable when it says 201.)
 *
 * Group commit. One writer thread owns the database. A request's connection
 * thread hands it a job (the request, or a log row alone) and waits; the
 * writer takes every job waiting at that moment and carries them out in one
 * transaction, in arrival order, each inside a savepoint: a job that fails
 * is rolled back to its savepoint alone (answered 500, nothing of it
 * written), the rest of the group commits; a lost transaction (BEGIN or
 * COMMIT fails) fails them all. So each request's rows are all in a
 * committed group or none of them are, and each is answered only after its
 * group committed. With --fsync a commit costs a disk flush, and under
 * concurrency one flush then serves many requests; requests.txn numbers the
 * groups (`stats` counts them as commits). The order inside the group keeps
 * fencing exact: a request sees the epochs its predecessors in the group
 * wrote. Two requests with one key are never in a group together: the
 * in-flight claim below lasts until the commit.
 *
 * The payload hash is SHA-256 of the body bytes (implemented below, checked
 * against the FIPS 180-2 vectors by the tests through the response body). The
 * body is the operation's canonical meaning: any path accepts effects, and a
 * key is scoped to the whole receiver (one caller, one operation type).
 *
 * Retention: a completion record older than --retention is forgotten (and
 * purged, at most once a second): a reuse of its key after that is a new
 * effect, as at every real provider. The request and effect logs are never
 * purged. --no-dedup ignores keys altogether; --drop-acks P applies an effect
 * normally, then with probability P closes the connection without answering
 * (a lost acknowledgement; replays and refusals are always answered).
 *
 * A key's life here (with dedup on):
 *
 *               headers with K arrive            commit (effect + record)
 *      FREE --------------------------> IN FLIGHT ------------------------> RECORDED
 *       ^  ^                             |  another request with K: 409      |  same body: 200
 *       |  +-----------------------------+                                   |  other body: 422
 *       |    cut off, 413 or 500: nothing written                            |
 *       +--------------------------------------------------------------------+
 *                        older than --retention: forgotten
 *
 * Every request with a key holds it (in an in-memory set) from the arrival
 * of its headers until its transaction has committed, so no two
 * transactions for one key ever overlap: one key, at most one effect, under
 * any concurrency (a second request gets 409 meanwhile; a retry of a recorded
 * key claims it again for its replay). The claim is released right after
 * the commit, before the delay and the answer, so a retry after a lost or
 * slow answer finds the record.
 *
 * --latency MS[:JITTER] makes a slow destination: each answer (refusals and
 * replays too) waits MS plus a uniform 0..JITTER milliseconds after the
 * request's commit. The wait is on the connection's own thread, holding no
 * lock and no key, so N requests with 20 ms each wait them together, not N
 * x 20 ms one after the other (figures in bench/README.md, "weir receiver").
 * Since it comes after the commit, a receiver killed during it has applied
 * the effect and not answered: the client's retry is a replay. A stop
 * (SIGINT/SIGTERM) ends the waits the same way, unanswered, rather than
 * waiting up to two minutes.
 *
 * Threads: libmicrohttpd runs one thread per connection, and the request
 * handler runs on it; it hashes the body, queues its job, waits for the
 * group commit, then delays and answers. The writer thread alone uses the
 * SQLite connection. The set of keys in flight has its own mutex, so a
 * claim never waits for a transaction. The main thread only waits for
 * SIGINT/SIGTERM, then ends the delays, stops the daemon (which joins the
 * connection threads), lets the writer drain the queue (the aborted
 * requests' rows) and end, and closes the database. stats and effects open
 * the database read-only; WAL lets them read while the receiver writes.
 *
 * What libmicrohttpd answers itself (bytes that do not parse as HTTP,
 * oversized headers) never reaches the handler and is not a request here.
 */
#include "tools.h"

#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>
#include <sqlite3.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/failpoint.h"

#define RECV_MAX_BODY (1024 * 1024)                     /* larger bodies get 413 */
#define RECV_MAX_DISCARD (16 * 1024 * 1024)             /* beyond this, the connection is closed */
#define RECV_MAX_KEY 255                                /* Idempotency-Key length, as at Stripe */
#define RECV_CONN_TIMEOUT_S 10                          /* idle or slow connections are closed */
#define RECV_CONN_LIMIT 256                             /* concurrent connections (= threads) */
#define RECV_DEFAULT_RETENTION_MS (24ull * 3600 * 1000) /* 24 h, as at Stripe */
#define RECV_BUSY_TIMEOUT_MS 5000
#define RECV_APP_ID 0x77656972 /* "weir" in PRAGMA application_id */
#define RECV_DB_VERSION 3 /* PRAGMA user_version of the schema below (1: no fences, 2: no txn) */
#define RECV_MAX_LATENCY_MS 60000 /* --latency MS:JITTER, each at most this */

/* The statuses it answers (libmicrohttpd renamed some of its constants). */
enum {
  HTTP_OK = 200,
  HTTP_CREATED = 201,
  HTTP_BAD_REQUEST = 400,
  HTTP_NOT_ALLOWED = 405,
  HTTP_CONFLICT = 409,
  HTTP_TOO_LARGE = 413,
  HTTP_UNPROCESSABLE = 422,
  HTTP_SERVER_ERROR = 500
};

/* ------------------------------------------------------------------------ */
/* SHA-256 (FIPS 180-4), one-shot                                           */

static const uint32_t sha_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t ror32(uint32_t x, int n) {
  return (x >> n) | (x << (32 - n));
}

static void sha_block(uint32_t h[8], const uint8_t *p) {
  uint32_t w[64];
  for (int i = 0; i < 16; i++)
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 |
           (uint32_t)p[4 * i + 3];
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = ror32(w[i - 15], 7) ^ ror32(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = ror32(w[i - 2], 17) ^ ror32(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
  for (int i = 0; i < 64; i++) {
    uint32_t t1 =
        k + (ror32(e, 6) ^ ror32(e, 11) ^ ror32(e, 25)) + ((e & f) ^ (~e & g)) + sha_k[i] + w[i];
    uint32_t t2 = (ror32(a, 2) ^ ror32(a, 13) ^ ror32(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    k = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a;
  h[1] += b;
  h[2] += c;
  h[3] += d;
  h[4] += e;
  h[5] += f;
  h[6] += g;
  h[7] += k;
}

/* The SHA-256 digest of data[0..len) into out. Cannot fail. */
static void sha256(const void *data, size_t len, uint8_t out[32]) {
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  const uint8_t *p = data;
  size_t n = len;
  for (; n >= 64; n -= 64, p += 64) sha_block(h, p);
  uint8_t tail[128] = {0};
  if (n) memcpy(tail, p, n);
  tail[n] = 0x80;
  size_t tl = n < 56 ? 64 : 128;
  uint64_t bits = (uint64_t)len * 8;
  for (int i = 0; i < 8; i++) tail[tl - 1 - i] = (uint8_t)(bits >> (8 * i));
  sha_block(h, tail);
  if (tl == 128) sha_block(h, tail + 64);
  for (int i = 0; i < 8; i++) {
    out[4 * i] = (uint8_t)(h[i] >> 24);
    out[4 * i + 1] = (uint8_t)(h[i] >> 16);
    out[4 * i + 2] = (uint8_t)(h[i] >> 8);
    out[4 * i + 3] = (uint8_t)h[i];
  }
}

static void hex32(const uint8_t d[32], char out[65]) {
  static const char x[] = "0123456789abcdef";
  for (int i = 0; i < 32; i++) {
    out[2 * i] = x[d[i] >> 4];
    out[2 * i + 1] = x[d[i] & 15];
  }
  out[64] = '\0';
}

/* ------------------------------------------------------------------------ */
/* The database                                                             */

/* The schema (format RECV_DB_VERSION). Times are wall-clock milliseconds
 * since the epoch. */
static const char schema_sql[] =
    "CREATE TABLE requests(\n"
    "  id INTEGER PRIMARY KEY,   -- arrival order\n"
    "  t_ms INTEGER NOT NULL,\n"
    "  key TEXT,                 -- Idempotency-Key; NULL without one\n"
    "  payload_sha256 BLOB,      -- NULL when the body was not read\n"
    "  status INTEGER NOT NULL,  -- the HTTP status answered (or decided, if the ack was dropped)\n"
    "  outcome TEXT NOT NULL,    -- effect|replayed|rejected|conflict|invalid|aborted|error\n"
    "  effect INTEGER,           -- the effect created, replayed or refused\n"
    "  ack_dropped INTEGER NOT NULL DEFAULT 0,\n"
    "  txn INTEGER);             -- the group commit that wrote the row (NULL: format 1 or 2)\n"
    "CREATE TABLE effects(\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  key TEXT,\n"
    "  payload BLOB NOT NULL,\n"
    "  t_ms INTEGER NOT NULL);\n"
    "CREATE TABLE completions(  -- one per live Idempotency-Key\n"
    "  key TEXT PRIMARY KEY,\n"
    "  payload_sha256 BLOB NOT NULL,\n"
    "  status INTEGER NOT NULL,  -- the first response\n"
    "  body BLOB NOT NULL,\n"
    "  t_ms INTEGER NOT NULL,\n"
    "  effect INTEGER NOT NULL);\n"
    "CREATE INDEX completions_by_time ON completions(t_ms);\n"
    "CREATE TABLE fences(       -- per job (Weir-Job), the highest Weir-Epoch seen\n"
    "  job TEXT PRIMARY KEY,\n"
    "  epoch INTEGER NOT NULL,\n"
    "  t_ms INTEGER NOT NULL);\n";

/* What formats 1 and 2 lack; added when such a database is opened to serve.
 * Their request rows keep txn NULL: each was a transaction of its own. */
static const char upgrade_v1_sql[] = "BEGIN IMMEDIATE;\n"
                                     "CREATE TABLE fences(job TEXT PRIMARY KEY, epoch INTEGER NOT "
                                     "NULL, t_ms INTEGER NOT NULL);\n"
                                     "ALTER TABLE requests ADD COLUMN txn INTEGER;\n"
                                     "PRAGMA user_version = 3;\n"
                                     "COMMIT;";
static const char upgrade_v2_sql[] = "BEGIN IMMEDIATE;\n"
                                     "ALTER TABLE requests ADD COLUMN txn INTEGER;\n"
                                     "PRAGMA user_version = 3;\n"
                                     "COMMIT;";

enum {
  ST_BEGIN,
  ST_COMMIT,
  ST_ROLLBACK,
  ST_SAVEPOINT,
  ST_RELEASE,
  ST_ROLLBACK_TO,
  ST_GET,
  ST_PUT,
  ST_EFFECT,
  ST_LOG,
  ST_PURGE,
  ST_FENCE_GET,
  ST_FENCE_PUT,
  ST_COUNT
};

static const char *const stmt_sql[ST_COUNT] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_SAVEPOINT] = "SAVEPOINT req",
    [ST_RELEASE] = "RELEASE req",
    [ST_ROLLBACK_TO] = "ROLLBACK TO req",
    [ST_GET] = "SELECT payload_sha256, body, t_ms, effect FROM completions WHERE key = ?1",
    [ST_PUT] = "INSERT OR REPLACE INTO completions(key, payload_sha256, status, body, t_ms, effect)"
               " VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    [ST_EFFECT] = "INSERT INTO effects(key, payload, t_ms) VALUES (?1, ?2, ?3)",
    [ST_LOG] =
        "INSERT INTO requests(t_ms, key, payload_sha256, status, outcome, effect, ack_dropped, txn)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    [ST_PURGE] = "DELETE FROM completions WHERE t_ms <= ?1",
    [ST_FENCE_GET] = "SELECT epoch FROM fences WHERE job = ?1",
    [ST_FENCE_PUT] = "INSERT OR REPLACE INTO fences(job, epoch, t_ms) VALUES (?1, ?2, ?3)",
};

/* Prints "weir receiver: <what>: <sqlite message>" on stderr. */
static void db_complain(sqlite3 *db, const char *what) {
  fprintf(stderr, "weir receiver: %s: %s\n", what, db ? sqlite3_errmsg(db) : "out of memory");
}

/* Runs one statement that returns at most one integer; *out gets it (0 if no
 * row). Returns 0 or WEIR_EIO. */
static int db_int(sqlite3 *db, const char *sql, int64_t *out) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return WEIR_EIO;
  int rc = sqlite3_step(st);
  *out = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
  sqlite3_finalize(st);
  return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : WEIR_EIO;
}

/* Checks that db is a receiver database (or, if `create` and it is empty,
 * makes it one). Returns 0, WEIR_EFORMAT (another database, a newer format,
 * not SQLite at all) after a message, or WEIR_EIO. */
static int db_check(sqlite3 *db, const char *path, int create) {
  int64_t app = 0, ver = 0, tables = 0;
  if (db_int(db, "PRAGMA application_id", &app) < 0 ||
      db_int(db, "PRAGMA user_version", &ver) < 0 ||
      db_int(db, "SELECT count(*) FROM sqlite_master", &tables) < 0) {
    int ec = sqlite3_errcode(db);
    if (ec == SQLITE_NOTADB || ec == SQLITE_CORRUPT) {
      fprintf(stderr, "weir receiver: '%s' is not a receiver database: %s\n", path,
              sqlite3_errmsg(db));
      return WEIR_EFORMAT;
    }
    db_complain(db, "cannot read the database");
    return WEIR_EIO;
  }
  if (app == RECV_APP_ID) {
    if ((ver == 1 || ver == 2) && create) {
      char *err = NULL;
      if (sqlite3_exec(db, ver == 1 ? upgrade_v1_sql : upgrade_v2_sql, NULL, NULL, &err) !=
          SQLITE_OK) {
        fprintf(stderr, "weir receiver: cannot upgrade the database '%s' to format %d: %s\n", path,
                RECV_DB_VERSION, err ? err : "unknown error");
        sqlite3_free(err);
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        return WEIR_EIO;
      }
      return 0;
    }
    if (ver < 1 || ver > RECV_DB_VERSION) { /* formats 1 and 2 read as 3 without what they lack */
      fprintf(stderr, "weir receiver: '%s' has format %lld; this weir reads format %d\n", path,
              (long long)ver, RECV_DB_VERSION);
      return WEIR_EFORMAT;
    }
    return 0;
  }
  if (app != 0 || tables != 0 || !create) {
    fprintf(stderr, "weir receiver: '%s' is not a receiver database\n", path);
    return WEIR_EFORMAT;
  }
  char sql[sizeof schema_sql + 128];
  snprintf(sql, sizeof sql,
           "BEGIN IMMEDIATE;\n%sPRAGMA application_id = %d;\nPRAGMA user_version = %d;\nCOMMIT;",
           schema_sql, RECV_APP_ID, RECV_DB_VERSION);
  char *err = NULL;
  if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
    fprintf(stderr, "weir receiver: cannot create the database '%s': %s\n", path,
            err ? err : "unknown error");
    sqlite3_free(err);
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return WEIR_EIO;
  }
  return 0;
}

/* Opens the database at path. Writable: creates it if missing, switches it to
 * WAL and to synchronous=FULL (durable) or NORMAL. Returns 0 (*out set), or
 * WEIR_ENOENT (read-only and missing), WEIR_EFORMAT or WEIR_EIO after a
 * message. */
static int db_open(const char *path, int writable, int durable, sqlite3 **out) {
  *out = NULL;
  sqlite3 *db = NULL;
  int flags = writable ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE : SQLITE_OPEN_READONLY;
  int rc = sqlite3_open_v2(path, &db, flags | SQLITE_OPEN_FULLMUTEX, NULL);
  if (rc != SQLITE_OK) {
    if (!writable && access(path, F_OK) != 0) {
      fprintf(stderr, "weir receiver: no database at '%s'\n", path);
      sqlite3_close(db);
      return WEIR_ENOENT;
    }
    fprintf(stderr, "weir receiver: cannot open the database '%s': %s\n", path,
            db ? sqlite3_errmsg(db) : "out of memory");
    sqlite3_close(db);
    return WEIR_EIO;
  }
  sqlite3_busy_timeout(db, RECV_BUSY_TIMEOUT_MS);
  int c = db_check(db, path, writable);
  if (c == 0 && writable) {
    char *err = NULL;
    sqlite3_stmt *st = NULL;
    /* WAL: readers (stats) never block the writer, nor it them. */
    if (sqlite3_prepare_v2(db, "PRAGMA journal_mode = WAL", -1, &st, NULL) != SQLITE_OK ||
        sqlite3_step(st) != SQLITE_ROW ||
        strcmp((const char *)sqlite3_column_text(st, 0), "wal") != 0) {
      fprintf(stderr, "weir receiver: cannot switch '%s' to WAL mode: %s\n", path,
              sqlite3_errmsg(db));
      c = WEIR_EIO;
    }
    sqlite3_finalize(st);
    /* synchronous is a setting of the connection, not of the file: read it
     * back, so that what the receiver prints at its start is what SQLite
     * does (2 is FULL, 1 NORMAL). */
    int64_t sync = -1;
    if (c == 0 &&
        (sqlite3_exec(db, durable ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL",
                      NULL, NULL, &err) != SQLITE_OK ||
         db_int(db, "PRAGMA synchronous", &sync) < 0 || sync != (durable ? 2 : 1))) {
      fprintf(stderr, "weir receiver: cannot set synchronous = %s on '%s': %s\n",
              durable ? "FULL" : "NORMAL", path, err ? err : sqlite3_errmsg(db));
      c = WEIR_EIO;
    }
    sqlite3_free(err);
  }
  if (c < 0) {
    sqlite3_close(db);
    return c;
  }
  *out = db;
  return 0;
}

/* ------------------------------------------------------------------------ */
/* The server                                                               */

typedef struct recv_job recv_job;

/* The receiver while it serves. Configuration is read-only once the daemon
 * runs; `db`, `st`, `last_purge_ms`, `rng` and `txn` belong to the writer
 * thread (and to serve() before it starts and after it ends); the queue to
 * whoever holds q_mu; `flight` to whoever holds fl_mu; `stopping` to whoever
 * holds lat_mu. Never two of these locks at once. */
typedef struct recv_server {
  uint64_t retention_ms;
  int dedup;
  char *auth; /* --auth: the Authorization value every request must carry */
  double drop_p;
  uint64_t latency_ms, jitter_ms;

  sqlite3 *db;
  sqlite3_stmt *st[ST_COUNT];
  int64_t last_purge_ms;
  uint64_t rng; /* splitmix64 state: lost acknowledgements */
  int64_t txn;  /* the number of the last group commit (requests.txn) */

  pthread_mutex_t q_mu;
  pthread_cond_t q_cv;       /* the writer waits here for jobs */
  recv_job *q_head, *q_tail; /* jobs waiting for the next group */
  int q_stop;                /* serve() is done with the daemon: drain, then end */
  pthread_t writer;
  int writer_running;

  pthread_mutex_t fl_mu;
  char **flight; /* keys of requests in flight: claimed, not yet committed */
  size_t nflight, capflight;

  pthread_mutex_t lat_mu;
  pthread_cond_t lat_cv; /* requests in their --latency delay wait here */
  int stopping;          /* SIGINT/SIGTERM came: delays end, unanswered */
  /* splitmix64 state of the jitter. Relaxed: each fetch_add returns a
   * distinct state whichever thread makes it, and nothing else is published
   * through it. */
  _Atomic uint64_t jit_rng;
} recv_server;

/* One HTTP request, from its headers to its end (MHD's con_cls). Owned by
 * the connection's thread. */
typedef struct recv_req {
  char *key;    /* the Idempotency-Key (a copy), or NULL */
  int claimed;  /* key is in the server's in-flight set */
  int answered; /* a response is queued (or the connection dropped on purpose) */
  int logged;   /* the request has its row in `requests` */
  int too_big;  /* the body passed RECV_MAX_BODY: discarded, answered 413 */
  int fenced;   /* carries Weir-Epoch: checked against the job's fence */
  uint64_t epoch;
  char *job; /* Weir-Job (a copy; "" without one) when fenced */
  char *body;
  size_t len, cap, seen;
} recv_req;

/* The outcome of a request's transaction. */
typedef struct recv_result {
  unsigned status;
  int replayed;       /* answer with Idempotent-Replayed: true */
  int drop;           /* close the connection without answering */
  uint64_t fenced_by; /* 409: a later epoch of the job wrote here (Weir-Fenced) */
  char *body;         /* malloc'd JSON */
  size_t len;
} recv_result;

/* One request's writes, handed from its connection thread to the writer
 * thread, which carries them out inside a group commit. The connection
 * thread fills the inputs, queues the job and waits on cv until `done`; the
 * writer owns rc and res from the moment it takes the job off the queue
 * until it sets `done` (under q_mu), and never touches the job after. */
struct recv_job {
  const recv_req *r;   /* a request whose body arrived: its effect, or its
                          refusal; NULL: only the log row below */
  const uint8_t *hash; /* SHA-256 of the body, NULL if it was not read */
  const char *key;     /* the log row alone (r == NULL): key, status, outcome */
  unsigned status;
  const char *outcome;
  recv_result res; /* r's outcome */
  int rc;          /* 0, or WEIR_EIO: nothing of the job was committed */
  int done;
  pthread_cond_t cv;
  recv_job *next;
};

#define SPLITMIX_GAMMA 0x9e3779b97f4a7c15ull

static uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t splitmix64(uint64_t *s) {
  return splitmix64_mix(*s += SPLITMIX_GAMMA);
}

/* Claims key for a request in flight. Returns 0, or WEIR_EAGAIN if another
 * request holds it. */
static int flight_claim(recv_server *s, const char *key) {
  int rc = 0;
  pthread_mutex_lock(&s->fl_mu);
  for (size_t i = 0; i < s->nflight; i++) {
    if (strcmp(s->flight[i], key) == 0) {
      rc = WEIR_EAGAIN;
      break;
    }
  }
  if (rc == 0) {
    if (s->nflight == s->capflight) {
      s->capflight = s->capflight ? 2 * s->capflight : 16;
      s->flight = weir_realloc(s->flight, s->capflight * sizeof *s->flight);
    }
    s->flight[s->nflight++] = weir_strdup(key);
  }
  pthread_mutex_unlock(&s->fl_mu);
  return rc;
}

/* Releases r's claim, if it holds one. Cannot fail. */
static void flight_release(recv_server *s, recv_req *r) {
  if (!r->claimed) return;
  pthread_mutex_lock(&s->fl_mu);
  for (size_t i = 0; i < s->nflight; i++) {
    if (strcmp(s->flight[i], r->key) == 0) {
      weir_free(s->flight[i]);
      s->flight[i] = s->flight[--s->nflight];
      break;
    }
  }
  pthread_mutex_unlock(&s->fl_mu);
  r->claimed = 0;
}

/* Appends s to buf as a JSON string (or null). buf has room: callers size it
 * for 2 * strlen + 3. */
static size_t json_str_to(char *buf, const char *s) {
  if (s == NULL) {
    memcpy(buf, "null", 4);
    return 4;
  }
  size_t n = 0;
  buf[n++] = '"';
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') buf[n++] = '\\';
    buf[n++] = *s; /* keys are printable ASCII (checked) */
  }
  buf[n++] = '"';
  return n;
}

/* {"effect": N, "key": K, "sha256": H} or {"error": MSG, "key": K}: a
 * malloc'd body in res. Cannot fail. */
static void make_body(recv_result *res, int64_t effect, const char *key, const uint8_t *hash,
                      const char *error) {
  size_t klen = key ? strlen(key) : 0;
  size_t cap = 2 * klen + (error ? strlen(error) : 0) + 200;
  char *b = weir_malloc(cap);
  size_t n = 0;
  if (error) {
    n += (size_t)snprintf(b + n, cap - n, "{\"error\": \"%s\", \"key\": ", error);
    n += json_str_to(b + n, key);
    n += (size_t)snprintf(b + n, cap - n, "}\n");
  } else {
    char hx[65];
    hex32(hash, hx);
    n += (size_t)snprintf(b + n, cap - n, "{\"effect\": %lld, \"key\": ", (long long)effect);
    n += json_str_to(b + n, key);
    n += (size_t)snprintf(b + n, cap - n, ", \"sha256\": \"%s\"}\n", hx);
  }
  res->body = b;
  res->len = n;
}

/* Steps a statement that returns no row, then resets it. Returns 0 or
 * WEIR_EIO. */
static int st_done(sqlite3_stmt *st) {
  int rc = sqlite3_step(st);
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  return rc == SQLITE_DONE ? 0 : WEIR_EIO;
}

static void bind_key(sqlite3_stmt *st, int i, const char *key) {
  if (key)
    sqlite3_bind_text(st, i, key, -1, SQLITE_STATIC);
  else
    sqlite3_bind_null(st, i);
}

/* Appends a row to `requests`, as part of the current group commit. effect <
 * 0: none. Writer thread. Returns 0 or WEIR_EIO. */
static int log_request(recv_server *s, int64_t now, const char *key, const uint8_t *hash,
                       unsigned status, const char *outcome, int64_t effect, int dropped) {
  sqlite3_stmt *st = s->st[ST_LOG];
  sqlite3_bind_int64(st, 1, now);
  bind_key(st, 2, key);
  if (hash)
    sqlite3_bind_blob(st, 3, hash, 32, SQLITE_STATIC);
  else
    sqlite3_bind_null(st, 3);
  sqlite3_bind_int(st, 4, (int)status);
  sqlite3_bind_text(st, 5, outcome, -1, SQLITE_STATIC);
  if (effect >= 0)
    sqlite3_bind_int64(st, 6, effect);
  else
    sqlite3_bind_null(st, 6);
  sqlite3_bind_int(st, 7, dropped);
  sqlite3_bind_int64(st, 8, s->txn);
  return st_done(st);
}

/* Applies a new effect: the effect row, the completion record (if key and
 * dedup) and the request's row. Writer thread, inside a group. */
static int apply_effect(recv_server *s, int64_t now, const recv_req *r, const uint8_t *hash,
                        recv_result *res) {
  sqlite3_stmt *st = s->st[ST_EFFECT];
  bind_key(st, 1, r->key);
  sqlite3_bind_blob(st, 2, r->body ? r->body : "", (int)r->len, SQLITE_STATIC);
  sqlite3_bind_int64(st, 3, now);
  if (st_done(st) < 0) return WEIR_EIO;
  int64_t effect = sqlite3_last_insert_rowid(s->db);
  make_body(res, effect, r->key, hash, NULL);
  res->status = HTTP_CREATED;
  if (s->drop_p > 0) res->drop = (double)(splitmix64(&s->rng) >> 11) * 0x1.0p-53 < s->drop_p;
  if (r->key && s->dedup) {
    st = s->st[ST_PUT];
    sqlite3_bind_text(st, 1, r->key, -1, SQLITE_STATIC);
    sqlite3_bind_blob(st, 2, hash, 32, SQLITE_STATIC);
    sqlite3_bind_int(st, 3, (int)res->status);
    sqlite3_bind_blob(st, 4, res->body, (int)res->len, SQLITE_STATIC);
    sqlite3_bind_int64(st, 5, now);
    sqlite3_bind_int64(st, 6, effect);
    if (st_done(st) < 0) return WEIR_EIO;
  }
  return log_request(s, now, r->key, hash, res->status, "effect", effect, res->drop);
}

/* Decides a keyed request against its completion record: replay, reject, or
 * (no live record) a new effect. Writer thread, inside a group. */
static int decide_keyed(recv_server *s, int64_t now, const recv_req *r, const uint8_t *hash,
                        recv_result *res) {
  int64_t horizon = now - (int64_t)s->retention_ms;
  if (now - s->last_purge_ms >= 1000) {
    sqlite3_bind_int64(s->st[ST_PURGE], 1, horizon);
    if (st_done(s->st[ST_PURGE]) < 0) return WEIR_EIO;
    s->last_purge_ms = now;
  }
  sqlite3_stmt *st = s->st[ST_GET];
  sqlite3_bind_text(st, 1, r->key, -1, SQLITE_STATIC);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW && sqlite3_column_int64(st, 2) > horizon) {
    int64_t effect = sqlite3_column_int64(st, 3);
    const void *h = sqlite3_column_blob(st, 0);
    int same = sqlite3_column_bytes(st, 0) == 32 && memcmp(h, hash, 32) == 0;
    if (same) {
      size_t n = (size_t)sqlite3_column_bytes(st, 1);
      res->body = weir_malloc(n + 1);
      if (n) memcpy(res->body, sqlite3_column_blob(st, 1), n);
      res->len = n;
      res->status = HTTP_OK;
      res->replayed = 1;
    } else {
      make_body(res, effect, r->key, NULL, "Idempotency-Key reused with another payload");
      res->status = HTTP_UNPROCESSABLE;
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return log_request(s, now, r->key, hash, res->status, same ? "replayed" : "rejected", effect,
                       0);
  }
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return WEIR_EIO;
  return apply_effect(s, now, r, hash, res); /* new, or its record expired */
}

/* Fencing: a request with Weir-Epoch e for job j is refused (409, outcome
 * "fenced", no effect) if a request with a higher epoch of j came before;
 * otherwise j's fence moves up to e. Inside the request's part of the group,
 * so the fence and the effect it admits commit together, and a later request
 * of the same group sees the fence moved. Sets *refused. */
static int check_fence(recv_server *s, int64_t now, const recv_req *r, const uint8_t *hash,
                       recv_result *res, int *refused) {
  *refused = 0;
  sqlite3_stmt *st = s->st[ST_FENCE_GET];
  sqlite3_bind_text(st, 1, r->job, -1, SQLITE_STATIC);
  int rc = sqlite3_step(st);
  int have = rc == SQLITE_ROW;
  uint64_t cur = have ? (uint64_t)sqlite3_column_int64(st, 0) : 0;
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return WEIR_EIO;
  if (have && cur > r->epoch) {
    char msg[160];
    snprintf(msg, sizeof msg, "epoch %llu of this job is fenced: epoch %llu wrote here since",
             (unsigned long long)r->epoch, (unsigned long long)cur);
    make_body(res, 0, r->key, NULL, msg);
    res->status = HTTP_CONFLICT;
    res->fenced_by = cur;
    *refused = 1;
    return log_request(s, now, r->key, hash, res->status, "fenced", -1, 0);
  }
  if (have && cur == r->epoch) return 0;
  st = s->st[ST_FENCE_PUT];
  sqlite3_bind_text(st, 1, r->job, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 2, (int64_t)r->epoch);
  sqlite3_bind_int64(st, 3, now);
  return st_done(st);
}

/* A job's writes: a request's transaction (fence, then key, then effect), or
 * a log row alone. Writer thread, inside a group; the caller makes them all
 * or nothing. Returns 0 with j->res filled, or WEIR_EIO. */
static int run_job(recv_server *s, recv_job *j) {
  int64_t now = weir_clock_wall_ms();
  const recv_req *r = j->r;
  if (r == NULL) return log_request(s, now, j->key, j->hash, j->status, j->outcome, -1, 0);
  int rc = 0, refused = 0;
  if (r->fenced) rc = check_fence(s, now, r, j->hash, &j->res, &refused);
  if (rc == 0 && !refused)
    rc = r->key && s->dedup ? decide_keyed(s, now, r, j->hash, &j->res)
                            : apply_effect(s, now, r, j->hash, &j->res);
  return rc;
}

static void job_fail(recv_job *j) {
  weir_free(j->res.body);
  memset(&j->res, 0, sizeof j->res);
  j->rc = WEIR_EIO;
}

/* Group commit: the jobs of `group` (a list, in arrival order) in ONE SQLite
 * transaction. Each job runs inside a savepoint, so one that fails leaves
 * nothing behind and the others still commit; if the transaction itself is
 * lost (BEGIN or COMMIT fails, or SQLite rolled it all back), every job
 * fails. Writer thread; sets each job's rc. */
static void commit_group(recv_server *s, recv_job *group) {
  int rc = st_done(s->st[ST_BEGIN]);
  if (rc < 0) {
    db_complain(s->db, "cannot begin a transaction");
    for (recv_job *j = group; j; j = j->next) job_fail(j);
    return;
  }
  s->txn++;
  int lost = 0;
  for (recv_job *j = group; j && !lost; j = j->next) {
    j->rc = st_done(s->st[ST_SAVEPOINT]);
    if (j->rc == 0) j->rc = run_job(s, j);
    if (j->rc == 0) j->rc = weir_failpoint("receiver.request");
    if (j->rc == 0) j->rc = st_done(s->st[ST_RELEASE]);
    if (j->rc == 0) continue;
    db_complain(s->db, "a request's transaction failed");
    job_fail(j);
    /* After some errors (a full disk, an I/O error) SQLite has rolled back
     * the whole transaction, the earlier jobs' writes with it. */
    if (sqlite3_get_autocommit(s->db))
      lost = 1;
    else if (st_done(s->st[ST_ROLLBACK_TO]) < 0 || st_done(s->st[ST_RELEASE]) < 0)
      lost = 1;
  }
  if (!lost) rc = weir_failpoint("receiver.group_commit");
  if (!lost && rc == 0) rc = st_done(s->st[ST_COMMIT]);
  if (lost || rc < 0) {
    db_complain(s->db, "a group commit failed");
    if (!sqlite3_get_autocommit(s->db)) st_done(s->st[ST_ROLLBACK]);
    for (recv_job *j = group; j; j = j->next) job_fail(j);
  }
}

/* The writer thread: takes every job waiting, commits them as one group,
 * wakes their connection threads, again until serve() stops it with an empty
 * queue. */
static void *writer_main(void *arg) {
  recv_server *s = arg;
  pthread_mutex_lock(&s->q_mu);
  for (;;) {
    while (s->q_head == NULL && !s->q_stop) pthread_cond_wait(&s->q_cv, &s->q_mu);
    recv_job *group = s->q_head;
    if (group == NULL) break;
    s->q_head = s->q_tail = NULL;
    pthread_mutex_unlock(&s->q_mu);
    commit_group(s, group);
    pthread_mutex_lock(&s->q_mu);
    /* The waiter may free its job as soon as it sees `done`, which it reads
     * under q_mu: so next is read first, and the signal given under q_mu. */
    for (recv_job *j = group, *next; j; j = next) {
      next = j->next;
      j->done = 1;
      pthread_cond_signal(&j->cv);
    }
  }
  pthread_mutex_unlock(&s->q_mu);
  return NULL;
}

/* Queues j for the next group commit and waits until it is done. Connection
 * threads; blocks for one commit or two. Returns j->rc. */
static int submit(recv_server *s, recv_job *j) {
  pthread_cond_init(&j->cv, NULL);
  j->done = 0;
  j->next = NULL;
  pthread_mutex_lock(&s->q_mu);
  if (s->q_tail)
    s->q_tail->next = j;
  else
    s->q_head = j;
  s->q_tail = j;
  pthread_cond_signal(&s->q_cv);
  while (!j->done) pthread_cond_wait(&j->cv, &s->q_mu);
  pthread_mutex_unlock(&s->q_mu);
  pthread_cond_destroy(&j->cv);
  return j->rc;
}

/* Logs a request that creates nothing (409, 4xx, aborted, error). Returns 0
 * or WEIR_EIO (after a message). */
static int log_alone(recv_server *s, const char *key, const uint8_t *hash, unsigned status,
                     const char *outcome) {
  recv_job j = {.hash = hash, .key = key, .status = status, .outcome = outcome};
  return submit(s, &j);
}

/* The transaction of a request whose body has arrived. Returns 0 with res
 * filled (committed), or WEIR_EIO (nothing applied). */
static int process(recv_server *s, const recv_req *r, recv_result *res) {
  uint8_t hash[32];
  sha256(r->body ? r->body : "", r->len, hash);
  recv_job j = {.r = r, .hash = hash};
  int rc = submit(s, &j);
  *res = j.res;
  return rc;
}

/* The --latency delay before an answer: latency plus a uniform draw in
 * [0, jitter] milliseconds. Waits on a condition variable, holding nothing
 * else, so that any number of requests wait at once. Returns 0 once it has
 * passed, or -1 if the receiver is stopping (the answer is then not sent:
 * what a kill during the delay does too). */
static int delay(recv_server *s) {
  uint64_t ms = s->latency_ms;
  if (s->jitter_ms) {
    uint64_t z = atomic_fetch_add_explicit(&s->jit_rng, SPLITMIX_GAMMA, memory_order_relaxed);
    ms += splitmix64_mix(z + SPLITMIX_GAMMA) % (s->jitter_ms + 1);
  }
  if (ms == 0) return 0;
  uint64_t end = weir_clock_mono_ns() + ms * 1000000;
  int stopping = 0;
  pthread_mutex_lock(&s->lat_mu);
  for (;;) {
    stopping = s->stopping;
    uint64_t now = weir_clock_mono_ns();
    if (stopping || now >= end) break;
    /* timedwait takes a CLOCK_REALTIME deadline (the portable one); waiting
     * in steps of at most 100 ms measured on the monotonic clock keeps a
     * jump of the wall clock from stretching the delay. */
    uint64_t step = end - now < 100000000 ? end - now : 100000000;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + step;
    ts.tv_sec += (time_t)(ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    pthread_cond_timedwait(&s->lat_cv, &s->lat_mu, &ts);
  }
  pthread_mutex_unlock(&s->lat_mu);
  return stopping ? -1 : 0;
}

/* Queues a response. Returns MHD's verdict. */
static enum MHD_Result respond(struct MHD_Connection *c, unsigned status, const char *body,
                               size_t len, int replayed, const char *extra_name,
                               const char *extra_value) {
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
  if (resp == NULL) return MHD_NO;
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
  if (replayed) MHD_add_response_header(resp, "Idempotent-Replayed", "true");
  if (extra_name) MHD_add_response_header(resp, extra_name, extra_value);
  enum MHD_Result ret = MHD_queue_response(c, status, resp);
  MHD_destroy_response(resp);
  return ret;
}

/* Logs a request that creates nothing (409, 4xx, 5xx), then answers it after
 * the --latency delay. */
static enum MHD_Result refuse(recv_server *s, struct MHD_Connection *c, recv_req *r,
                              unsigned status, const char *outcome, const char *msg,
                              const char *extra_name, const char *extra_value) {
  uint8_t hash[32];
  int have_hash = r->len > 0 && !r->too_big;
  if (have_hash) sha256(r->body, r->len, hash);
  log_alone(s, r->key, have_hash ? hash : NULL, status, outcome);
  r->logged = 1;
  r->answered = 1;
  if (delay(s) < 0) return MHD_NO;
  recv_result res = {0};
  make_body(&res, 0, r->key, NULL, msg);
  enum MHD_Result ret = respond(c, status, res.body, res.len, 0, extra_name, extra_value);
  weir_free(res.body);
  return ret;
}

/* A key is 1..RECV_MAX_KEY printable ASCII characters. */
static int key_ok(const char *k) {
  size_t n = strlen(k);
  if (n == 0 || n > RECV_MAX_KEY) return 0;
  for (; *k; k++)
    if ((unsigned char)*k < 0x20 || (unsigned char)*k > 0x7e) return 0;
  return 1;
}

/* The first call for a request: its headers have arrived, its body not yet. */
static enum MHD_Result on_headers(recv_server *s, struct MHD_Connection *c, recv_req *r,
                                  const char *method) {
  if (strcmp(method, MHD_HTTP_METHOD_POST) != 0)
    return refuse(s, c, r, HTTP_NOT_ALLOWED, "invalid", "only POST is accepted",
                  MHD_HTTP_HEADER_ALLOW, "POST");
  if (s->auth) {
    const char *au = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!au || strcmp(au, s->auth) != 0)
      return refuse(s, c, r, 401, "invalid", "missing or wrong Authorization", "WWW-Authenticate",
                    "Bearer");
  }
  const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
  if (cl) {
    char *end = NULL;
    errno = 0;
    unsigned long long n = strtoull(cl, &end, 10);
    if (errno == 0 && end != cl && n > RECV_MAX_BODY) {
      r->too_big = 1;
      return refuse(s, c, r, HTTP_TOO_LARGE, "invalid", "body larger than 1 MiB", NULL, NULL);
    }
  }
  const char *ep = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Weir-Epoch");
  if (ep) {
    const char *job = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Weir-Job");
    char *end = NULL;
    errno = 0;
    unsigned long long e = *ep >= '0' && *ep <= '9' ? strtoull(ep, &end, 10) : 0;
    if (end == NULL || *end != '\0' || errno || e > INT64_MAX || (job && !key_ok(job)))
      return refuse(s, c, r, HTTP_BAD_REQUEST, "invalid",
                    "Weir-Epoch must be a whole number and Weir-Job 1 to 255 printable ASCII "
                    "characters",
                    NULL, NULL);
    r->fenced = 1;
    r->epoch = (uint64_t)e;
    r->job = weir_strdup(job ? job : "");
  }
  const char *key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Idempotency-Key");
  if (key == NULL) return MHD_YES;
  if (!key_ok(key))
    return refuse(s, c, r, HTTP_BAD_REQUEST, "invalid",
                  "Idempotency-Key must be 1 to 255 printable ASCII characters", NULL, NULL);
  r->key = weir_strdup(key);
  if (!s->dedup) return MHD_YES;
  if (flight_claim(s, key) < 0)
    return refuse(s, c, r, HTTP_CONFLICT, "conflict",
                  "a request with this Idempotency-Key is in flight", MHD_HTTP_HEADER_RETRY_AFTER,
                  "1");
  r->claimed = 1;
  return MHD_YES;
}

/* A piece of the body: kept up to RECV_MAX_BODY, discarded beyond (the answer
 * is then 413); closes the connection past RECV_MAX_DISCARD. */
static enum MHD_Result on_body(recv_req *r, const char *data, size_t *size) {
  size_t n = *size;
  *size = 0;
  r->seen += n;
  if (r->seen > RECV_MAX_DISCARD) return MHD_NO;
  if (r->too_big) return MHD_YES;
  if (r->len + n > RECV_MAX_BODY) {
    r->too_big = 1;
    weir_free(r->body);
    r->body = NULL;
    r->len = r->cap = 0;
    return MHD_YES;
  }
  if (r->len + n > r->cap) {
    size_t cap = r->cap ? r->cap : 4096;
    while (cap < r->len + n) cap *= 2;
    r->body = weir_realloc(r->body, cap);
    r->cap = cap;
  }
  memcpy(r->body + r->len, data, n);
  r->len += n;
  return MHD_YES;
}

/* The whole body has arrived: the transaction, then the answer. */
static enum MHD_Result on_complete(recv_server *s, struct MHD_Connection *c, recv_req *r) {
  if (r->too_big) {
    flight_release(s, r);
    return refuse(s, c, r, HTTP_TOO_LARGE, "invalid", "body larger than 1 MiB", NULL, NULL);
  }
  recv_result res = {0};
  int rc = process(s, r, &res);
  flight_release(s, r); /* after the commit: a retry now sees the record */
  if (rc < 0) return refuse(s, c, r, HTTP_SERVER_ERROR, "error", "database error", NULL, NULL);
  r->logged = 1;
  r->answered = 1;
  /* Committed, not yet answered: a kill during the delay leaves an accepted,
   * unanswered request, as a slow network does. */
  if (delay(s) < 0) {
    weir_free(res.body);
    return MHD_NO;
  }
  char fenced_by[24];
  snprintf(fenced_by, sizeof fenced_by, "%llu", (unsigned long long)res.fenced_by);
  enum MHD_Result ret = res.drop ? MHD_NO
                                 : respond(c, res.status, res.body, res.len, res.replayed,
                                           res.fenced_by ? "Weir-Fenced" : NULL, fenced_by);
  weir_free(res.body);
  return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *data,
                                  size_t *size, void **con_cls) {
  recv_server *s = cls;
  recv_req *r = *con_cls;
  if (r == NULL) {
    r = weir_calloc(1, sizeof *r);
    *con_cls = r;
    return on_headers(s, c, r, method);
  }
  if (r->answered) {
    *size = 0;
    return MHD_YES;
  }
  if (*size > 0) return on_body(r, data, size);
  return on_complete(s, c, r);
}

/* The end of a request, answered or not: an unanswered one (the client went
 * away mid-upload, or the connection timed out) is logged as aborted. */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  recv_server *s = cls;
  recv_req *r = *con_cls;
  if (r == NULL) return;
  flight_release(s, r);
  if (!r->logged) log_alone(s, r->key, NULL, 0, "aborted");
  weir_free(r->key);
  weir_free(r->job);
  weir_free(r->body);
  weir_free(r);
  *con_cls = NULL;
}

/* ------------------------------------------------------------------------ */
/* Options                                                                  */

void cli_help_receiver(FILE *out) {
  fputs("usage: weir receiver --listen HOST:PORT --db FILE [--retention DURATION]\n"
        "                     [--no-dedup] [--drop-acks P] [--seed S]\n"
        "                     [--latency MS[:JITTER]] [--fsync] [--auth FILE]\n"
        "                     [--tls-cert FILE --tls-key FILE]\n"
        "       weir receiver stats --db FILE [--json]\n"
        "       weir receiver effects --db FILE\n"
        "\n"
        "A reference HTTP destination for testing sinks. Every POST (any path) with a\n"
        "body of at most 1 MiB is an effect, and the receiver honours Idempotency-Key\n"
        "as a careful provider does:\n"
        "  first request with a key      201, the effect, and a completion record\n"
        "                                (key, SHA-256 of the body, this response)\n"
        "  same key, same body           200 with the first response's body and\n"
        "                                'Idempotent-Replayed: true' (a duplicate)\n"
        "  same key, another body        422 (a rejection; no effect)\n"
        "  key still in flight           409 with 'Retry-After: 1'\n"
        "  Weir-Epoch below the highest  409 with 'Weir-Fenced: E' (no effect): a stale\n"
        "  seen for its Weir-Job         owner of the job; checked before the key\n"
        "  no key                        201, always a new effect\n"
        "  not POST 405; body over 1 MiB 413; bad key (not 1..255 printable ASCII) 400\n"
        "Response bodies are JSON: {\"effect\": N, \"key\": K, \"sha256\": HEX} or\n"
        "{\"error\": MSG, \"key\": K}. Effect, completion record and the request's log\n"
        "row are committed together (all or none) before the answer is sent; one\n"
        "writer thread commits the requests waiting at that moment in one SQLite\n"
        "transaction (group commit).\n"
        "\n"
        "Options:\n"
        "  --listen HOST:PORT     address to listen on (PORT 0: any free port); prints\n"
        "                         'weir receiver: listening on HOST:PORT' on stderr\n"
        "                         once it accepts connections\n"
        "  --db FILE              SQLite database (created if missing, WAL mode)\n"
        "  --retention DURATION   how long completion records live (default 24h):\n"
        "                         a key reused after that is a new effect; DURATION\n"
        "                         is a whole number with a unit: ms, s, m, h or d\n"
        "  --no-dedup             ignore Idempotency-Key: every request is an effect\n"
        "  --drop-acks P          after applying a new effect, close the connection\n"
        "                         without answering with probability P (0..1): a lost\n"
        "                         acknowledgement. Replays and refusals are answered.\n"
        "  --seed S               seed for --drop-acks and the jitter (default: from\n"
        "                         the clock, printed)\n"
        "  --latency MS[:JITTER]  a slow destination: answer each request MS ms, plus\n"
        "                         a uniform 0..JITTER ms, after its commit (whole ms,\n"
        "                         each at most 60000). Requests wait concurrently and\n"
        "                         hold nothing; one killed or stopped meanwhile is\n"
        "                         applied and unanswered\n"
        "  --fsync                a durable destination: SQLite synchronous=FULL, each\n"
        "                         group commit reaches the disk before its answers\n"
        "                         (default NORMAL: a power loss may undo the last\n"
        "                         commits; a crash of the receiver loses nothing)\n"
        "  --auth FILE            every request must carry 'Authorization: V', V the\n"
        "                         first line of FILE; any other is answered 401\n"
        "  --tls-cert FILE, --tls-key FILE\n"
        "                         https: serve TLS with this certificate and key (PEM)\n"
        "SIGINT or SIGTERM stops it cleanly (exit 0).\n"
        "\n"
        "stats prints the counts, read-only (also while the receiver runs):\n"
        "  {\"requests\": R, \"effects\": E, \"duplicates\": D, \"rejections\": X,\n"
        "   \"conflicts\": C, \"invalid\": I, \"aborted\": A, \"errors\": Z, \"acks_dropped\": L,\n"
        "   \"fenced\": F, \"repeated_payloads\": P, \"repeated_effects\": Q,\n"
        "   \"commits\": T}\n"
        "requests counts every request answered or aborted; effects the accepted\n"
        "effects; duplicates the replays (200); rejections the 422s; conflicts the\n"
        "409s; invalid the 400/401/405/413s; aborted the requests cut off before their\n"
        "answer (the client went away, a timeout, a body past 16 MiB); errors the 500s;\n"
        "fenced the 409s to a stale Weir-Epoch; so R = E + D + X + C + I + A + Z + F.\n"
        "acks_dropped counts the effects whose answer --drop-acks withheld;\n"
        "repeated_payloads the distinct bodies requested more than once,\n"
        "repeated_effects those applied more than once (with a key: only after\n"
        "--no-dedup or an expired key); commits the SQLite transactions that wrote the\n"
        "requests (below R when group commit joined requests; one per request in\n"
        "databases of format 1 and 2). effects prints every effect's body in order,\n"
        "each ending with a newline.\n"
        "\n"
        "Exit codes: 0 success, 1 runtime error (cannot listen, database error),\n"
        "2 usage error, 3 the file is not a receiver database (or a newer format).\n",
        out);
}

static int usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage(const char *fmt, ...) {
  va_list ap;
  fputs("weir receiver: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs("\nsee 'weir help receiver'\n", stderr);
  return -1;
}

typedef struct opts {
  const char *listen;
  const char *db;
  uint64_t retention_ms;
  int no_dedup;
  double drop_p;
  int have_seed;
  uint64_t seed;
  uint64_t latency_ms, jitter_ms;
  int fsync;
  int json;
  const char *auth;               /* --auth FILE */
  const char *tls_cert, *tls_key; /* --tls-cert, --tls-key: https */
} opts;

/* If argv[*i] is `flag` ("--flag VALUE" or "--flag=VALUE"), returns 1 with
 * the value (advancing *i), -1 after a message if the value is missing or
 * empty, 0 if it is another argument. */
static int take(int argc, char **argv, int *i, const char *flag, const char **val) {
  const char *s = argv[*i];
  size_t n = strlen(flag);
  if (strncmp(s, flag, n) != 0) return 0;
  if (s[n] == '=') {
    *val = s + n + 1;
    (*i)++;
  } else if (s[n] == '\0') {
    (*i)++;
    *val = *i < argc ? argv[(*i)++] : NULL;
  } else {
    return 0;
  }
  if (*val == NULL || **val == '\0') return usage("missing value for %s", flag);
  return 1;
}

/* A duration: digits and a unit (ms, s, m, h, d), more than zero. Returns 0
 * or -1 after a message. */
static int parse_duration(const char *s, uint64_t *ms) {
  char *end = NULL;
  if (*s < '0' || *s > '9') return usage("--retention: '%s' is not a duration (e.g. 10s)", s);
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  uint64_t unit;
  if (strcmp(end, "ms") == 0)
    unit = 1;
  else if (strcmp(end, "s") == 0)
    unit = 1000;
  else if (strcmp(end, "m") == 0)
    unit = 60 * 1000;
  else if (strcmp(end, "h") == 0)
    unit = 3600 * 1000;
  else if (strcmp(end, "d") == 0)
    unit = 24 * 3600 * 1000;
  else
    return usage("--retention: '%s' needs a unit: ms, s, m, h or d (e.g. 500ms, 24h)", s);
  /* At most about 100 years, so that now - retention cannot overflow. */
  if (errno == ERANGE || v > (uint64_t)INT64_MAX / 4 / unit)
    return usage("--retention: '%s' is too long", s);
  if (v == 0) return usage("--retention: must be more than zero");
  *ms = v * unit;
  return 0;
}

/* Whole milliseconds, 0..RECV_MAX_LATENCY_MS, ending at *end. Returns 0 or
 * -1 (no message). */
static int parse_ms(const char *s, const char **end, uint64_t *ms) {
  if (*s < '0' || *s > '9') return -1;
  char *e = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &e, 10);
  if (errno || v > RECV_MAX_LATENCY_MS) return -1;
  *end = e;
  *ms = v;
  return 0;
}

/* --latency MS[:JITTER]. Returns 0 or -1 after a message. */
static int parse_latency(const char *s, uint64_t *ms, uint64_t *jitter) {
  const char *end = NULL;
  *jitter = 0;
  if (parse_ms(s, &end, ms) < 0 || (*end != '\0' && *end != ':') ||
      (*end == ':' && (parse_ms(end + 1, &end, jitter) < 0 || *end != '\0')))
    return usage("--latency: '%s' is not MS or MS:JITTER (whole milliseconds, each at most %d; "
                 "e.g. 20 or 20:5)",
                 s, RECV_MAX_LATENCY_MS);
  return 0;
}

enum { MODE_SERVE, MODE_STATS, MODE_EFFECTS };

/* Parses argv[first..argc) for mode. Returns 0, 1 after printing the help, or
 * -1 after a usage message. */
static int parse(int argc, char **argv, int first, int mode, opts *o) {
  memset(o, 0, sizeof *o);
  o->retention_ms = RECV_DEFAULT_RETENTION_MS;
  const char *retention = NULL, *drop = NULL, *seed = NULL, *latency = NULL;
  for (int i = first; i < argc;) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      cli_help_receiver(stdout);
      return 1;
    }
    int k;
    if ((k = take(argc, argv, &i, "--db", &o->db)) != 0) {
      if (k < 0) return -1;
      continue;
    }
    if (mode == MODE_SERVE) {
      if ((k = take(argc, argv, &i, "--listen", &o->listen)) != 0 ||
          (k = take(argc, argv, &i, "--retention", &retention)) != 0 ||
          (k = take(argc, argv, &i, "--drop-acks", &drop)) != 0 ||
          (k = take(argc, argv, &i, "--seed", &seed)) != 0 ||
          (k = take(argc, argv, &i, "--latency", &latency)) != 0 ||
          (k = take(argc, argv, &i, "--auth", &o->auth)) != 0 ||
          (k = take(argc, argv, &i, "--tls-cert", &o->tls_cert)) != 0 ||
          (k = take(argc, argv, &i, "--tls-key", &o->tls_key)) != 0) {
        if (k < 0) return -1;
        continue;
      }
      if (strcmp(a, "--no-dedup") == 0) {
        o->no_dedup = 1;
        i++;
        continue;
      }
      if (strcmp(a, "--fsync") == 0) {
        o->fsync = 1;
        i++;
        continue;
      }
    } else if (mode == MODE_STATS && strcmp(a, "--json") == 0) {
      o->json = 1;
      i++;
      continue;
    }
    return usage("unexpected argument '%s'", a);
  }
  if (o->db == NULL) return usage("missing --db FILE");
  if (mode != MODE_SERVE) return 0;
  if (o->listen == NULL) return usage("missing --listen HOST:PORT");
  if (retention && parse_duration(retention, &o->retention_ms) < 0) return -1;
  if (drop) {
    char *end = NULL;
    errno = 0;
    o->drop_p = strtod(drop, &end);
    if (errno || *end != '\0' || end == drop || !(o->drop_p >= 0.0 && o->drop_p <= 1.0))
      return usage("--drop-acks: '%s' is not a probability between 0 and 1", drop);
  }
  if (seed) {
    char *end = NULL;
    errno = 0;
    if (*seed < '0' || *seed > '9') return usage("--seed: '%s' is not a whole number", seed);
    o->seed = strtoull(seed, &end, 10);
    if (errno || *end != '\0') return usage("--seed: '%s' is not a whole number", seed);
    o->have_seed = 1;
  }
  if (latency && parse_latency(latency, &o->latency_ms, &o->jitter_ms) < 0) return -1;
  if (!o->tls_cert != !o->tls_key) return usage("--tls-cert and --tls-key go together");
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Serving                                                                  */

/* Binds and listens on "HOST:PORT" ("[v6]:PORT" too). Returns the socket,
 * with its printable address in addr, or -1 after a message (*usage_err set
 * when the address itself is malformed). */
static int listen_on(const char *spec, char *addr, size_t cap, int *usage_err) {
  *usage_err = 0;
  const char *colon = strrchr(spec, ':');
  if (colon == NULL || colon == spec || colon[1] == '\0') {
    *usage_err = 1;
    return usage("--listen: '%s' is not HOST:PORT (e.g. 127.0.0.1:8080)", spec);
  }
  char host[256];
  size_t hl = (size_t)(colon - spec);
  if (spec[0] == '[' && hl >= 2 && spec[hl - 1] == ']') {
    spec++;
    hl -= 2;
  }
  if (hl == 0 || hl >= sizeof host) {
    *usage_err = 1;
    return usage("--listen: '%s' is not HOST:PORT", spec);
  }
  memcpy(host, spec, hl);
  host[hl] = '\0';
  struct addrinfo hints = {0}, *ai = NULL;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  int g = getaddrinfo(host, colon + 1, &hints, &ai);
  if (g != 0) {
    *usage_err = 1;
    return usage("--listen: cannot use '%s': %s", spec, gai_strerror(g));
  }
  int err = 0;
  int fd = cli_listen(ai, 128, &err);
  freeaddrinfo(ai);
  if (fd < 0) {
    cli_error("receiver: cannot listen on %s: %s", spec, strerror(err));
    return -1;
  }
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  char h[128] = "?", p[16] = "?";
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
    getnameinfo((struct sockaddr *)&ss, sl, h, sizeof h, p, sizeof p,
                NI_NUMERICHOST | NI_NUMERICSERV);
  snprintf(addr, cap, ss.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", h, p);
  return fd;
}

static int prepare_all(recv_server *s) {
  for (int i = 0; i < ST_COUNT; i++) {
    if (sqlite3_prepare_v3(s->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &s->st[i], NULL) !=
        SQLITE_OK) {
      db_complain(s->db, "cannot prepare a statement");
      return WEIR_EIO;
    }
  }
  return 0;
}

/* Starts the writer thread. Returns 0 or WEIR_EIO after a message. */
static int writer_start(recv_server *s) {
  int e = pthread_create(&s->writer, NULL, writer_main, s);
  if (e != 0) {
    cli_error("receiver: cannot start the writer thread: %s", strerror(e));
    return WEIR_EIO;
  }
  s->writer_running = 1;
  return 0;
}

/* Ends the writer once the queue is empty. Only after the daemon stopped:
 * no connection thread may queue a job any more. */
static void writer_stop(recv_server *s) {
  if (!s->writer_running) return;
  pthread_mutex_lock(&s->q_mu);
  s->q_stop = 1;
  pthread_cond_signal(&s->q_cv);
  pthread_mutex_unlock(&s->q_mu);
  pthread_join(s->writer, NULL);
  s->writer_running = 0;
}

static void server_close(recv_server *s) {
  writer_stop(s);
  weir_free(s->auth);
  for (int i = 0; i < ST_COUNT; i++) sqlite3_finalize(s->st[i]);
  if (s->db && sqlite3_close(s->db) != SQLITE_OK) db_complain(s->db, "cannot close the database");
  for (size_t i = 0; i < s->nflight; i++) weir_free(s->flight[i]);
  weir_free(s->flight);
  pthread_mutex_destroy(&s->q_mu);
  pthread_cond_destroy(&s->q_cv);
  pthread_mutex_destroy(&s->fl_mu);
  pthread_mutex_destroy(&s->lat_mu);
  pthread_cond_destroy(&s->lat_cv);
}

/* The contents of a small text file (a PEM certificate or key), or NULL
 * after a message. */
static char *read_pem(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    usage("cannot read '%s': %s", path, strerror(errno));
    return NULL;
  }
  size_t cap = 1 << 16;
  char *b = weir_malloc(cap);
  size_t n = fread(b, 1, cap - 1, f);
  fclose(f);
  b[n] = '\0';
  if (n == 0 || n == cap - 1) {
    usage("'%s' is empty or larger than 64 KiB: not a PEM file", path);
    weir_free(b);
    return NULL;
  }
  return b;
}

/* The first line of a file (--auth), trailing CR/LF dropped, or NULL after
 * a message. */
static char *file_line(const char *path) {
  char *b = read_pem(path);
  if (!b) return NULL;
  b[strcspn(b, "\r\n")] = '\0';
  if (!*b) {
    usage("--auth: '%s' starts with an empty line", path);
    weir_free(b);
    return NULL;
  }
  return b;
}

/* The number of the last group commit: rows are appended in commit order,
 * so the last row has it (NULL, read as 0, in a database of format 1 or 2). */
#define LAST_TXN_SQL "SELECT coalesce((SELECT txn FROM requests ORDER BY id DESC LIMIT 1), 0)"

static int serve(const opts *o) {
  recv_server s = {0};
  s.retention_ms = o->retention_ms;
  s.dedup = !o->no_dedup;
  s.drop_p = o->drop_p;
  s.latency_ms = o->latency_ms;
  s.jitter_ms = o->jitter_ms;
  s.rng = o->have_seed ? o->seed : (uint64_t)weir_clock_wall_ms() ^ ((uint64_t)getpid() << 32);
  uint64_t seed = s.rng;
  /* The jitter draws from a sequence of its own, so that --seed gives the
   * same lost acknowledgements with and without --latency. */
  atomic_init(&s.jit_rng, splitmix64_mix(seed ^ 0x6c6174656e6379ull)); /* "latency" */
  pthread_mutex_init(&s.q_mu, NULL);
  pthread_cond_init(&s.q_cv, NULL);
  pthread_mutex_init(&s.fl_mu, NULL);
  pthread_mutex_init(&s.lat_mu, NULL);
  pthread_cond_init(&s.lat_cv, NULL);

  /* SIGINT and SIGTERM are taken by sigwait below: blocked here, before the
   * daemon's threads start, so that they inherit the mask. */
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, NULL);
  signal(SIGPIPE, SIG_IGN);

  char *cert = NULL, *key = NULL;
  if (o->auth) {
    s.auth = file_line(o->auth);
    if (!s.auth) {
      server_close(&s);
      return CLI_EXIT_USAGE;
    }
  }
  if (o->tls_cert) {
    if (!MHD_is_feature_supported(MHD_FEATURE_TLS)) {
      cli_error("receiver: this libmicrohttpd was built without TLS: --tls-cert cannot work");
      server_close(&s);
      return CLI_EXIT_RUNTIME;
    }
    cert = read_pem(o->tls_cert);
    key = cert ? read_pem(o->tls_key) : NULL;
    if (!key) {
      weir_free(cert);
      server_close(&s);
      return CLI_EXIT_USAGE;
    }
  }

  /* Listen first: a bad or busy address creates no database. Connections
   * wait in the backlog until the daemon runs. */
  char addr[200];
  int usage_err = 0;
  int fd = listen_on(o->listen, addr, sizeof addr, &usage_err);
  if (fd < 0) {
    server_close(&s);
    return usage_err ? CLI_EXIT_USAGE : CLI_EXIT_RUNTIME;
  }
  int rc = db_open(o->db, 1, o->fsync, &s.db);
  if (rc == 0 && db_int(s.db, LAST_TXN_SQL, &s.txn) < 0) {
    db_complain(s.db, "cannot read the requests");
    rc = WEIR_EIO;
  }
  if (rc == 0) rc = prepare_all(&s);
  if (rc == 0) rc = writer_start(&s);
  if (rc < 0) {
    close(fd);
    server_close(&s);
    return rc == WEIR_EFORMAT ? CLI_EXIT_STORE : CLI_EXIT_RUNTIME;
  }
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_AUTO;
  struct MHD_Daemon *d =
      cert ? MHD_start_daemon(flags | MHD_USE_TLS, 0, NULL, NULL, on_request, &s,
                              MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_TIMEOUT,
                              (unsigned)RECV_CONN_TIMEOUT_S, MHD_OPTION_CONNECTION_LIMIT,
                              (unsigned)RECV_CONN_LIMIT, MHD_OPTION_NOTIFY_COMPLETED, on_completed,
                              &s, MHD_OPTION_HTTPS_MEM_KEY, key, MHD_OPTION_HTTPS_MEM_CERT, cert,
                              MHD_OPTION_END)
           : MHD_start_daemon(flags, 0, NULL, NULL, on_request, &s, MHD_OPTION_LISTEN_SOCKET, fd,
                              MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)RECV_CONN_TIMEOUT_S,
                              MHD_OPTION_CONNECTION_LIMIT, (unsigned)RECV_CONN_LIMIT,
                              MHD_OPTION_NOTIFY_COMPLETED, on_completed, &s, MHD_OPTION_END);
  if (d == NULL) {
    cli_error("receiver: cannot start the HTTP daemon on %s%s", addr,
              cert ? " (is --tls-key the key of --tls-cert, both PEM?)" : "");
    close(fd);
    server_close(&s);
    weir_free(cert);
    weir_free(key);
    return CLI_EXIT_RUNTIME;
  }
  if (s.drop_p > 0)
    fprintf(stderr, "weir receiver: dropping acknowledgements with probability %g (seed %llu)\n",
            s.drop_p, (unsigned long long)seed);
  if (s.latency_ms || s.jitter_ms)
    fprintf(stderr,
            "weir receiver: answering %llu ms (+ 0..%llu ms, seed %llu) after each commit\n",
            (unsigned long long)s.latency_ms, (unsigned long long)s.jitter_ms,
            (unsigned long long)seed);
  fprintf(stderr, "weir receiver: SQLite synchronous=%s, group commit\n",
          o->fsync ? "FULL" : "NORMAL");
  if (s.auth) fprintf(stderr, "weir receiver: requests need the Authorization of --auth\n");
  if (cert) fprintf(stderr, "weir receiver: https (TLS) only\n");
  fprintf(stderr, "weir receiver: listening on %s\n", addr);
  fflush(stderr);

  int sig = 0;
  while (sigwait(&stop, &sig) != 0) {
  }
  /* Requests in their delay end unanswered rather than keep the stop
   * waiting up to a minute. */
  pthread_mutex_lock(&s.lat_mu);
  s.stopping = 1;
  pthread_cond_broadcast(&s.lat_cv);
  pthread_mutex_unlock(&s.lat_mu);
  MHD_stop_daemon(d); /* joins every connection thread; closes fd */
  server_close(&s);   /* the writer drains what they queued, then ends */
  weir_free(cert);
  weir_free(key);
  fprintf(stderr, "weir receiver: stopped (%s)\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  return CLI_EXIT_OK;
}

/* ------------------------------------------------------------------------ */
/* stats and effects (read-only)                                            */

static int cmd_stats(const opts *o) {
  sqlite3 *db = NULL;
  int rc = db_open(o->db, 0, 0, &db);
  if (rc < 0) return rc == WEIR_EFORMAT ? CLI_EXIT_STORE : CLI_EXIT_RUNTIME;
  static const char *const names[] = {"effect",  "replayed", "rejected", "conflict",
                                      "invalid", "aborted",  "error",    "fenced"};
  int64_t by[8] = {0};
  int64_t requests = 0, effects = 0, dropped = 0, rep_payloads = 0, rep_effects = 0, ver = 0;
  int64_t commits = 0;
  sqlite3_stmt *st = NULL;
  /* One read transaction: all the counts come from the same snapshot. */
  int ok = sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) == SQLITE_OK &&
           db_int(db, "SELECT count(*) FROM requests", &requests) == 0 &&
           db_int(db, "PRAGMA user_version", &ver) == 0 &&
           /* Rows of formats 1 and 2 (txn NULL) each had a transaction. */
           db_int(db,
                  ver >= 3 ? "SELECT count(DISTINCT txn) + count(*) - count(txn) FROM requests"
                           : "SELECT count(*) FROM requests",
                  &commits) == 0 &&
           db_int(db, "SELECT count(*) FROM effects", &effects) == 0 &&
           db_int(db, "SELECT count(*) FROM requests WHERE ack_dropped != 0", &dropped) == 0 &&
           db_int(db,
                  "SELECT count(*) FROM (SELECT 1 FROM requests WHERE payload_sha256 IS NOT "
                  "NULL GROUP BY payload_sha256 HAVING count(*) > 1)",
                  &rep_payloads) == 0 &&
           db_int(db,
                  "SELECT count(*) FROM (SELECT 1 FROM effects GROUP BY payload HAVING count(*) "
                  "> 1)",
                  &rep_effects) == 0 &&
           sqlite3_prepare_v2(db, "SELECT outcome, count(*) FROM requests GROUP BY outcome", -1,
                              &st, NULL) == SQLITE_OK;
  int step = SQLITE_DONE;
  while (ok && (step = sqlite3_step(st)) == SQLITE_ROW) {
    const char *name = (const char *)sqlite3_column_text(st, 0);
    for (int i = 0; name && i < 8; i++)
      if (strcmp(name, names[i]) == 0) by[i] = sqlite3_column_int64(st, 1);
  }
  if (step != SQLITE_DONE) ok = 0;
  sqlite3_finalize(st);
  if (!ok) {
    db_complain(db, "cannot read the counts");
    sqlite3_close(db);
    return CLI_EXIT_RUNTIME;
  }
  sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
  sqlite3_close(db);
  if (o->json) {
    printf("{\"requests\": %lld, \"effects\": %lld, \"duplicates\": %lld, \"rejections\": %lld, "
           "\"conflicts\": %lld, \"invalid\": %lld, \"aborted\": %lld, \"errors\": %lld, "
           "\"acks_dropped\": %lld, \"fenced\": %lld, \"repeated_payloads\": %lld, "
           "\"repeated_effects\": %lld, \"commits\": %lld}\n",
           (long long)requests, (long long)effects, (long long)by[1], (long long)by[2],
           (long long)by[3], (long long)by[4], (long long)by[5], (long long)by[6],
           (long long)dropped, (long long)by[7], (long long)rep_payloads, (long long)rep_effects,
           (long long)commits);
  } else {
    printf("requests      %lld\n"
           "effects       %lld\n"
           "duplicates    %lld   (replayed, 200)\n"
           "rejections    %lld   (key reused with another payload, 422)\n"
           "conflicts     %lld   (key in flight, 409)\n"
           "invalid       %lld   (400, 405, 413)\n"
           "aborted       %lld   (upload cut off)\n"
           "errors        %lld   (500)\n"
           "acks dropped  %lld   (effects applied, answer withheld)\n"
           "fenced        %lld   (a stale epoch of the job, 409)\n"
           "repeated payloads  %lld   (bodies requested more than once)\n"
           "repeated effects   %lld   (bodies applied more than once)\n"
           "commits       %lld   (SQLite transactions that wrote them: group commits)\n",
           (long long)requests, (long long)effects, (long long)by[1], (long long)by[2],
           (long long)by[3], (long long)by[4], (long long)by[5], (long long)by[6],
           (long long)dropped, (long long)by[7], (long long)rep_payloads, (long long)rep_effects,
           (long long)commits);
  }
  return CLI_EXIT_OK;
}

static int cmd_effects(const opts *o) {
  sqlite3 *db = NULL;
  int rc = db_open(o->db, 0, 0, &db);
  if (rc < 0) return rc == WEIR_EFORMAT ? CLI_EXIT_STORE : CLI_EXIT_RUNTIME;
  sqlite3_stmt *st = NULL;
  int step = SQLITE_ERROR;
  if (sqlite3_prepare_v2(db, "SELECT payload FROM effects ORDER BY id", -1, &st, NULL) ==
      SQLITE_OK) {
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
      size_t n = (size_t)sqlite3_column_bytes(st, 0);
      const char *p = sqlite3_column_blob(st, 0);
      if (n) fwrite(p, 1, n, stdout);
      if (n == 0 || p[n - 1] != '\n') fputc('\n', stdout);
    }
  }
  int code = CLI_EXIT_OK;
  if (step != SQLITE_DONE) {
    db_complain(db, "cannot read the effects");
    code = CLI_EXIT_RUNTIME;
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  if (fflush(stdout) != 0) code = CLI_EXIT_RUNTIME;
  return code;
}

int cli_cmd_receiver(int argc, char **argv) {
  opts o;
  const char *sub = argc > 1 ? argv[1] : "";
  int mode = strcmp(sub, "stats") == 0     ? MODE_STATS
             : strcmp(sub, "effects") == 0 ? MODE_EFFECTS
                                           : MODE_SERVE;
  int p = parse(argc, argv, mode == MODE_SERVE ? 1 : 2, mode, &o);
  if (p) return p > 0 ? CLI_EXIT_OK : CLI_EXIT_USAGE;
  if (mode == MODE_STATS) return cmd_stats(&o);
  if (mode == MODE_EFFECTS) return cmd_effects(&o);
  return serve(&o);
}
