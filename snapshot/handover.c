/* handover.c: owns which LMDB environment of a state directory is the store,
 * and the handover of the store to a fresh environment when a lease was taken
 * over from an owner that may still be alive (weir_store_handover; the lease
 * protocol is in lease.c).
 *
 * DESIGN
 * LMDB allows one write transaction per environment, guarded by a mutex in
 * its lock file. A process stopped (SIGSTOP) inside a write transaction keeps
 * that mutex: anyone who opens a write transaction on that environment then
 * waits until the process continues or dies, which may be never. So a
 * successor that took the lease over by expiry never writes to its
 * predecessor's environment: it copies it, with a read that takes no lock at
 * all (MDB_NOLOCK: no reader slot, no lock file; a stopped process may hold
 * the reader mutex too), into a new environment store.<epoch>, syncs it, and
 * only then marks it complete with the file store.<epoch>/ready (fsynced,
 * with both directories).
 *
 * Which environment is the store: the complete one (with `ready`) of the
 * highest epoch; <dir>/store if there is none (as before leases existed). A
 * maximum, not a pointer that is replaced: a handover that was stopped and
 * resumes after a later one (its owner is fenced by then) can only complete
 * an environment of a lower epoch, which nobody chooses. The owner of a new
 * environment deletes the older ones; a process that still has one open
 * keeps its unlinked files.
 *
 * Why reading without a reader slot is safe here: the copy reads the newest
 * committed snapshot of the old environment. A writer only reuses pages freed
 * by transactions older than every registered reader, so the one write
 * transaction the stale owner may still have in flight (it passed the fence
 * check before the takeover) can only reuse pages freed before that snapshot,
 * which the snapshot does not use; every later transaction of the stale owner
 * checks the fence after it begins and aborts (writer.c), so no second
 * transaction can recycle the snapshot's pages. What the copy reads is
 * verified like any restore (envelopes, checksums) before it is used.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "store_impl.h"
#include "base/alloc.h"
#include "base/log.h"

typedef unsigned long long ull;

#define READY "ready"
#define COPY_BATCH 1024u /* puts per write transaction of the copy */

static char *join(const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 2;
  char *p = weir_malloc(n);
  snprintf(p, n, "%s/%s", a, b);
  return p;
}

/* N if name is "store.<N>" (N > 0), else 0. */
static uint64_t env_epoch(const char *name) {
  if (strncmp(name, "store.", 6) != 0 || name[6] < '1' || name[6] > '9') return 0;
  char *end;
  errno = 0;
  unsigned long long n = strtoull(name + 6, &end, 10);
  return errno || *end ? 0 : n;
}

static int is_ready(const char *dir, const char *name) {
  char *env = join(dir, name), *r = join(env, READY);
  struct stat st;
  int ok = stat(r, &st) == 0;
  weir_free(env);
  weir_free(r);
  return ok;
}

int weir__store_env_name(const char *dir, char *name, size_t cap) {
  DIR *d = opendir(dir);
  if (d == NULL) {
    if (errno != ENOENT && errno != ENOTDIR) return -errno;
    snprintf(name, cap, "store");
    return 0;
  }
  uint64_t best = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    uint64_t n = env_epoch(e->d_name);
    if (n > best && is_ready(dir, e->d_name)) best = n;
  }
  closedir(d);
  if (best)
    snprintf(name, cap, "store.%llu", (ull)best);
  else
    snprintf(name, cap, "store");
  return 0;
}

static int fsync_path(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  int rc = fsync(fd) == 0 ? 0 : -errno;
  close(fd);
  return rc == -EINVAL ? 0 : rc;
}

static void rm_env(const char *path) {
  char *f = join(path, READY);
  unlink(f);
  weir_free(f);
  f = join(path, "data.mdb");
  unlink(f);
  weir_free(f);
  f = join(path, "lock.mdb");
  unlink(f);
  weir_free(f);
  rmdir(path);
}

/* Deletes every environment older than epoch `keep` (and <dir>/store). */
static void remove_older(const char *dir, uint64_t keep) {
  DIR *d = opendir(dir);
  if (d == NULL) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    uint64_t n = env_epoch(e->d_name);
    if ((n > 0 && n < keep) || strcmp(e->d_name, "store") == 0) {
      char *p = join(dir, e->d_name);
      rm_env(p); /* `ready` first: a half-deleted environment is never chosen */
      weir_free(p);
    }
  }
  closedir(d);
}

static int fail(char *err, size_t len, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t len, int rc, const char *fmt, ...) {
  if (err && len) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
  }
  return rc;
}

/* Copies every entry of database `name` from rtxn to the new environment,
 * committing every COPY_BATCH puts. */
static int copy_db(MDB_txn *rtxn, MDB_env *dst, const char *name, uint64_t *entries) {
  MDB_dbi sdbi, ddbi;
  int rc = mdb_dbi_open(rtxn, name, 0, &sdbi);
  if (rc == MDB_NOTFOUND) return 0; /* never created: nothing to copy */
  if (rc) return rc;
  MDB_txn *w;
  if ((rc = mdb_txn_begin(dst, NULL, 0, &w))) return rc;
  if ((rc = mdb_dbi_open(w, name, MDB_CREATE, &ddbi))) {
    mdb_txn_abort(w);
    return rc;
  }
  MDB_cursor *c;
  if ((rc = mdb_cursor_open(rtxn, sdbi, &c))) {
    mdb_txn_abort(w);
    return rc;
  }
  MDB_val k, v;
  unsigned batch = 0;
  for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0;
       rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
    if ((rc = mdb_put(w, ddbi, &k, &v, MDB_APPEND))) break;
    (*entries)++;
    if (++batch == COPY_BATCH) {
      batch = 0;
      if ((rc = mdb_txn_commit(w))) {
        w = NULL;
        break;
      }
      if ((rc = mdb_txn_begin(dst, NULL, 0, &w))) {
        w = NULL;
        break;
      }
    }
  }
  mdb_cursor_close(c);
  if (rc == MDB_NOTFOUND) rc = 0;
  if (rc == 0 && w) {
    rc = mdb_txn_commit(w);
    w = NULL;
  }
  if (w) mdb_txn_abort(w);
  return rc;
}

int weir_store_handover(const char *dir, uint64_t epoch, char *err, size_t errlen) {
  char cur[64], next[64];
  int rc = weir__store_env_name(dir, cur, sizeof cur);
  if (rc < 0) return fail(err, errlen, rc, "state directory '%s': %s", dir, weir_strerror(rc));
  snprintf(next, sizeof next, "store.%llu", (ull)epoch);
  if (strcmp(cur, next) == 0) return 0;
  char *src = join(dir, cur), *dst = join(dir, next), *src_data = join(src, "data.mdb");
  MDB_env *senv = NULL, *denv = NULL;
  MDB_txn *rtxn = NULL;
  uint64_t entries = 0;
  const char *step = "";
  rm_env(dst); /* epochs are never reused, so this is only ever an empty no-op */
  if (mkdir(dst, 0755) != 0 && errno != EEXIST) {
    rc = -errno;
    step = "creating the new environment";
    goto out;
  }
  struct stat st;
  int have_src = stat(src_data, &st) == 0;
  step = "opening the new environment";
  rc = mdb_env_create(&denv);
  if (rc == 0) rc = mdb_env_set_maxdbs(denv, 4);
  if (rc == 0)
    rc = mdb_env_set_mapsize(denv, (size_t)(sizeof(size_t) >= 8 ? 64ull << 30 : 1ull << 30));
  if (rc == 0) rc = mdb_env_open(denv, dst, MDB_NOTLS, 0644);
  if (rc) goto out;
  if (have_src) {
    step = "reading the previous owner's environment";
    rc = mdb_env_create(&senv);
    if (rc == 0) rc = mdb_env_set_maxdbs(senv, 4);
    /* Map at least the whole file (the stored map size may be smaller than
     * a file another build grew). */
    if (rc == 0) rc = mdb_env_set_mapsize(senv, (size_t)st.st_size);
    if (rc == 0) rc = mdb_env_open(senv, src, MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS, 0644);
    if (rc == 0) rc = mdb_txn_begin(senv, NULL, MDB_RDONLY, &rtxn);
    if (rc) goto out;
    step = "copying";
    static const char *const dbs[] = {"job", "meta", "chunks"};
    for (size_t i = 0; i < 3 && rc == 0; i++) rc = copy_db(rtxn, denv, dbs[i], &entries);
    if (rc) goto out;
  }
  step = "syncing the new environment";
  rc = mdb_env_sync(denv, 1);
  if (rc) goto out;
  rc = fsync_path(dst);
  if (rc < 0) goto out;
  /* Complete: the marker, durable, and the environment's directory entry. */
  step = "marking the new environment complete";
  char *ready = join(dst, READY);
  int fd = open(ready, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  rc = fd < 0 ? -errno : 0;
  if (rc == 0 && fsync(fd) != 0) rc = -errno;
  if (fd >= 0) close(fd);
  if (rc == 0) rc = fsync_path(dst);
  if (rc == 0) rc = fsync_path(dir);
  if (rc < 0) unlink(ready);
  weir_free(ready);
out:
  if (rtxn) mdb_txn_abort(rtxn);
  if (senv) mdb_env_close(senv);
  if (denv) mdb_env_close(denv);
  if (rc == 0) {
    WEIR_LOG_I("state directory %s: epoch %llu continues in %s (copied %llu values from %s, "
               "which the previous owner may still hold)",
               dir, (ull)epoch, next, (ull)entries, cur);
    remove_older(dir, epoch);
  } else {
    rm_env(dst);
    int code = rc > 0 ? weir__mdb_err(rc) : rc;
    rc = fail(err, errlen, code,
              "state directory '%s': handing the store over to epoch %llu: %s: "
              "%s",
              dir, (ull)epoch, step, rc > 0 ? mdb_strerror(rc) : weir_strerror(rc));
  }
  weir_free(src);
  weir_free(dst);
  weir_free(src_data);
  return rc;
}
