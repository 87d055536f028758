/* chanstate.c: owns the channel-state blob format (see chanstate.h): its
 * writer, used on the task's thread while a cut records, and its checked
 * reader, used on restore. */
#include "chanstate.h"

#include <string.h>

#include "base/alloc.h"
#include "base/assert.h"

/* A record's worst case before its payload: three 9-byte values and a
 * 5-byte length; an output run's header: two 5-byte varints and a 10-byte
 * count. */
#define REC_MAX 32u
#define RUN_MAX 20u
/* The smallest buffer. */
#define CS_MIN (64u * 1024u)

/* The buffer comes from the pool of large arrays (base/alloc.h), sized
 * at first like the task's previous blob: a cut's channel state is
 * written while the task runs, on the critical path of the checkpoint,
 * and a fresh buffer of a few MB grown by doubling faulted in every page
 * at every checkpoint (330 faults, 4-6 ms of a 2-core VM's slow worker,
 * against ~1 ms for the encoding itself). */
static void reserve(weir__cs_writer *w, uint64_t more) {
  if (w->len + more <= w->cap) return;
  /* A quarter more than last time: a blob that grows a little does not
   * grow into a fresh buffer. */
  uint64_t first = w->hint + w->hint / 4;
  uint64_t n = w->cap ? 2 * w->cap : first > CS_MIN ? first : CS_MIN;
  while (n < w->len + more) n *= 2;
  uint8_t *b = weir_pool_alloc((size_t)n);
  if (w->len) memcpy(b, w->buf, (size_t)w->len);
  weir_pool_free(w->buf);
  w->buf = b;
  w->cap = n;
}

static inline uint8_t *put_varint(uint8_t *q, uint64_t v) {
  while (v >= 0x80) {
    *q++ = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  *q++ = (uint8_t)v;
  return q;
}

/* Zigzag: small differences of either sign become small varints. */
static inline uint64_t zz(uint64_t d) {
  return (d << 1) ^ (uint64_t)((int64_t)d >> 63);
}

static inline uint64_t unzz(uint64_t u) {
  return (u >> 1) ^ (0 - (u & 1));
}

/* Format 3: a record's head byte codes its key and ts in 3 bits each (a
 * zigzagged difference under SMALL is the code itself; F_VARINT: its
 * varint follows; F_RAW: the value's 8 bytes follow), whether its id
 * follows raw (H_ID_RAW) or as a difference to one of the last ids
 * (put_id), and whether a length and payload follow (H_LEN). A difference
 * whose varint would take more than 8 bytes goes raw. */
#define SMALL 6u
#define F_VARINT 6u
#define F_RAW 7u
#define H_ID_RAW 0x40u
#define H_LEN 0x80u
#define VARINT8 (1ull << 56)

static inline unsigned code_of(uint64_t u) {
  return u < SMALL ? (unsigned)u : u < VARINT8 ? F_VARINT : F_RAW;
}

static inline uint8_t *put_field(uint8_t *q, unsigned code, uint64_t u, uint64_t v) {
  if (code == F_VARINT) return put_varint(q, u);
  if (code == F_RAW) {
    memcpy(q, &v, 8);
    return q + 8;
  }
  return q;
}

/* An id that far (zigzagged) from the one it is coded against makes the
 * writer try the lag it used before this one (two sources taking turns),
 * then look for a nearer id among the last WEIR__CS_IDS. A look that finds
 * none allows the next only SCAN_EVERY records later (ids that are hashes
 * are near none: the look costs them WEIR__CS_IDS / SCAN_EVERY compares a
 * record), one that finds one only SCAN_AGAIN later: whatever the pattern
 * of near and far ids, a record costs at most WEIR__CS_IDS / SCAN_AGAIN
 * compares (restarting the count at every near id let ids that alternate
 * between near and far look on every second record). */
#define FAR_ID (1ull << 20)
#define SCAN_EVERY 64u
#define SCAN_AGAIN 8u

/* The id lag + 1 records back among the section's first n. */
static inline uint64_t id_back(const uint64_t *ids, uint64_t n, uint32_t lag) {
  return lag < n ? ids[(n - 1 - lag) & (WEIR__CS_IDS - 1)] : 0;
}

static void section_start(weir__cs_writer *w) {
  w->pkey = 0;
  w->pts = 0;
  memset(w->ids, 0, sizeof w->ids);
  w->lag = w->prev_lag = 0;
  w->next_scan = 0;
}

/* Codes id, the section's record n: the varint and lag byte of format 3,
 * or 8 raw bytes (then *raw is set). */
static uint8_t *put_id(weir__cs_writer *w, uint8_t *q, uint64_t id, uint64_t n, int *raw) {
  uint64_t u = zz(id - id_back(w->ids, n, w->lag));
  uint32_t lag = w->lag;
  if (u >= FAR_ID && w->prev_lag != lag) {
    uint64_t v = zz(id - id_back(w->ids, n, w->prev_lag));
    if (v < u) {
      u = v;
      lag = w->prev_lag;
    }
  }
  if (u >= FAR_ID && n >= w->next_scan) {
    uint32_t most = n < WEIR__CS_IDS ? (uint32_t)n : WEIR__CS_IDS;
    for (uint32_t l = 0; l < most; l++) {
      uint64_t v = zz(id - id_back(w->ids, n, l));
      if (v < u) {
        u = v;
        lag = l;
      }
    }
    w->next_scan = n + (u < FAR_ID ? SCAN_AGAIN : SCAN_EVERY);
  }
  w->ids[n & (WEIR__CS_IDS - 1)] = id;
  /* Raw when the varint of u << 1 (and a new lag's byte) would take 8
   * bytes or more: 7 varint bytes hold 49 bits, 6 hold 42. */
  int relag = lag != w->lag;
  *raw = u >= (relag ? 1ull << 41 : 1ull << 48);
  if (*raw) {
    memcpy(q, &id, 8);
    return q + 8;
  }
  q = put_varint(q, u << 1 | (uint64_t)relag);
  if (relag) {
    w->prev_lag = w->lag;
    w->lag = lag;
    *q++ = (uint8_t)lag;
  }
  return q;
}

void weir__cs_begin(weir__cs_writer *w) {
  weir__cs_drop(w);
  reserve(w, WEIR__CS_HDR);
  memset(w->buf, 0, WEIR__CS_HDR);
  w->len = WEIR__CS_HDR;
  section_start(w);
}

void weir__cs_run(weir__cs_writer *w, uint32_t k, uint32_t j, uint64_t n) {
  WEIR_ASSERT(!w->in_start && n > 0);
  reserve(w, RUN_MAX);
  uint8_t *q = w->buf + w->len;
  q = put_varint(q, k);
  q = put_varint(q, j);
  q = put_varint(q, n);
  w->len = (uint64_t)(q - w->buf);
}

void weir__cs_records(weir__cs_writer *w, const weir__batch *b, uint32_t from, uint32_t to) {
  uint64_t n0 = w->in_start ? w->in_records : w->out_records;
  for (uint32_t r = from; r < to; r++) {
    uint32_t rl = b->lens[r];
    reserve(w, REC_MAX + rl);
    uint8_t *q = w->buf + w->len;
    uint64_t key = b->keys[r], ts = (uint64_t)b->ts[r], id = b->ids[r];
    uint64_t uk = zz(key - w->pkey), ut = zz(ts - (uint64_t)w->pts);
    unsigned ck = code_of(uk), ct = code_of(ut);
    uint8_t *head = q++;
    q = put_field(q, ck, uk, key);
    q = put_field(q, ct, ut, ts);
    int id_raw;
    q = put_id(w, q, id, n0 + (r - from), &id_raw);
    *head = (uint8_t)(ck | ct << 3 | (id_raw ? H_ID_RAW : 0) | (rl ? H_LEN : 0));
    if (rl) {
      q = put_varint(q, rl);
      memcpy(q, b->data + b->off[r], rl);
      q += rl;
    }
    w->len = (uint64_t)(q - w->buf);
    w->pkey = key;
    w->pts = (int64_t)ts;
  }
  if (w->in_start)
    w->in_records += to - from;
  else
    w->out_records += to - from;
}

void weir__cs_inputs(weir__cs_writer *w) {
  WEIR_ASSERT(!w->in_start && w->len >= WEIR__CS_HDR);
  w->in_start = w->len;
  section_start(w);
}

uint8_t *weir__cs_finish(weir__cs_writer *w, uint64_t *len) {
  WEIR_ASSERT(w->in_start >= WEIR__CS_HDR);
  uint32_t h[2] = {WEIR__CS_MAGIC, WEIR__CS_FORMAT};
  uint64_t q[4] = {w->out_records, w->in_start - WEIR__CS_HDR, w->in_records, w->len - w->in_start};
  memcpy(w->buf, h, 8);
  memcpy(w->buf + 8, q, 32);
  uint8_t *blob = w->buf;
  *len = w->len;
  memset(w, 0, sizeof *w);
  w->hint = *len;
  return blob;
}

void weir__cs_drop(weir__cs_writer *w) {
  uint64_t hint = w->hint;
  weir_pool_free(w->buf);
  memset(w, 0, sizeof *w);
  w->hint = hint;
}

void weir__cs_free(uint8_t *blob) {
  weir_pool_free(blob);
}

void weir__cs_release(uint8_t *blob, uint64_t len) {
  (void)len;
  weir_pool_free(blob);
}

/* ---- reading ---------------------------------------------------------------- */

/* A varint at r->off, not past r->end. */
static int get_varint(weir__cs_reader *r, uint64_t *v) {
  uint64_t x = 0;
  for (unsigned s = 0; s < 70; s += 7) {
    if (r->off >= r->end) return -1;
    uint8_t c = r->p[r->off++];
    if (s == 63 && c > 1) return -1; /* more than 64 bits */
    x |= (uint64_t)(c & 0x7f) << s;
    if (!(c & 0x80)) {
      *v = x;
      return 0;
    }
  }
  return -1;
}

/* A value of format 2 (read only): the varint of its zigzagged difference
 * to the previous one shifted left by one, or the varint 1 and the value's
 * 8 bytes. */
static int get_delta(weir__cs_reader *r, uint64_t *v, uint64_t prev) {
  uint64_t u;
  if (get_varint(r, &u)) return -1;
  if (!(u & 1)) {
    *v = prev + unzz(u >> 1);
    return 0;
  }
  if (u != 1 || r->end - r->off < 8) return -1;
  memcpy(v, r->p + r->off, 8);
  r->off += 8;
  return 0;
}

static int get_fixed(weir__cs_reader *r, void *v, uint64_t n) {
  if (r->end - r->off < n) return -1;
  memcpy(v, r->p + r->off, (size_t)n);
  r->off += n;
  return 0;
}

int weir__cs_open(weir__cs_reader *r, const uint8_t *p, uint64_t len, uint32_t max_record,
                  const char **why) {
  memset(r, 0, sizeof *r);
  uint32_t h[2];
  uint64_t q[4];
  if (len < WEIR__CS_HDR) {
    *why = "shorter than its header";
    return -1;
  }
  memcpy(h, p, 8);
  memcpy(q, p + 8, 32);
  if (h[0] != WEIR__CS_MAGIC || h[1] < 1 || h[1] > WEIR__CS_FORMAT) {
    *why = "unknown format (written by a newer weir?)";
    return -1;
  }
  if (q[1] > len - WEIR__CS_HDR || q[3] != len - WEIR__CS_HDR - q[1]) {
    *why = "section lengths do not add up";
    return -1;
  }
  r->p = p;
  r->len = len;
  r->off = WEIR__CS_HDR;
  r->end = WEIR__CS_HDR + q[1];
  r->format = h[1];
  r->max_record = max_record;
  r->out_records = q[0];
  r->in_records = q[2];
  return 0;
}

void weir__cs_to_inputs(weir__cs_reader *r) {
  WEIR_ASSERT(!r->inputs && r->off == r->end);
  r->inputs = 1;
  r->end = r->len;
  r->got = 0;
  r->run_left = 0;
  r->pkey = r->pid = 0;
  r->pts = 0;
  memset(r->ids, 0, sizeof r->ids);
  r->lag = 0;
}

static int next_v1(weir__cs_reader *r, weir__cs_rec *rec) {
  if (!r->inputs && (get_fixed(r, &rec->k, 4) || get_fixed(r, &rec->j, 4))) return -1;
  if (get_fixed(r, &rec->key, 8) || get_fixed(r, &rec->ts, 8) || get_fixed(r, &rec->id, 8) ||
      get_fixed(r, &rec->len, 4))
    return -1;
  return 0;
}

/* Formats 2 and 3: a record's ts and length, and what the next one is
 * coded against. */
static int rec_done(weir__cs_reader *r, weir__cs_rec *rec, uint64_t ts, uint64_t len) {
  rec->ts = (int64_t)ts;
  rec->len = (uint32_t)len;
  r->pkey = rec->key;
  r->pts = rec->ts;
  r->pid = rec->id;
  return 0;
}

static int rec_v2(weir__cs_reader *r, weir__cs_rec *rec) {
  uint64_t ts, len;
  if (get_delta(r, &rec->key, r->pkey) || get_delta(r, &ts, (uint64_t)r->pts) ||
      get_delta(r, &rec->id, r->pid) || get_varint(r, &len) || len > UINT32_MAX)
    return -1;
  return rec_done(r, rec, ts, len);
}

/* A key or ts of format 3 with its head byte's code. */
static int get_field(weir__cs_reader *r, unsigned code, uint64_t *v, uint64_t prev) {
  uint64_t u = code;
  if (code == F_RAW) return get_fixed(r, v, 8);
  if (code == F_VARINT && (get_varint(r, &u) || u < SMALL)) return -1;
  *v = prev + unzz(u);
  return 0;
}

static int rec_v3(weir__cs_reader *r, weir__cs_rec *rec) {
  if (r->off >= r->end) return -1;
  uint8_t h = r->p[r->off++];
  uint64_t ts, u, len = 0;
  if (get_field(r, h & 7u, &rec->key, r->pkey) || get_field(r, h >> 3 & 7u, &ts, (uint64_t)r->pts))
    return -1;
  if (h & H_ID_RAW) {
    if (get_fixed(r, &rec->id, 8)) return -1;
  } else {
    if (get_varint(r, &u)) return -1;
    if (u & 1) {
      if (r->off >= r->end || r->p[r->off] >= WEIR__CS_IDS) return -1;
      r->lag = r->p[r->off++];
    }
    rec->id = id_back(r->ids, r->got, r->lag) + unzz(u >> 1);
  }
  r->ids[r->got & (WEIR__CS_IDS - 1)] = rec->id;
  if ((h & H_LEN) && (get_varint(r, &len) || len == 0 || len > UINT32_MAX)) return -1;
  return rec_done(r, rec, ts, len);
}

/* Formats 2 and 3: runs of output records, records coded against the
 * previous one. */
static int next_delta(weir__cs_reader *r, weir__cs_rec *rec, const char **why) {
  if (!r->inputs) {
    if (!r->run_left) {
      uint64_t k, j, n;
      if (get_varint(r, &k) || get_varint(r, &j) || get_varint(r, &n)) return -1;
      if (k > UINT32_MAX || j > UINT32_MAX || n == 0) {
        *why = "malformed output run";
        return -1;
      }
      r->k = (uint32_t)k;
      r->j = (uint32_t)j;
      r->run_left = n;
    }
    r->run_left--;
    rec->k = r->k;
    rec->j = r->j;
  }
  return r->format == 2 ? rec_v2(r, rec) : rec_v3(r, rec);
}

static int miscounted(const weir__cs_reader *r, const char **why) {
  *why = r->inputs ? "input record count does not match" : "output record count does not match";
  return -1;
}

int weir__cs_next(weir__cs_reader *r, weir__cs_rec *rec, const char **why) {
  uint64_t want = r->inputs ? r->in_records : r->out_records;
  if (r->off == r->end) {
    if (r->run_left) {
      *why = "an output run ends early";
      return -1;
    }
    return r->got == want ? 0 : miscounted(r, why);
  }
  memset(rec, 0, sizeof *rec);
  *why = NULL;
  int rc = r->format == 1 ? next_v1(r, rec) : next_delta(r, rec, why);
  if (!rc && (rec->len > r->max_record || r->end - r->off < rec->len)) rc = -1;
  if (rc) {
    if (!*why) *why = r->inputs ? "malformed input record" : "malformed output record";
    return -1;
  }
  rec->data = r->p + r->off;
  r->off += rec->len;
  return ++r->got > want ? miscounted(r, why) : 1;
}
