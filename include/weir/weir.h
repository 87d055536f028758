/* weir/weir.h: everything a job author needs.
 *
 *   #include <weir/weir.h>
 *
 *   static int build(weir_job *job, int argc, char **argv) {
 *     weir_gen_opts g = {.records = 1000000, .keys = 1000};
 *     weir_stream *s = weir_gen(job, "gen", &g, 0);
 *     s = weir_count(weir_key_by(s), "count", 0);
 *     return weir_sink_to(s, "out", "file:out", NULL, 0);
 *   }
 *   WEIR_JOB_EXPORT(build)
 *
 * Built as a shared object and run with `weir run ./myjob.so [args]`.
 */
#ifndef WEIR_WEIR_H
#define WEIR_WEIR_H

#include "weir/error.h"
#include "weir/job.h"
#include "weir/nexmark.h"
#include "weir/operators.h"
#include "weir/sinks.h"

#endif
