/* store.c: owns the checkpoint store's public API (weir/store.h): opening
 * and closing the LMDB environment, the error message, the job record and
 * checkpoint ids as seen by callers, queueing writes for the writer thread
 * (writer.c), and the reads of list, info and load (the chunks themselves
 * are read by load.c; the checks in a child process are verify.c's).
 *
 * DESIGN: one LMDB environment at <dir>/store (or, after a lease takeover
 * from an owner that may be alive, <dir>/store.<epoch>: handover.c), mapped
 * once, large and sparse (64 GiB of address space by default), with LMDB's
 * safe defaults (synchronous commits, no writable map: a full disk is an
 * error code, not a SIGBUS), and MDB_NOTLS so that read transactions may run
 * on any thread. Three named
 * databases: "job", "meta", "chunks" (layout and commit protocol in
 * writer.c). All writes after open belong to the writer thread; reads are
 * short read transactions on the caller's thread, which never block the
 * writer. Before open touches any page itself, a child process walks every
 * page that open and the writer's scans read (verify.c).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "store_impl.h"
#include "base/alloc.h"
#include "base/assert.h"
#include "base/clock.h"
#include "base/log.h"

typedef unsigned long long ull;

#define GiB (1024ull * 1024 * 1024)

/* ---- errors, keys ---------------------------------------------------------- */

int weir__store_fail(weir_store *s, int rc, const char *fmt, ...) {
  char buf[sizeof s->err];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&s->err_mu);
  memcpy(s->err, buf, sizeof buf);
  pthread_mutex_unlock(&s->err_mu);
  return rc;
}

const char *weir_store_error(weir_store *s, char *buf, size_t len) {
  if (buf == NULL || len == 0) return "";
  if (s == NULL) {
    snprintf(buf, len, "no store");
    return buf;
  }
  pthread_mutex_lock(&s->err_mu);
  snprintf(buf, len, "%s", s->err);
  pthread_mutex_unlock(&s->err_mu);
  return buf;
}

int weir__mdb_err(int rc) {
  switch (rc) {
  case 0:
    return 0;
  case MDB_MAP_FULL:
    return WEIR_ENOSPC;
  case MDB_NOTFOUND:
    return WEIR_ENOENT;
  case MDB_CORRUPTED:
  case MDB_PAGE_NOTFOUND:
  case MDB_BAD_TXN:
  case MDB_PANIC:
  case MDB_INVALID:
  case MDB_INCOMPATIBLE:
  case MDB_BAD_DBI:
  case MDB_CURSOR_FULL:
  case MDB_PAGE_FULL:
    return WEIR_ECORRUPT;
  case MDB_VERSION_MISMATCH:
    return WEIR_EFORMAT;
  case MDB_READERS_FULL:
  case MDB_MAP_RESIZED:
    return WEIR_EAGAIN;
  case MDB_TXN_FULL:
  case MDB_TLS_FULL:
    return WEIR_ENOMEM;
  case WEIR_EFENCED: /* from writer.c's begin_write, passed through */
    return WEIR_EFENCED;
  case MDB_KEYEXIST:
  case MDB_DBS_FULL:
  case MDB_BAD_RSLOT:
  case MDB_BAD_VALSIZE:
    return WEIR_EINVAL;
  default:
    return rc > 0 ? -rc : WEIR_EIO;
  }
}

const char *weir__mdb_text(int rc) {
  if (rc == MDB_MAP_FULL) return "the store's map is full";
  if (rc == WEIR_EFENCED) return weir_strerror(rc);
  return mdb_strerror(rc);
}

void weir__key_meta(uint8_t k[8], uint64_t id) {
  for (int i = 0; i < 8; i++) k[i] = (uint8_t)(id >> (56 - 8 * i));
}

void weir__key_chunk(uint8_t k[WEIR__CHUNK_KEY], uint64_t id, uint32_t record, uint32_t seq) {
  weir__key_meta(k, id);
  for (int i = 0; i < 4; i++) {
    k[8 + i] = (uint8_t)(record >> (24 - 8 * i));
    k[12 + i] = (uint8_t)(seq >> (24 - 8 * i));
  }
}

uint64_t weir__be64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = v << 8 | p[i];
  return v;
}

uint32_t weir__be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads the job record: 1, 0 (none) or an error; the message goes to err. */
int weir__read_job(MDB_txn *txn, MDB_dbi dbi, weir__job_rec *out, char *err, size_t errlen) {
  MDB_val key = {3, "job"}, val;
  int rc = mdb_get(txn, dbi, &key, &val);
  if (rc == MDB_NOTFOUND) return 0;
  if (rc != 0) {
    snprintf(err, errlen, "reading the job record: %s", weir__mdb_text(rc));
    return weir__mdb_err(rc);
  }
  rc = weir__job_decode(val.mv_data, val.mv_size, out, err, errlen);
  return rc < 0 ? rc : 1;
}

int weir__txn_job(weir_store *s, MDB_txn *txn, MDB_dbi dbi, weir__job_rec *out) {
  char err[512];
  int rc = weir__read_job(txn, dbi, out, err, sizeof err);
  if (rc < 0) return weir__store_fail(s, rc, "store %s: %s", s->path, err);
  return rc;
}

/* ---- open, close ------------------------------------------------------------ */

static int mkdir_p(const char *path) {
  char *p = weir_strdup(path);
  int rc = 0;
  for (char *q = p + 1;; q++) {
    if (*q == '/' || *q == '\0') {
      char c = *q;
      *q = '\0';
      if (mkdir(p, 0755) != 0 && errno != EEXIST) {
        rc = -errno;
        break;
      }
      *q = c;
      if (c == '\0') break;
    }
  }
  weir_free(p);
  if (rc == 0) {
    struct stat st;
    if (stat(path, &st) != 0) return -errno;
    if (!S_ISDIR(st.st_mode)) return -ENOTDIR;
  }
  return rc;
}

static char *join(const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 2;
  char *p = weir_malloc(n);
  snprintf(p, n, "%s/%s", a, b);
  return p;
}

static void store_free(weir_store *s) {
  if (s->env) mdb_env_close(s->env);
  weir__meta_free(&s->ident);
  pthread_mutex_destroy(&s->err_mu);
  pthread_mutex_destroy(&s->q_mu);
  pthread_cond_destroy(&s->q_cv);
  pthread_cond_destroy(&s->done_cv);
  pthread_mutex_destroy(&s->id_mu);
  pthread_cond_destroy(&s->id_cv);
  pthread_mutex_destroy(&s->rd_mu);
  pthread_cond_destroy(&s->rd_cv);
  pthread_cond_destroy(&s->rd_done_cv);
  weir_free(s->dir);
  weir_free(s->path);
  weir_free(s->data_path);
  weir_free(s);
}

/* Fails the open: logs the message (no store is left to ask) and frees. */
static int open_fail(weir_store *s, int rc) {
  char msg[sizeof s->err];
  WEIR_LOG_E("%s", weir_store_error(s, msg, sizeof msg));
  store_free(s);
  return rc;
}

/* A data file shorter than its last committed page is truncated; reading
 * those pages through the map would fault. Touches no page beyond the two
 * meta pages LMDB has already read. */
static int check_size(weir_store *s) {
  MDB_envinfo info;
  MDB_stat st;
  int rc = mdb_env_info(s->env, &info);
  if (rc == 0) rc = mdb_env_stat(s->env, &st);
  if (rc != 0)
    return weir__store_fail(s, weir__mdb_err(rc), "store %s: %s", s->path, weir__mdb_text(rc));
  s->map_size = info.me_mapsize;
  uint64_t need = ((uint64_t)info.me_last_pgno + 1) * st.ms_psize;
  uint64_t have = weir__env_file_size(s->env);
  if (have < need)
    return weir__store_fail(s, WEIR_ECORRUPT,
                            "store %s is damaged: its data file is truncated (%llu bytes, the "
                            "last committed page ends at %llu)",
                            s->path, (ull)have, (ull)need);
  return 0;
}

int weir_store_open(weir_store **out, const char *dir, const weir_store_opts *opts) {
  if (out) *out = NULL;
  if (out == NULL || dir == NULL || dir[0] == '\0') return WEIR_EINVAL;
  weir_store_opts o = {0};
  if (opts) o = *opts;
  weir_store *s = weir_calloc(1, sizeof *s);
  pthread_mutex_init(&s->err_mu, NULL);
  pthread_mutex_init(&s->q_mu, NULL);
  pthread_cond_init(&s->q_cv, NULL);
  pthread_cond_init(&s->done_cv, NULL);
  pthread_mutex_init(&s->id_mu, NULL);
  pthread_cond_init(&s->id_cv, NULL);
  pthread_mutex_init(&s->rd_mu, NULL);
  pthread_cond_init(&s->rd_cv, NULL);
  pthread_cond_init(&s->rd_done_cv, NULL);
  s->dir = weir_strdup(dir);
  char env_name[64];
  int prc = weir__store_env_name(dir, env_name, sizeof env_name);
  s->path = join(dir, prc == 0 ? env_name : "store");
  s->data_path = join(s->path, "data.mdb");
  s->read_only = o.read_only != 0;
  s->lease = o.lease;
  if (prc < 0) {
    weir__store_fail(s, prc, "store %s: cannot list the state directory: %s", dir,
                     weir_strerror(prc));
    return open_fail(s, prc);
  }
  s->retain = o.retain ? o.retain : 3;
  s->verify_timeout_s = o.verify_timeout_s ? o.verify_timeout_s : 600;
  int rc;

  if (s->read_only) {
    struct stat st;
    if (stat(s->data_path, &st) != 0) {
      rc = -errno;
      if (rc == WEIR_ENOENT) { /* no store yet: an answer, not a failure to log */
        store_free(s);
        return WEIR_ENOENT;
      }
      weir__store_fail(s, rc, "no store in %s (%s: %s)", dir, s->data_path, strerror(errno));
      return open_fail(s, rc);
    }
  } else if ((rc = mkdir_p(s->path)) < 0) {
    weir__store_fail(s, rc, "store %s: cannot create the directory: %s", s->path,
                     weir_strerror(rc));
    return open_fail(s, rc);
  }

  /* Map large and sparse; where the address space is short (32-bit hosts,
   * ulimit -v), fall back to smaller maps unless a size was asked for. */
  uint64_t map = o.map_size ? o.map_size : (sizeof(size_t) >= 8 ? 64 * GiB : 1 * GiB);
  for (;;) {
    rc = mdb_env_create(&s->env);
    if (rc == 0) rc = mdb_env_set_maxdbs(s->env, 4);
    if (rc == 0) rc = mdb_env_set_mapsize(s->env, (size_t)map);
    if (rc == 0)
      rc = mdb_env_open(s->env, s->path, MDB_NOTLS | (s->read_only ? MDB_RDONLY : MDB_NOMETASYNC),
                        0644);
    if (rc == 0) break;
    if (s->env) mdb_env_close(s->env);
    s->env = NULL;
    if (rc == ENOMEM && o.map_size == 0 && map > GiB / 4) {
      map /= 2;
      continue;
    }
    weir__store_fail(s, weir__mdb_err(rc), "store %s: cannot open: %s", s->path,
                     weir__mdb_text(rc));
    return open_fail(s, weir__mdb_err(rc));
  }
  s->map_size = map;
  if ((rc = check_size(s)) < 0) return open_fail(s, rc);
  int dead = 0;
  mdb_reader_check(s->env, &dead);
  if (dead > 0) WEIR_LOG_I("store %s: cleared %d stale reader slots", s->path, dead);

  if ((rc = weir__verify_structure(s)) < 0) return open_fail(s, rc);

  /* Open (create) the databases and read the job record. */
  MDB_txn *txn;
  rc = mdb_txn_begin(s->env, NULL, s->read_only ? MDB_RDONLY : 0, &txn);
  if (rc != 0) {
    weir__store_fail(s, weir__mdb_err(rc), "store %s: %s", s->path, weir__mdb_text(rc));
    return open_fail(s, weir__mdb_err(rc));
  }
  unsigned flags = s->read_only ? 0 : MDB_CREATE;
  rc = mdb_dbi_open(txn, "job", flags, &s->dbi_job);
  if (rc == 0) rc = mdb_dbi_open(txn, "meta", flags, &s->dbi_meta);
  if (rc == 0) rc = mdb_dbi_open(txn, "chunks", flags, &s->dbi_chunks);
  weir__job_rec job;
  int have = 0;
  if (rc == 0) {
    have = weir__txn_job(s, txn, s->dbi_job, &job);
    if (have < 0) {
      mdb_txn_abort(txn);
      return open_fail(s, have);
    }
  }
  if (rc == 0) {
    rc = mdb_txn_commit(txn); /* makes the database handles usable by every txn */
  } else {
    mdb_txn_abort(txn);
  }
  if (rc == MDB_NOTFOUND && s->read_only) {
    weir__store_fail(s, WEIR_ENOENT, "no store in %s (%s has no databases yet)", dir, s->path);
    return open_fail(s, WEIR_ENOENT);
  }
  if (rc != 0) {
    weir__store_fail(s, weir__mdb_err(rc), "store %s: opening its databases: %s", s->path,
                     weir__mdb_text(rc));
    return open_fail(s, weir__mdb_err(rc));
  }
  if (have) {
    s->have_job = 1;
    s->next = s->limit = s->first_id = job.id_limit;
  }

  if (!s->read_only) {
    uint64_t chunks = 0, ckpts = 0;
    if ((rc = weir__collect_orphans(s, &chunks, &ckpts)) < 0) {
      /* On a full disk even deleting needs room (copy-on-write pages): the
       * leftovers wait for a later collection, and restoring (which only
       * reads) must still work. */
      if (rc != WEIR_ENOSPC) return open_fail(s, rc);
      char msg[512];
      WEIR_LOG_W("%s (collected later)", weir_store_error(s, msg, sizeof msg));
    }
    if (ckpts > 0)
      WEIR_LOG_I("store %s: collected %llu chunks of %llu checkpoints that never completed or "
                 "were removed",
                 s->path, (ull)chunks, (ull)ckpts);
    if ((rc = weir__writer_start(s)) < 0) return open_fail(s, rc);
  }
  *out = s;
  return 0;
}

void weir_store_close(weir_store *s) {
  if (s == NULL) return;
  weir__writer_stop(s);
  store_free(s);
}

/* ---- job record, ids ----------------------------------------------------------- */

int weir__read_txn(weir_store *s, MDB_txn **txn) {
  int rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, txn);
  if (rc != 0)
    return weir__store_fail(s, weir__mdb_err(rc), "store %s: read transaction: %s", s->path,
                            weir__mdb_text(rc));
  return 0;
}

static void fill_job(weir_store *s, const weir__job_rec *j, weir_store_job *out) {
  memset(out, 0, sizeof *out);
  memcpy(out->job_id, j->job_id, sizeof out->job_id);
  out->instance = j->instance;
  out->latest = j->latest;
  out->finished = j->finished;
  memcpy(out->name, j->name, sizeof out->name);
  out->next_id = j->id_limit;
  if (!s->read_only) {
    pthread_mutex_lock(&s->id_mu);
    if (s->have_job) out->next_id = s->next;
    pthread_mutex_unlock(&s->id_mu);
  }
}

int weir_store_job_get(weir_store *s, weir_store_job *out) {
  if (s == NULL || out == NULL) return WEIR_EINVAL;
  memset(out, 0, sizeof *out);
  MDB_txn *txn;
  int rc = weir__read_txn(s, &txn);
  if (rc < 0) return rc;
  weir__job_rec j;
  rc = weir__txn_job(s, txn, s->dbi_job, &j);
  mdb_txn_abort(txn);
  if (rc == 1) fill_job(s, &j, out);
  return rc;
}

int weir_store_job_id_valid(const char *s) {
  return weir__uuid_valid(s);
}

int weir_store_set_identity(weir_store *s, const weir_store_identity *id) {
  if (s == NULL || id == NULL || id->name == NULL || id->fingerprint == 0) return WEIR_EINVAL;
  if (s->read_only) return weir__store_fail(s, WEIR_ESTATE, "store %s: opened read-only", s->path);
  if (strlen(id->name) > WEIR_STORE_NAME_MAX)
    return weir__store_fail(s, WEIR_EINVAL, "store %s: a job name of %zu bytes", s->path,
                            strlen(id->name));
  for (uint32_t i = 0; i < id->ndests; i++) {
    const weir_store_dest *d = &id->dests[i];
    if (!d->op || !*d->op || !d->id || strlen(d->id) > WEIR_STORE_DEST_MAX ||
        (i > 0 && strcmp(id->dests[i - 1].op, d->op) >= 0))
      return weir__store_fail(s, WEIR_EINVAL,
                              "store %s: destination %u is unnamed, too long or out of order",
                              s->path, i);
  }
  if (id->job_id && !weir__uuid_valid(id->job_id))
    return weir__store_fail(s, WEIR_EINVAL, "store %s: job id '%s' is not a UUID", s->path,
                            id->job_id);
  snprintf(s->new_job_id, sizeof s->new_job_id, "%s", id->job_id ? id->job_id : "");
  weir__meta_free(&s->ident);
  s->ident.job_name = weir_strdup(id->name);
  s->ident.fingerprint = id->fingerprint;
  s->ident.ndest = id->ndests;
  s->ident.dests = id->ndests ? weir_calloc(id->ndests, sizeof *s->ident.dests) : NULL;
  for (uint32_t i = 0; i < id->ndests; i++) {
    s->ident.dests[i].op = weir_strdup(id->dests[i].op);
    s->ident.dests[i].id = weir_strdup(id->dests[i].id);
  }
  return 0;
}

int weir_store_job_begin(weir_store *s, int new_instance, weir_store_job *out) {
  if (s == NULL) return WEIR_EINVAL;
  if (s->read_only) return weir__store_fail(s, WEIR_ESTATE, "store %s: opened read-only", s->path);
  weir__req r = {.type = WEIR__REQ_JOB_BEGIN, .new_instance = new_instance != 0};
  int rc = weir__writer_call(s, &r);
  if (rc < 0) return rc;
  pthread_mutex_lock(&s->id_mu);
  if (!s->have_job) {
    s->have_job = 1;
    s->next = s->limit = s->first_id = r.job.id_limit;
  }
  pthread_mutex_unlock(&s->id_mu);
  if (out) fill_job(s, &r.job, out);
  return 0;
}

int weir_store_next_id(weir_store *s, uint64_t *id) {
  if (s == NULL || id == NULL) return WEIR_EINVAL;
  if (s->read_only) return weir__store_fail(s, WEIR_ESTATE, "store %s: opened read-only", s->path);
  int self = weir__on_writer(s);
  pthread_mutex_lock(&s->id_mu);
  for (;;) {
    if (!s->have_job) {
      pthread_mutex_unlock(&s->id_mu);
      return weir__store_fail(
          s, WEIR_ESTATE, "store %s: no job: weir_store_job_begin before asking for ids", s->path);
    }
    if (s->next < s->limit) {
      *id = s->next++;
      pthread_mutex_unlock(&s->id_mu);
      return 0;
    }
    if (s->reserving && !self) {
      pthread_cond_wait(&s->id_cv, &s->id_mu);
      continue;
    }
    /* Reserve the next block durably, without holding id_mu (the writer
     * thread may need it in a done() callback). */
    s->reserving++;
    weir__req r = {.type = WEIR__REQ_RESERVE, .from = s->next};
    pthread_mutex_unlock(&s->id_mu);
    int rc = weir__writer_call(s, &r);
    pthread_mutex_lock(&s->id_mu);
    s->reserving--;
    if (rc == 0 && r.limit > s->limit) s->limit = r.limit;
    pthread_cond_broadcast(&s->id_cv);
    if (rc < 0) {
      pthread_mutex_unlock(&s->id_mu);
      return rc;
    }
  }
}

/* ---- writing --------------------------------------------------------------------- */

static int cmp_pos(const void *a, const void *b) {
  const weir_snap_position *x = a, *y = b;
  return x->split < y->split ? -1 : x->split > y->split;
}

/* Checks a snapshot handed to write_subtask; sorts its positions. */
static int check_snapshot(weir_store *s, uint64_t id, weir_subtask_snapshot *sn) {
#define BAD(...) return weir__store_fail(s, WEIR_EINVAL, __VA_ARGS__)
  if (id == 0) BAD("store %s: checkpoint id 0", s->path);
  if (sn->op == NULL || sn->op[0] == '\0' || strlen(sn->op) > WEIR__MAX_OP_NAME)
    BAD("store %s: checkpoint %llu: a subtask without an operator name (or a name over %u bytes)",
        s->path, (ull)id, WEIR__MAX_OP_NAME);
  const char *op = sn->op;
  if (sn->parallelism == 0 || sn->subtask >= sn->parallelism)
    BAD("store %s: checkpoint %llu: operator \"%s\": subtask %u of parallelism %u", s->path,
        (ull)id, op, sn->subtask, sn->parallelism);
  if ((sn->n_u64 && (!sn->u64_keys || !sn->u64_values)) ||
      (sn->n_bytes && (!sn->b_route || !sn->b_klen || !sn->b_vlen)) ||
      (sn->b_data_len && !sn->b_data) || (sn->npos && !sn->pos) || (sn->blob_len && !sn->blob) ||
      (sn->n_ns && (!sn->ns_keys || !sn->ns_ns || !sn->ns_values)) ||
      (sn->n_timers && (!sn->tm_keys || !sn->tm_ts || !sn->tm_domain)) ||
      (sn->n_bcast && (!sn->bc_klen || !sn->bc_vlen)) || (sn->bc_data_len && !sn->bc_data))
    BAD("store %s: checkpoint %llu: operator \"%s\" subtask %u: a count without its array", s->path,
        (ull)id, op, sn->subtask);
  uint64_t sum = 0;
  for (uint64_t i = 0; i < sn->n_bytes; i++) sum += (uint64_t)sn->b_klen[i] + sn->b_vlen[i];
  if (sum != sn->b_data_len)
    BAD("store %s: checkpoint %llu: operator \"%s\" subtask %u: byte-string entries of %llu "
        "bytes in %llu bytes of data",
        s->path, (ull)id, op, sn->subtask, (ull)sum, (ull)sn->b_data_len);
  sum = 0;
  for (uint64_t i = 0; i < sn->n_bcast; i++) sum += (uint64_t)sn->bc_klen[i] + sn->bc_vlen[i];
  if (sum != sn->bc_data_len)
    BAD("store %s: checkpoint %llu: operator \"%s\" subtask %u: broadcast entries of %llu "
        "bytes in %llu bytes of data",
        s->path, (ull)id, op, sn->subtask, (ull)sum, (ull)sn->bc_data_len);
  if (sn->npos > 1) {
    qsort(sn->pos, sn->npos, sizeof *sn->pos, cmp_pos);
    for (uint32_t i = 1; i < sn->npos; i++)
      if (sn->pos[i].split == sn->pos[i - 1].split)
        BAD("store %s: checkpoint %llu: operator \"%s\" subtask %u: split %u has two positions",
            s->path, (ull)id, op, sn->subtask, sn->pos[i].split);
  }
  return 0;
#undef BAD
}

int weir_store_write_subtask(weir_store *s, uint64_t id, weir_subtask_snapshot *snap,
                             weir_store_done_fn done, void *user) {
  if (snap == NULL) return WEIR_EINVAL;
  weir__req *r = weir_calloc(1, sizeof *r);
  r->snap = *snap;
  memset(snap, 0, sizeof *snap);
  int rc = 0;
  if (s == NULL) {
    rc = WEIR_EINVAL;
  } else if (s->read_only) {
    rc = weir__store_fail(s, WEIR_ESTATE, "store %s: opened read-only", s->path);
  } else {
    rc = check_snapshot(s, id, &r->snap);
  }
  if (rc < 0) {
    weir_subtask_snapshot_free(&r->snap);
    weir_free(r);
    return rc;
  }
  r->type = WEIR__REQ_WRITE;
  r->id = id;
  r->done = done;
  r->user = user;
  weir__writer_post(s, r);
  return 0;
}

int weir_store_commit(weir_store *s, const weir_store_commit_info *c, weir_store_done_fn done,
                      void *user) {
  if (s == NULL || c == NULL) return WEIR_EINVAL;
  if (s->read_only) return weir__store_fail(s, WEIR_ESTATE, "store %s: opened read-only", s->path);
  weir__req *r = weir_calloc(1, sizeof *r);
  r->type = WEIR__REQ_COMMIT;
  r->id = c->id;
  r->commit = *c;
  r->done = done;
  r->user = user;
  weir__writer_post(s, r);
  return 0;
}

int weir_store_abort(weir_store *s, uint64_t id) {
  if (s == NULL) return WEIR_EINVAL;
  if (s->read_only) return weir__store_fail(s, WEIR_ESTATE, "store %s: opened read-only", s->path);
  weir__req *r = weir_calloc(1, sizeof *r);
  r->type = WEIR__REQ_ABORT;
  r->id = id;
  weir__writer_post(s, r);
  return 0;
}

void weir_store_flush(weir_store *s) {
  if (s == NULL || s->read_only || !s->writer_running || weir__on_writer(s)) return;
  weir__req r = {.type = WEIR__REQ_FLUSH};
  weir__writer_call(s, &r);
}

/* ---- reading ------------------------------------------------------------------------ */

int weir_store_list(weir_store *s, weir_store_ckpt **out, size_t *n) {
  if (out) *out = NULL;
  if (n) *n = 0;
  if (s == NULL || out == NULL || n == NULL) return WEIR_EINVAL;
  MDB_txn *txn;
  int rc = weir__read_txn(s, &txn);
  if (rc < 0) return rc;
  weir__job_rec job;
  int have = weir__txn_job(s, txn, s->dbi_job, &job);
  if (have < 0) {
    mdb_txn_abort(txn);
    return have;
  }
  MDB_cursor *cur;
  rc = mdb_cursor_open(txn, s->dbi_meta, &cur);
  if (rc != 0) {
    mdb_txn_abort(txn);
    return weir__store_fail(s, weir__mdb_err(rc), "store %s: listing: %s", s->path,
                            weir__mdb_text(rc));
  }
  weir_store_ckpt *v = NULL;
  size_t cnt = 0, cap = 0;
  MDB_val key, val;
  for (rc = mdb_cursor_get(cur, &key, &val, MDB_FIRST); rc == 0;
       rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
    if (key.mv_size != 8) {
      rc = MDB_CORRUPTED;
      break;
    }
    if (cnt == cap) {
      cap = cap ? 2 * cap : 16;
      v = weir_realloc(v, cap * sizeof *v);
    }
    weir_store_ckpt *c = &v[cnt++];
    memset(c, 0, sizeof *c);
    c->id = weir__be64(key.mv_data);
    weir__ckpt_meta m;
    char err[512];
    int d = weir__meta_decode(val.mv_data, val.mv_size, c->id, have ? job.job_id : NULL, &m, err,
                              sizeof err);
    if (d < 0) {
      c->status = d;
      weir__store_fail(s, d, "%s", err);
      continue;
    }
    c->time_ms = m.complete_ms;
    c->bytes = m.total_bytes;
    c->duration_ms = m.duration_ms;
    c->alignment_ms = m.alignment_ms;
    c->instance = m.instance;
    c->epoch = m.epoch;
    c->final = m.final;
    weir__meta_free(&m);
  }
  mdb_cursor_close(cur);
  mdb_txn_abort(txn);
  if (rc != MDB_NOTFOUND) {
    weir_free(v);
    return weir__store_fail(s, weir__mdb_err(rc), "store %s: listing: %s", s->path,
                            weir__mdb_text(rc));
  }
  *out = v;
  *n = cnt;
  return 0;
}

/* Reads and decodes the metadata of checkpoint id in txn. */
static int txn_meta(weir_store *s, MDB_txn *txn, uint64_t id, weir__ckpt_meta *m) {
  memset(m, 0, sizeof *m);
  weir__job_rec job;
  int have = weir__txn_job(s, txn, s->dbi_job, &job);
  if (have < 0) return have;
  uint8_t k[8];
  weir__key_meta(k, id);
  MDB_val key = {8, k}, val;
  int rc = mdb_get(txn, s->dbi_meta, &key, &val);
  if (rc == MDB_NOTFOUND)
    return weir__store_fail(s, WEIR_ENOENT, "checkpoint %llu is not retained in store %s", (ull)id,
                            s->path);
  if (rc != 0)
    return weir__store_fail(s, weir__mdb_err(rc), "checkpoint %llu: reading its metadata: %s",
                            (ull)id, weir__mdb_text(rc));
  char err[512];
  rc =
      weir__meta_decode(val.mv_data, val.mv_size, id, have ? job.job_id : NULL, m, err, sizeof err);
  if (rc < 0) return weir__store_fail(s, rc, "%s", err);
  return 0;
}

int weir_store_info(weir_store *s, uint64_t id, weir_store_ckpt_info **out) {
  if (out) *out = NULL;
  if (s == NULL || out == NULL) return WEIR_EINVAL;
  MDB_txn *txn;
  int rc = weir__read_txn(s, &txn);
  if (rc < 0) return rc;
  weir__ckpt_meta m;
  rc = txn_meta(s, txn, id, &m);
  mdb_txn_abort(txn);
  if (rc < 0) return rc;
  weir_store_ckpt_info *info = weir_calloc(1, sizeof *info);
  info->ckpt.id = m.id;
  info->ckpt.time_ms = m.complete_ms;
  info->ckpt.bytes = m.total_bytes;
  info->ckpt.duration_ms = m.duration_ms;
  info->ckpt.alignment_ms = m.alignment_ms;
  info->ckpt.instance = m.instance;
  info->ckpt.epoch = m.epoch;
  info->ckpt.final = m.final;
  memcpy(info->job_id, m.job_id, sizeof info->job_id);
  info->format_version = m.format_version;
  info->key_groups = m.key_groups;
  if (m.job_name) snprintf(info->job_name, sizeof info->job_name, "%s", m.job_name);
  info->fingerprint = m.fingerprint;
  info->ndests = m.ndest; /* moved */
  info->dests = m.dests;
  m.ndest = 0;
  m.dests = NULL;
  info->nsubtasks = m.nsub;
  if (m.nsub) info->subtasks = weir_calloc(m.nsub, sizeof *info->subtasks);
  for (uint32_t i = 0; i < m.nsub; i++) {
    weir__sub_entry *e = &m.subs[i];
    weir_store_subtask_info *t = &info->subtasks[i];
    t->op = e->op; /* moved */
    e->op = NULL;
    t->subtask = e->subtask;
    t->parallelism = e->parallelism;
    t->bytes = e->bytes;
    t->chunks = weir__sub_chunks(e);
    t->u64_entries = e->u64_entries;
    t->bytes_entries = e->bytes_entries;
    t->blob_len = e->blob_len;
    t->keys_ckpt = e->keys_ckpt;
    t->ns = e->ns_entries;
    t->timers = e->timer_entries;
    t->bcast = e->bcast_entries;
    t->has_clock = e->has_clock;
    t->state_version = e->state_version;
    t->clock = e->clock;
    t->npos = e->npos;
    t->pos = e->pos; /* moved */
    e->pos = NULL;
  }
  weir__meta_free(&m);
  *out = info;
  return 0;
}

void weir_store_ckpt_info_free(weir_store_ckpt_info *info) {
  if (info == NULL) return;
  for (uint32_t i = 0; i < info->nsubtasks; i++) {
    weir_free(info->subtasks[i].op);
    weir_free(info->subtasks[i].pos);
  }
  weir_free(info->subtasks);
  for (uint32_t i = 0; i < info->ndests; i++) {
    weir_free(info->dests[i].op);
    weir_free(info->dests[i].id);
  }
  weir_free(info->dests);
  weir_free(info);
}

int weir_store_load(weir_store *s, uint64_t id, const char *op, uint32_t subtask,
                    weir_subtask_snapshot *out) {
  return weir_store_load_stream(s, id, op, subtask, NULL, out);
}

int weir_store_load_stream(weir_store *s, uint64_t id, const char *op, uint32_t subtask,
                           const weir_store_u64_sink *sink, weir_subtask_snapshot *out) {
  if (out) memset(out, 0, sizeof *out);
  if (s == NULL || op == NULL || out == NULL) return WEIR_EINVAL;
  MDB_txn *txn;
  int rc = weir__read_txn(s, &txn);
  if (rc < 0) return rc;
  weir__ckpt_meta m;
  rc = txn_meta(s, txn, id, &m);
  if (rc < 0) {
    mdb_txn_abort(txn);
    return rc;
  }
  const weir__sub_entry *e = NULL;
  for (uint32_t i = 0; i < m.nsub && e == NULL; i++)
    if (m.subs[i].subtask == subtask && strcmp(m.subs[i].op, op) == 0) e = &m.subs[i];
  if (e == NULL) {
    rc = weir__store_fail(s, WEIR_ENOENT, "checkpoint %llu has no operator \"%s\" subtask %u",
                          (ull)id, op, subtask);
  } else {
    char err[768];
    /* A streamed load (a restore) reads the values with pread. */
    int fd = -1;
    if (sink && mdb_env_get_fd(s->env, &fd) != 0) fd = -1;
    rc = weir__read_entry(txn, s->dbi_chunks, id, e, weir__env_file_size(s->env), fd, sink, out,
                          err, sizeof err);
    if (rc < 0) weir__store_fail(s, rc, "%s", err);
  }
  mdb_txn_abort(txn);
  weir__meta_free(&m);
  return rc;
}

void weir_subtask_snapshot_fill(weir_subtask_snapshot *snap) {
  if (!snap->fill) return;
  void (*fill)(void *, weir_subtask_snapshot *, int) = snap->fill;
  snap->fill = NULL;
  fill(snap->fill_arg, snap, 1);
}

void weir_blob_free(uint8_t *blob, uint64_t len, void (*release)(uint8_t *, uint64_t)) {
  if (release)
    release(blob, len);
  else
    weir_free(blob);
}

void weir_subtask_snapshot_free(weir_subtask_snapshot *snap) {
  if (snap == NULL) return;
  if (snap->fill) snap->fill(snap->fill_arg, snap, 0);
  weir_free(snap->op);
  void (*rel)(void *) = snap->u64_release ? snap->u64_release : weir_free;
  rel(snap->u64_keys);
  rel(snap->u64_values);
  weir_free(snap->b_route);
  weir_free(snap->b_klen);
  weir_free(snap->b_vlen);
  weir_free(snap->b_data);
  weir_free(snap->ns_keys);
  weir_free(snap->ns_ns);
  weir_free(snap->ns_values);
  weir_free(snap->tm_keys);
  weir_free(snap->tm_ts);
  weir_free(snap->tm_domain);
  weir_free(snap->bc_klen);
  weir_free(snap->bc_vlen);
  weir_free(snap->bc_data);
  weir_free(snap->pos);
  weir_blob_free(snap->blob, snap->blob_len, snap->blob_release);
  memset(snap, 0, sizeof *snap);
}
