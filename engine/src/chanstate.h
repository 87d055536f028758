/* chanstate.h: the channel-state blob of an unaligned cut: the records a
 * task's barrier overtook, written by the task while it records (task.c)
 * and read back on restore. Pure: no threads, no store.
 *
 * A blob is a 40-byte header, then the output section (records that were
 * waiting in the task's output channels, each with the router and channel
 * it goes to), then the input section (records consumed after the cut from
 * inputs whose barrier had not arrived yet), both in the order they were
 * sent. Header (host byte order, like every stored value):
 *
 *   u32 magic "WUCS", u32 format, u64 output records, u64 output section
 *   bytes, u64 input records, u64 input section bytes
 *
 * Format 3 (written): the output section is a sequence of runs
 * [router][channel][n] followed by n records; a record is
 * [head][key][ts][id][len][payload]. Integers are LEB128 varints (at most
 * 10 bytes). Key, ts and id are each coded against the same field of the
 * previous record of the section (0 before the first), as the zigzagged
 * difference u. The head byte says how: bits 0-2 for the key and 3-5 for
 * ts are u itself when u < 6, else 6 (the varint of u follows) or 7 (the
 * value's 8 bytes follow, when u's varint would take more than 8); bit 6
 * set: the id's 8 bytes follow; else a varint v, the id being coded
 * against the id `lag` + 1 records back in the section (0 if there is
 * none) as u = v >> 1; when v is odd, a byte follows with the new lag
 * (below WEIR__CS_IDS), which holds for the section's next records
 * until another one says otherwise (the lag starts at 0: the previous
 * record). Bit 7 set: the varint length (at least 1) and the payload
 * follow, else the length is 0. A source that takes turns among its
 * splits emits ids that are consecutive per split, so its records' ids
 * take 2 bytes against the id of the same split's last record; a
 * source's records take 3 to 4 bytes in all, an operator's, whose ids are
 * hashes, 9 (format 2: 12).
 *
 * Format 2 (read only): the same runs; a record is
 * [key][ts][id][len][payload], key, ts and id each the varint of the
 * zigzagged difference shifted left by one when that takes at most 8
 * bytes, else the varint 1 followed by the value's 8 bytes.
 *
 * Format 1 (read only, so checkpoints written before format 2 restore):
 * fixed-width records, [router u32][channel u32] before each output
 * record, then [key u64][ts i64][id u64][len u32][payload].
 *
 * The reader checks everything it returns: lengths against the blob and
 * max_record, counts against the header, runs against the section end;
 * a damaged blob gives -1 with a reason, never a read out of bounds. */
#ifndef WEIR_CHANSTATE_H
#define WEIR_CHANSTATE_H

#include <stdint.h>

#include "batch.h"
#include "snapshot/store.h"
#include "weir/job.h"

#define WEIR__CS_MAGIC 0x53435557u /* "WUCS" */
#define WEIR__CS_HDR WEIR_STORE_CHANNELS_HEADER
#define WEIR__CS_FORMAT 3u
/* Format 3: how many of a section's last ids an id may be coded against. */
#define WEIR__CS_IDS 128u

/* One blob being written. Zero it, then weir__cs_begin(). */
typedef struct weir__cs_writer {
  uint8_t *buf; /* owned until weir__cs_finish() */
  uint64_t len, cap;
  uint64_t out_records, in_records;
  uint64_t in_start; /* offset of the input section, 0 while writing outputs */
  uint64_t hint;     /* the size of the last blob: the next one's first buffer */
  uint64_t pkey;     /* the previous record of this section */
  int64_t pts;
  uint64_t ids[WEIR__CS_IDS]; /* the section's last ids, a ring */
  uint32_t lag, prev_lag;     /* the id coded against, and the one before */
  uint64_t next_scan;         /* the first record that may look for a nearer id */
} weir__cs_writer;

/* Starts a blob (drops one left unfinished) at its output section. */
void weir__cs_begin(weir__cs_writer *w);
/* Output section: the next n records (n > 0) go to router k, channel j. */
void weir__cs_run(weir__cs_writer *w, uint32_t k, uint32_t j, uint64_t n);
/* Appends records [from, to) of data batch b to the current section. */
void weir__cs_records(weir__cs_writer *w, const weir__batch *b, uint32_t from, uint32_t to);
/* Appends every record of data batch b to the current section. */
static inline void weir__cs_batch(weir__cs_writer *w, const weir__batch *b) {
  weir__cs_records(w, b, 0, b->len);
}
/* Ends the output section and starts the input section. */
void weir__cs_inputs(weir__cs_writer *w);
/* Completes the header and hands the blob over (caller frees it with
 * weir__cs_free, or the store with weir__cs_release); *len is its size.
 * The writer is empty afterwards, and its next blob starts as large as
 * this one. */
uint8_t *weir__cs_finish(weir__cs_writer *w, uint64_t *len);
/* Frees an unfinished blob. */
void weir__cs_drop(weir__cs_writer *w);
/* Frees a blob of weir__cs_finish (pooled memory: not weir_free). */
void weir__cs_free(uint8_t *blob);
/* The same as a weir_subtask_snapshot.blob_release. */
void weir__cs_release(uint8_t *blob, uint64_t len);

/* One decoded record. data points into the blob. */
typedef struct weir__cs_rec {
  uint32_t k, j; /* output records: router and channel */
  uint32_t len;
  uint64_t key, id;
  int64_t ts;
  const uint8_t *data;
} weir__cs_rec;

/* Reads a blob it does not own, one section after the other. */
typedef struct weir__cs_reader {
  const uint8_t *p;
  uint64_t len, off, end; /* end: of the current section */
  uint32_t format, max_record;
  int inputs;           /* in the input section */
  uint64_t out_records; /* the header's counts */
  uint64_t in_records;
  uint64_t got;      /* records of the current section read */
  uint64_t run_left; /* format 2 outputs: records left in the run */
  uint32_t k, j;     /* and where they go */
  uint64_t pkey, pid;
  int64_t pts;
  uint64_t ids[WEIR__CS_IDS]; /* format 3: the section's last ids, a ring */
  uint32_t lag;
} weir__cs_reader;

/* Checks the header and positions r at the output section. Returns 0, or
 * -1 with *why set. */
int weir__cs_open(weir__cs_reader *r, const uint8_t *p, uint64_t len, uint32_t max_record,
                  const char **why);
/* The next record of the current section into *rec: 1, or 0 at the
 * section's end (its count checked), or -1 with *why set. */
int weir__cs_next(weir__cs_reader *r, weir__cs_rec *rec, const char **why);
/* Moves to the input section; the output section must have been read to
 * its end. */
void weir__cs_to_inputs(weir__cs_reader *r);
#endif
