/* weir/nexmark.h: the Nexmark event generator (Person, Auction, Bid) as a
 * weir source, the fixed layout of its events in a record's payload, and
 * a CSV dump of the same events.
 *
 * The generator reproduces the behaviour of the public Nexmark suite's
 * generator (docs/nexmark.md lists every deviation): event i (0 .. N-1)
 * has the suite's event id e = i + 2 (its ids start at 1 and its event
 * numbers at 1, run with one generator), which makes it a person when
 * e mod 50 < 1, an auction when e mod 50 < 4 and a bid otherwise (the
 * proportions 1:3:46); the ids, hot sellers, hot auctions, hot bidders,
 * prices, strings and auction lengths follow the suite's formulas, with
 * the random choices of event i drawn from a stream seeded by (seed, i)
 * alone, so that the events do not depend on the parallelism, on the
 * order they are made in or on a restore. Event time (ms):
 *
 *   date_time_i = base_time + floor((i + 1) * 1000 / tps)
 *
 * (the suite's spacing at tps events per second of event time, in exact
 * integer arithmetic). Watermarks: bounded out-of-orderness of the
 * suite's 4 s (its WATERMARK dateTime - INTERVAL '4' SECOND).
 *
 * Splits: events come in blocks of WEIR_NEXMARK_BLOCK; block b belongs to
 * split b mod WEIR_NEXMARK_SPLITS, and subtask s of P owns the splits j
 * with j mod P == s. So with P = 1 the events come out in order 0, 1, 2,
 * ..., and with P dividing the split count subtask s emits the blocks b
 * with b mod P == s. Each split is a watermark split of its own
 * (weir_source_split) and checkpoints store its next event: a restore,
 * also at another parallelism, continues every split exactly.
 */
#ifndef WEIR_NEXMARK_H
#define WEIR_NEXMARK_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "weir/job.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WEIR_NEXMARK_SPLITS 128
#define WEIR_NEXMARK_BLOCK 1024

/* The suite's event_type. */
enum { WEIR_NEXMARK_PERSON = 0, WEIR_NEXMARK_AUCTION = 1, WEIR_NEXMARK_BID = 2 };

/* The payload of an event: one of the three fixed parts below (the first
 * field, `kind`, tells which), in host byte order, followed directly by
 * the bytes of its strings in the order of `len` (not NUL-terminated;
 * ASCII without comma, quote or newline). A payload is not aligned in a
 * batch: read it with weir_nexmark_parse, which copies the fixed part.
 * The record's key is the person's id, the auction's id or the bid's
 * auction, and its timestamp the event's date_time. Every part has
 * `event` at offset 16 and date_time at 24, and no implicit padding. */
typedef struct weir_nexmark_person {
  uint32_t kind;     /* WEIR_NEXMARK_PERSON */
  uint16_t len[6];   /* name, email_address, credit_card, city, state, extra */
  uint64_t event;    /* i */
  int64_t date_time; /* ms since the epoch */
  int64_t id;
} weir_nexmark_person; /* 40 bytes */

typedef struct weir_nexmark_auction {
  uint32_t kind;   /* WEIR_NEXMARK_AUCTION */
  uint16_t len[3]; /* item_name, description, extra */
  uint16_t pad[3]; /* 0 */
  uint64_t event;
  int64_t date_time;
  int64_t id, initial_bid, reserve, expires, seller, category;
} weir_nexmark_auction; /* 80 bytes */

typedef struct weir_nexmark_bid {
  uint32_t kind;   /* WEIR_NEXMARK_BID */
  uint16_t len[3]; /* channel, url, extra */
  uint16_t pad[3]; /* 0 */
  uint64_t event;
  int64_t date_time;
  int64_t auction, bidder, price;
} weir_nexmark_bid; /* 56 bytes */

/* A string of a parsed event: points into the payload. */
typedef struct weir_nexmark_str {
  const char *p;
  uint32_t len;
} weir_nexmark_str;

/* An event read from a payload (weir_nexmark_parse). The strings point
 * into the payload and are valid as long as it is. */
typedef struct weir_nexmark_event {
  uint32_t kind;
  union {
    weir_nexmark_person person;
    weir_nexmark_auction auction;
    weir_nexmark_bid bid;
  } u;
  /* person: name, email_address, credit_card, city, state, extra;
   * auction: item_name, description, extra; bid: channel, url, extra. */
  weir_nexmark_str s[6];
} weir_nexmark_event;

/* Reads an event payload into *out. 0, or WEIR_EBADREC if the payload is
 * not one (unknown kind, lengths that do not add up). Never asserts. */
int weir_nexmark_parse(const void *payload, size_t len, weir_nexmark_event *out);

/* Only the kind of an event payload (-1 when too short): a filter's
 * first look, without copying. */
static inline int weir_nexmark_kind(const void *payload, size_t len) {
  if (len < 4) return -1;
  const uint8_t *p = (const uint8_t *)payload;
  uint32_t k;
  memcpy(&k, p, 4);
  return (int)k;
}

/* The suite's defaults. */
#define WEIR_NEXMARK_DEFAULT_TPS 10000000u
#define WEIR_NEXMARK_DEFAULT_DELAY_MS 4000
/* 2015-07-15 00:00:00 UTC: a fixed base time, so that runs repeat. */
#define WEIR_NEXMARK_DEFAULT_BASE_TIME 1436918400000ll

typedef struct weir_nexmark_opts {
  size_t size;       /* sizeof(weir_nexmark_opts) */
  uint64_t events;   /* N >= 1 */
  uint64_t tps;      /* events per second of event time; 0 = 10M */
  uint64_t rate;     /* events per second of wall-clock time, all subtasks; 0 = no limit */
  uint64_t seed;     /* of every random choice */
  int64_t base_time; /* ms; 0 = WEIR_NEXMARK_DEFAULT_BASE_TIME */
  int64_t delay_ms;  /* watermark out-of-orderness in ms; 0 = 4000 */
  uint32_t watermark_interval_ms; /* 0 = 200 */
} weir_nexmark_opts;

/* The generator itself, for a program or test that wants the events
 * without a job: its tables (made from the seed) are read-only after
 * create, so several threads may call weir_nexmark_gen_event at once. */
typedef struct weir_nexmark_gen weir_nexmark_gen;
/* 0, or WEIR_EINVAL with a message in err (errlen bytes) for options out
 * of range (no size, events 0, a base time or tps that would overflow). */
int weir_nexmark_gen_create(const weir_nexmark_opts *opts, weir_nexmark_gen **out, char *err,
                            size_t errlen);
void weir_nexmark_gen_destroy(weir_nexmark_gen *g); /* NULL: no-op */
/* The largest payload an event can have (a buffer of this size always
 * suffices). */
#define WEIR_NEXMARK_MAX_EVENT 4096
/* Event i's payload into buf (WEIR_NEXMARK_MAX_EVENT bytes); returns its
 * length, *key and *ts the record's key and timestamp. */
size_t weir_nexmark_gen_event(const weir_nexmark_gen *g, uint64_t i, void *buf, uint64_t *key,
                              int64_t *ts);

/* The CSV dump: a header line
 *
 *   event,event_type,date_time,id,name,email_address,credit_card,city,state,
 *   item_name,description,initial_bid,reserve,expires,seller,category,
 *   auction,bidder,price,channel,url,extra
 *
 * (one line), then one line per event in event order: `event` is i,
 * event_type 0/1/2, date_time in ms; `id` is the person's or the
 * auction's; a field the kind has not is empty; every string as it is
 * (none holds a comma, quote or newline). Writes events first .. first +
 * n - 1 of g (without the header when first > 0). 0 or -errno. */
int weir_nexmark_write_csv(const weir_nexmark_gen *g, uint64_t first, uint64_t n, FILE *out);

/* The generator as a source: N events, with the watermark strategy above,
 * rescalable, positions checkpointed. WEIR_EINVAL (a build error) for
 * options out of range, as weir_nexmark_gen_create. */
weir_stream *weir_nexmark_source(weir_job *job, const char *name, const weir_nexmark_opts *opts,
                                 int parallelism);

#ifdef __cplusplus
}
#endif
#endif
