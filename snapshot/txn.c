/* txn.c: owns the rules every write transaction of the store-writer thread
 * follows: it begins under the lease (fencing), what must survive a power
 * failure is synced (durability), and a failure is reported with an
 * account of the space left (full disks, full maps).
 */
#include <errno.h>
#include <stdio.h>
#include <sys/statvfs.h>

#include "writer_impl.h"
#include "snapshot/lease.h"

typedef unsigned long long ull;

/* Is checkpoint id committed? 1, 0 or an error. */
int weir__is_committed(weir_store *s, MDB_txn *txn, uint64_t id) {
  uint8_t k[8];
  weir__key_meta(k, id);
  MDB_val key = {8, k}, val;
  int rc = mdb_get(txn, s->dbi_meta, &key, &val);
  if (rc == 0) return 1;
  if (rc == MDB_NOTFOUND) return 0;
  return weir__store_fail(s, weir__mdb_err(rc), "store %s: reading checkpoint %llu: %s", s->path,
                          (ull)id, weir__mdb_text(rc));
}

int weir__committed_now(weir_store *s, uint64_t id) {
  MDB_txn *txn;
  int rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
  if (rc != 0)
    return weir__store_fail(s, weir__mdb_err(rc), "store %s: read transaction: %s", s->path,
                            weir__mdb_text(rc));
  rc = weir__is_committed(s, txn, id);
  mdb_txn_abort(txn);
  return rc;
}

/* Commits txn and makes it durable. The environment is opened with
 * MDB_NOMETASYNC: a commit syncs the data pages it wrote, and writes the
 * meta page that makes them current without syncing it; the next commit's
 * data sync (fdatasync of the whole file) or mdb_env_sync carries it to
 * disk. So a power failure can undo only the last commit before it, and
 * chunk transactions (which a checkpoint's commit always follows) and
 * deletions cost one sync instead of two. What must be durable before
 * anything acts on it (a checkpoint's commit, reserved ids) commits here. */
int weir__commit_durable(weir_store *s, MDB_txn *txn) {
  int rc = mdb_txn_commit(txn);
  return rc != 0 ? rc : mdb_env_sync(s->env, 1);
}

/* Begins a write transaction and then checks the lease (lease.c, I5): the
 * check runs while this process holds LMDB's writer lock, so after a takeover
 * at most the one transaction that had already passed it can still commit,
 * and a fenced owner begins no other. Returns an LMDB code or WEIR_EFENCED
 * (nothing begun). */
int weir__begin_write(weir_store *s, MDB_txn **txn) {
  int rc = mdb_txn_begin(s->env, NULL, 0, txn);
  if (rc != 0) return rc;
  if (s->lease != NULL && weir_lease_check(s->lease) < 0) {
    mdb_txn_abort(*txn);
    *txn = NULL;
    return WEIR_EFENCED;
  }
  return 0;
}

/* Maps the failure of a write transaction that was writing `want` bytes,
 * with a note for the message. LMDB reports a short write as EIO; on a file
 * system without room for what was being written that is a full disk. */
int weir__write_err(weir_store *s, int rc, uint64_t want, char *note, size_t len) {
  note[0] = '\0';
  if (rc == MDB_MAP_FULL) {
    MDB_envinfo info;
    MDB_stat st;
    if (mdb_env_info(s->env, &info) == 0 && mdb_env_stat(s->env, &st) == 0)
      snprintf(note, len, " (map size %llu bytes, %llu of them in use)", (ull)info.me_mapsize,
               (ull)(((uint64_t)info.me_last_pgno + 1) * st.ms_psize));
    else
      snprintf(note, len, " (map size %llu bytes)", (ull)s->map_size);
  } else if (rc == EIO || rc == ENOSPC) {
    struct statvfs v;
    if (statvfs(s->path, &v) == 0) {
      uint64_t avail = (uint64_t)v.f_bavail * v.f_frsize;
      int full = avail < want + (1u << 20);
      snprintf(note, len, " (%sthe file system has %llu bytes free)",
               full && rc == EIO ? "a short write: No space left on device; " : "", (ull)avail);
      if (full) return WEIR_ENOSPC;
    }
  }
  return weir__mdb_err(rc);
}
