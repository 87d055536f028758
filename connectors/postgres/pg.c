/* pg.c: owns the PostgreSQL destination (postgresql://...), its
 * specification and arg: rows written
 * into a transaction per sink subtask and epoch, made durable by PREPARE
 * TRANSACTION at the barrier and visible by COMMIT PREPARED when the epoch's
 * checkpoint completed (a destination of twophase.c), with a marker row per
 * prepared transaction and a fence row per job.
 *
 * DESIGN. Tables (created if missing, in the database the URI names):
 *
 *   <table>        (key numeric(20,0), value text, opid text): the output,
 *                  columns in the order key, value, operation id, with no
 *                  uniqueness constraint (a duplicate must show). `table`
 *                  is a parameter of the URI (default weir_output), taken
 *                  out before the URI goes to libpq.
 *   weir_markers   (gid primary key, job, sink, subtask, checkpoint, epoch):
 *                  one row inserted inside each prepared transaction, so
 *                  after an ambiguous failure "was gid committed?" has an
 *                  answer: COMMIT PREPARED failing with 42704 (no such
 *                  prepared transaction) is success if the marker is there
 *                  and a lost transaction (a permanent error) if not.
 *   weir_fence     (job primary key, epoch): the owner epoch (the lease's,
 *                  docs/leases.md §4) that may prepare for the job.
 *
 * Global transaction id (< 200 bytes, cluster-wide):
 *   weir:<job id>:<sink>:<owner epoch>:<checkpoint>:<subtask>
 * (a sink name longer than 64 bytes or holding ':' is replaced by a hash).
 *
 * Steps, per subtask. The task thread formats records into 256 KiB chunks
 * (COPY's text format) and hands each full one to the subtask's
 * connection thread (io_main), which owns the connection from the first
 * chunk on: the first chunk of an epoch begins a transaction and a COPY
 * ... FROM STDIN, every chunk is sent with PQputCopyData. So the worker
 * formats and goes on to its other tasks while the server takes the rows;
 * it waits only when QUEUE_BYTES (8 MiB) are handed over and not yet sent
 * (a server slower than the input pushes back). pre_commit(n) hands the
 * last chunk over, then a PREPARE marker, and returns WEIR_SINK_LATER with
 * the gid as the handle: the worker goes on, and checkpoint n waits for
 * the answer (WEIR_SNAPSHOT_LATER, docs/checkpoints.md §6), which the
 * driver takes in its poll (pg_prepared; the thread wakes the task) and
 * turns into the snapshot's acknowledgement. The queue keeps the order:
 * epoch n's rows, its PREPARE, epoch n+1's rows. The thread ends the
 * COPY, inserts the marker through
 *   INSERT INTO weir_markers SELECT ... FROM weir_fence
 *     WHERE job = $job AND epoch = $my_epoch FOR SHARE
 * (no row inserted: a newer owner bumped the fence: WEIR_EFENCED, nothing
 * lands), then PREPARE TRANSACTION gid; the gid is the handle.
 *
 * A PREPARE that fails declines the checkpoint (the acknowledgement says
 * so), with the server's error in the log line, instead of failing the job: the
 * server may be out of prepared-transaction slots (another client holds
 * them, SQLSTATE 53200), or restarting. A failed PREPARE rolls its
 * transaction back and loses the rows COPYed into it, so the thread keeps
 * every chunk it sent until the transaction is prepared (RETAIN_BYTES, 64
 * MiB, at most), and after a failure sends them again first in the next
 * epoch's transaction (their operation ids unchanged: still unique among
 * committed rows, as the failed transaction committed nothing). The same
 * holds for a transaction broken before PREPARE (its connection lost
 * during COPY, a statement failing): at the barrier the thread tries once
 * more on a new connection with the kept rows, and declines if that fails
 * too. The engine counts declines against tolerable_checkpoint_failures;
 * the sink counts them as prepare_declines. Checkpoint n+1 cannot start
 * before n's answer, and the driver takes it before the next pre_commit,
 * which then knows what the declined epoch carried. An epoch of more rows than
 * RETAIN_BYTES is not kept (its chunks are freed as sent), and a failure
 * to prepare it fails the job as before: a restore replays it. Without a
 * state directory (one epoch, prepared at the end) a failure fails the
 * job.
 *
 * A PREPARE whose answer is lost with its connection is ambiguous: the
 * server may have prepared gid. The thread reconnects (waiting up to
 * SETTLE_MS for a restarting server), ends the server process that ran it
 * if it is still there (pg_terminate_backend, matched by pid and start
 * time), after which gid is prepared or never will be, and looks it up in
 * pg_prepared_xacts: prepared is success; not prepared declines as above;
 * not known fails the job (a restore resolves gid). Declining while gid
 * might still become prepared would be unsound: a later restore from a
 * checkpoint after n would commit it, and its rows a second time.
 *
 * commit runs
 * on the commit thread's own connection (made at its first commit, made
 * again after a failure): COMMIT PREPARED gid, then the marker rows of this
 * subtask older than both `markers` checkpoints (a URI parameter, default
 * 100, taken out like `table`) and the oldest epoch still pending when gid
 * was prepared (weir_sink_commit.oldest_pending) are pruned: no checkpoint
 * from gid's on lists an older one, and restoring one before it is refused
 * as a rewind (below), so nothing can ask about them again. A recovered
 * transaction prunes nothing (its oldest pending is not known). Connection
 * failures are retried (WEIR_EAGAIN) for up to COMMIT_GIVE_UP_MS, so a
 * restarted server is waited for: a prepared transaction survives it.
 *
 * A fresh start (no checkpoint restored) also removes the rows and markers
 * that earlier runs of this job's sink committed (found by the operation id
 * prefix "<job>/<sink>/"): a new run replaces the output of the previous
 * one, as with the file sink (a --fresh run, or a new instance of a
 * finished job, would otherwise write its rows a second time).
 *
 * Start: every subtask resolves the prepared transactions of this job's
 * sink (all subtasks, in pg_prepared_xacts): on restore from checkpoint r
 * those of checkpoints <= r are committed and the rest rolled back; a fresh
 * start rolls back every one (no checkpoint of the run completed). Two
 * subtasks resolving at once is harmless (42704, and "busy" 55000/55006,
 * are skipped; a commit that finds its transaction busy retries). Then it
 * refuses a rewind (committed markers after r: restoring r would duplicate
 * their rows), and bumps the fence row to its owner epoch with
 * lock_timeout: a stale owner's prepared transaction holds the row FOR
 * SHARE, so on a lock timeout it resolves again and retries, never hanging
 * behind it. Resolution never touches this run's own transactions (owner
 * epoch >= its own: another subtask may be ahead), and a fence already at
 * this run's epoch is left alone (its update would wait for them). A fence already above its epoch
 * means this run is the stale one: WEIR_EFENCED. Without a state directory (owner epoch 0, a random
 * job id) there is no fence.
 *
 * max_prepared_transactions: 0 (PostgreSQL's default) is refused at open
 * with a message saying what to set; fewer than 2 per subtask likewise (one
 * transaction committing while the next is prepared). Slots taken by other
 * clients while the job runs decline checkpoints (above).
 *
 * Operation ids: with the job's id function "<job>/<sink>/c/<content>";
 * otherwise "<job>/<sink>/t/<subtask>/<after>/<index>", after = the last
 * checkpoint before the epoch, index = the record's place in it: unique
 * among committed rows (a replay after a crash writes a new transaction
 * after the old one was rolled back).
 *
 * Threads: open, write, pre_commit, abort_after, close on the task thread
 * (`conn`, which open and abort_after use, until it is handed over with
 * the first chunk; abort_after runs at a restore, before any record, and
 * would connect anew otherwise); COPY and PREPARE on the connection thread
 * (`tconn`), whose mailbox (chunks in order, a PREPARE request and its
 * answer) is under `mu`; commit on the commit thread (`cconn`). libpq calls
 * block: on the task thread only at open, at a restore and in the fence
 * bump (and pre_commit without a state directory, which waits for its
 * answer).
 */
#include "pg_impl.h"

#include "connector.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/failpoint.h"
#include "base/log.h"

#ifdef WEIR_HAVE_PQ
#include <libpq-fe.h>
#endif

#define DEFAULT_TABLE "weir_output"
#define DEFAULT_MARKER_KEEP 100u /* checkpoints of markers kept per subtask */

/* The sink's arg (weir__pg_parse). */
typedef struct pg_arg {
  weir__sink_arg common;
  char *conninfo;       /* the URI without weir's parameters */
  char *table;          /* the output table (NAME or SCHEMA.NAME) */
  uint64_t marker_keep; /* checkpoints of marker rows kept (markers=) */
} pg_arg;

/* ---- specification (no libpq needed) --------------------------------------- */

static int ident_ok(const char *s, size_t n) {
  if (n == 0 || n > 63) return 0;
  if (!((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') || s[0] == '_')) return 0;
  for (size_t i = 1; i < n; i++)
    if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
          (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
      return 0;
  return 1;
}

int weir__pg_parse(const char *spec, char **conninfo, char **table, uint64_t *keep, char *err,
                   size_t errlen) {
  *conninfo = *table = NULL;
  *keep = DEFAULT_MARKER_KEEP;
  const char *q = strchr(spec, '?');
  size_t base = q ? (size_t)(q - spec) : strlen(spec);
  char *url = weir_malloc(strlen(spec) + 1);
  memcpy(url, spec, base);
  url[base] = '\0';
  size_t ulen = base;
  int kept = 0;
  char *t = NULL;
  for (const char *p = q ? q + 1 : NULL; p && *p;) {
    const char *amp = strchr(p, '&');
    size_t n = amp ? (size_t)(amp - p) : strlen(p);
    if (n >= 6 && !strncmp(p, "table=", 6)) {
      const char *v = p + 6;
      size_t vn = n - 6;
      const char *dot = memchr(v, '.', vn);
      int ok = dot ? ident_ok(v, (size_t)(dot - v)) && ident_ok(dot + 1, vn - (size_t)(dot - v) - 1)
                   : ident_ok(v, vn);
      if (!ok) {
        if (err && errlen)
          snprintf(err, errlen,
                   "sink '%s': table must be NAME or SCHEMA.NAME, each a letter or _ then "
                   "letters, digits or _ (at most 63)",
                   spec);
        weir_free(url);
        weir_free(t);
        return WEIR_ESINK;
      }
      weir_free(t);
      t = weir_malloc(vn + 1);
      memcpy(t, v, vn);
      t[vn] = '\0';
    } else if (n >= 8 && !strncmp(p, "markers=", 8)) {
      uint64_t v = 0;
      size_t i = 8;
      for (; i < n && p[i] >= '0' && p[i] <= '9' && v < 1000000000; i++)
        v = v * 10 + (uint64_t)(p[i] - '0');
      if (i != n || i == 8 || v < 1 || v >= 1000000000) {
        if (err && errlen)
          snprintf(err, errlen,
                   "sink '%s': markers must be a number of checkpoints >= 1 (at least --retain)",
                   spec);
        weir_free(url);
        weir_free(t);
        return WEIR_ESINK;
      }
      *keep = v;
    } else if (n) {
      url[ulen++] = kept++ ? '&' : '?';
      memcpy(url + ulen, p, n);
      ulen += n;
      url[ulen] = '\0';
    }
    p = amp ? amp + 1 : NULL;
  }
  *conninfo = url;
  *table = t ? t : weir_strdup(DEFAULT_TABLE);
  return 0;
}

/* FNV-1a, for sink names that do not fit a gid. */
static uint64_t fnv64(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

/* The sink's part of a gid: its name, or "h<hash>" if too long or with ':'. */
static void gid_sink(const char *sink, char *out, size_t cap) {
  if (strlen(sink) <= 64 && !strchr(sink, ':'))
    snprintf(out, cap, "%s", sink);
  else
    snprintf(out, cap, "h%016llx", (unsigned long long)fnv64(sink));
}

int weir__pg_gid(char *buf, size_t cap, const char *job, const char *sink, uint64_t epoch,
                 uint64_t checkpoint, uint32_t subtask) {
  char s[80];
  gid_sink(sink, s, sizeof s);
  int n = snprintf(buf, cap, "weir:%s:%s:%llu:%llu:%u", job, s, (unsigned long long)epoch,
                   (unsigned long long)checkpoint, (unsigned)subtask);
  return n > 0 && (size_t)n < cap && n < 200 ? 0 : WEIR_EINVAL;
}

#ifndef WEIR_HAVE_PQ

static int pg_available(void) {
  return 0;
}

#else

#define COPY_BUF (256u * 1024u)  /* a chunk: one send of COPY data */
#define QUEUE_BYTES (8u << 20)   /* handed to the thread, not yet sent, at most */
#define RETAIN_BYTES (64u << 20) /* an epoch's rows kept for a retry, at most */
#define SETTLE_MS 30000u         /* reconnecting to settle a PREPARE, at most */
#define COMMIT_GIVE_UP_MS 60000u /* a commit's connection failures, at most */
#define FENCE_ATTEMPTS 10        /* lock timeouts of the fence bump, at most */
#define FENCE_LOCK_TIMEOUT "2s"

static int pg_available(void) {
  return 1;
}

/* A piece of an epoch's COPY data: rows in COPY's text format. */
typedef struct chunk {
  struct chunk *next;
  size_t len;
  int prepare; /* no rows: PREPARE the transaction here (req_epoch as req_gid) */
  char data[]; /* COPY_BUF bytes */
} chunk;

/* What the connection thread answers a PREPARE with. */
enum { RES_OK = 1, RES_DECLINE, RES_FENCED, RES_FAIL };

/* One subtask's destination. conn (until handed over), cur, scratch,
 * rows, after, index: the task thread's; the mailbox: under mu; tconn and
 * the t*, k_* fields: the connection thread's; cconn: the commit
 * thread's; the rest immutable after open. */
typedef struct pgdest {
  const pg_arg *a;
  weir_ctx *ctx; /* for weir_ctx_wake from the connection thread */
  char *job, *sink, *qtable;
  char prefix[160]; /* "weir:<job>:<sink>:" */
  uint32_t subtask, parallelism;
  uint64_t owner;   /* owner epoch; 0: no state directory, no fence */
  char where[160];  /* "host:port" for messages (never the password) */
  char cwhere[160]; /* the same, the commit thread's */
  PGconn *conn;     /* open's, abort_after's; handed to the thread with the first rows */
  int given;        /* conn was handed over */
  int fenced_ok;
  uint64_t after, index;
  chunk *cur;     /* the rows being formatted */
  uint64_t rows;  /* rows of this epoch */
  uint64_t carry; /* rows of declined epochs, kept by the thread for the next PREPARE */
  int awaiting;   /* a PREPARE is in flight (req_epoch) */
  uint64_t req_rows, req_carried; /* its rows, and of them carried ones */
  char *scratch;
  size_t scap;
  /* The mailbox of the connection thread (io_main). */
  pthread_mutex_t mu;
  pthread_cond_t cv;   /* to the thread: rows, a PREPARE, or stop */
  pthread_cond_t back; /* to the task: room in the queue, or the PREPARE's answer */
  pthread_t io;
  int io_started;
  chunk *q_head, *q_tail; /* rows to COPY, in order */
  size_t q_bytes;
  uint64_t req_epoch; /* the PREPARE in flight: req_epoch as req_gid */
  char req_gid[208];
  int res; /* its answer (RES_*), 0 until there is one */
  char res_msg[700];
  int stop;
  /* The connection thread's. */
  PGconn *tconn;
  char twhere[160];
  int tpid;               /* tconn's server process and its start, to settle */
  char tstart[64];        /* a PREPARE whose answer was lost */
  int topen;              /* the transaction and its COPY are open on tconn */
  int tbroken;            /* the transaction failed: nothing more is sent */
  char tmsg[600];         /* why */
  chunk *k_head, *k_tail; /* the transaction's rows, kept until it is prepared */
  size_t k_bytes;
  int unkept; /* more than RETAIN_BYTES: not kept, a failure is final */
  PGconn *cconn;
} pgdest;

static const char *sqlstate(const PGresult *r) {
  const char *s = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
  return s ? s : "";
}

/* The error message of r or c on one line (libpq ends it with '\n'). */
static void msg_of(PGconn *c, const PGresult *r, char *out, size_t cap) {
  const char *m = r ? PQresultErrorMessage(r) : NULL;
  if (!m || !*m) m = c ? PQerrorMessage(c) : "no connection";
  snprintf(out, cap, "%s", m);
  for (char *p = out; *p; p++)
    if (*p == '\n' || *p == '\t') *p = *(p + 1) ? ' ' : '\0';
}

static void set_where(char *where, size_t n, PGconn *c) {
  const char *h = c ? PQhost(c) : NULL;
  const char *p = c ? PQport(c) : NULL;
  snprintf(where, n, "%s:%s", h && *h ? h : "(default host)", p && *p ? p : "5432");
}

/* Server notices ("relation ... already exists, skipping") are not news. */
static void quiet(void *arg, const char *message) {
  (void)arg;
  (void)message;
}

/* Connects to the URI, naming the server in where (160 bytes). Returns the
 * connection, or NULL with a message. */
static PGconn *connect_to(char *where, const char *conninfo, char *err, size_t errlen) {
  const char *keys[] = {"dbname", "connect_timeout", "application_name", NULL};
  const char *vals[] = {conninfo, "5", "weir", NULL};
  if (strstr(conninfo, "connect_timeout=")) keys[1] = NULL;
  PGconn *c = PQconnectdbParams(keys, vals, 1);
  set_where(where, 160, c);
  if (!c || PQstatus(c) != CONNECTION_OK) {
    char m[400];
    msg_of(c, NULL, m, sizeof m);
    snprintf(err, errlen, "cannot connect to PostgreSQL at %s: %s", where, m);
    PQfinish(c);
    return NULL;
  }
  PQsetNoticeProcessor(c, quiet, NULL);
  /* A server process whose client died (SIGKILL) while it waits must not
   * keep its locks: it checks the socket (PostgreSQL >= 14; else ignored). */
  PQclear(PQexec(c, "SET client_connection_check_interval = '1s'"));
  return c;
}

/* Runs sql with text params; returns the result if its status is ok (the
 * caller PQclears it), else NULL with the message and SQLSTATE. */
static PGresult *exec(PGconn *c, const char *sql, int n, const char *const *params, char *err,
                      size_t errlen, char state[6]) {
  PGresult *r = n ? PQexecParams(c, sql, n, NULL, params, NULL, NULL, 0) : PQexec(c, sql);
  ExecStatusType st = PQresultStatus(r);
  if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK || st == PGRES_COPY_IN) return r;
  if (state) snprintf(state, 6, "%s", sqlstate(r));
  msg_of(c, r, err, errlen);
  PQclear(r);
  return NULL;
}

/* A prepared transaction another session is finishing right now: 55000
 * ("prepared transaction ... is busy") or 55006 (object in use). */
static int busy_elsewhere(const char *state) {
  return !strcmp(state, "55000") || !strcmp(state, "55006");
}

/* exec for statements whose result is not needed. Returns 0 or -1. */
static int run(PGconn *c, const char *sql, int n, const char *const *params, char *err,
               size_t errlen, char state[6]) {
  PGresult *r = exec(c, sql, n, params, err, errlen, state);
  PQclear(r);
  return r ? 0 : -1;
}

static int fail(weir_ctx *ctx, pgdest *d, int code, const char *what, const char *m) {
  return weir_ctx_fail(ctx, code, "sink '%s' subtask %u: PostgreSQL at %s: %s: %s", d->sink,
                       d->subtask, d->where, what, m);
}

/* ---- start: tables, resolution, fence ----------------------------------------- */

/* Creates what is missing. Only what is missing: CREATE INDEX IF NOT
 * EXISTS would wait for a ShareLock on weir_markers, which a prepared
 * transaction left by a crash holds against it until it is resolved
 * (after this). lock_timeout bounds every wait. */
static int setup_tables(weir_ctx *ctx, pgdest *d) {
  char m[600], st[6] = "", sql[1024], junk[200];
  char *lit = PQescapeLiteral(d->conn, d->qtable, strlen(d->qtable));
  snprintf(sql, sizeof sql,
           "SELECT to_regclass(%s) IS NULL, to_regclass('weir_markers') IS NULL, "
           "to_regclass('weir_fence') IS NULL",
           lit ? lit : "''");
  PQfreemem(lit);
  PGresult *r = exec(d->conn, sql, 0, NULL, m, sizeof m, st);
  if (!r || PQntuples(r) != 1) {
    PQclear(r);
    return fail(ctx, d, WEIR_EIO, "cannot look for the sink's tables", m);
  }
  int need_t = PQgetvalue(r, 0, 0)[0] == 't', need_m = PQgetvalue(r, 0, 1)[0] == 't',
      need_f = PQgetvalue(r, 0, 2)[0] == 't';
  PQclear(r);
  if (!need_t && !need_m && !need_f) goto created;
  /* Concurrent CREATE ... IF NOT EXISTS can collide: one at a time. */
  snprintf(sql, sizeof sql,
           "BEGIN; SET LOCAL lock_timeout = '30s'; SELECT pg_advisory_xact_lock(7765426813); "
           "%s%s%s%s%s%s COMMIT",
           need_t ? "CREATE TABLE IF NOT EXISTS " : "", need_t ? d->qtable : "",
           need_t ? " (key numeric(20,0) NOT NULL, value text, opid text);" : "",
           need_m ? "CREATE TABLE IF NOT EXISTS weir_markers (gid text PRIMARY KEY, job text NOT "
                    "NULL, sink text NOT NULL, subtask integer NOT NULL, checkpoint bigint NOT "
                    "NULL, epoch bigint NOT NULL, at timestamptz NOT NULL DEFAULT now());"
                  : "",
           need_m ? "CREATE INDEX IF NOT EXISTS weir_markers_job ON weir_markers (job, sink, "
                    "subtask, checkpoint);"
                  : "",
           need_f ? "CREATE TABLE IF NOT EXISTS weir_fence (job text PRIMARY KEY, epoch bigint NOT "
                    "NULL);"
                  : "");
  if (run(d->conn, sql, 0, NULL, m, sizeof m, st) < 0) {
    (void)run(d->conn, "ROLLBACK", 0, NULL, junk, sizeof junk, NULL);
    return fail(ctx, d, WEIR_EIO, "cannot create the sink's tables", m);
  }
created:
  r = exec(d->conn, "SHOW max_prepared_transactions", 0, NULL, m, sizeof m, st);
  if (!r) return fail(ctx, d, WEIR_EIO, "cannot read max_prepared_transactions", m);
  long mpt = PQntuples(r) == 1 ? strtol(PQgetvalue(r, 0, 0), NULL, 10) : 0;
  PQclear(r);
  if (mpt == 0)
    return weir_ctx_fail(ctx, WEIR_ESINK,
                         "sink '%s': PostgreSQL at %s has max_prepared_transactions = 0, so it "
                         "cannot prepare transactions (two-phase commit): set "
                         "max_prepared_transactions to at least %u (2 per sink subtask, plus "
                         "other users) in postgresql.conf and restart the server",
                         d->sink, d->where, 2 * d->parallelism);
  if (mpt < 2 * (long)d->parallelism)
    return weir_ctx_fail(ctx, WEIR_ESINK,
                         "sink '%s': PostgreSQL at %s has max_prepared_transactions = %ld, fewer "
                         "than the %u this sink needs (2 per subtask): raise it and restart the "
                         "server, or lower the parallelism",
                         d->sink, d->where, mpt, 2 * d->parallelism);
  return 0;
}

/* Resolves the prepared transactions of this job's sink: commit those of
 * checkpoints <= r (when restored), roll back the rest. Returns the number
 * rolled back, or a negative error. */
static int resolve(weir_ctx *ctx, pgdest *d, uint64_t r, int restored) {
  char m[600], st[6] = "";
  const char *p[] = {d->prefix};
  PGresult *res = exec(d->conn,
                       "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() "
                       "AND left(gid, length($1)) = $1 ORDER BY gid",
                       1, p, m, sizeof m, st);
  if (!res) return fail(ctx, d, WEIR_EIO, "cannot list prepared transactions", m);
  int rolled = 0, rc = 0;
  size_t plen = strlen(d->prefix);
  for (int i = 0; i < PQntuples(res) && rc == 0; i++) {
    const char *gid = PQgetvalue(res, i, 0);
    unsigned long long ep, ck;
    unsigned sub;
    if (sscanf(gid + plen, "%llu:%llu:%u", &ep, &ck, &sub) != 3) continue;
    /* This run's own (another subtask may already have prepared one). */
    if (d->owner && ep >= d->owner) continue;
    int commit = restored && ck <= r;
    char *lit = PQescapeLiteral(d->conn, gid, strlen(gid));
    if (!lit) {
      msg_of(d->conn, NULL, m, sizeof m);
      rc = fail(ctx, d, WEIR_EIO, "cannot quote a gid", m);
      break;
    }
    char sql[400];
    snprintf(sql, sizeof sql, "%s PREPARED %s", commit ? "COMMIT" : "ROLLBACK", lit);
    PQfreemem(lit);
    if (run(d->conn, sql, 0, NULL, m, sizeof m, st) < 0) {
      /* Resolved by another subtask meanwhile (gone, or busy there). */
      if (!strcmp(st, "42704") || busy_elsewhere(st)) continue;
      rc = fail(ctx, d, WEIR_EIO,
                commit ? "cannot commit a prepared transaction"
                       : "cannot roll back a prepared transaction",
                m);
      break;
    }
    if (!commit) rolled++;
    WEIR_LOG_I("sink '%s' subtask %u: %s prepared transaction %s (%s checkpoint %llu)", d->sink,
               d->subtask, commit ? "committed" : "rolled back", gid,
               commit     ? "restored"
               : restored ? "after the restored"
                          : "fresh start, no",
               (unsigned long long)r);
  }
  PQclear(res);
  return rc < 0 ? rc : rolled;
}

/* Refuses a rewind: committed rows of checkpoints after r would be written
 * again by the replay. */
static int check_rewind(weir_ctx *ctx, pgdest *d, uint64_t r) {
  char m[600], st[6] = "", rs[24];
  snprintf(rs, sizeof rs, "%llu", (unsigned long long)r);
  const char *p[] = {d->job, d->sink, rs};
  PGresult *res = exec(d->conn,
                       "SELECT max(checkpoint) FROM weir_markers WHERE job = $1 AND sink = $2 "
                       "AND checkpoint > $3",
                       3, p, m, sizeof m, st);
  if (!res) return fail(ctx, d, WEIR_EIO, "cannot read weir_markers", m);
  int rc = 0;
  if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 0))
    rc = weir_ctx_fail(ctx, WEIR_EMISMATCH, /* a run that does not fit: exit 2 */
                       "sink '%s': restoring checkpoint %llu would write again the rows that "
                       "checkpoints up to %s committed into %s at %s (a rewind duplicates "
                       "them): restore the latest checkpoint, or remove those rows and their "
                       "weir_markers first",
                       d->sink, (unsigned long long)r, PQgetvalue(res, 0, 0), d->qtable, d->where);
  PQclear(res);
  return rc;
}

/* A fresh start replaces what earlier runs of this job's sink committed
 * (as the file sink does): its rows (by operation id prefix) and markers.
 * Costs one index probe when there is nothing to replace. Safe from every
 * subtask at once: all of them open before any checkpoint can complete, so
 * before any commit of this run. */
static int replace_earlier(weir_ctx *ctx, pgdest *d) {
  char m[600], st[6] = "", sql[600], pre[300];
  const char *p[] = {d->job, d->sink};
  PGresult *res = exec(d->conn, "SELECT 1 FROM weir_markers WHERE job = $1 AND sink = $2 LIMIT 1",
                       2, p, m, sizeof m, st);
  if (!res) return fail(ctx, d, WEIR_EIO, "cannot read weir_markers", m);
  int any = PQntuples(res) > 0;
  PQclear(res);
  if (!any) return 0;
  snprintf(pre, sizeof pre, "%s/%s/", d->job, d->sink);
  const char *q[] = {d->job, d->sink, pre};
  snprintf(sql, sizeof sql,
           "WITH r AS (DELETE FROM %s WHERE left(opid, length($3)) = $3 RETURNING 1), "
           "k AS (DELETE FROM weir_markers WHERE job = $1 AND sink = $2 RETURNING 1) "
           "SELECT (SELECT count(*) FROM r), (SELECT count(*) FROM k)",
           d->qtable);
  res = exec(d->conn, sql, 3, q, m, sizeof m, st);
  if (!res) return fail(ctx, d, WEIR_EIO, "cannot remove the rows of an earlier run", m);
  if (PQntuples(res) == 1 && atoll(PQgetvalue(res, 0, 0)) > 0)
    WEIR_LOG_I("sink '%s' subtask %u: fresh start: removed %s rows of an earlier run of job %s "
               "from %s",
               d->sink, d->subtask, PQgetvalue(res, 0, 0), d->job, d->qtable);
  PQclear(res);
  return 0;
}

/* Bumps the job's fence row to this run's owner epoch (resolving again
 * after each lock timeout: a stale prepared transaction holds it). */
static int bump_fence(weir_ctx *ctx, pgdest *d, uint64_t r, int restored) {
  if (!d->owner) {
    d->fenced_ok = 1;
    return 0;
  }
  char m[600], st[6] = "", es[24], junk[200];
  snprintf(es, sizeof es, "%llu", (unsigned long long)d->owner);
  const char *p[] = {d->job, es};
  for (int attempt = 0; attempt < FENCE_ATTEMPTS; attempt++) {
    /* Already there (another subtask bumped it): no update, which would
     * wait for this run's own prepared transactions. */
    PGresult *cur =
        exec(d->conn, "SELECT epoch FROM weir_fence WHERE job = $1", 1, p, m, sizeof m, st);
    if (!cur) return fail(ctx, d, WEIR_EIO, "cannot read the fence row", m);
    unsigned long long at = PQntuples(cur) == 1 ? strtoull(PQgetvalue(cur, 0, 0), NULL, 10) : 0;
    PQclear(cur);
    if (at == d->owner) {
      d->fenced_ok = 1;
      return 0;
    }
    if (run(d->conn, "BEGIN; SET LOCAL lock_timeout = '" FENCE_LOCK_TIMEOUT "'", 0, NULL, m,
            sizeof m, st) < 0)
      return fail(ctx, d, WEIR_EIO, "cannot begin the fence bump", m);
    PGresult *res = exec(d->conn,
                         "INSERT INTO weir_fence (job, epoch) VALUES ($1, $2) ON CONFLICT (job) "
                         "DO UPDATE SET epoch = greatest(weir_fence.epoch, excluded.epoch) "
                         "RETURNING epoch",
                         2, p, m, sizeof m, st);
    if (!res) {
      (void)run(d->conn, "ROLLBACK", 0, NULL, junk, sizeof junk, NULL);
      if (strcmp(st, "55P03") != 0 && strcmp(st, "40P01") != 0)
        return fail(ctx, d, WEIR_EIO, "cannot bump the fence row", m);
      WEIR_LOG_I("sink '%s' subtask %u: the fence row of job %s is locked: resolving again",
                 d->sink, d->subtask, d->job);
      int rc = resolve(ctx, d, r, restored);
      if (rc < 0) return rc;
      continue;
    }
    unsigned long long now = strtoull(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    if (run(d->conn, "COMMIT", 0, NULL, m, sizeof m, st) < 0)
      return fail(ctx, d, WEIR_EIO, "cannot commit the fence bump", m);
    if (now > d->owner)
      return weir_ctx_fail(ctx, WEIR_EFENCED,
                           "sink '%s' subtask %u: PostgreSQL at %s: the fence of job %s is at "
                           "owner epoch %llu, above this run's %llu: a newer owner runs the job",
                           d->sink, d->subtask, d->where, d->job, now,
                           (unsigned long long)d->owner);
    d->fenced_ok = 1;
    return 0;
  }
  return weir_ctx_fail(ctx, WEIR_EIO,
                       "sink '%s' subtask %u: PostgreSQL at %s: the fence row of job %s stays "
                       "locked after %d attempts (a stale owner's open transaction?)",
                       d->sink, d->subtask, d->where, d->job, FENCE_ATTEMPTS);
}

/* ---- the task side: rows into chunks ------------------------------------------ */

static chunk *chunk_new(void) {
  chunk *c = weir_malloc(sizeof *c + COPY_BUF);
  c->next = NULL;
  c->len = 0;
  c->prepare = 0;
  return c;
}

static void chunks_free(chunk *c) {
  while (c) {
    chunk *n = c->next;
    weir_free(c);
    c = n;
  }
}

/* Hands the chunk being filled to the connection thread, which COPYs it;
 * waits only while QUEUE_BYTES are queued already (a server slower than
 * the input pushes back here). The first hand-over also gives the thread
 * the connection open made. */
static void post(pgdest *d, chunk *c) {
  pthread_mutex_lock(&d->mu);
  if (d->conn && !d->given) {
    d->tconn = d->conn;
    d->conn = NULL;
    d->given = 1;
  }
  while (d->q_bytes >= QUEUE_BYTES && !d->stop) pthread_cond_wait(&d->back, &d->mu);
  if (d->q_tail)
    d->q_tail->next = c;
  else
    d->q_head = c;
  d->q_tail = c;
  d->q_bytes += c->len;
  pthread_cond_signal(&d->cv);
  pthread_mutex_unlock(&d->mu);
}

static void hand(pgdest *d) {
  chunk *c = d->cur;
  if (!c || !c->len) return;
  d->cur = NULL;
  post(d, c);
}

static void put(pgdest *d, const char *p, size_t n) {
  memcpy(d->cur->data + d->cur->len, p, n);
  d->cur->len += n;
}

/* Appends s (n bytes) escaped for COPY's text format. */
static void put_escaped(pgdest *d, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    const char *e = c == '\\'   ? "\\\\"
                    : c == '\t' ? "\\t"
                    : c == '\n' ? "\\n"
                    : c == '\r' ? "\\r"
                                : NULL;
    if (e)
      put(d, e, 2);
    else
      d->cur->data[d->cur->len++] = c;
  }
}

/* Formats r with fn into scratch (grown as needed); returns the length. */
static int format(weir_ctx *ctx, pgdest *d, size_t (*fn)(const weir_record *, char *, size_t),
                  const weir_record *r, size_t *len) {
  size_t n = fn(r, d->scratch, d->scap);
  if (n >= d->scap) {
    d->scap = n + 1;
    d->scratch = weir_realloc(d->scratch, d->scap);
    if (fn(r, d->scratch, d->scap) != n)
      return weir_ctx_fail(ctx, WEIR_EINVAL, "sink '%s': a formatter contradicted itself", d->sink);
  }
  *len = n;
  return 0;
}

static int pg_write(weir_ctx *ctx, void *dest, const weir_record *r) {
  pgdest *d = dest;
  int rc;
  if (!d->fenced_ok) {
    /* Restoring, but abort_after has not bumped it yet: on the task's own
     * connection, before the thread has any work. */
    char m[600];
    if (!d->conn && !(d->conn = connect_to(d->where, d->a->conninfo, m, sizeof m)))
      return weir_ctx_fail(ctx, WEIR_EIO, "sink '%s' subtask %u: %s", d->sink, d->subtask, m);
    uint64_t rp = weir_ctx_restored_checkpoint(ctx);
    if ((rc = bump_fence(ctx, d, rp, rp != 0)) < 0) return rc;
  }
  size_t n;
  if ((rc = format(ctx, d, d->a->common.fmt, r, &n)) < 0) return rc;
  char key[24];
  int kn = snprintf(key, sizeof key, "%llu", (unsigned long long)r->key);
  /* value: the formatted text without its leading "<key> " (NULL if
   * nothing follows the key). */
  const char *v = d->scratch;
  size_t vn = n;
  int null = 0;
  if (vn >= (size_t)kn && !memcmp(v, key, (size_t)kn) && (vn == (size_t)kn || v[kn] == ' ')) {
    null = vn == (size_t)kn;
    v += vn == (size_t)kn ? kn : kn + 1;
    vn -= vn == (size_t)kn ? (size_t)kn : (size_t)kn + 1;
  }
  /* Worst case: every byte escaped (value and id), plus key and framing. */
  size_t need = 2 * vn + 2 * 400 + 64;
  if (need > COPY_BUF)
    return weir_ctx_fail(ctx, WEIR_ETOOBIG, "sink '%s': record too large", d->sink);
  if (d->cur && d->cur->len + need > COPY_BUF) hand(d);
  if (!d->cur) d->cur = chunk_new();
  put(d, key, (size_t)kn);
  put(d, "\t", 1);
  if (null)
    put(d, "\\N", 2);
  else
    put_escaped(d, v, vn);
  put(d, "\t", 1);
  char id[400];
  int in;
  if (d->a->common.opid) {
    size_t cn;
    if ((rc = format(ctx, d, d->a->common.opid, r, &cn)) < 0) return rc;
    in = snprintf(id, sizeof id, "%s/%s/c/%.*s", d->job, d->sink, (int)(cn > 250 ? 250 : cn),
                  d->scratch);
  } else {
    in = snprintf(id, sizeof id, "%s/%s/t/%u/%llu/%llu", d->job, d->sink, (unsigned)d->subtask,
                  (unsigned long long)d->after, (unsigned long long)d->index);
  }
  put_escaped(d, id, in > 0 ? ((size_t)in < sizeof id ? (size_t)in : sizeof id - 1) : 0);
  put(d, "\n", 1);
  d->index++;
  d->rows++;
  return 0;
}

/* ---- the connection thread ------------------------------------------------------ */

/* The transaction on tconn failed (its connection, or a statement): it is
 * gone (the connection is dropped when it is not known to be usable), and
 * nothing more is sent until the next PREPARE tries again. */
static void io_broke(pgdest *d, const char *what, const char *m) {
  if (!d->tbroken) snprintf(d->tmsg, sizeof d->tmsg, "%.80s: %.500s", what, m);
  d->tbroken = 1;
  d->topen = 0;
  PQfinish(d->tconn);
  d->tconn = NULL;
}

/* Keeps c (sent) until the transaction is prepared, within RETAIN_BYTES;
 * beyond, the transaction's rows are no longer kept and a failure to
 * prepare it fails the job. */
static void io_keep(pgdest *d, chunk *c) {
  if (d->unkept) {
    weir_free(c);
    return;
  }
  c->next = NULL;
  if (d->k_tail)
    d->k_tail->next = c;
  else
    d->k_head = c;
  d->k_tail = c;
  d->k_bytes += c->len;
  if (d->k_bytes > RETAIN_BYTES) {
    chunks_free(d->k_head);
    d->k_head = d->k_tail = NULL;
    d->k_bytes = 0;
    d->unkept = 1;
  }
}

/* Begins the transaction and its COPY on tconn (connecting first if need
 * be), and sends the rows kept for it (those of declined epochs). */
static void io_begin(pgdest *d) {
  char m[600], st[6] = "", sql[300];
  if (!d->tconn || PQstatus(d->tconn) != CONNECTION_OK) {
    PQfinish(d->tconn);
    d->tpid = 0;
    d->tconn = connect_to(d->twhere, d->a->conninfo, m, sizeof m);
    if (!d->tconn) {
      d->tbroken = 1;
      snprintf(d->tmsg, sizeof d->tmsg, "%s", m);
      return;
    }
  }
  if (!d->tpid) {
    /* Its server process, to settle a PREPARE whose answer is lost. */
    PGresult *r = exec(d->tconn,
                       "SELECT pg_backend_pid(), backend_start::text FROM pg_stat_activity WHERE "
                       "pid = pg_backend_pid()",
                       0, NULL, m, sizeof m, st);
    if (r && PQntuples(r) == 1) {
      d->tpid = atoi(PQgetvalue(r, 0, 0));
      snprintf(d->tstart, sizeof d->tstart, "%s", PQgetvalue(r, 0, 1));
    }
    PQclear(r);
  }
  snprintf(sql, sizeof sql, "BEGIN; COPY %s (key, value, opid) FROM STDIN", d->qtable);
  PGresult *r = exec(d->tconn, sql, 0, NULL, m, sizeof m, st);
  if (!r) {
    io_broke(d, "cannot begin a transaction", m);
    return;
  }
  PQclear(r);
  d->topen = 1;
  for (chunk *c = d->k_head; c; c = c->next)
    if (PQputCopyData(d->tconn, c->data, (int)c->len) != 1) {
      msg_of(d->tconn, NULL, m, sizeof m);
      io_broke(d, "cannot send rows", m);
      return;
    }
}

static void io_send(pgdest *d, chunk *c) {
  if (!d->tbroken && !d->topen) io_begin(d);
  if (!d->tbroken && PQputCopyData(d->tconn, c->data, (int)c->len) != 1) {
    char m[600];
    msg_of(d->tconn, NULL, m, sizeof m);
    io_broke(d, "cannot send rows", m);
  }
  io_keep(d, c);
}

static int io_stopping(pgdest *d) {
  pthread_mutex_lock(&d->mu);
  int stop = d->stop;
  pthread_mutex_unlock(&d->mu);
  return stop;
}

/* PREPARE TRANSACTION gid went out and its answer was lost with the
 * connection: whether gid is prepared. Once the server process that ran
 * it is gone (ended here if it is still there), gid is prepared or never
 * will be. Returns 1, 0, or -1 (cannot tell). */
static int io_settle(pgdest *d, const char *gid, char *m, size_t mlen) {
  char st[6] = "", pid[16];
  PQfinish(d->tconn);
  int oldpid = d->tpid;
  d->tpid = 0;
  /* A server that restarts is waited for (its prepared transactions
   * survive it), for a while: the task waits at the barrier meanwhile. */
  uint64_t t0 = weir_clock_wall_ms();
  while (!(d->tconn = connect_to(d->twhere, d->a->conninfo, m, mlen)) &&
         weir_clock_wall_ms() - t0 < SETTLE_MS && !io_stopping(d))
    weir_sleep_us(250000);
  if (!d->tconn) return -1;
  if (!oldpid) {
    snprintf(m, mlen, "its server process is not known");
    return -1;
  }
  snprintf(pid, sizeof pid, "%d", oldpid);
  const char *p[] = {pid, d->tstart};
  PGresult *r = exec(d->tconn,
                     "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE pid = "
                     "$1::int AND backend_start::text = $2",
                     2, p, m, mlen, st);
  if (!r) return -1;
  int alive = PQntuples(r) == 1 && PQgetvalue(r, 0, 0)[0] != 't';
  PQclear(r);
  if (alive) {
    snprintf(m, mlen, "its server process %d did not end", oldpid);
    return -1;
  }
  const char *q[] = {gid};
  r = exec(d->tconn, "SELECT 1 FROM pg_prepared_xacts WHERE gid = $1", 1, q, m, mlen, st);
  if (!r) return -1;
  int n = PQntuples(r);
  PQclear(r);
  return n > 0;
}

/* A failure the transaction did not survive (it is rolled back or never
 * was prepared): decline while its rows are kept, else fail. */
static int io_failed(pgdest *d, const char *what, const char *m, char *out, size_t cap) {
  char junk[200];
  snprintf(out, cap, "%s: %s", what, m);
  d->topen = 0;
  d->tbroken = 0;
  if (d->tconn && PQstatus(d->tconn) == CONNECTION_OK) {
    if (PQtransactionStatus(d->tconn) != PQTRANS_IDLE)
      (void)run(d->tconn, "ROLLBACK", 0, NULL, junk, sizeof junk, NULL);
  } else {
    PQfinish(d->tconn);
    d->tconn = NULL;
  }
  if (!d->unkept) return RES_DECLINE;
  d->unkept = 0;
  size_t n = strlen(out);
  snprintf(out + n, cap - n, " (its rows were more than the %u MiB the sink keeps for a retry)",
           (unsigned)(RETAIN_BYTES >> 20));
  return RES_FAIL;
}

/* The epoch's transaction prepared (or, settled, found prepared). */
static int io_prepared(pgdest *d) {
  chunks_free(d->k_head);
  d->k_head = d->k_tail = NULL;
  d->k_bytes = 0;
  d->unkept = 0;
  d->topen = 0;
  return RES_OK;
}

/* Ends the COPY, inserts the marker (fenced) and prepares as gid. */
static int io_prepare(pgdest *d, uint64_t epoch, const char *gid, char *out, size_t cap) {
  char m[600], st[6] = "";
  /* A transaction broken during the epoch: once more, now, with the rows
   * kept (a server that restarted meanwhile is back, say). */
  if (d->tbroken && !d->unkept) d->tbroken = 0;
  if (!d->tbroken && !d->topen) io_begin(d);
  if (d->tbroken) {
    snprintf(m, sizeof m, "%s", d->tmsg);
    return io_failed(d, "the rows' transaction failed", m, out, cap);
  }
  if (PQputCopyEnd(d->tconn, NULL) != 1) {
    msg_of(d->tconn, NULL, m, sizeof m);
    return io_failed(d, "cannot end the rows' COPY", m, out, cap);
  }
  PGresult *r;
  int bad = 0;
  while ((r = PQgetResult(d->tconn)) != NULL) {
    if (PQresultStatus(r) != PGRES_COMMAND_OK && !bad) {
      bad = 1;
      msg_of(d->tconn, r, m, sizeof m);
    }
    PQclear(r);
  }
  if (bad) return io_failed(d, "cannot write the rows", m, out, cap);
  char sub[16], ck[24], ow[24];
  snprintf(sub, sizeof sub, "%u", (unsigned)d->subtask);
  snprintf(ck, sizeof ck, "%llu", (unsigned long long)epoch);
  snprintf(ow, sizeof ow, "%llu", (unsigned long long)d->owner);
  const char *p[] = {gid, d->job, d->sink, sub, ck, ow};
  /* The marker, inserted only if the fence still names this owner (and
   * holding its row FOR SHARE until the prepared transaction resolves). */
  r = exec(d->tconn,
           d->owner ? "INSERT INTO weir_markers (gid, job, sink, subtask, checkpoint, epoch) "
                      "SELECT $1, $2, $3, $4, $5, $6 FROM weir_fence WHERE job = $2 AND epoch = "
                      "$6 FOR SHARE"
                    : "INSERT INTO weir_markers (gid, job, sink, subtask, checkpoint, epoch) "
                      "VALUES ($1, $2, $3, $4, $5, $6)",
           6, p, m, sizeof m, st);
  if (!r) return io_failed(d, "cannot insert the marker row", m, out, cap);
  int inserted = atoi(PQcmdTuples(r));
  PQclear(r);
  if (inserted != 1) {
    (void)io_failed(d, "fenced", "", out, cap);
    return RES_FENCED;
  }
  char *lit = PQescapeLiteral(d->tconn, gid, strlen(gid));
  char sql[300];
  snprintf(sql, sizeof sql, "PREPARE TRANSACTION %s", lit ? lit : "''");
  PQfreemem(lit);
  if (weir_failpoint("pg.before_prepare")) {
    PQfinish(d->tconn);
    d->tconn = NULL;
    return io_failed(d, "cannot prepare the transaction", "failpoint pg.before_prepare", out, cap);
  }
  int prc = run(d->tconn, sql, 0, NULL, m, sizeof m, st);
  if (prc == 0 && weir_failpoint("pg.after_prepare")) {
    PQfinish(d->tconn);
    d->tconn = NULL;
    prc = -1;
    snprintf(m, sizeof m, "failpoint pg.after_prepare: the answer lost");
  }
  if (prc == 0) return io_prepared(d);
  if (PQstatus(d->tconn) == CONNECTION_OK) {
    char what[80];
    snprintf(what, sizeof what, "PREPARE TRANSACTION failed (SQLSTATE %s)", st);
    return io_failed(d, what, m, out, cap);
  }
  /* Sent, and the answer lost with the connection. */
  char why[600];
  int k = io_settle(d, gid, why, sizeof why);
  if (k > 0) {
    WEIR_LOG_I("sink '%s' subtask %u: PostgreSQL at %s: the connection was lost after PREPARE "
               "TRANSACTION %s, which is prepared (epoch %llu)",
               d->sink, d->subtask, d->twhere, gid, (unsigned long long)epoch);
    return io_prepared(d);
  }
  if (k == 0)
    return io_failed(d, "the connection was lost during PREPARE TRANSACTION", m, out, cap);
  snprintf(out, cap,
           "the connection was lost during PREPARE TRANSACTION %s (%.200s), and whether it is "
           "prepared cannot be told (%.200s): --restore latest resolves it",
           gid, m, why);
  d->topen = 0;
  return RES_FAIL;
}

static void *io_main(void *arg) {
  pgdest *d = arg;
  char msg[700];
  for (;;) {
    pthread_mutex_lock(&d->mu);
    while (!d->stop && !d->q_head) pthread_cond_wait(&d->cv, &d->mu);
    if (d->stop) {
      pthread_mutex_unlock(&d->mu);
      return NULL;
    }
    /* In order: an epoch's rows, its PREPARE, the next epoch's rows. */
    chunk *c = d->q_head;
    d->q_head = c->next;
    if (!d->q_head) d->q_tail = NULL;
    d->q_bytes -= c->len;
    pthread_cond_signal(&d->back);
    uint64_t epoch = d->req_epoch;
    char gid[208];
    snprintf(gid, sizeof gid, "%s", d->req_gid);
    pthread_mutex_unlock(&d->mu);
    if (!c->prepare) {
      io_send(d, c);
      continue;
    }
    weir_free(c);
    msg[0] = '\0';
    int res = io_prepare(d, epoch, gid, msg, sizeof msg);
    pthread_mutex_lock(&d->mu);
    d->res = res;
    snprintf(d->res_msg, sizeof d->res_msg, "%s", msg);
    pthread_cond_signal(&d->back);
    pthread_mutex_unlock(&d->mu);
    weir_ctx_wake(d->ctx); /* its poll takes the answer (pg_prepared) */
  }
}

/* ---- pre_commit: the thread prepares, the task goes on ------------------------- */

/* The answer to the PREPARE in flight (wait: waits for it). Returns 0 (not
 * yet), 1 (prepared), 2 (declined: why says so, its rows are carried into
 * the next epoch's transaction) or a negative error. */
static int pg_prepared(weir_ctx *ctx, void *dest, int wait, char *why, size_t whylen) {
  pgdest *d = dest;
  if (!d->awaiting) return 0;
  pthread_mutex_lock(&d->mu);
  while (wait && !d->res) pthread_cond_wait(&d->back, &d->mu);
  int res = d->res;
  char m[700];
  snprintf(m, sizeof m, "%s", d->res_msg);
  d->res = 0;
  pthread_mutex_unlock(&d->mu);
  if (!res) return 0;
  d->awaiting = 0;
  unsigned long long epoch = d->req_epoch;
  if (res == RES_OK) return 1;
  if (res == RES_FENCED)
    return weir_ctx_fail(ctx, WEIR_EFENCED,
                         "sink '%s' subtask %u: epoch %llu not prepared: PostgreSQL at %s: the "
                         "fence of job %s is no longer at this run's owner epoch %llu (a newer "
                         "owner took over): nothing of this epoch lands",
                         d->sink, d->subtask, epoch, d->where, d->job,
                         (unsigned long long)d->owner);
  if (res == RES_DECLINE && weir_ctx_checkpointing(ctx)) {
    d->carry += d->req_rows;
    weir_ctx_count(ctx, "prepare_declines", 1);
    snprintf(why, whylen,
             "PostgreSQL at %s did not prepare epoch %llu: %s; its %llu rows (%llu of them "
             "carried from earlier epochs) are kept for the next epoch's transaction",
             d->where, epoch, m, (unsigned long long)d->req_rows,
             (unsigned long long)d->req_carried);
    return 2;
  }
  return weir_ctx_fail(ctx, WEIR_EIO,
                       "sink '%s' subtask %u: PostgreSQL at %s: epoch %llu not prepared: %s",
                       d->sink, d->subtask, d->where, epoch, m);
}

/* Hands the epoch's last rows and its PREPARE to the thread. With
 * checkpoints the answer comes later (pg_prepared, from the driver's
 * poll): the worker does not wait for the server at the barrier. */
static int pg_pre_commit(weir_ctx *ctx, void *dest, uint64_t epoch, weir_sink_buf *h) {
  pgdest *d = dest;
  d->after = epoch;
  d->index = 0;
  if (!d->rows && !d->carry) return 1;
  char gid[208];
  if (weir__pg_gid(gid, sizeof gid, d->job, d->sink, d->owner, epoch, d->subtask) < 0)
    return weir_ctx_fail(ctx, WEIR_EINVAL, "sink '%s': transaction id too long for job %s", d->sink,
                         d->job);
  hand(d);
  d->req_rows = d->rows + d->carry;
  d->req_carried = d->carry;
  d->rows = d->carry = 0;
  d->awaiting = 1;
  chunk *c = weir_malloc(sizeof *c);
  c->next = NULL;
  c->len = 0;
  c->prepare = 1;
  pthread_mutex_lock(&d->mu);
  /* One PREPARE in flight at a time: the driver takes its answer before
   * the next pre_commit. */
  d->req_epoch = epoch;
  snprintf(d->req_gid, sizeof d->req_gid, "%s", gid);
  d->res = 0;
  pthread_mutex_unlock(&d->mu);
  post(d, c);
  weir_sink_buf_put(h, gid, strlen(gid));
  if (weir_ctx_checkpointing(ctx)) return WEIR_SINK_LATER;
  /* Without checkpoints (one epoch, at the end): its answer now. */
  char why[1024];
  int rc = pg_prepared(ctx, d, 1, why, sizeof why);
  return rc == 1 ? 0 : rc < 0 ? rc : weir_ctx_fail(ctx, WEIR_EIO, "sink '%s': %s", d->sink, why);
}

/* ---- the destination --------------------------------------------------------- */

static void pgdest_free(pgdest *d) {
  if (!d) return;
  if (d->io_started) {
    pthread_mutex_lock(&d->mu);
    d->stop = 1;
    pthread_cond_broadcast(&d->cv);
    pthread_cond_broadcast(&d->back);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->io, NULL);
  }
  pthread_mutex_destroy(&d->mu);
  pthread_cond_destroy(&d->cv);
  pthread_cond_destroy(&d->back);
  /* An open transaction dies with its connection (rolled back). */
  PQfinish(d->tconn);
  PQfinish(d->conn);
  PQfinish(d->cconn);
  chunks_free(d->cur);
  chunks_free(d->q_head);
  chunks_free(d->k_head);
  weir_free(d->scratch);
  weir_free(d->job);
  weir_free(d->sink);
  weir_free(d->qtable);
  weir_free(d);
}

static int pg_open(weir_ctx *ctx, void **out) {
  pgdest *d = weir_calloc(1, sizeof *d);
  d->a = weir_sink_dest_arg(ctx);
  d->job = weir_strdup(weir_ctx_job_id(ctx));
  d->sink = weir_strdup(weir_ctx_name(ctx));
  d->subtask = weir_ctx_subtask(ctx);
  d->parallelism = weir_ctx_parallelism(ctx);
  d->owner = weir_ctx_checkpointing(ctx) ? weir_ctx_epoch(ctx) : 0;
  d->ctx = ctx;
  weir_ctx_count(ctx, "prepare_declines", 0); /* in the summary from the start */
  pthread_mutex_init(&d->mu, NULL);
  pthread_cond_init(&d->cv, NULL);
  pthread_cond_init(&d->back, NULL);
  char s[80];
  gid_sink(d->sink, s, sizeof s);
  snprintf(d->prefix, sizeof d->prefix, "weir:%s:%s:", d->job, s);
  const char *t = d->a->table, *dot = strchr(t, '.');
  size_t qn = strlen(t) + 8;
  d->qtable = weir_malloc(qn);
  if (dot)
    snprintf(d->qtable, qn, "\"%.*s\".\"%s\"", (int)(dot - t), t, dot + 1);
  else
    snprintf(d->qtable, qn, "\"%s\"", t);
  d->scap = 256;
  d->scratch = weir_malloc(d->scap);
  char err[700];
  d->conn = connect_to(d->where, d->a->conninfo, err, sizeof err);
  int rc;
  if (!d->conn) {
    rc = weir_ctx_fail(ctx, WEIR_EIO, "sink '%s' subtask %u: %s", d->sink, d->subtask, err);
  } else if ((rc = setup_tables(ctx, d)) == 0 && !weir_ctx_restored_checkpoint(ctx)) {
    /* A fresh start: nothing of an earlier unfinished run completed. */
    rc = resolve(ctx, d, 0, 0);
    if (rc >= 0 && d->owner) rc = replace_earlier(ctx, d);
    if (rc >= 0) rc = bump_fence(ctx, d, 0, 0);
  }
  if (rc >= 0 && pthread_create(&d->io, NULL, io_main, d) != 0)
    rc = weir_ctx_fail(ctx, WEIR_ENOMEM, "sink '%s': cannot start its connection thread", d->sink);
  else if (rc >= 0)
    d->io_started = 1;
  if (rc < 0) {
    pgdest_free(d);
    return rc;
  }
  *out = d;
  return 0;
}

static int pg_abort_after(weir_ctx *ctx, void *dest, uint64_t id) {
  pgdest *d = dest;
  d->after = id;
  /* At a restore, before any row: the connection is still the task's
   * (else a new one). */
  char m[600];
  if (!d->conn && !(d->conn = connect_to(d->where, d->a->conninfo, m, sizeof m)))
    return weir_ctx_fail(ctx, WEIR_EIO, "sink '%s' subtask %u: %s", d->sink, d->subtask, m);
  int rolled = resolve(ctx, d, id, 1);
  if (rolled < 0) return rolled;
  int rc = check_rewind(ctx, d, id);
  if (rc == 0) rc = bump_fence(ctx, d, id, 1);
  return rc < 0 ? rc : rolled;
}

/* Whether the marker of gid is committed: 1, 0, or -1 (cannot tell). */
static int marker_committed(PGconn *c, const char *gid, char *m, size_t mlen) {
  const char *p[] = {gid};
  char st[6];
  PGresult *r = exec(c, "SELECT 1 FROM weir_markers WHERE gid = $1", 1, p, m, mlen, st);
  if (!r) return -1;
  int n = PQntuples(r);
  PQclear(r);
  return n > 0;
}

/* A connection failure on the commit thread: again later, for a while. */
static int retry_later(pgdest *d, weir_sink_commit *c, const char *m) {
  uint64_t now = weir_clock_wall_ms();
  if (!c->progress) c->progress = now;
  PQfinish(d->cconn);
  d->cconn = NULL;
  if (now - c->progress < COMMIT_GIVE_UP_MS) return WEIR_EAGAIN;
  snprintf(c->err, c->errlen,
           "PostgreSQL at %s unreachable for %u s; epoch %llu stays prepared there and is "
           "committed by the next --restore latest: %s",
           d->cwhere, COMMIT_GIVE_UP_MS / 1000, (unsigned long long)c->epoch, m);
  return WEIR_EIO;
}

static int pg_commit(void *dest, weir_sink_commit *c) {
  pgdest *d = dest;
  char gid[208], m[600], st[6] = "";
  if (c->len == 0 || c->len >= sizeof gid) {
    snprintf(c->err, c->errlen, "bad handle for epoch %llu", (unsigned long long)c->epoch);
    return WEIR_ECORRUPT;
  }
  memcpy(gid, c->handle, c->len);
  gid[c->len] = '\0';
  if (!d->cconn || PQstatus(d->cconn) != CONNECTION_OK) {
    PQfinish(d->cconn);
    d->cconn = connect_to(d->cwhere, d->a->conninfo, m, sizeof m);
    if (!d->cconn) return retry_later(d, c, m);
  }
  char *lit = PQescapeLiteral(d->cconn, gid, strlen(gid));
  if (!lit) return retry_later(d, c, "cannot quote the gid");
  char sql[300];
  snprintf(sql, sizeof sql, "COMMIT PREPARED %s", lit);
  PQfreemem(lit);
  weir_sink_io_count(c->io, WEIR_SINK_REQUESTS, 1);
  if (run(d->cconn, sql, 0, NULL, m, sizeof m, st) < 0) {
    if (PQstatus(d->cconn) != CONNECTION_OK) return retry_later(d, c, m);
    weir_sink_io_count(c->io, WEIR_SINK_RESPONSES, 1);
    if (busy_elsewhere(st)) return WEIR_EAGAIN; /* retried: then done, or 42704 below */
    if (strcmp(st, "42704") != 0) {
      snprintf(c->err, c->errlen, "PostgreSQL at %s: cannot commit %s: %s", d->cwhere, gid, m);
      return WEIR_EIO;
    }
    /* No such prepared transaction: committed before, or lost. */
    int k = marker_committed(d->cconn, gid, m, sizeof m);
    if (k < 0) return PQstatus(d->cconn) != CONNECTION_OK ? retry_later(d, c, m) : WEIR_EAGAIN;
    if (!k) {
      snprintf(c->err, c->errlen,
               "PostgreSQL at %s: prepared transaction %s is gone and its marker row is not in "
               "weir_markers: it was rolled back, its rows are lost",
               d->cwhere, gid);
      return WEIR_EIO;
    }
    weir_sink_io_count(c->io, WEIR_SINK_DUPLICATES, 1);
  } else {
    weir_sink_io_count(c->io, WEIR_SINK_RESPONSES, 1);
  }
  /* Checkpoint ids jump (a new run starts a new block of ids), and an epoch
   * can stay pending through many checkpoints (restored, then carried until
   * its commit is seen): never prune a marker a checkpoint from this one on
   * may still ask about. */
  uint64_t below = c->epoch > d->a->marker_keep ? c->epoch - d->a->marker_keep : 0;
  if (below > c->oldest_pending) below = c->oldest_pending;
  if (below > 0) {
    char sub[16], ck[24];
    snprintf(sub, sizeof sub, "%u", (unsigned)d->subtask);
    snprintf(ck, sizeof ck, "%llu", (unsigned long long)below);
    const char *p[] = {d->job, d->sink, sub, ck};
    /* Best effort: a failed prune is retried by the next commit. */
    (void)run(d->cconn,
              "DELETE FROM weir_markers WHERE job = $1 AND sink = $2 AND subtask = $3 AND "
              "checkpoint < $4",
              4, p, m, sizeof m, st);
  }
  return 0;
}

static void pg_close(weir_ctx *ctx, void *dest) {
  (void)ctx;
  pgdest_free(dest);
}

/* "postgresql://HOST:PORT/DB table T": the server and database from the
 * URI, or libpq's environment variables where the URI leaves them out; no
 * user or password. */
static int pg_identity(const void *arg, char *buf, size_t cap) {
  const pg_arg *a = arg;
  char *msg = NULL;
  PQconninfoOption *opts = PQconninfoParse(a->conninfo, &msg);
  if (!opts) {
    PQfreemem(msg);
    return WEIR_ESINK;
  }
  const char *host = NULL, *port = NULL, *db = NULL;
  for (PQconninfoOption *o = opts; o->keyword; o++) {
    if (!o->val || !*o->val) continue;
    if (!strcmp(o->keyword, "host")) host = o->val;
    if (!strcmp(o->keyword, "port")) port = o->val;
    if (!strcmp(o->keyword, "dbname")) db = o->val;
  }
  if (!host) host = getenv("PGHOST");
  if (!port) port = getenv("PGPORT");
  if (!db) db = getenv("PGDATABASE");
  snprintf(buf, cap, "postgresql://%s:%s/%s table %s", host && *host ? host : "(default host)",
           port && *port ? port : "5432", db && *db ? db : "(default database)", a->table);
  PQconninfoFree(opts);
  return 0;
}

static const weir_sink_dest_vt pg_dest_vt = {
    .size = sizeof(weir_sink_dest_vt),
    .name = "postgresql",
    .open = pg_open,
    .write = pg_write,
    .pre_commit = pg_pre_commit,
    .prepared = pg_prepared,
    .abort_after = pg_abort_after,
    .commit = pg_commit,
    .close = pg_close,
    .identity = pg_identity,
    .move_note = "the postgresql sink's pending epochs are transactions prepared in the old "
                 "database, which only that database can commit, and weir keeps no credentials "
                 "to reach it",
};

#endif

static int pg_parse(const char *spec, weir__sink_arg *common, char *err, size_t errlen) {
  pg_arg *a = (pg_arg *)common;
  return weir__pg_parse(spec, &a->conninfo, &a->table, &a->marker_keep, err, errlen);
}

static void pg_arg_free(void *p) {
  pg_arg *a = p;
  weir_free(a->conninfo);
  weir_free(a->table);
  weir_free(a);
}

const weir__sink_def weir__pg_sink = {
    .name = "postgresql",
    .library = "libpq",
    .available = pg_available,
    .arg_size = sizeof(pg_arg),
    .parse = pg_parse,
    .free = pg_arg_free,
#ifdef WEIR_HAVE_PQ
    .dest = &pg_dest_vt,
#endif
};
