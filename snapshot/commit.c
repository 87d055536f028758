/* commit.c: owns a checkpoint's commit (its metadata and the job record's
 * latest pointer in one durable transaction: the commit protocol is in
 * writer.c) and the job record's other updates, a job's beginning and the
 * reservation of checkpoint ids.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "writer_impl.h"
#include "base/alloc.h"
#include "base/clock.h"
#include "snapshot/lease.h"
#include "base/log.h"

typedef unsigned long long ull;

static int cmp_entry(const void *a, const void *b) {
  const weir__sub_entry *x = a, *y = b;
  int c = strcmp(x->op, y->op);
  if (c != 0) return c;
  return x->subtask < y->subtask ? -1 : x->subtask > y->subtask;
}

/* The checks that need no transaction: the id is this store's to commit,
 * no subtask write of it failed, and it holds as many writes as the
 * coordinator counted. 0 or an error (message set). */
int weir__commit_check(weir_store *s, weir__ckcommit *c) {
  const weir_store_commit_info *ci = &c->r->commit;
  c->discard_on_fail = 1;
  int rc = weir__check_open_id(s, c->id);
  if (rc < 0) { /* nothing of it may be touched: it is not this commit's */
    c->untouched = 1;
    return rc;
  }
  c->pc = weir__pending_find(s, c->id);
  uint32_t written = c->pc ? c->pc->nsub : 0;
  if (c->pc != NULL && c->pc->status < 0) {
    char prev[512];
    weir_store_error(s, prev, sizeof prev);
    return weir__store_fail(s, c->pc->status,
                            "store %s: checkpoint %llu not committed: a subtask write failed (%s; "
                            "last store error: %s)",
                            s->path, (ull)c->id, weir_strerror(c->pc->status), prev);
  }
  if (ci->subtasks != 0 && ci->subtasks != written)
    return weir__store_fail(s, WEIR_ESTATE,
                            "store %s: checkpoint %llu not committed: it holds %u subtask writes, "
                            "%u were acknowledged",
                            s->path, (ull)c->id, written, ci->subtasks);
  return 0;
}

/* The message of a failed metadata put or durable commit (rc an LMDB or
 * errno code; with_writes: of the transaction that also held the
 * checkpoint's last writes); returns the WEIR_E* code. */
int weir__commit_io_fail(weir_store *s, const weir__ckcommit *c, int rc, int with_writes) {
  char map[128];
  int code = weir__write_err(s, rc, c->mlen + c->jlen, map, sizeof map);
  if (with_writes)
    return weir__store_fail(s, code,
                            "store %s: checkpoint %llu not committed: the transaction holding its "
                            "last writes and its metadata (%zu bytes) failed: %s%s%s",
                            s->path, (ull)c->id, c->mlen, weir__mdb_text(rc), map, c->fp);
  return weir__store_fail(s, code,
                          "store %s: committing checkpoint %llu (%zu bytes of metadata): %s%s%s",
                          s->path, (ull)c->id, c->mlen, weir__mdb_text(rc), map, c->fp);
}

/* Puts the checkpoint's metadata (every subtask written for it) and the
 * job record's latest pointer (and finished flag) into txn. 0 or an error
 * (message set); txn must then be aborted. */
int weir__commit_put(weir_store *s, weir__ckcommit *c, MDB_txn *txn) {
  const weir_store_commit_info *ci = &c->r->commit;
  uint64_t id = c->id;
  weir__job_rec job;
  int rc = weir__txn_job(s, txn, s->dbi_job, &job);
  if (rc == 0)
    rc = weir__store_fail(s, WEIR_ESTATE,
                          "store %s: checkpoint %llu: no job (weir_store_job_begin first)", s->path,
                          (ull)id);
  if (rc < 0) return rc;
  if (id == 0 || id >= job.id_limit)
    return weir__store_fail(
        s, WEIR_EINVAL, "store %s: checkpoint id %llu was never handed out (ids below %llu were)",
        s->path, (ull)id, (ull)job.id_limit);
  rc = weir__is_committed(s, txn, id);
  if (rc > 0) {
    c->discard_on_fail = 0;
    return weir__store_fail(s, WEIR_ESTATE, "store %s: checkpoint %llu is already committed",
                            s->path, (ull)id);
  }
  if (rc < 0) return rc;

  weir__ckpt_meta *m = &c->m;
  m->format_version = WEIR_STORE_FORMAT;
  m->min_reader_version = WEIR_STORE_MIN_READER;
  memcpy(m->job_id, job.job_id, sizeof m->job_id);
  m->instance = job.instance;
  m->id = id;
  m->epoch = ci->epoch;
  m->trigger_ms = ci->trigger_ms;
  m->complete_ms = weir_clock_wall_ms();
  m->duration_ms = ci->duration_ms;
  if (ci->trigger_ns != 0) {
    uint64_t now = weir_clock_mono_ns();
    m->duration_ms = now > ci->trigger_ns ? (now - ci->trigger_ns) / 1000000u : 0;
  }
  m->alignment_ms = ci->alignment_ms;
  m->key_groups = ci->key_groups;
  m->final = ci->final != 0;
  /* Borrowed from the store for the encoding (weir__meta_encode). */
  m->job_name = s->ident.job_name;
  m->fingerprint = s->ident.fingerprint;
  m->ndest = s->ident.ndest;
  m->dests = s->ident.dests;
  weir__pending *pc = c->pc;
  if (pc != NULL && pc->nsub > 0) {
    c->subs = weir_malloc(pc->nsub * sizeof *c->subs);
    memcpy(c->subs, pc->subs, pc->nsub * sizeof *c->subs);
    qsort(c->subs, pc->nsub, sizeof *c->subs, cmp_entry);
    m->nsub = pc->nsub;
    m->subs = c->subs;
    for (uint32_t i = 0; i < m->nsub; i++) {
      m->total_bytes += c->subs[i].bytes;
      m->total_chunks += weir__sub_chunks(&c->subs[i]);
      if (c->subs[i].keys_ckpt && m->min_reader_version < WEIR_STORE_SHARED_KEYS)
        m->min_reader_version = WEIR_STORE_SHARED_KEYS;
      if (c->subs[i].timer_entries || c->subs[i].has_clock)
        m->min_reader_version = WEIR_STORE_TIMERS;
      if (c->subs[i].bcast_entries) m->min_reader_version = WEIR_STORE_BROADCAST;
      if (c->subs[i].ns_entries) m->min_reader_version = WEIR_STORE_NS;
    }
  }
  weir__meta_encode(m, &c->mval, &c->mlen);
  uint8_t k[8];
  weir__key_meta(k, id);
  MDB_val key = {8, k}, val = {c->mlen, c->mval};
  if ((rc = weir__simulated("store.commit")) != 0)
    c->fp = " [simulated by failpoint store.commit]";
  else
    rc = mdb_put(txn, s->dbi_meta, &key, &val, MDB_NOOVERWRITE);
  if (rc == 0) {
    if (id > job.latest) job.latest = id;
    if (ci->final) job.finished = 1;
    weir__job_encode(&job, &c->jval, &c->jlen);
    MDB_val jkey = {3, "job"}, jv = {c->jlen, c->jval};
    rc = mdb_put(txn, s->dbi_job, &jkey, &jv, 0);
  }
  /* Tests: pause (SIGSTOP) here holds LMDB's writer lock (lease.c, I5). */
  if (rc == 0 && weir_failpoint("store.in_commit_txn")) rc = EIO;
  return rc == 0 ? 0 : weir__commit_io_fail(s, c, rc, 0);
}

/* Once the transaction holding the metadata is durable: still the owner?
 * If not, this process was paused past its lease: the checkpoint is not
 * reported as completed (no effects may follow it), though it stays in
 * this environment. 0 or WEIR_EFENCED (message set). */
int weir__commit_owned(weir_store *s, weir__ckcommit *c) {
  if (s->lease == NULL || weir_lease_check(s->lease) >= 0) return 0;
  c->discard_on_fail = 0;
  char why[512];
  return weir__store_fail(s, WEIR_EFENCED, "store %s: checkpoint %llu: %s", s->path, (ull)c->id,
                          weir_lease_error(s->lease, why, sizeof why));
}

/* Settles the commit with rc (0: durable and owned) and reports it; never
 * with a transaction open. */
void weir__commit_end(weir_store *s, weir__ckcommit *c, int rc) {
  weir__req *r = c->r;
  weir_store_written w = {0, 0};
  if (rc == 0) {
    w.bytes = c->m.total_bytes;
    w.chunks = (uint32_t)(c->m.total_chunks > UINT32_MAX ? UINT32_MAX : c->m.total_chunks);
    WEIR_LOG_D("store %s: checkpoint %llu committed (%u subtasks, %llu bytes in %llu chunks)%s",
               s->path, (ull)c->id, c->m.nsub, (ull)c->m.total_bytes, (ull)c->m.total_chunks,
               c->m.final ? ", final" : "");
  }
  if (rc < 0 && c->why != NULL) weir__store_fail(s, rc, "%s", c->why); /* done() reads it */
  weir_free(c->why);
  weir_free(c->subs);
  weir_free(c->mval);
  weir_free(c->jval);
  s->stats.commits++;
  if (c->untouched) {
    if (r->done) r->done(r->user, rc, NULL);
    return;
  }
  weir__fin_add(s, c->id);
  if (rc == 0) {
    weir__pending_drop(s, c->id);
    weir__memo_committed(s, c->id);
    if (r->done) r->done(r->user, 0, &w);
    weir__retention(s);
  } else {
    if (c->discard_on_fail) weir__discard(s, c->id);
    if (r->done) r->done(r->user, rc, NULL);
  }
}

/* The commit in a write transaction of its own. */
void weir__exec_commit(weir_store *s, weir__req *r) {
  weir__ckcommit c = {.r = r, .id = r->commit.id, .fp = ""};
  MDB_txn *txn = NULL;
  int rc = weir__commit_check(s, &c);
  if (rc == 0 && (rc = weir__begin_write(s, &txn)) != 0) {
    txn = NULL;
    rc = weir__store_fail(s, weir__mdb_err(rc), "store %s: committing checkpoint %llu: %s", s->path,
                          (ull)c.id, weir__mdb_text(rc));
  }
  if (rc == 0) rc = weir__commit_put(s, &c, txn);
  if (rc == 0) {
    rc = weir__commit_durable(s, txn);
    txn = NULL;
    rc = rc != 0 ? weir__commit_io_fail(s, &c, rc, 0) : weir__commit_owned(s, &c);
  }
  if (txn != NULL) mdb_txn_abort(txn);
  weir__commit_end(s, &c, rc);
}

/* Fills out with a random (version 4) UUID in text form. */
static int make_uuid(weir_store *s, char out[40]) {
  uint8_t b[16];
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return weir__store_fail(s, -errno, "store %s: /dev/urandom: %s", s->path, strerror(errno));
  size_t got = 0;
  while (got < sizeof b) {
    ssize_t n = read(fd, b + got, sizeof b - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = n < 0 ? errno : EIO;
      close(fd);
      return weir__store_fail(s, -e, "store %s: reading /dev/urandom: %s", s->path, strerror(e));
    }
    got += (size_t)n;
  }
  close(fd);
  b[6] = (uint8_t)((b[6] & 0x0f) | 0x40);
  b[8] = (uint8_t)((b[8] & 0x3f) | 0x80);
  static const char hex[] = "0123456789abcdef";
  char *p = out;
  for (int i = 0; i < 16; i++) {
    if (i == 4 || i == 6 || i == 8 || i == 10) *p++ = '-';
    *p++ = hex[b[i] >> 4];
    *p++ = hex[b[i] & 15];
  }
  *p = '\0';
  return 0;
}

/* Reads the job record in a write transaction, lets `change` modify it, and
 * writes it back (when change returns 1). */
int weir__update_job(weir_store *s, weir__req *r) {
  MDB_txn *txn;
  int rc = weir__begin_write(s, &txn);
  if (rc != 0)
    return weir__store_fail(s, weir__mdb_err(rc), "store %s: updating the job record: %s", s->path,
                            weir__mdb_text(rc));
  weir__job_rec job;
  int have = weir__txn_job(s, txn, s->dbi_job, &job);
  if (have < 0) {
    mdb_txn_abort(txn);
    return have;
  }
  int write = 0;
  if (r->type == WEIR__REQ_JOB_BEGIN) {
    if (!have) {
      memset(&job, 0, sizeof job);
      if (s->new_job_id[0])
        memcpy(job.job_id, s->new_job_id, sizeof job.job_id);
      else if ((rc = make_uuid(s, job.job_id)) < 0) {
        mdb_txn_abort(txn);
        return rc;
      }
      job.instance = 1;
      job.id_limit = 1;
      job.created_ms = weir_clock_wall_ms();
      write = 1;
    } else if (r->new_instance) {
      job.instance++;
      job.latest = 0;
      job.finished = 0;
      write = 1;
    }
    /* The name is the current instance's; a record written before names
     * were recorded gets this run's (the engine checked that it fits). */
    const char *name = s->ident.job_name;
    if (name && (!have || r->new_instance || !job.name[0]) && strcmp(job.name, name) != 0) {
      snprintf(job.name, sizeof job.name, "%s", name);
      write = 1;
    }
  } else { /* RESERVE */
    if (!have) {
      mdb_txn_abort(txn);
      return weir__store_fail(
          s, WEIR_ESTATE, "store %s: no job: weir_store_job_begin before asking for ids", s->path);
    }
    job.id_limit = (job.id_limit > r->from ? job.id_limit : r->from) + WEIR__ID_BLOCK;
    write = 1;
  }
  if (write) {
    uint8_t *v;
    size_t len;
    weir__job_encode(&job, &v, &len);
    MDB_val key = {3, "job"}, val = {len, v};
    rc = mdb_put(txn, s->dbi_job, &key, &val, 0);
    weir_free(v);
    if (rc == 0) {
      rc = weir__commit_durable(s, txn);
    } else {
      mdb_txn_abort(txn);
    }
    if (rc != 0) {
      char note[128];
      int code = weir__write_err(s, rc, len, note, sizeof note);
      return weir__store_fail(s, code, "store %s: writing the job record: %s%s", s->path,
                              weir__mdb_text(rc), note);
    }
  } else {
    mdb_txn_abort(txn);
  }
  r->job = job;
  r->limit = job.id_limit;
  return 0;
}
