/* failpoint.c: owns the failpoint table parsed from WEIR_FAILPOINTS (see
 * base/failpoint.h). Hits are counted with atomics so that points reached
 * from several threads fire exactly once at the N-th hit. */
#include "base/failpoint.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "weir/error.h"
#include "base/log.h"

#define MAX_POINTS 16

enum { ACT_KILL, ACT_ERROR, ACT_ENOSPC, ACT_PAUSE, ACT_DELAY, ACT_UNTIL, ACT_COUNT };

typedef struct point {
  char name[64];
  int action;
  unsigned at;
  unsigned delay_ms; /* ACT_DELAY */
  char until[64];    /* ACT_UNTIL: the point whose hits it waits for ... */
  unsigned until_n;  /* ... and how many */
  int repeat;
  atomic_uint hits;
} point;

static point points[MAX_POINTS];
static int npoints;
static atomic_int armed;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static point *find(const char *name) {
  for (int i = 0; i < npoints; i++)
    if (!strcmp(points[i].name, name)) return &points[i];
  return NULL;
}

static void parse(void) {
  npoints = 0;
  const char *env = getenv("WEIR_FAILPOINTS");
  if (!env || !*env) {
    atomic_store(&armed, 0);
    return;
  }
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", env);
  char *save = NULL;
  for (char *tok = strtok_r(buf, ",", &save); tok && npoints < MAX_POINTS;
       tok = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(tok, '=');
    if (!eq) {
      WEIR_LOG_W("WEIR_FAILPOINTS: ignoring '%s' (expected NAME=ACTION[@N][+])", tok);
      continue;
    }
    *eq = 0;
    point *p = &points[npoints];
    snprintf(p->name, sizeof p->name, "%s", tok);
    char *act = eq + 1;
    p->repeat = act[strlen(act) - 1] == '+';
    if (p->repeat) act[strlen(act) - 1] = 0;
    char *at = strchr(act, '@');
    p->at = 1;
    if (at) {
      *at = 0;
      p->at = (unsigned)strtoul(at + 1, NULL, 10);
      if (!p->at) p->at = 1;
    }
    if (!strcmp(act, "kill"))
      p->action = ACT_KILL;
    else if (!strcmp(act, "error"))
      p->action = ACT_ERROR;
    else if (!strcmp(act, "enospc"))
      p->action = ACT_ENOSPC;
    else if (!strcmp(act, "pause"))
      p->action = ACT_PAUSE;
    else if (!strcmp(act, "delay") || !strncmp(act, "delay:", 6)) {
      p->action = ACT_DELAY;
      p->delay_ms = act[5] == ':' ? (unsigned)strtoul(act + 6, NULL, 10) : 5;
    } else if (!strncmp(act, "until:", 6) && strrchr(act + 6, ':')) {
      char *colon = strrchr(act + 6, ':');
      *colon = 0;
      p->action = ACT_UNTIL;
      p->repeat = 1;
      snprintf(p->until, sizeof p->until, "%s", act + 6);
      p->until_n = (unsigned)strtoul(colon + 1, NULL, 10);
    } else {
      WEIR_LOG_W("WEIR_FAILPOINTS: unknown action '%s' for %s", act, p->name);
      continue;
    }
    atomic_store(&p->hits, 0);
    npoints++;
  }
  /* A point an `until` waits for is counted even if nothing else arms it. */
  for (int i = 0, n = npoints; i < n; i++)
    if (points[i].action == ACT_UNTIL && !find(points[i].until) && npoints < MAX_POINTS) {
      point *c = &points[npoints++];
      memset(c, 0, sizeof *c);
      memcpy(c->name, points[i].until, sizeof c->name);
      c->action = ACT_COUNT;
      c->at = 1;
    }
  atomic_store(&armed, npoints > 0);
}

int weir_failpoint(const char *name) {
  pthread_once(&once, parse);
  if (!atomic_load_explicit(&armed, memory_order_relaxed)) return 0;
  point *p = find(name);
  if (!p) return 0;
  unsigned hit = atomic_fetch_add(&p->hits, 1) + 1;
  if (hit < p->at || (hit > p->at && !p->repeat)) return 0;
  switch (p->action) {
  case ACT_COUNT:
    return 0;
  case ACT_UNTIL: {
    point *u = find(p->until);
    return u && atomic_load(&u->hits) < p->until_n ? WEIR_EAGAIN : 0;
  }
  case ACT_KILL:
    fprintf(stderr, "weir: failpoint %s: kill (hit %u)\n", name, hit);
    fflush(stderr);
    raise(SIGKILL);
    return 0;
  case ACT_PAUSE:
    fprintf(stderr, "weir: failpoint %s: pause (hit %u)\n", name, hit);
    fflush(stderr);
    raise(SIGSTOP);
    return 0;
  case ACT_DELAY: {
    struct timespec ts = {(time_t)(p->delay_ms / 1000), (long)(p->delay_ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
    return 0;
  }
  case ACT_ENOSPC:
    WEIR_LOG_W("failpoint %s: enospc (hit %u)", name, hit);
    return WEIR_ENOSPC;
  default:
    WEIR_LOG_W("failpoint %s: error (hit %u)", name, hit);
    return WEIR_EIO;
  }
}

unsigned weir_failpoint_hits(const char *name) {
  pthread_once(&once, parse);
  point *p = find(name);
  return p ? atomic_load(&p->hits) : 0;
}

void weir_failpoint_reload(void) {
  pthread_once(&once, parse);
  parse();
}
