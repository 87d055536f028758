/* snapshot/lease.h: the job lease of a state directory: who may run the job and
 * commit its checkpoints now (docs/leases.md).
 *
 * A run acquires the lease before it does anything else with its state
 * directory and holds it until it ends. The lease names its owner (host, boot
 * id, pid, process start time, random nonce), its expiry, and a fencing epoch
 * that only grows: each new owner gets the previous epoch + 1. The owner
 * renews the lease on a heartbeat thread of its own (no checkpoint write can
 * delay it), and every checkpoint commit calls weir_lease_check() inside its
 * write transaction, so an owner that was paused past its expiry and taken
 * over commits nothing when it resumes. The protocol, its files and its
 * invariants are described at the top of snapshot/lease.c.
 *
 * Functions return 0 or a negative WEIR_E* code: WEIR_EOWNED when a live
 * owner holds the lease, WEIR_EFENCED when this owner lost it. The message
 * (naming owner and epoch) is available from weir_lease_error().
 */
#ifndef WEIR_LEASE_H
#define WEIR_LEASE_H

#include <stddef.h>
#include <stdint.h>

#include "weir/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WEIR_LEASE_DEFAULT_MS 6000u

typedef struct weir_lease weir_lease;

/* Who holds (or held) a lease. */
typedef struct weir_lease_owner {
  char host[128];
  char boot[64]; /* boot id ("" where the OS has none) */
  int64_t pid;
  uint64_t start; /* process start time in OS units (0: unknown) */
  char nonce[40]; /* random, per acquisition */
} weir_lease_owner;

/* How an acquisition got the lease. */
typedef enum {
  WEIR_LEASE_FIRST = 0,    /* nobody ever held it */
  WEIR_LEASE_RELEASED = 1, /* the previous owner released it in order */
  WEIR_LEASE_GONE = 2,     /* the previous owner ran on this host and its process is gone
                              (or the host rebooted since) */
  WEIR_LEASE_EXPIRED = 3   /* the previous owner stopped renewing: it may still be alive */
} weir_lease_takeover;

/* Time, for tests: a monotonic clock in nanoseconds and a sleep. */
typedef struct weir_lease_clock {
  uint64_t (*now_ns)(void *user);
  void (*sleep_ns)(void *user, uint64_t ns);
  void *user;
} weir_lease_clock;

typedef struct weir_lease_opts {
  uint32_t lease_ms; /* lease duration; 0 = WEIR_LEASE_DEFAULT_MS; at least 30 */
  int wait;          /* a live owner: wait for its lease to expire instead of WEIR_EOWNED */
  /* Called once, when the lease is lost (taken over, or not renewed in
   * time), on the thread that found it lost (the heartbeat thread, or one
   * that checked the lease), with the reason: the owner must stop
   * committing. It must not fork (see weir_fork_hold). */
  void (*lost)(void *user, int err, const char *msg);
  void *lost_user;
  /* A state directory without any epoch yet starts at this one (0, 1: at
   * 1): a run from a savepoint continues above the savepoint's epoch, so
   * that destinations fenced by it accept the run. */
  uint64_t min_epoch;
  /* Tests. */
  const weir_lease_clock *clock; /* NULL: the system's monotonic clock */
  const weir_lease_owner *as;    /* NULL: this process (host, boot, pid, start) */
  int (*alive)(void *user, const weir_lease_owner *o); /* NULL: pid + start time */
  void *alive_user;
} weir_lease_opts;

/* Acquires the lease of state directory `dir` (creating <dir>/lease). Returns
 * 0 and *out, or WEIR_EOWNED (a live owner; its identity and epoch in `err`),
 * or another error (message in `err`). With opts->wait, blocks until the
 * holder's lease expires, it releases, or its process is gone. Does not start
 * the heartbeat: weir_lease_start. Blocks (fsync). */
int weir_lease_acquire(weir_lease **out, const char *dir, const weir_lease_opts *opts, char *err,
                       size_t errlen);
/* Starts the heartbeat thread (renewal every lease_ms / 3). */
int weir_lease_start(weir_lease *l);
/* Renews once now (the heartbeat does this; tests call it directly).
 * 0, or WEIR_EFENCED when the lease is lost (then it stays lost). */
int weir_lease_renew(weir_lease *l);
/* Is this process still the owner, with a margin before its lease could
 * expire? 0 or WEIR_EFENCED (message in weir_lease_error). Cheap (a clock
 * read and two stat calls); thread-safe; never blocks on another process. */
int weir_lease_check(weir_lease *l);
/* Stops the heartbeat and frees the lease. With `release`, and if this
 * process still holds the current epoch, marks the lease released first so
 * that a successor starts at once. Call it only after every commit stopped
 * (the store is closed). NULL: no-op. */
void weir_lease_close(weir_lease *l, int release);

uint64_t weir_lease_epoch(const weir_lease *l);
weir_lease_takeover weir_lease_how(const weir_lease *l);
/* The previous owner (valid if weir_lease_how() != WEIR_LEASE_FIRST). */
const weir_lease_owner *weir_lease_previous(const weir_lease *l);
const char *weir_lease_error(weir_lease *l, char *buf, size_t len);

/* What <dir>/lease says now, for listings: returns 1 and fills the fields, or
 * 0 if the directory has no lease. `released` is 1 after an orderly release;
 * `age_ms` is the time since the last renewal when it can be told (same
 * host and boot), else -1. */
typedef struct weir_lease_state {
  uint64_t epoch;
  weir_lease_owner owner;
  uint32_t lease_ms;
  int released;
  int64_t age_ms;
} weir_lease_state;
int weir_lease_read(const char *dir, weir_lease_state *out);

/* This process as an owner (host, boot id, pid, start time; no nonce). */
int weir_lease_self(weir_lease_owner *out);
/* Is the process described by o alive (this host only)? 1, 0, or -1 if it
 * cannot be told (another host or boot). A zombie counts as gone. */
int weir_lease_owner_alive(const weir_lease_owner *o);

#ifdef __cplusplus
}
#endif
#endif
