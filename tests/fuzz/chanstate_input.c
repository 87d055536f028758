/* tests/fuzz/chanstate_input.c: the channel-state oracle (see
 * chanstate_input.h). */
#include "chanstate_input.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "chanstate.h"
#include "base/alloc.h"

static void broken(const char *what) {
  fprintf(stderr, "fz_chanstate: broken promise: %s\n", what);
  abort();
}

/* The records of one blob, in order: outputs first. */
typedef struct recs {
  weir__cs_rec *v;
  size_t n, nout;
} recs;

/* Reads the blob p[0..len) into *out. Returns 0 or -1 (refused). */
static int read_blob(const uint8_t *p, uint64_t len, uint32_t max_record, recs *out) {
  weir__cs_reader r;
  weir__cs_rec rec;
  const char *why = NULL;
  memset(out, 0, sizeof *out);
  if (weir__cs_open(&r, p, len, max_record, &why)) {
    if (!why) broken("refused without a reason");
    return -1;
  }
  volatile uint8_t sink = 0;
  for (int sec = 0; sec < 2; sec++) {
    int rc;
    while ((rc = weir__cs_next(&r, &rec, &why)) > 0) {
      if (rec.len > max_record) broken("a record over max_record");
      if (rec.data < p || rec.data > p + len || (uint64_t)(p + len - rec.data) < rec.len)
        broken("a payload outside the blob");
      for (uint32_t i = 0; i < rec.len; i++) sink ^= rec.data[i];
      out->v = weir_realloc(out->v, (out->n + 1) * sizeof *out->v);
      out->v[out->n++] = rec;
    }
    if (rc < 0) {
      if (!why) broken("refused without a reason");
      weir_free(out->v);
      memset(out, 0, sizeof *out);
      return -1;
    }
    if (!sec) {
      out->nout = out->n;
      if (out->nout != r.out_records) broken("output count differs from the header's");
      weir__cs_to_inputs(&r);
    }
  }
  if (out->n - out->nout != r.in_records) broken("input count differs from the header's");
  (void)sink;
  return 0;
}

/* Appends records v[0..n) to w in batches (and, for outputs, runs of one
 * router and channel). */
static void write_recs(weir__cs_writer *w, const weir__cs_rec *v, size_t n, int out) {
  weir__batch *b = weir__batch_create(64);
  for (size_t i = 0; i < n;) {
    size_t m = 1;
    while (i + m < n && m < 64 && (!out || (v[i + m].k == v[i].k && v[i + m].j == v[i].j))) m++;
    weir__batch_reset(b);
    size_t put = 0;
    while (put < m && weir__batch_fits(b, v[i + put].len)) {
      weir__batch_append(b, v[i + put].key, v[i + put].ts, v[i + put].id, v[i + put].data,
                         v[i + put].len);
      put++;
    }
    if (put == 0) broken("a record fits no empty batch");
    if (out) weir__cs_run(w, v[i].k, v[i].j, put);
    weir__cs_batch(w, b);
    i += put;
  }
  weir__batch_destroy(b);
}

int fz_chanstate(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  uint32_t max_record = 16u * data[0];
  uint64_t len = size - 1;
  uint8_t *p = weir_malloc(len ? len : 1);
  if (len) memcpy(p, data + 1, len);
  recs a;
  if (read_blob(p, len, max_record, &a)) {
    weir_free(p);
    return 0;
  }
  /* Written again (the current format) and read back: the same records. */
  weir__cs_writer w;
  memset(&w, 0, sizeof w);
  weir__cs_begin(&w);
  write_recs(&w, a.v, a.nout, 1);
  weir__cs_inputs(&w);
  if (a.n > a.nout) write_recs(&w, a.v + a.nout, a.n - a.nout, 0);
  uint64_t len2;
  uint8_t *q = weir__cs_finish(&w, &len2);
  recs c;
  if (read_blob(q, len2, max_record, &c)) broken("a re-encoded blob is refused");
  if (c.n != a.n || c.nout != a.nout) broken("re-encoding changed the record counts");
  for (size_t i = 0; i < a.n; i++) {
    const weir__cs_rec *x = &a.v[i], *y = &c.v[i];
    if (x->key != y->key || x->ts != y->ts || x->id != y->id || x->len != y->len ||
        (i < a.nout && (x->k != y->k || x->j != y->j)) ||
        (x->len && memcmp(x->data, y->data, x->len) != 0))
      broken("re-encoding changed a record");
  }
  weir_free(c.v);
  weir__cs_free(q);
  weir_free(a.v);
  weir_free(p);
  return 1;
}
