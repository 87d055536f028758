/* store.c: owns the checkpoint store's public API (weir/store.h): opening
 * and closing the LMDB environment, the error message, the job record and
 * checkpoint ids as seen by callers, queueing writes for the writer thread
 * (writer.c), and every read: list, info, load and the verification in a
 * child process.
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
 * writer.
 *
 * Reading never trusts the store: every value passes the envelope and codec
 * checks, chunk sequences are checked for gaps and leftovers, and totals are
 * checked against the metadata before a loaded snapshot is handed out.
 *
 * Verify-in-a-child: LMDB has no page checksums, and a damaged page (a
 * branch page pointing anywhere, a file truncated under the map) can make a
 * reader fault instead of returning an error. So the checks that walk
 * LMDB's pages run in a forked child that opens its OWN read-only
 * environment (the parent's environment, locks and threads are never used
 * after fork(); only plain memory is, and the heap: glibc's malloc is safe
 * in the child of a threaded parent, and weir's threads that may be inside
 * an allocator meanwhile (the lease's heartbeat, a store's writer, a
 * restore's prefault threads) hold forks off while they work, for
 * allocators that are not, such as AddressSanitizer's: weir_fork_hold),
 * reports a status and a message through a pipe, and exits. The parent reports a child
 * killed by a signal, or silent, or slow, as a damaged store.
 * weir_store_verify does this for one checkpoint (every value);
 * weir_store_open does it for the structure (every page the open path and
 * the writer's scans touch) before touching any page itself;
 * weir_store_probe, before a restore, for the pages a load of one
 * checkpoint walks (every chunk found, each value inside the file), leaving
 * the values' checks to the load itself, which runs them all.
 *
 * Streamed loads (weir_store_load_stream, a restore's loader threads, each
 * with its own read transaction) hand each u64 chunk to a sink as soon as
 * it passed its checks, and read the values with pread at their offset in
 * the file rather than through the map (read_entry).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

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
static int read_job(MDB_txn *txn, MDB_dbi dbi, weir__job_rec *out, char *err, size_t errlen) {
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
  int rc = read_job(txn, dbi, out, err, sizeof err);
  if (rc < 0) return weir__store_fail(s, rc, "store %s: %s", s->path, err);
  return rc;
}

/* ---- reading one subtask's chunks ---------------------------------------- */

/* Moves cur to whatever follows the last chunk of record `record` of
 * checkpoint id (with no chunks, to where its first would be): 0 with *key
 * set to the key found there, MDB_NOTFOUND, or an LMDB error. */
static int after_last_chunk(MDB_cursor *cur, uint64_t id, uint32_t record, uint64_t nchunks,
                            MDB_val *key) {
  MDB_val val;
  if (nchunks) return mdb_cursor_get(cur, key, &val, MDB_NEXT);
  uint8_t kb[WEIR__CHUNK_KEY];
  weir__key_chunk(kb, id, record, 0);
  key->mv_size = sizeof kb;
  key->mv_data = kb;
  return mdb_cursor_get(cur, key, &val, MDB_SET_RANGE);
}

/* Blobs of 64 MiB and more (a loop's back-edge log can be larger than
 * memory) are read into an unlinked scratch file in $TMPDIR, mapped shared:
 * the kernel can write its pages out instead of holding them. The bound can
 * be set with WEIR_FILE_BLOB_MIN (bytes; the tests use 1). */
static uint64_t file_blob_min(void) {
  const char *v = getenv("WEIR_FILE_BLOB_MIN");
  return v && *v ? strtoull(v, NULL, 10) : 64ull << 20;
}

static void unmap_blob(uint8_t *p, uint64_t len) {
  munmap(p, (size_t)len);
}

static uint8_t *blob_alloc(uint64_t len, void (**release)(uint8_t *, uint64_t)) {
  *release = NULL;
  if (len >= file_blob_min()) {
    const char *dir = getenv("TMPDIR");
    char path[4200];
    snprintf(path, sizeof path, "%s/weir-blob-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd >= 0) {
      unlink(path);
      void *p = ftruncate(fd, (off_t)len) == 0
                    ? mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                    : MAP_FAILED;
      close(fd);
      if (p != MAP_FAILED) {
        *release = unmap_blob;
        return p;
      }
    }
    /* No scratch file: memory it is. */
  }
  return weir_malloc(len);
}

static const uint8_t *mapping_of(const void *p);

/* Where read_entry gets chunk values: the cursor, and with fd >= 0 the
 * store file (below). */
typedef struct chunk_src {
  MDB_cursor *cur;
  uint64_t file_size;
  int fd;
  const uint8_t *base; /* fd >= 0: where the map starts, once known */
  uint8_t *rbuf;       /* fd >= 0: the value read */
} chunk_src;

/* Looks chunk (id, record, seq) up through cur into *val: 0, or an error
 * with a message in why that starts with `what` (the chunk, for the
 * reader): missing, unreadable, or larger than a chunk may be. */
static int lookup_chunk(MDB_cursor *cur, uint64_t id, uint32_t record, uint32_t seq,
                        const char *what, MDB_val *val, char *why, size_t wlen) {
  uint8_t kb[WEIR__CHUNK_KEY];
  weir__key_chunk(kb, id, record, seq);
  MDB_val key = {sizeof kb, kb};
  int rc = mdb_cursor_get(cur, &key, val, MDB_SET_KEY);
  if (rc == MDB_NOTFOUND) {
    snprintf(why, wlen, "%s is missing", what);
    return WEIR_ECORRUPT;
  }
  if (rc != 0) {
    snprintf(why, wlen, "%s: %s", what, weir__mdb_text(rc));
    return weir__mdb_err(rc);
  }
  if (val->mv_size > WEIR__CHUNK_MAX) {
    snprintf(why, wlen, "%s: %zu bytes, more than a chunk may hold", what, val->mv_size);
    return WEIR_ECORRUPT;
  }
  return 0;
}

/* lookup_chunk, and with fd >= 0 the value read from the file. */
static int src_get(chunk_src *src, uint64_t id, uint32_t record, uint32_t seq, const char *what,
                   MDB_val *val, char *why, size_t wlen) {
  int rc = lookup_chunk(src->cur, id, record, seq, what, val, why, wlen);
  if (rc != 0 || src->fd < 0) return rc;
  const uint8_t *v = val->mv_data;
  if (!src->base && !(src->base = mapping_of(v))) {
    src->fd = -1; /* no /proc/self/maps: read through the map */
    return 0;
  }
  uint64_t off = (uint64_t)(v - src->base);
  if (v < src->base || off > src->file_size || val->mv_size > src->file_size - off) {
    snprintf(why, wlen, "%s is damaged: its %zu bytes lie outside the store file (%llu bytes)",
             what, val->mv_size, (ull)src->file_size);
    return WEIR_ECORRUPT;
  }
  if (!src->rbuf) src->rbuf = weir_malloc(WEIR__CHUNK_MAX);
  for (size_t got = 0; got < val->mv_size;) {
    ssize_t n = pread(src->fd, src->rbuf + got, val->mv_size - got, (off_t)(off + got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e2 = n < 0 ? errno : 0;
      snprintf(why, wlen, "%s: reading %zu bytes at %llu of the store file: %s", what, val->mv_size,
               (ull)off, e2 ? strerror(e2) : "the file ends first");
      return e2 ? -e2 : WEIR_ECORRUPT;
    }
    got += (size_t)n;
  }
  val->mv_data = src->rbuf;
  return 0;
}

/* Reads every chunk of entry e of checkpoint id and checks it against the
 * metadata; assembles the state into *out when out != NULL (on error *out is
 * left empty). `file_size` bounds what the metadata may claim, so that a
 * lying count cannot make us allocate more than the store holds. With
 * shared keys (e->keys_ckpt) each u64 chunk holds values only, and its keys
 * are those of the chunk in the same place of the holder's record, which
 * must hold as many entries (and is checked as it is read). Safe to run
 * in a forked child: no store, no lock, messages into err.
 *
 * `sink`, when not NULL (and out is not), receives the u64 entries chunk by
 * chunk, each chunk once it passed every check that concerns it alone or
 * its predecessors; out->u64_* stay empty. The checks of the whole (counts,
 * stored bytes, nothing after the last chunk) come after the last chunk: on
 * an error the sink has seen entries that the caller must discard.
 *
 * `fd` >= 0: the store file's descriptor, and the chunk values are read
 * from it with pread(2) at their offset in the file (LMDB maps the file
 * from offset 0, and a read transaction keeps its pages unchanged) instead
 * of through the map: mapping a large checkpoint's pages costs more than
 * copying them here (about 1 ms per MB in a paravirtualised guest), and a
 * value outside the file is an error, not a fault. */
static int read_entry(MDB_txn *txn, MDB_dbi dbi, uint64_t id, const weir__sub_entry *e,
                      uint64_t file_size, int fd, const weir_store_u64_sink *sink,
                      weir_subtask_snapshot *out, char *err, size_t errlen) {
  char why[512], what[96];
  int rc = 0;
  chunk_src src = {NULL, file_size, fd, NULL, NULL};
  chunk_src ksrc = {NULL, file_size, fd, NULL, NULL}; /* shared keys: its own cursor */
  weir__chunk c = {0}, kc = {0};
  uint64_t nchunks = weir__sub_chunks(e);
  uint64_t nu = 0, nb = 0, nd = 0, nblob = 0, bytes = 0, dsum = 0, lastkey = 0;
  uint16_t lastformat = 0;
  uint32_t seq = 0;
  if (out) memset(out, 0, sizeof *out);
#define BAD(code, ...)                                                                             \
  do {                                                                                             \
    snprintf(why, sizeof why, __VA_ARGS__);                                                        \
    rc = (code);                                                                                   \
    goto fail;                                                                                     \
  } while (0)
  if (e->bytes > file_size)
    BAD(WEIR_ECORRUPT, "claims %llu stored bytes, more than the store file's %llu", (ull)e->bytes,
        (ull)file_size);
  if (out) {
    out->op = weir_strdup(e->op);
    out->subtask = e->subtask;
    out->parallelism = e->parallelism;
    if (sink)
      sink->begin(sink->user, e->u64_entries); /* bounded by file_size (meta_decode) */
    else if (e->u64_entries) {
      out->u64_keys = weir_malloc_big(e->u64_entries * sizeof(uint64_t));
      out->u64_values = weir_malloc_big(e->u64_entries * sizeof(uint64_t));
    }
    if (e->bytes_entries) {
      out->b_route = weir_malloc(e->bytes_entries * sizeof(uint64_t));
      out->b_klen = weir_malloc(e->bytes_entries * sizeof(uint32_t));
      out->b_vlen = weir_malloc(e->bytes_entries * sizeof(uint32_t));
    }
    if (e->bytes_data_len) out->b_data = weir_malloc_big(e->bytes_data_len);
    if (e->blob_len) out->blob = blob_alloc(e->blob_len, &out->blob_release);
    if (e->npos) {
      out->pos = weir_malloc(e->npos * sizeof *out->pos);
      memcpy(out->pos, e->pos, e->npos * sizeof *out->pos);
      out->npos = e->npos;
    }
  }
  rc = mdb_cursor_open(txn, dbi, &src.cur);
  if (rc != 0) {
    src.cur = NULL;
    BAD(weir__mdb_err(rc), "reading chunks: %s", weir__mdb_text(rc));
  }
  if (e->keys_ckpt && (rc = mdb_cursor_open(txn, dbi, &ksrc.cur)) != 0) {
    ksrc.cur = NULL;
    BAD(weir__mdb_err(rc), "reading chunks: %s", weir__mdb_text(rc));
  }
  for (seq = 0; seq < nchunks; seq++) {
    MDB_val val;
    char cerr[300];
    snprintf(what, sizeof what, "chunk %u of %llu", seq, (ull)nchunks);
    if ((rc = src_get(&src, id, e->record, seq, what, &val, cerr, sizeof cerr)) != 0)
      BAD(rc, "%s", cerr);
    weir__chunk_id want = {id, e->record, seq};
    rc = weir__chunk_decode(val.mv_data, val.mv_size, want, &c, cerr, sizeof cerr);
    if (rc < 0) BAD(rc, "chunk %u: %s", seq, cerr);
    uint16_t kind = seq < e->u64_chunks ? (e->keys_ckpt ? WEIR__KIND_U64_VALUES : WEIR__KIND_U64)
                    : seq < e->u64_chunks + e->bytes_chunks ? WEIR__KIND_BYTES
                                                            : WEIR__KIND_BLOB;
    if (c.kind != kind)
      BAD(WEIR_ECORRUPT, "chunk %u: a value of kind %u where kind %u belongs", seq, c.kind, kind);
    bytes += val.mv_size;
    if (seq < e->u64_chunks) {
      const uint64_t *keys = c.keys;
      uint16_t format = c.format;
      if (e->keys_ckpt) {
        /* The keys of the same chunk of the holder's record. */
        snprintf(what, sizeof what, "chunk %u of record %u of checkpoint %llu (its keys)", seq,
                 e->keys_record, (ull)e->keys_ckpt);
        if ((rc = src_get(&ksrc, e->keys_ckpt, e->keys_record, seq, what, &val, cerr,
                          sizeof cerr)) != 0)
          BAD(rc, "%s", cerr);
        weir__chunk_id kwant = {e->keys_ckpt, e->keys_record, seq};
        rc = weir__chunk_decode(val.mv_data, val.mv_size, kwant, &kc, cerr, sizeof cerr);
        if (rc < 0) BAD(rc, "%s: %s", what, cerr);
        if (kc.kind != WEIR__KIND_U64)
          BAD(WEIR_ECORRUPT, "%s: a value of kind %u where u64 keys belong", what, kc.kind);
        if (kc.n != c.n)
          BAD(WEIR_ECORRUPT, "chunk %u: %zu values for the %zu keys of %s", seq, c.n, kc.n, what);
        keys = kc.keys;
        format = kc.format;
      }
      if (c.n > e->u64_entries - nu)
        BAD(WEIR_ECORRUPT, "chunk %u: more u64 entries than the %llu recorded", seq,
            (ull)e->u64_entries);
      if (nu > 0 && format != lastformat)
        BAD(WEIR_ECORRUPT, "chunk %u: written in store format %u, the chunk before in %u", seq,
            format, lastformat);
      if (nu > 0 && weir__u64_order(format, keys[0]) <= weir__u64_order(format, lastkey))
        BAD(WEIR_ECORRUPT, "chunk %u: u64 key %llu after key %llu", seq, (ull)keys[0],
            (ull)lastkey);
      if (out && sink) {
        sink->chunk(sink->user, keys, c.values, c.n);
      } else if (out) {
        memcpy(out->u64_keys + nu, keys, c.n * sizeof(uint64_t));
        memcpy(out->u64_values + nu, c.values, c.n * sizeof(uint64_t));
      }
      lastkey = keys[c.n - 1];
      lastformat = format;
      nu += c.n;
      weir__chunk_free(&kc);
    } else if (kind == WEIR__KIND_BYTES) {
      if (c.n > e->bytes_entries - nb)
        BAD(WEIR_ECORRUPT, "chunk %u: more byte-string entries than the %llu recorded", seq,
            (ull)e->bytes_entries);
      if (c.data_len > e->bytes_data_len - nd)
        BAD(WEIR_ECORRUPT, "chunk %u: more byte-string data than the %llu bytes recorded", seq,
            (ull)e->bytes_data_len);
      for (size_t i = 0; i < c.n; i++) dsum += (uint64_t)c.klen[i] + c.vlen[i];
      if (out && c.n) {
        memcpy(out->b_route + nb, c.route, c.n * sizeof(uint64_t));
        memcpy(out->b_klen + nb, c.klen, c.n * sizeof(uint32_t));
        memcpy(out->b_vlen + nb, c.vlen, c.n * sizeof(uint32_t));
      }
      if (out && c.data_len) memcpy(out->b_data + nd, c.data, c.data_len);
      nb += c.n;
      nd += c.data_len;
    } else {
      if (c.data_len > e->blob_len - nblob)
        BAD(WEIR_ECORRUPT, "chunk %u: more blob bytes than the %llu recorded", seq,
            (ull)e->blob_len);
      if (out) memcpy(out->blob + nblob, c.data, c.data_len);
      nblob += c.data_len;
    }
    weir__chunk_free(&c);
  }
  /* Nothing may follow the last chunk of the record. */
  {
    MDB_val key;
    rc = after_last_chunk(src.cur, id, e->record, nchunks, &key);
    if (rc != 0 && rc != MDB_NOTFOUND)
      BAD(weir__mdb_err(rc), "after the last chunk: %s", weir__mdb_text(rc));
    if (rc == 0 && key.mv_size >= 12 && weir__be64(key.mv_data) == id &&
        weir__be32((const uint8_t *)key.mv_data + 8) == e->record)
      BAD(WEIR_ECORRUPT, "a chunk beyond the %llu recorded", (ull)nchunks);
    rc = 0;
  }
  if (nu != e->u64_entries || nb != e->bytes_entries || nd != e->bytes_data_len ||
      nblob != e->blob_len)
    BAD(WEIR_ECORRUPT,
        "chunks hold %llu u64 entries, %llu byte-string entries with %llu data bytes and a "
        "%llu-byte blob; the metadata records %llu, %llu, %llu and %llu",
        (ull)nu, (ull)nb, (ull)nd, (ull)nblob, (ull)e->u64_entries, (ull)e->bytes_entries,
        (ull)e->bytes_data_len, (ull)e->blob_len);
  if (dsum != e->bytes_data_len)
    BAD(WEIR_ECORRUPT, "byte-string entries add up to %llu bytes, their data is %llu bytes",
        (ull)dsum, (ull)e->bytes_data_len);
  if (bytes != e->bytes)
    BAD(WEIR_ECORRUPT, "chunks take %llu bytes, the metadata records %llu", (ull)bytes,
        (ull)e->bytes);
  mdb_cursor_close(src.cur);
  if (ksrc.cur) mdb_cursor_close(ksrc.cur);
  weir_free(src.rbuf);
  weir_free(ksrc.rbuf);
  if (out) {
    out->n_u64 = sink ? 0 : nu;
    out->n_bytes = nb;
    out->b_data_len = nd;
    out->blob_len = nblob;
  }
  return 0;
#undef BAD
fail:
  weir__chunk_free(&c);
  weir__chunk_free(&kc);
  weir_free(src.rbuf);
  weir_free(ksrc.rbuf);
  if (src.cur) mdb_cursor_close(src.cur);
  if (ksrc.cur) mdb_cursor_close(ksrc.cur);
  if (out) weir_subtask_snapshot_free(out);
  snprintf(err, errlen, "checkpoint %llu: operator \"%s\" subtask %u: %s", (ull)id, e->op,
           e->subtask, why);
  return rc < 0 ? rc : WEIR_ECORRUPT;
}

/* walk_entry's look at one chunk (id, record, seq) through cur: 0, or an
 * error with a message in why that starts with `what`. */
static int walk_value(MDB_cursor *cur, uint64_t id, uint32_t record, uint32_t seq,
                      const uint8_t *map, uint64_t file_size, const char *what, char *why,
                      size_t wlen) {
  MDB_val val;
  int rc = lookup_chunk(cur, id, record, seq, what, &val, why, wlen);
  if (rc != 0) return rc;
  const uint8_t *v = val.mv_data;
  if (map == NULL) { /* no /proc/self/maps: touch every page of it instead */
    volatile uint8_t sink = 0;
    for (size_t off = 0; off < val.mv_size; off += 4096) sink ^= v[off];
    if (val.mv_size) sink ^= v[val.mv_size - 1];
    (void)sink;
    return 0;
  }
  if (v < map || (uint64_t)(v - map) > file_size || val.mv_size > file_size - (uint64_t)(v - map)) {
    snprintf(why, wlen, "%s is damaged: its %zu bytes lie outside the store file (%llu bytes)",
             what, val.mv_size, (ull)file_size);
    return WEIR_ECORRUPT;
  }
  return 0;
}

/* What a load of entry e reads from LMDB, without decoding it: every chunk
 * looked up as read_entry looks it up (the tree pages on the way), and the
 * key after the last one. For the probe child (weir_store_probe): a damaged
 * tree page faults here, not in the loader. A chunk's value must lie in
 * the store file, within [map, map + file_size) of the child's map: then
 * reading it cannot fault (SIGBUS past the end of a truncated file, SIGSEGV
 * outside the map). The values are not touched (mapping the pages of a
 * large checkpoint costs more than reading them once the loader has them)
 * and their contents are checked by read_entry when they are loaded. */
static int walk_entry(MDB_txn *txn, MDB_dbi dbi, uint64_t id, const weir__sub_entry *e,
                      const uint8_t *map, uint64_t file_size, char *err, size_t errlen) {
  char why[300], what[96];
  int rc = 0;
  MDB_cursor *cur = NULL, *kcur = NULL;
  uint64_t nchunks = weir__sub_chunks(e);
#define BAD(code, ...)                                                                             \
  do {                                                                                             \
    snprintf(why, sizeof why, __VA_ARGS__);                                                        \
    rc = (code);                                                                                   \
    goto fail;                                                                                     \
  } while (0)
  if (e->bytes > file_size)
    BAD(WEIR_ECORRUPT, "claims %llu stored bytes, more than the store file's %llu", (ull)e->bytes,
        (ull)file_size);
  rc = mdb_cursor_open(txn, dbi, &cur);
  if (rc == 0 && e->keys_ckpt) rc = mdb_cursor_open(txn, dbi, &kcur);
  if (rc != 0) BAD(weir__mdb_err(rc), "reading chunks: %s", weir__mdb_text(rc));
  for (uint32_t seq = 0; seq < nchunks; seq++) {
    snprintf(what, sizeof what, "chunk %u of %llu", seq, (ull)nchunks);
    rc = walk_value(cur, id, e->record, seq, map, file_size, what, why, sizeof why);
    if (rc == 0 && e->keys_ckpt && seq < e->u64_chunks) {
      snprintf(what, sizeof what, "chunk %u of record %u of checkpoint %llu (its keys)", seq,
               e->keys_record, (ull)e->keys_ckpt);
      rc = walk_value(kcur, e->keys_ckpt, e->keys_record, seq, map, file_size, what, why,
                      sizeof why);
    }
    if (rc != 0) goto fail;
  }
  {
    MDB_val key;
    rc = after_last_chunk(cur, id, e->record, nchunks, &key);
    if (rc != 0 && rc != MDB_NOTFOUND)
      BAD(weir__mdb_err(rc), "after the last chunk: %s", weir__mdb_text(rc));
    rc = 0;
  }
  mdb_cursor_close(cur);
  if (kcur) mdb_cursor_close(kcur);
  return 0;
#undef BAD
fail:
  if (cur) mdb_cursor_close(cur);
  if (kcur) mdb_cursor_close(kcur);
  snprintf(err, errlen, "checkpoint %llu: operator \"%s\" subtask %u: %s", (ull)id, e->op,
           e->subtask, why);
  return rc < 0 ? rc : WEIR_ECORRUPT;
}

/* The start of this process's mapping that holds address p (Linux: from
 * /proc/self/maps), or NULL. For the probe child: the map of its own
 * environment is the one that holds a value it read (the parent's map of
 * the same file, inherited across fork, lies elsewhere). */
static const uint8_t *mapping_of(const void *p) {
#ifndef __linux__
  (void)p;
  return NULL; /* no /proc: the probe touches the pages, the load reads the map */
#else
  /* WEIR_NO_PROC_MAPS (tests): as on a system without /proc. */
  if (getenv("WEIR_NO_PROC_MAPS")) return NULL;
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  size_t cap = 1 << 16, have = 0;
  char *buf = weir_malloc(cap);
  for (;;) {
    if (have + 1 == cap) buf = weir_realloc(buf, cap *= 2);
    ssize_t n = read(fd, buf + have, cap - 1 - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    have += (size_t)n;
  }
  close(fd);
  buf[have] = '\0';
  const uint8_t *found = NULL;
  uintptr_t at = (uintptr_t)p;
  for (char *line = buf; *line && !found;) { /* "lo-hi perms offset ..." */
    char *end;
    uintptr_t lo = (uintptr_t)strtoull(line, &end, 16), hi = 0;
    if (*end == '-') hi = (uintptr_t)strtoull(end + 1, NULL, 16);
    if (lo <= at && at < hi) found = (const uint8_t *)lo;
    char *nl = strchr(line, '\n');
    line = nl ? nl + 1 : line + strlen(line);
  }
  weir_free(buf);
  return found;
#endif
}

static uint64_t env_file_size(MDB_env *env) {
  int fd;
  struct stat st;
  if (mdb_env_get_fd(env, &fd) != 0 || fstat(fd, &st) != 0) return UINT64_MAX;
  return (uint64_t)st.st_size;
}

/* ---- children --------------------------------------------------------------- */

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
 * walks what loading it reads without decoding the chunks (walk_entry). */
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
  rc = read_job(txn, dj, &job, why, sizeof why);
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
  uint64_t fsize = env_file_size(env);
  /* LMDB maps the file from offset 0: the mapping that holds the metadata
   * value is the map. */
  const uint8_t *map = pages_only ? mapping_of(val.mv_data) : NULL;
  if (pages_only && fsize == UINT64_MAX) {
    snprintf(msg, len, "checkpoint %llu: cannot see the size of the store file", (ull)id);
    rc = WEIR_EIO;
    goto out;
  }
  for (uint32_t i = 0; i < m.nsub; i++) {
    rc = pages_only ? walk_entry(txn, dc, id, &m.subs[i], map, fsize, msg, len)
                    : read_entry(txn, dc, id, &m.subs[i], fsize, -1, NULL, NULL, msg, len);
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
    if (s->test_child_signal) raise(s->test_child_signal);
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
  uint64_t have = env_file_size(s->env);
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

  char what[64];
  snprintf(what, sizeof what, "store %s", s->path);
  if ((rc = run_in_child(s, probe_child, 0, what)) < 0) return open_fail(s, rc);

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

static int read_txn(weir_store *s, MDB_txn **txn) {
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
  int rc = read_txn(s, &txn);
  if (rc < 0) return rc;
  weir__job_rec j;
  rc = weir__txn_job(s, txn, s->dbi_job, &j);
  mdb_txn_abort(txn);
  if (rc == 1) fill_job(s, &j, out);
  return rc;
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
      (sn->b_data_len && !sn->b_data) || (sn->npos && !sn->pos) || (sn->blob_len && !sn->blob))
    BAD("store %s: checkpoint %llu: operator \"%s\" subtask %u: a count without its array", s->path,
        (ull)id, op, sn->subtask);
  uint64_t sum = 0;
  for (uint64_t i = 0; i < sn->n_bytes; i++) sum += (uint64_t)sn->b_klen[i] + sn->b_vlen[i];
  if (sum != sn->b_data_len)
    BAD("store %s: checkpoint %llu: operator \"%s\" subtask %u: byte-string entries of %llu "
        "bytes in %llu bytes of data",
        s->path, (ull)id, op, sn->subtask, (ull)sum, (ull)sn->b_data_len);
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
  int rc = read_txn(s, &txn);
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
  int rc = read_txn(s, &txn);
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
  weir_free(info);
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

int weir_store_load(weir_store *s, uint64_t id, const char *op, uint32_t subtask,
                    weir_subtask_snapshot *out) {
  return weir_store_load_stream(s, id, op, subtask, NULL, out);
}

int weir_store_load_stream(weir_store *s, uint64_t id, const char *op, uint32_t subtask,
                           const weir_store_u64_sink *sink, weir_subtask_snapshot *out) {
  if (out) memset(out, 0, sizeof *out);
  if (s == NULL || op == NULL || out == NULL) return WEIR_EINVAL;
  MDB_txn *txn;
  int rc = read_txn(s, &txn);
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
    rc = read_entry(txn, s->dbi_chunks, id, e, env_file_size(s->env), fd, sink, out, err,
                    sizeof err);
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
  weir_free(snap->pos);
  weir_blob_free(snap->blob, snap->blob_len, snap->blob_release);
  memset(snap, 0, sizeof *snap);
}

/* ---- test hooks ------------------------------------------------------------------------ */

void weir__store_test_child_signal(weir_store *s, int sig) {
  s->test_child_signal = sig;
}

int weir__store_test_chunk_stats(weir_store *s, uint64_t id, size_t *max_len, uint64_t *count) {
  *max_len = 0;
  *count = 0;
  MDB_txn *txn;
  int rc = read_txn(s, &txn);
  if (rc < 0) return rc;
  MDB_cursor *cur;
  rc = mdb_cursor_open(txn, s->dbi_chunks, &cur);
  if (rc == 0) {
    uint8_t kb[WEIR__CHUNK_KEY];
    weir__key_chunk(kb, id, 0, 0);
    MDB_val key = {sizeof kb, kb}, val;
    for (rc = mdb_cursor_get(cur, &key, &val, MDB_SET_RANGE); rc == 0;
         rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT)) {
      if (key.mv_size < 8 || weir__be64(key.mv_data) != id) break;
      if (val.mv_size > *max_len) *max_len = val.mv_size;
      (*count)++;
    }
    mdb_cursor_close(cur);
    if (rc == MDB_NOTFOUND) rc = 0;
  }
  mdb_txn_abort(txn);
  return weir__mdb_err(rc);
}
