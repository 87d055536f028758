/* verify.c: owns the checks that walk LMDB's pages in a forked child:
 * weir_store_verify (every value of one checkpoint), weir_store_probe (the
 * pages a load of one checkpoint walks) and the probe of the store's
 * structure at open (weir__verify_structure).
 *
 * DESIGN: LMDB has no page checksums, and a damaged page (a branch page
 * pointing anywhere, a file truncated under the map) can make a reader
 * fault instead of returning an error. So the checks that walk LMDB's pages
 * run in a forked child that opens its OWN read-only environment (the
 * parent's environment, locks and threads are never used after fork();
 * only plain memory is, and the heap: glibc's malloc is safe in the child
 * of a threaded parent, and weir's threads that may be inside an allocator
 * meanwhile (the lease's heartbeat, a store's writer, a restore's prefault
 * threads) hold forks off while they work, for allocators that are not,
 * such as AddressSanitizer's: weir_fork_hold; and they start and end away
 * from a fork: weir_thread_start), reports a status and a
 * message through a pipe, and exits. The parent reports a child killed by
 * a signal, or silent, or slow, as a damaged store. weir_store_verify does
 * this for one checkpoint (every value); weir_store_open does it for the
 * structure (every page the open path and the writer's scans touch) before
 * touching any page itself; weir_store_probe, before a restore, for the
 * pages a load of one checkpoint walks (every chunk found, each value
 * inside the file), leaving the values' checks to the load itself, which
 * runs them all.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store_impl.h"
#include "base/alloc.h"
#include "base/clock.h"

typedef unsigned long long ull;

/* Opens a read-only environment of its own on the store (in a child). */
static int child_env(const weir_store *s, MDB_env **env, MDB_txn **txn, char *msg, size_t len) {
  int rc = mdb_env_create(env);
  if (rc == 0) rc = mdb_env_set_maxdbs(*env, 4);
  if (rc == 0) rc = mdb_env_set_mapsize(*env, (size_t)s->map_size);
  if (rc == 0) rc = mdb_env_open(*env, s->path, MDB_RDONLY | MDB_NOTLS, 0644);
  if (rc == 0) rc = mdb_txn_begin(*env, NULL, MDB_RDONLY, txn);
  if (rc != 0) {
    snprintf(msg, len, "opening %s read-only: %s", s->path, weir__mdb_text(rc));
    if (*env) mdb_env_close(*env);
    *env = NULL;
    /* The parent has this environment open: a missing file means one
     * emptied under it. */
    int code = weir__mdb_err(rc);
    return code == WEIR_ENOENT || code == WEIR_EIO ? WEIR_ECORRUPT : code;
  }
  return 0;
}

static const char *const db_names[] = {"job", "meta", "chunks"};

/* The main database holds the records of the named ones: none (a store
 * never written) or exactly job, meta and chunks, as the first open
 * creates them together. Anything else is damage that a write would
 * trip over (open creates a database it cannot find, in the page where it
 * should be). 0 or WEIR_ECORRUPT (message set). */
static int probe_main(const weir_store *s, MDB_txn *txn, char *msg, size_t len) {
  MDB_dbi main;
  MDB_cursor *cur = NULL;
  int r = mdb_dbi_open(txn, NULL, 0, &main);
  if (r == 0) r = mdb_cursor_open(txn, main, &cur);
  unsigned seen = 0, n = 0;
  MDB_val key, val;
  if (r == 0) {
    for (r = mdb_cursor_get(cur, &key, &val, MDB_FIRST); r == 0;
         r = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
      unsigned which = 0;
      for (unsigned i = 0; i < 3; i++)
        if (key.mv_size == strlen(db_names[i]) &&
            memcmp(key.mv_data, db_names[i], key.mv_size) == 0)
          which = 1u << i;
      if (which == 0 || (seen & which) != 0 || ++n > 3) {
        r = MDB_CORRUPTED;
        break;
      }
      seen |= which;
    }
    if (r == MDB_NOTFOUND) r = 0;
  }
  if (cur) mdb_cursor_close(cur);
  if (r == 0 && seen != 0 && seen != 7) r = MDB_CORRUPTED;
  if (r == 0) return 0;
  int rc = weir__mdb_err(r);
  snprintf(msg, len, "store %s%s: reading its list of databases: %s", s->path,
           rc == WEIR_ECORRUPT ? " is damaged" : "",
           r == MDB_CORRUPTED ? "not job, meta and chunks" : weir__mdb_text(r));
  return rc;
}

/* Walks every page that open and the writer's scans read (the list of
 * databases, the job record, every metadata value, every chunk key) and
 * reports LMDB errors; crashes are the parent's to see. Damaged values are
 * not errors here (they are refused when read). */
static int probe_child(const weir_store *s, uint64_t unused, char *msg, size_t len) {
  (void)unused;
  MDB_env *env = NULL;
  MDB_txn *txn = NULL;
  int rc = child_env(s, &env, &txn, msg, len);
  if (rc < 0) return rc;
  rc = probe_main(s, txn, msg, len);
  for (int i = 0; i < 3 && rc == 0; i++) {
    MDB_dbi dbi;
    int r = mdb_dbi_open(txn, db_names[i], 0, &dbi);
    if (r == MDB_NOTFOUND) continue;
    MDB_cursor *cur = NULL;
    if (r == 0) r = mdb_cursor_open(txn, dbi, &cur);
    MDB_val key, val;
    uint64_t n = 0;
    if (r == 0) {
      for (r = mdb_cursor_get(cur, &key, &val, MDB_FIRST); r == 0;
           r = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
        if (i < 2) { /* read the whole value: job record and metadata */
          uint16_t kind;
          const uint8_t *p;
          size_t plen;
          char why[8];
          (void)weir__env_open(val.mv_data, val.mv_size, &kind, &p, &plen, why, sizeof why);
        }
        n++;
      }
    }
    if (cur) mdb_cursor_close(cur);
    if (r != 0 && r != MDB_NOTFOUND) {
      rc = weir__mdb_err(r);
      snprintf(msg, len, "store %s%s: reading database \"%s\" after %llu entries: %s", s->path,
               rc == WEIR_ECORRUPT ? " is damaged" : "", db_names[i], (ull)n, weir__mdb_text(r));
    }
  }
  mdb_txn_abort(txn);
  mdb_env_close(env);
  return rc;
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

/* Reads and checks every value of checkpoint id (in a child); pages_only:
 * walks what loading it reads without decoding the chunks (weir__walk_entry). */
static int check_child(const weir_store *s, uint64_t id, int pages_only, char *msg, size_t len) {
  MDB_env *env = NULL;
  MDB_txn *txn = NULL;
  int rc = child_env(s, &env, &txn, msg, len);
  if (rc < 0) return rc;
  MDB_dbi dj, dm, dc;
  weir__ckpt_meta m = {0};
  uint32_t *records = NULL;
  MDB_cursor *cur = NULL;
  char why[512];
  int r = mdb_dbi_open(txn, "job", 0, &dj);
  if (r == 0) r = mdb_dbi_open(txn, "meta", 0, &dm);
  if (r == 0) r = mdb_dbi_open(txn, "chunks", 0, &dc);
  if (r == MDB_NOTFOUND) {
    snprintf(msg, len, "checkpoint %llu is not retained (the store is empty)", (ull)id);
    rc = WEIR_ENOENT;
    goto out;
  }
  if (r != 0) {
    snprintf(msg, len, "checkpoint %llu: opening the store's databases: %s", (ull)id,
             weir__mdb_text(r));
    rc = WEIR_ECORRUPT;
    goto out;
  }
  weir__job_rec job;
  rc = weir__read_job(txn, dj, &job, why, sizeof why);
  if (rc < 0) {
    snprintf(msg, len, "checkpoint %llu: %s", (ull)id, why);
    goto out;
  }
  uint8_t k[8];
  weir__key_meta(k, id);
  MDB_val key = {8, k}, val;
  r = mdb_get(txn, dm, &key, &val);
  if (r == MDB_NOTFOUND) {
    snprintf(msg, len, "checkpoint %llu is not retained", (ull)id);
    rc = WEIR_ENOENT;
    goto out;
  }
  if (r != 0) {
    snprintf(msg, len, "checkpoint %llu: reading its metadata: %s", (ull)id, weir__mdb_text(r));
    rc = weir__mdb_err(r);
    goto out;
  }
  rc = weir__meta_decode(val.mv_data, val.mv_size, id, rc == 1 ? job.job_id : NULL, &m, msg, len);
  if (rc < 0) goto out;
  uint64_t fsize = weir__env_file_size(env);
  /* LMDB maps the file from offset 0: the mapping that holds the metadata
   * value is the map. */
  const uint8_t *map = pages_only ? weir__mapping_of(val.mv_data) : NULL;
  if (pages_only && fsize == UINT64_MAX) {
    snprintf(msg, len, "checkpoint %llu: cannot see the size of the store file", (ull)id);
    rc = WEIR_EIO;
    goto out;
  }
  for (uint32_t i = 0; i < m.nsub; i++) {
    rc = pages_only ? weir__walk_entry(txn, dc, id, &m.subs[i], map, fsize, msg, len)
                    : weir__read_entry(txn, dc, id, &m.subs[i], fsize, -1, NULL, NULL, msg, len);
    if (rc < 0) goto out;
  }
  /* Every chunk under this checkpoint must belong to one of its subtasks. */
  records = weir_malloc((m.nsub ? m.nsub : 1) * sizeof *records);
  for (uint32_t i = 0; i < m.nsub; i++) records[i] = m.subs[i].record;
  qsort(records, m.nsub, sizeof *records, cmp_u32);
  r = mdb_cursor_open(txn, dc, &cur);
  if (r == 0) {
    uint8_t kb[WEIR__CHUNK_KEY];
    weir__key_chunk(kb, id, 0, 0);
    MDB_val ck = {sizeof kb, kb}, cv;
    for (r = mdb_cursor_get(cur, &ck, &cv, MDB_SET_RANGE); r == 0;
         r = mdb_cursor_get(cur, &ck, &cv, MDB_NEXT)) {
      if (ck.mv_size < 8 || weir__be64(ck.mv_data) != id) break;
      if (ck.mv_size != WEIR__CHUNK_KEY) {
        snprintf(msg, len, "checkpoint %llu: a chunk key of %zu bytes", (ull)id, ck.mv_size);
        rc = WEIR_ECORRUPT;
        goto out;
      }
      uint32_t rec = weir__be32((const uint8_t *)ck.mv_data + 8);
      if (!bsearch(&rec, records, m.nsub, sizeof *records, cmp_u32)) {
        snprintf(msg, len, "checkpoint %llu: chunks of record %u belong to no subtask", (ull)id,
                 rec);
        rc = WEIR_ECORRUPT;
        goto out;
      }
    }
  }
  if (r != 0 && r != MDB_NOTFOUND) {
    snprintf(msg, len, "checkpoint %llu: scanning its chunks: %s", (ull)id, weir__mdb_text(r));
    rc = weir__mdb_err(r);
    goto out;
  }
  rc = 0;
out:
  if (cur) mdb_cursor_close(cur);
  weir_free(records);
  weir__meta_free(&m);
  mdb_txn_abort(txn);
  mdb_env_close(env);
  return rc;
}

static int verify_child(const weir_store *s, uint64_t id, char *msg, size_t len) {
  return check_child(s, id, 0, msg, len);
}

static int probe_ckpt_child(const weir_store *s, uint64_t id, char *msg, size_t len) {
  return check_child(s, id, 1, msg, len);
}

typedef int (*child_fn)(const weir_store *s, uint64_t id, char *msg, size_t len);

/* Runs fn in a forked child and returns its status, with its message (or a
 * description of its death) as the store's error. `what` names the subject
 * of the messages ("checkpoint 7"). */
static int run_in_child(weir_store *s, child_fn fn, uint64_t id, const char *what) {
  int p[2];
  if (pipe(p) != 0)
    return weir__store_fail(s, -errno, "%s: cannot check the store: pipe: %s", what,
                            strerror(errno));
  /* Run the one-time initialisations here, not in the child. */
  (void)weir__crc32c_sw(0, NULL, 0);
  (void)weir__crc32c(0, NULL, 0);
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close(p[0]);
    close(p[1]);
    return weir__store_fail(s, -e, "%s: cannot check the store: fork: %s", what, strerror(e));
  }
  if (pid == 0) {
    /* The child: plain memory of the parent only (no env, lock or thread of
     * the parent), and no stdio. A fault must kill it with its signal, so
     * that the parent can tell, whatever handlers the parent installed. */
    close(p[0]);
    static const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGPIPE, SIGABRT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
      struct sigaction sa;
      memset(&sa, 0, sizeof sa);
      sa.sa_handler = SIG_DFL;
      sigemptyset(&sa.sa_mask);
      sigaction(sigs[i], &sa, NULL);
    }
#ifdef WEIR_TEST_HOOKS
    if (s->test_child_signal) raise(s->test_child_signal);
#endif
    char msg[1024] = "";
    int rc = fn(s, id, msg, sizeof msg);
    uint8_t rep[4 + sizeof msg];
    int32_t st = rc;
    memcpy(rep, &st, 4);
    size_t n = strlen(msg);
    memcpy(rep + 4, msg, n);
    size_t off = 0;
    while (off < 4 + n) {
      ssize_t w = write(p[1], rep + off, 4 + n - off);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) break;
      off += (size_t)w;
    }
    _exit(rc == 0               ? 0
          : rc == WEIR_ECORRUPT ? 3
          : rc == WEIR_EFORMAT  ? 4
          : rc == WEIR_ENOENT   ? 5
                                : 1);
  }
  close(p[1]);
  char rep[4 + 1024 + 1];
  size_t got = 0;
  int timed_out = 0;
  uint64_t deadline = weir_clock_mono_ns() + (uint64_t)s->verify_timeout_s * 1000000000ull;
  for (;;) {
    uint64_t now = weir_clock_mono_ns();
    if (now >= deadline) {
      timed_out = 1;
      break;
    }
    uint64_t ms = (deadline - now) / 1000000 + 1;
    struct pollfd pfd = {.fd = p[0], .events = POLLIN};
    int pr = poll(&pfd, 1, ms > 60000 ? 60000 : (int)ms);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) continue;
    char tmp[512];
    ssize_t n = read(p[0], tmp, sizeof tmp);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break; /* EOF: the child exited (or closed its end) */
    size_t take = (size_t)n;
    if (take > sizeof rep - 1 - got) take = sizeof rep - 1 - got;
    memcpy(rep + got, tmp, take);
    got += take;
  }
  close(p[0]);
  if (timed_out) kill(pid, SIGKILL);
  int wst = 0;
  while (waitpid(pid, &wst, 0) < 0 && errno == EINTR) {
  }
  int dead = 0;
  mdb_reader_check(s->env, &dead); /* a crashed child leaves its reader slot */
  if (timed_out)
    return weir__store_fail(s, WEIR_ECORRUPT,
                            "%s: the store may be damaged: its reader did not finish within %u s",
                            what, s->verify_timeout_s);
  if (WIFSIGNALED(wst))
    return weir__store_fail(s, WEIR_ECORRUPT,
                            "%s: the store is damaged (reader crashed with signal %s, %d)", what,
                            weir_signal_name(WTERMSIG(wst)), WTERMSIG(wst));
  if (got < 4)
    return weir__store_fail(s, WEIR_ECORRUPT,
                            "%s: the store may be damaged: its reader exited with status %d "
                            "without a report",
                            what, WIFEXITED(wst) ? WEXITSTATUS(wst) : -1);
  int32_t st;
  memcpy(&st, rep, 4);
  rep[got] = '\0';
  if (st < 0) return weir__store_fail(s, st, "%s", rep + 4);
  return 0;
}

int weir_store_verify(weir_store *s, uint64_t id) {
  if (s == NULL) return WEIR_EINVAL;
  char what[48];
  snprintf(what, sizeof what, "checkpoint %llu", (ull)id);
  return run_in_child(s, verify_child, id, what);
}

int weir_store_probe(weir_store *s, uint64_t id) {
  if (s == NULL) return WEIR_EINVAL;
  char what[48];
  snprintf(what, sizeof what, "checkpoint %llu", (ull)id);
  return run_in_child(s, probe_ckpt_child, id, what);
}

int weir__verify_structure(weir_store *s) {
  char what[64];
  snprintf(what, sizeof what, "store %s", s->path);
  return run_in_child(s, probe_child, 0, what);
}
