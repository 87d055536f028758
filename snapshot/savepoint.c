/* savepoint.c: owns savepoint files: a completed checkpoint copied out of
 * a store into one self-contained file (weir_store_export), checked whole
 * (weir_savepoint_check), and copied into a state directory's store for a
 * run that starts from it (weir_store_import, on the writer thread).
 * The file format is docs/store.md §11.
 *
 * DESIGN
 * A savepoint file holds the store's own values, envelopes and all, as
 * LMDB holds them: the job record, the checkpoint's metadata and every
 * chunk it reads, including the chunks of an earlier checkpoint whose u64
 * keys it shares, so that the file needs nothing else. Copying values
 * rather than decoding and re-encoding them keeps their checksums, and an
 * import is a series of puts. The export reads inside one read
 * transaction: LMDB's snapshot keeps every value the checkpoint names even
 * if retention removes it meanwhile. The file's own checksum covers its
 * framing; the loader checks every value again when the run restores it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "envelope.h"
#include "writer_impl.h"
#include "base/alloc.h"
#include "base/clock.h"
#include "base/log.h"

typedef unsigned long long ull;

#define SP_MAGIC "WEIRSVPT"
#define SP_END "WEND"
#define SP_FORMAT 1u
#define SP_HEADER 24u  /* magic, format u32, reserved u32, checkpoint id u64 */
#define SP_TRAILER 16u /* records u64, crc32c u32, "WEND" */
#define SP_REC_HEAD 6u /* db u8, key length u8, value length u32 */

enum { SP_DB_JOB = 1, SP_DB_META = 2, SP_DB_CHUNK = 3 };

static void put_le32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_le64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t le64(const uint8_t *p) {
  return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

/* ---- writing -------------------------------------------------------------- */

typedef struct sp_out {
  FILE *f;
  uint32_t crc;
  uint64_t records, bytes;
  int err; /* errno of the first failed write */
} sp_out;

static void out_put(sp_out *o, const void *p, size_t n) {
  if (o->err || n == 0) return;
  if (fwrite(p, 1, n, o->f) != n) o->err = errno ? errno : EIO;
  o->crc = weir__crc32c(o->crc, p, n);
  o->bytes += n;
}

static void out_record(sp_out *o, int db, const MDB_val *key, const MDB_val *val) {
  uint8_t h[SP_REC_HEAD];
  h[0] = (uint8_t)db;
  h[1] = (uint8_t)key->mv_size;
  put_le32(h + 2, (uint32_t)val->mv_size);
  out_put(o, h, sizeof h);
  out_put(o, key->mv_data, key->mv_size);
  out_put(o, val->mv_data, val->mv_size);
  o->records++;
}

/* Copies the chunks whose keys start with prefix (8 bytes: a checkpoint;
 * 12: a checkpoint's record). */
static int out_chunks(weir_store *s, MDB_txn *txn, sp_out *o, const uint8_t *prefix, size_t plen) {
  MDB_cursor *cur;
  int rc = mdb_cursor_open(txn, s->dbi_chunks, &cur);
  if (rc != 0) return rc;
  uint8_t kb[WEIR__CHUNK_KEY] = {0};
  memcpy(kb, prefix, plen);
  MDB_val key = {sizeof kb, kb}, val;
  for (rc = mdb_cursor_get(cur, &key, &val, MDB_SET_RANGE); rc == 0 && !o->err;
       rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
    if (key.mv_size != WEIR__CHUNK_KEY || memcmp(key.mv_data, prefix, plen) != 0) break;
    out_record(o, SP_DB_CHUNK, &key, &val);
  }
  mdb_cursor_close(cur);
  return rc == MDB_NOTFOUND ? 0 : rc;
}

static int sync_dir_of(const char *path) {
  char *dir = weir_strdup(path);
  char *slash = strrchr(dir, '/');
  if (slash == dir)
    slash[1] = '\0';
  else if (slash)
    *slash = '\0';
  else
    strcpy(dir, ".");
  int fd = open(dir, O_RDONLY);
  int rc = 0;
  if (fd < 0 || fsync(fd) != 0) rc = -errno;
  if (fd >= 0) close(fd);
  weir_free(dir);
  return rc;
}

int weir_store_export(weir_store *s, uint64_t id, const char *path, uint64_t *bytes) {
  if (s == NULL || path == NULL || !*path) return WEIR_EINVAL;
  MDB_txn *txn;
  int rc = weir__read_txn(s, &txn);
  if (rc < 0) return rc;
  uint8_t k[8];
  weir__key_meta(k, id);
  MDB_val mkey = {8, k}, mval, jkey = {3, "job"}, jval;
  rc = mdb_get(txn, s->dbi_meta, &mkey, &mval);
  if (rc == 0) rc = mdb_get(txn, s->dbi_job, &jkey, &jval);
  if (rc != 0) {
    mdb_txn_abort(txn);
    if (rc == MDB_NOTFOUND)
      return weir__store_fail(s, WEIR_ENOENT, "checkpoint %llu is not retained in store %s",
                              (ull)id, s->path);
    return weir__store_fail(s, weir__mdb_err(rc), "store %s: reading checkpoint %llu: %s", s->path,
                            (ull)id, weir__mdb_text(rc));
  }
  weir__ckpt_meta m;
  char err[512];
  rc = weir__meta_decode(mval.mv_data, mval.mv_size, id, NULL, &m, err, sizeof err);
  if (rc < 0) {
    mdb_txn_abort(txn);
    return weir__store_fail(s, rc, "store %s: checkpoint %llu: %s", s->path, (ull)id, err);
  }
  size_t tlen = strlen(path) + 16;
  char *tmp = weir_malloc(tlen);
  snprintf(tmp, tlen, "%s.partial", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  sp_out o = {.f = fd >= 0 ? fdopen(fd, "wb") : NULL};
  if (o.f == NULL) {
    rc = -errno;
    if (fd >= 0) close(fd);
    mdb_txn_abort(txn);
    weir__meta_free(&m);
    weir__store_fail(s, rc, "cannot create the savepoint file '%s': %s", tmp, weir_strerror(rc));
    weir_free(tmp);
    return rc;
  }
  uint8_t h[SP_HEADER] = {0};
  memcpy(h, SP_MAGIC, 8);
  put_le32(h + 8, SP_FORMAT);
  put_le64(h + 16, id);
  out_put(&o, h, sizeof h);
  out_record(&o, SP_DB_JOB, &jkey, &jval);
  out_record(&o, SP_DB_META, &mkey, &mval);
  rc = out_chunks(s, txn, &o, k, 8);
  /* The chunks of earlier checkpoints whose keys this one shares. */
  for (uint32_t i = 0; rc == 0 && i < m.nsub; i++) {
    if (!m.subs[i].keys_ckpt) continue;
    uint8_t p[WEIR__CHUNK_KEY];
    weir__key_chunk(p, m.subs[i].keys_ckpt, m.subs[i].keys_record, 0);
    rc = out_chunks(s, txn, &o, p, 12);
  }
  mdb_txn_abort(txn);
  weir__meta_free(&m);
  uint8_t t[SP_TRAILER];
  put_le64(t, o.records);
  out_put(&o, t, 8);
  put_le32(t + 8, o.crc);
  memcpy(t + 12, SP_END, 4);
  if (!o.err && fwrite(t + 8, 1, 8, o.f) != 8) o.err = errno ? errno : EIO;
  if (!o.err && fflush(o.f) != 0) o.err = errno ? errno : EIO;
  if (!o.err && fsync(fileno(o.f)) != 0) o.err = errno ? errno : EIO;
  if (fclose(o.f) != 0 && !o.err) o.err = errno ? errno : EIO;
  if (rc != 0) {
    unlink(tmp);
    weir_free(tmp);
    return weir__store_fail(s, weir__mdb_err(rc), "store %s: reading checkpoint %llu: %s", s->path,
                            (ull)id, weir__mdb_text(rc));
  }
  if (!o.err && rename(tmp, path) != 0) o.err = errno;
  if (!o.err) {
    int d = sync_dir_of(path);
    if (d < 0) o.err = -d;
  }
  if (o.err) {
    unlink(tmp);
    weir__store_fail(s, -o.err, "cannot write the savepoint file '%s': %s", path,
                     weir_strerror(-o.err));
    weir_free(tmp);
    return -o.err;
  }
  weir_free(tmp);
  if (bytes) *bytes = o.bytes + 8;
  return 0;
}

/* ---- reading -------------------------------------------------------------- */

/* A savepoint file read front to back. */
typedef struct sp_in {
  FILE *f;
  const char *path;
  uint64_t size, at, records, id;
  uint32_t crc;
  uint8_t *val;
  size_t val_cap;
  char *err;
  size_t errlen;
} sp_in;

static int in_fail(sp_in *in, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int in_fail(sp_in *in, int rc, const char *fmt, ...) {
  char what[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  snprintf(in->err, in->errlen, "savepoint '%s' %s", in->path, what);
  return rc;
}

static int in_read(sp_in *in, void *p, size_t n) {
  if (n == 0) return 0;
  if (fread(p, 1, n, in->f) != n)
    return in_fail(in, WEIR_ECORRUPT, "cannot be read at byte %llu: %s", (ull)in->at,
                   ferror(in->f) ? strerror(errno) : "it ends early");
  in->crc = weir__crc32c(in->crc, p, n);
  in->at += n;
  return 0;
}

static int in_open(sp_in *in, const char *path, char *err, size_t errlen) {
  memset(in, 0, sizeof *in);
  in->path = path;
  in->err = err;
  in->errlen = errlen;
  in->f = fopen(path, "rb");
  if (in->f == NULL) {
    int e = errno;
    return in_fail(in, e == ENOENT ? WEIR_ENOENT : -e, "cannot be opened: %s", strerror(e));
  }
  struct stat st;
  if (fstat(fileno(in->f), &st) != 0 || !S_ISREG(st.st_mode))
    return in_fail(in, WEIR_EINVAL, "is not a file");
  in->size = (uint64_t)st.st_size;
  uint8_t h[SP_HEADER];
  if (in->size < SP_HEADER + SP_TRAILER || fread(h, 1, sizeof h, in->f) != sizeof h ||
      memcmp(h, SP_MAGIC, 8) != 0)
    return in_fail(in, WEIR_ECORRUPT, "is not a weir savepoint (no savepoint header)");
  in->crc = weir__crc32c(0, h, sizeof h);
  in->at = sizeof h;
  if (le32(h + 8) > SP_FORMAT)
    return in_fail(in, WEIR_EFORMAT, "is in savepoint format %u; this weir reads up to %u",
                   le32(h + 8), SP_FORMAT);
  in->id = le64(h + 16);
  return 0;
}

static void in_close(sp_in *in) {
  if (in->f) fclose(in->f);
  weir_free(in->val);
  in->f = NULL;
  in->val = NULL;
}

/* The next record: 1 with *db, key (kb, *klen) and its value (in->val,
 * *vlen); 0 at the trailer, which is checked (record count, checksum, end
 * of file); or an error. */
static int in_next(sp_in *in, int *db, uint8_t kb[255], uint8_t *klen, uint32_t *vlen) {
  if (in->at + SP_TRAILER > in->size)
    return in_fail(in, WEIR_ECORRUPT, "is truncated at byte %llu", (ull)in->at);
  if (in->at + SP_TRAILER == in->size) {
    uint8_t t[SP_TRAILER];
    int rc = in_read(in, t, 8);
    if (rc) return rc;
    uint32_t crc = in->crc;
    if (fread(t + 8, 1, 8, in->f) != 8) return in_fail(in, WEIR_ECORRUPT, "has no trailer");
    if (memcmp(t + 12, SP_END, 4) != 0 || le32(t + 8) != crc)
      return in_fail(in, WEIR_ECORRUPT, "is damaged (its checksum does not match its contents)");
    if (le64(t) != in->records)
      return in_fail(in, WEIR_ECORRUPT, "is damaged (%llu records, its trailer says %llu)",
                     (ull)in->records, (ull)le64(t));
    return 0;
  }
  uint8_t h[SP_REC_HEAD];
  int rc = in_read(in, h, sizeof h);
  if (rc) return rc;
  *db = h[0];
  *klen = h[1];
  *vlen = le32(h + 2);
  if (in->at + *klen + *vlen + SP_TRAILER > in->size)
    return in_fail(in, WEIR_ECORRUPT, "is damaged (a record at byte %llu runs past its end)",
                   (ull)(in->at - sizeof h));
  size_t want = *db == SP_DB_JOB ? 3 : *db == SP_DB_META ? 8 : WEIR__CHUNK_KEY;
  if (*db < SP_DB_JOB || *db > SP_DB_CHUNK || *klen != want)
    return in_fail(in, WEIR_ECORRUPT, "is damaged (a record of kind %d with a %u-byte key)", *db,
                   *klen);
  if ((rc = in_read(in, kb, *klen)) != 0) return rc;
  if (*vlen > in->val_cap) {
    in->val_cap = *vlen;
    in->val = weir_realloc(in->val, in->val_cap);
  }
  if ((rc = in_read(in, in->val, *vlen)) != 0) return rc;
  in->records++;
  return 1;
}

/* The job record and metadata records, checked: fills info. */
static int in_job(sp_in *in, const uint8_t *val, uint32_t vlen, weir__job_rec *job) {
  char err[256];
  int rc = weir__job_decode(val, vlen, job, err, sizeof err);
  return rc ? in_fail(in, rc, "has a damaged job record: %s", err) : 0;
}

static int in_meta(sp_in *in, const uint8_t *key, const uint8_t *val, uint32_t vlen,
                   const weir__job_rec *job, weir__ckpt_meta *m) {
  char err[256];
  if (weir__be64(key) != in->id)
    return in_fail(in, WEIR_ECORRUPT, "is damaged (metadata of checkpoint %llu, header says %llu)",
                   (ull)weir__be64(key), (ull)in->id);
  int rc = weir__meta_decode(val, vlen, in->id, job->job_id, m, err, sizeof err);
  return rc ? in_fail(in, rc, "has damaged metadata: %s", err) : 0;
}

static void fill_info(weir_savepoint_info *info, const char *path, const weir__job_rec *job,
                      const weir__ckpt_meta *m, uint64_t size) {
  memset(info, 0, sizeof *info);
  memcpy(info->job_id, job->job_id, sizeof info->job_id);
  snprintf(info->job_name, sizeof info->job_name, "%s",
           m->job_name && *m->job_name ? m->job_name : job->name);
  info->id = m->id;
  info->epoch = m->epoch;
  info->instance = m->instance;
  info->id_limit = job->id_limit > m->id ? job->id_limit : m->id + 1;
  info->time_ms = m->complete_ms;
  info->bytes = size;
  (void)path;
}

int weir_savepoint_check(const char *path, weir_savepoint_info *info, char *err, size_t errlen) {
  sp_in in;
  int rc = in_open(&in, path, err, errlen);
  weir__job_rec job;
  weir__ckpt_meta m;
  memset(&m, 0, sizeof m);
  int have_job = 0, have_meta = 0;
  uint8_t kb[255], klen;
  uint32_t vlen;
  int db;
  while (rc == 0 && (rc = in_next(&in, &db, kb, &klen, &vlen)) == 1) {
    rc = 0;
    if (db == SP_DB_JOB && !have_job) {
      rc = in_job(&in, in.val, vlen, &job);
      have_job = 1;
    } else if (db == SP_DB_META && have_job && !have_meta) {
      rc = in_meta(&in, kb, in.val, vlen, &job, &m);
      have_meta = rc == 0;
    } else if (db != SP_DB_CHUNK || !have_meta) {
      rc = in_fail(&in, WEIR_ECORRUPT, "is damaged (records out of order)");
    }
  }
  if (rc == 0 && !have_meta) rc = in_fail(&in, WEIR_ECORRUPT, "holds no checkpoint");
  if (rc == 0 && info) fill_info(info, path, &job, &m, in.size);
  weir__meta_free(&m);
  in_close(&in);
  return rc;
}

/* ---- importing (the writer thread) ----------------------------------------- */

/* Is the metadata of checkpoint id in the store, byte for byte as `val`?
 * 1 yes, 0 no such checkpoint, WEIR_EMISMATCH another one under that id. */
static int meta_there(weir_store *s, uint64_t id, const uint8_t *val, uint32_t vlen) {
  MDB_txn *txn;
  if (mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn) != 0) return 0;
  uint8_t k[8];
  weir__key_meta(k, id);
  MDB_val key = {8, k}, v;
  int rc = mdb_get(txn, s->dbi_meta, &key, &v);
  int there = rc != 0                                                  ? 0
              : v.mv_size == vlen && memcmp(v.mv_data, val, vlen) == 0 ? 1
                                                                       : WEIR_EMISMATCH;
  mdb_txn_abort(txn);
  return there;
}

int weir__exec_import(weir_store *s, weir__req *r) {
  char err[768];
  sp_in in;
  int rc = in_open(&in, r->path, err, sizeof err);
  MDB_txn *txn = NULL, *cur_txn = NULL;
  weir__job_rec spjob, have;
  weir__ckpt_meta m;
  memset(&m, 0, sizeof m);
  uint8_t *meta_val = NULL;
  uint32_t meta_len = 0, puts = 0;
  int exists = 0, skip = 0, stage = 0; /* 1: job read, 2: metadata read */
  if (rc == 0) {
    if ((rc = weir__read_txn(s, &txn)) == 0) {
      exists = weir__txn_job(s, txn, s->dbi_job, &have);
      mdb_txn_abort(txn);
      txn = NULL;
      if (exists < 0) rc = exists;
    }
    if (rc) {
      in_close(&in);
      return rc;
    }
  }
  uint8_t kb[255], klen;
  uint32_t vlen;
  int db;
  while (rc == 0 && (rc = in_next(&in, &db, kb, &klen, &vlen)) == 1) {
    rc = 0;
    if (db == SP_DB_JOB && stage == 0) {
      if ((rc = in_job(&in, in.val, vlen, &spjob)) != 0) break;
      if (exists && strcmp(have.job_id, spjob.job_id) != 0) {
        rc = in_fail(&in, WEIR_EMISMATCH,
                     "is of job %s ('%s'), and the state directory '%s' holds another job, %s "
                     "('%s'): start from the savepoint in a state directory of its own",
                     spjob.job_id, spjob.name, s->dir, have.job_id, have.name);
        break;
      }
      stage = 1;
    } else if (db == SP_DB_META && stage == 1) {
      if ((rc = in_meta(&in, kb, in.val, vlen, &spjob, &m)) != 0) break;
      meta_val = weir_malloc(vlen);
      memcpy(meta_val, in.val, vlen);
      meta_len = vlen;
      int there = meta_there(s, in.id, meta_val, meta_len);
      if (there < 0) {
        rc = in_fail(&in, WEIR_EMISMATCH,
                     "holds checkpoint %llu, and the state directory '%s' holds another "
                     "checkpoint %llu of the same job",
                     (ull)in.id, s->dir, (ull)in.id);
        break;
      }
      skip = there; /* already here (a savepoint taken in this directory) */
      stage = 2;
    } else if (db == SP_DB_CHUNK && stage == 2) {
      if (skip) continue;
      if (cur_txn == NULL && (rc = weir__begin_write(s, &cur_txn)) != 0) {
        cur_txn = NULL;
        rc = in_fail(&in, weir__mdb_err(rc), "cannot be imported: %s", weir__mdb_text(rc));
        break;
      }
      MDB_val key = {klen, kb}, val = {vlen, in.val};
      if ((rc = mdb_put(cur_txn, s->dbi_chunks, &key, &val, 0)) == 0 &&
          ++puts % WEIR__TXN_CHUNKS == 0) {
        rc = mdb_txn_commit(cur_txn);
        cur_txn = NULL;
      }
      if (rc != 0) {
        char note[128];
        int code = weir__write_err(s, rc, vlen, note, sizeof note);
        rc = in_fail(&in, code, "cannot be imported: %s%s", weir__mdb_text(rc), note);
        break;
      }
    } else {
      rc = in_fail(&in, WEIR_ECORRUPT, "is damaged (records out of order)");
    }
  }
  if (rc == 0 && stage < 2) rc = in_fail(&in, WEIR_ECORRUPT, "holds no checkpoint");
  if (rc == 0) {
    /* Metadata and job record last, in one durable transaction: before
     * it, the chunks are orphans that the next collection removes. */
    weir__job_rec job = exists ? have : spjob;
    uint64_t limit = spjob.id_limit > in.id ? spjob.id_limit : in.id + 1;
    if (!exists) {
      job.created_ms = weir_clock_wall_ms();
      job.instance = m.instance;
    }
    if (job.id_limit < limit) job.id_limit = limit;
    job.latest = in.id;
    job.finished = 0;
    if (r->name && *r->name) snprintf(job.name, sizeof job.name, "%s", r->name);
    uint8_t *jv;
    size_t jlen;
    weir__job_encode(&job, &jv, &jlen);
    if (cur_txn == NULL && (rc = weir__begin_write(s, &cur_txn)) != 0) cur_txn = NULL;
    uint8_t k[8];
    weir__key_meta(k, in.id);
    MDB_val mkey = {8, k}, mval = {meta_len, meta_val}, jkey = {3, "job"}, jval = {jlen, jv};
    if (rc == 0 && !skip) rc = mdb_put(cur_txn, s->dbi_meta, &mkey, &mval, 0);
    if (rc == 0) rc = mdb_put(cur_txn, s->dbi_job, &jkey, &jval, 0);
    if (rc == 0) {
      rc = weir__commit_durable(s, cur_txn);
    } else if (cur_txn) {
      mdb_txn_abort(cur_txn);
    }
    cur_txn = NULL;
    weir_free(jv);
    if (rc != 0) {
      char note[128];
      int code = weir__write_err(s, rc, meta_len + jlen, note, sizeof note);
      rc = in_fail(&in, code, "cannot be imported: %s%s", weir__mdb_text(rc), note);
    } else {
      fill_info(&r->sp, r->path, &spjob, &m, in.size);
      r->sp.replaced_latest = exists ? have.latest : 0;
    }
  }
  if (cur_txn) mdb_txn_abort(cur_txn);
  weir_free(meta_val);
  weir__meta_free(&m);
  in_close(&in);
  if (rc < 0) {
    weir__store_fail(s, rc, "%s", err);
    /* What was put is orphaned: collect it now rather than at the next
     * commit. */
    uint64_t chunks = 0;
    if (puts) (void)weir__collect_orphans(s, &chunks, NULL);
  }
  return rc;
}

int weir_store_import(weir_store *s, const char *path, const char *name,
                      weir_savepoint_info *info) {
  if (s == NULL || path == NULL) return WEIR_EINVAL;
  if (s->read_only) return weir__store_fail(s, WEIR_ESTATE, "store %s: opened read-only", s->path);
  weir__req r;
  memset(&r, 0, sizeof r);
  r.type = WEIR__REQ_IMPORT;
  r.path = path;
  r.name = name;
  int rc = weir__writer_call(s, &r);
  if (rc == 0 && info) *info = r.sp;
  return rc;
}
