/* load.c: owns reading one subtask's chunks back from the store: every
 * chunk of an entry looked up, decoded and checked against the metadata,
 * into a snapshot or a streamed load's sink (weir__read_entry, which the
 * verifying child runs too), and the walk of the pages such a read touches
 * (weir__walk_entry, for the probe child: verify.c).
 *
 * Reading never trusts the store: every value passes the envelope and codec
 * checks, chunk sequences are checked for gaps and leftovers, and totals are
 * checked against the metadata before a loaded snapshot is handed out.
 * Streamed loads (weir_store_load_stream, a restore's loader threads, each
 * with its own read transaction) hand each u64 chunk to a sink as soon as
 * it passed its checks, and read the values with pread at their offset in
 * the file rather than through the map (weir__read_entry).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store_impl.h"
#include "base/alloc.h"
#include "base/platform.h"

typedef unsigned long long ull;

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

/* Where weir__read_entry gets chunk values: the cursor, and with fd >= 0 the
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
  if (!src->base && !(src->base = weir__mapping_of(v))) {
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

/* What weir__read_entry has read of entry e so far (its steps below). */
typedef struct entry_read {
  uint64_t id;
  const weir__sub_entry *e;
  const weir_store_u64_sink *sink;
  weir_subtask_snapshot *out;
  chunk_src src, ksrc; /* ksrc: the holder's keys (shared keys), a cursor of its own */
  weir__chunk c, kc;
  uint64_t nu, nb, nd, nblob, nns, nt, bytes, dsum, lastkey;
  uint64_t nbc, nbcd, bcsum, bccap; /* broadcast: entries, data bytes, their sum, room */
  uint16_t lastformat;
  char why[512];
} entry_read;

/* Sets r's message; returns code (for `return bad(...)`). */
static int bad(entry_read *r, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(entry_read *r, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->why, sizeof r->why, fmt, ap);
  va_end(ap);
  return code;
}

/* Allocates what out will hold of e (its counts are bounded by the store
 * file's size: weir__meta_decode and weir__read_entry's first check). */
static void entry_alloc(const weir__sub_entry *e, const weir_store_u64_sink *sink,
                        weir_subtask_snapshot *out) {
  out->op = weir_strdup(e->op);
  out->subtask = e->subtask;
  out->parallelism = e->parallelism;
  if (sink)
    sink->begin(sink->user, e->u64_entries);
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
  if (e->ns_entries) {
    out->ns_keys = weir_malloc_big(e->ns_entries * sizeof(uint64_t));
    out->ns_ns = weir_malloc_big(e->ns_entries * sizeof(uint64_t));
    out->ns_values = weir_malloc_big(e->ns_entries * sizeof(uint64_t));
  }
  if (e->timer_entries) {
    out->tm_keys = weir_malloc_big(e->timer_entries * sizeof(uint64_t));
    out->tm_ts = weir_malloc_big(e->timer_entries * sizeof(int64_t));
    out->tm_domain = weir_malloc_big(e->timer_entries);
  }
  if (e->bcast_entries) {
    out->bc_klen = weir_malloc(e->bcast_entries * sizeof(uint32_t));
    out->bc_vlen = weir_malloc(e->bcast_entries * sizeof(uint32_t));
  }
  out->has_clock = e->has_clock;
  out->clock = e->clock;
  out->state_version = e->state_version;
  if (e->npos) {
    out->pos = weir_malloc(e->npos * sizeof *out->pos);
    memcpy(out->pos, e->pos, e->npos * sizeof *out->pos);
    out->npos = e->npos;
  }
}

/* The keys of u64 chunk seq of a write that shares them: the same chunk of
 * the holder's record, into r->kc, which must hold as many entries as
 * r->c. */
static int holder_keys(entry_read *r, uint32_t seq) {
  const weir__sub_entry *e = r->e;
  char what[96], cerr[300];
  MDB_val val;
  snprintf(what, sizeof what, "chunk %u of record %u of checkpoint %llu (its keys)", seq,
           e->keys_record, (ull)e->keys_ckpt);
  int rc = src_get(&r->ksrc, e->keys_ckpt, e->keys_record, seq, what, &val, cerr, sizeof cerr);
  if (rc != 0) return bad(r, rc, "%s", cerr);
  weir__chunk_id kwant = {e->keys_ckpt, e->keys_record, seq};
  rc = weir__chunk_decode(val.mv_data, val.mv_size, kwant, &r->kc, cerr, sizeof cerr);
  if (rc < 0) return bad(r, rc, "%s: %s", what, cerr);
  if (r->kc.kind != WEIR__KIND_U64)
    return bad(r, WEIR_ECORRUPT, "%s: a value of kind %u where u64 keys belong", what, r->kc.kind);
  if (r->kc.n != r->c.n)
    return bad(r, WEIR_ECORRUPT, "chunk %u: %zu values for the %zu keys of %s", seq, r->c.n,
               r->kc.n, what);
  return 0;
}

/* u64 chunk seq (in r->c): its entries continue the ones before in key
 * order; into out or the sink. */
static int read_u64(entry_read *r, uint32_t seq) {
  const weir__sub_entry *e = r->e;
  const weir__chunk *c = &r->c;
  const uint64_t *keys = c->keys;
  uint16_t format = c->format;
  if (e->keys_ckpt) {
    int rc = holder_keys(r, seq);
    if (rc != 0) return rc;
    keys = r->kc.keys;
    format = r->kc.format;
  }
  if (c->n > e->u64_entries - r->nu)
    return bad(r, WEIR_ECORRUPT, "chunk %u: more u64 entries than the %llu recorded", seq,
               (ull)e->u64_entries);
  if (r->nu > 0 && format != r->lastformat)
    return bad(r, WEIR_ECORRUPT, "chunk %u: written in store format %u, the chunk before in %u",
               seq, format, r->lastformat);
  if (r->nu > 0 && weir__u64_order(format, keys[0]) <= weir__u64_order(format, r->lastkey))
    return bad(r, WEIR_ECORRUPT, "chunk %u: u64 key %llu after key %llu", seq, (ull)keys[0],
               (ull)r->lastkey);
  if (r->out && r->sink) {
    r->sink->chunk(r->sink->user, keys, c->values, c->n);
  } else if (r->out) {
    memcpy(r->out->u64_keys + r->nu, keys, c->n * sizeof(uint64_t));
    memcpy(r->out->u64_values + r->nu, c->values, c->n * sizeof(uint64_t));
  }
  r->lastkey = keys[c->n - 1];
  r->lastformat = format;
  r->nu += c->n;
  weir__chunk_free(&r->kc);
  return 0;
}

/* Byte-string chunk seq (in r->c), into out. */
static int read_bytes(entry_read *r, uint32_t seq) {
  const weir__sub_entry *e = r->e;
  const weir__chunk *c = &r->c;
  weir_subtask_snapshot *out = r->out;
  if (c->n > e->bytes_entries - r->nb)
    return bad(r, WEIR_ECORRUPT, "chunk %u: more byte-string entries than the %llu recorded", seq,
               (ull)e->bytes_entries);
  if (c->data_len > e->bytes_data_len - r->nd)
    return bad(r, WEIR_ECORRUPT, "chunk %u: more byte-string data than the %llu bytes recorded",
               seq, (ull)e->bytes_data_len);
  for (size_t i = 0; i < c->n; i++) r->dsum += (uint64_t)c->klen[i] + c->vlen[i];
  if (out && c->n) {
    memcpy(out->b_route + r->nb, c->route, c->n * sizeof(uint64_t));
    memcpy(out->b_klen + r->nb, c->klen, c->n * sizeof(uint32_t));
    memcpy(out->b_vlen + r->nb, c->vlen, c->n * sizeof(uint32_t));
  }
  if (out && c->data_len) memcpy(out->b_data + r->nd, c->data, c->data_len);
  r->nb += c->n;
  r->nd += c->data_len;
  return 0;
}

/* Blob chunk seq (in r->c), into out. */
static int read_blob(entry_read *r, uint32_t seq) {
  const weir__chunk *c = &r->c;
  if (c->data_len > r->e->blob_len - r->nblob)
    return bad(r, WEIR_ECORRUPT, "chunk %u: more blob bytes than the %llu recorded", seq,
               (ull)r->e->blob_len);
  if (r->out) memcpy(r->out->blob + r->nblob, c->data, c->data_len);
  r->nblob += c->data_len;
  return 0;
}

/* Namespaced chunk seq (in r->c), into out. A (key, ns) given twice is
 * found where the entries go into a table (the engine's restore). */
static int read_ns(entry_read *r, uint32_t seq) {
  const weir__chunk *c = &r->c;
  if (c->n > r->e->ns_entries - r->nns)
    return bad(r, WEIR_ECORRUPT, "chunk %u: more namespaced entries than the %llu recorded", seq,
               (ull)r->e->ns_entries);
  if (r->out) {
    memcpy(r->out->ns_keys + r->nns, c->keys, c->n * sizeof(uint64_t));
    memcpy(r->out->ns_ns + r->nns, c->ns, c->n * sizeof(uint64_t));
    memcpy(r->out->ns_values + r->nns, c->values, c->n * sizeof(uint64_t));
  }
  r->nns += c->n;
  return 0;
}

/* Timer chunk seq (in r->c), into out. */
static int read_timers(entry_read *r, uint32_t seq) {
  const weir__chunk *c = &r->c;
  if (c->n > r->e->timer_entries - r->nt)
    return bad(r, WEIR_ECORRUPT, "chunk %u: more timers than the %llu recorded", seq,
               (ull)r->e->timer_entries);
  if (r->out) {
    memcpy(r->out->tm_keys + r->nt, c->keys, c->n * sizeof(uint64_t));
    memcpy(r->out->tm_ts + r->nt, c->ts, c->n * sizeof(int64_t));
    for (size_t i = 0; i < c->n; i++) r->out->tm_domain[r->nt + i] = (uint8_t)c->domain[i];
  }
  r->nt += c->n;
  return 0;
}

/* Broadcast chunk seq (a byte-string chunk in r->c, every route 0), into
 * out. The metadata records no data length for broadcast state, so its
 * data grows as chunks come (each chunk's data is bounded by its stored
 * size, and the chunks' sizes by the file's). */
static int read_bcast(entry_read *r, uint32_t seq) {
  const weir__chunk *c = &r->c;
  weir_subtask_snapshot *out = r->out;
  if (c->n > r->e->bcast_entries - r->nbc)
    return bad(r, WEIR_ECORRUPT, "chunk %u: more broadcast entries than the %llu recorded", seq,
               (ull)r->e->bcast_entries);
  for (size_t i = 0; i < c->n; i++) {
    if (c->route[i] != 0)
      return bad(r, WEIR_ECORRUPT, "chunk %u: broadcast entry with route %llu, not 0", seq,
                 (ull)c->route[i]);
    r->bcsum += (uint64_t)c->klen[i] + c->vlen[i];
  }
  if (out && c->n) {
    memcpy(out->bc_klen + r->nbc, c->klen, c->n * sizeof(uint32_t));
    memcpy(out->bc_vlen + r->nbc, c->vlen, c->n * sizeof(uint32_t));
  }
  if (out && c->data_len) {
    if (r->nbcd + c->data_len > r->bccap) {
      uint64_t cap = r->bccap ? 2 * r->bccap : 4096;
      while (cap < r->nbcd + c->data_len) cap *= 2;
      out->bc_data = weir_realloc(out->bc_data, cap);
      r->bccap = cap;
    }
    memcpy(out->bc_data + r->nbcd, c->data, c->data_len);
  }
  r->nbc += c->n;
  r->nbcd += c->data_len;
  return 0;
}

/* Chunk seq of the entry's nchunks: looked up, decoded, of the kind its
 * place calls for, and read by the step of that kind. */
static int read_chunk(entry_read *r, uint32_t seq, uint64_t nchunks) {
  const weir__sub_entry *e = r->e;
  char what[96], cerr[300];
  MDB_val val;
  snprintf(what, sizeof what, "chunk %u of %llu", seq, (ull)nchunks);
  int rc = src_get(&r->src, r->id, e->record, seq, what, &val, cerr, sizeof cerr);
  if (rc != 0) return bad(r, rc, "%s", cerr);
  weir__chunk_id want = {r->id, e->record, seq};
  rc = weir__chunk_decode(val.mv_data, val.mv_size, want, &r->c, cerr, sizeof cerr);
  if (rc < 0) return bad(r, rc, "chunk %u: %s", seq, cerr);
  /* Sections in their order: u64, bytes, blob, ns, timers, broadcast. */
  uint64_t end_bytes = (uint64_t)e->u64_chunks + e->bytes_chunks,
           end_blob = end_bytes + e->blob_chunks, end_ns = end_blob + e->ns_chunks,
           end_timers = end_ns + e->timer_chunks;
  uint16_t kind = seq < e->u64_chunks ? (e->keys_ckpt ? WEIR__KIND_U64_VALUES : WEIR__KIND_U64)
                  : seq < end_bytes   ? WEIR__KIND_BYTES
                  : seq < end_blob    ? WEIR__KIND_BLOB
                  : seq < end_ns      ? WEIR__KIND_NS
                  : seq < end_timers  ? WEIR__KIND_TIMERS
                                      : WEIR__KIND_BYTES;
  if (r->c.kind != kind)
    return bad(r, WEIR_ECORRUPT, "chunk %u: a value of kind %u where kind %u belongs", seq,
               r->c.kind, kind);
  r->bytes += val.mv_size;
  if (seq < e->u64_chunks)
    rc = read_u64(r, seq);
  else if (seq >= end_timers)
    rc = read_bcast(r, seq);
  else if (kind == WEIR__KIND_BYTES)
    rc = read_bytes(r, seq);
  else if (kind == WEIR__KIND_NS)
    rc = read_ns(r, seq);
  else if (kind == WEIR__KIND_BLOB)
    rc = read_blob(r, seq);
  else
    rc = read_timers(r, seq);
  if (rc != 0) return rc;
  weir__chunk_free(&r->c);
  return 0;
}

/* The checks of the whole, once every chunk was read: nothing follows the
 * last chunk of the record, and the chunks add up to what the metadata
 * records. */
static int check_whole(entry_read *r, uint64_t nchunks) {
  const weir__sub_entry *e = r->e;
  MDB_val key;
  int rc = after_last_chunk(r->src.cur, r->id, e->record, nchunks, &key);
  if (rc != 0 && rc != MDB_NOTFOUND)
    return bad(r, weir__mdb_err(rc), "after the last chunk: %s", weir__mdb_text(rc));
  if (rc == 0 && key.mv_size >= 12 && weir__be64(key.mv_data) == r->id &&
      weir__be32((const uint8_t *)key.mv_data + 8) == e->record)
    return bad(r, WEIR_ECORRUPT, "a chunk beyond the %llu recorded", (ull)nchunks);
  if (r->nu != e->u64_entries || r->nb != e->bytes_entries || r->nd != e->bytes_data_len ||
      r->nblob != e->blob_len || r->nt != e->timer_entries)
    return bad(r, WEIR_ECORRUPT,
               "chunks hold %llu u64 entries, %llu byte-string entries with %llu data bytes, a "
               "%llu-byte blob and %llu timers; the metadata records %llu, %llu, %llu, %llu and "
               "%llu",
               (ull)r->nu, (ull)r->nb, (ull)r->nd, (ull)r->nblob, (ull)r->nt, (ull)e->u64_entries,
               (ull)e->bytes_entries, (ull)e->bytes_data_len, (ull)e->blob_len,
               (ull)e->timer_entries);
  if (r->dsum != e->bytes_data_len)
    return bad(r, WEIR_ECORRUPT,
               "byte-string entries add up to %llu bytes, their data is %llu bytes", (ull)r->dsum,
               (ull)e->bytes_data_len);
  if (r->nns != e->ns_entries)
    return bad(r, WEIR_ECORRUPT, "chunks hold %llu namespaced entries; the metadata records %llu",
               (ull)r->nns, (ull)e->ns_entries);
  if (r->nbc != e->bcast_entries)
    return bad(r, WEIR_ECORRUPT, "chunks hold %llu broadcast entries; the metadata records %llu",
               (ull)r->nbc, (ull)e->bcast_entries);
  if (r->bcsum != r->nbcd)
    return bad(r, WEIR_ECORRUPT, "broadcast entries add up to %llu bytes, their data is %llu bytes",
               (ull)r->bcsum, (ull)r->nbcd);
  if (r->bytes != e->bytes)
    return bad(r, WEIR_ECORRUPT, "chunks take %llu bytes, the metadata records %llu", (ull)r->bytes,
               (ull)e->bytes);
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
int weir__read_entry(MDB_txn *txn, MDB_dbi dbi, uint64_t id, const weir__sub_entry *e,
                     uint64_t file_size, int fd, const weir_store_u64_sink *sink,
                     weir_subtask_snapshot *out, char *err, size_t errlen) {
  entry_read r = {.id = id, .e = e, .sink = sink, .out = out};
  r.src = r.ksrc = (chunk_src){NULL, file_size, fd, NULL, NULL};
  uint64_t nchunks = weir__sub_chunks(e);
  int rc = 0;
  if (out) memset(out, 0, sizeof *out);
  if (e->bytes > file_size)
    rc = bad(&r, WEIR_ECORRUPT, "claims %llu stored bytes, more than the store file's %llu",
             (ull)e->bytes, (ull)file_size);
  if (rc == 0 && out) entry_alloc(e, sink, out);
  if (rc == 0 && (rc = mdb_cursor_open(txn, dbi, &r.src.cur)) != 0) {
    r.src.cur = NULL;
    rc = bad(&r, weir__mdb_err(rc), "reading chunks: %s", weir__mdb_text(rc));
  }
  if (rc == 0 && e->keys_ckpt && (rc = mdb_cursor_open(txn, dbi, &r.ksrc.cur)) != 0) {
    r.ksrc.cur = NULL;
    rc = bad(&r, weir__mdb_err(rc), "reading chunks: %s", weir__mdb_text(rc));
  }
  for (uint32_t seq = 0; rc == 0 && seq < nchunks; seq++) rc = read_chunk(&r, seq, nchunks);
  if (rc == 0) rc = check_whole(&r, nchunks);
  weir__chunk_free(&r.c);
  weir__chunk_free(&r.kc);
  weir_free(r.src.rbuf);
  weir_free(r.ksrc.rbuf);
  if (r.src.cur) mdb_cursor_close(r.src.cur);
  if (r.ksrc.cur) mdb_cursor_close(r.ksrc.cur);
  if (rc == 0) {
    if (out) {
      out->n_u64 = sink ? 0 : r.nu;
      out->n_bytes = r.nb;
      out->b_data_len = r.nd;
      out->blob_len = r.nblob;
      out->n_ns = r.nns;
      out->n_timers = r.nt;
      out->n_bcast = r.nbc;
      out->bc_data_len = r.nbcd;
    }
    return 0;
  }
  if (out) weir_subtask_snapshot_free(out);
  snprintf(err, errlen, "checkpoint %llu: operator \"%s\" subtask %u: %s", (ull)id, e->op,
           e->subtask, r.why);
  return rc < 0 ? rc : WEIR_ECORRUPT;
}

/* weir__walk_entry's look at one chunk (id, record, seq) through cur: 0, or an
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
 * looked up as weir__read_entry looks it up (the tree pages on the way), and the
 * key after the last one. For the probe child (weir_store_probe): a damaged
 * tree page faults here, not in the loader. A chunk's value must lie in
 * the store file, within [map, map + file_size) of the child's map: then
 * reading it cannot fault (SIGBUS past the end of a truncated file, SIGSEGV
 * outside the map). The values are not touched (mapping the pages of a
 * large checkpoint costs more than reading them once the loader has them)
 * and their contents are checked by weir__read_entry when they are loaded. */
int weir__walk_entry(MDB_txn *txn, MDB_dbi dbi, uint64_t id, const weir__sub_entry *e,
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
 * /proc/self/maps), or NULL where that cannot be known (macOS, and the
 * build with WEIR_PORTABLE_ONLY: base/platform.h). For the probe child: the
 * map of its own environment is the one that holds a value it read (the
 * parent's map of the same file, inherited across fork, lies elsewhere). */
const uint8_t *weir__mapping_of(const void *p) {
#if !WEIR_HAVE_PROC_FS
  (void)p;
  return NULL; /* no /proc: the probe touches the pages, the load reads the map */
#else
  /* WEIR_NO_PROC_MAPS (tests): as on a system without /proc, in one test of
   * every build (the portable build takes that branch everywhere). */
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

uint64_t weir__env_file_size(MDB_env *env) {
  int fd;
  struct stat st;
  if (mdb_env_get_fd(env, &fd) != 0 || fstat(fd, &st) != 0) return UINT64_MAX;
  return (uint64_t)st.st_size;
}
