/* spec.c: owns sink specifications ("null", "print", "file:DIR"): checking
 * them and adding the sink they name to a job (weir_sink_to).
 */
#include "sink_impl.h"

#include <stdio.h>
#include <string.h>

#include "weir/alloc.h"

#define SPEC_HELP "use null, print or file:DIR"

static int spec_error(char *err, size_t errlen, const char *fmt, const char *spec) {
  if (err && errlen) snprintf(err, errlen, fmt, spec);
  return WEIR_ESINK;
}

int weir_sink_spec_check(const char *spec, char *err, size_t errlen) {
  if (!spec || !*spec) return spec_error(err, errlen, "empty sink specification%s: " SPEC_HELP, "");
  if (strcmp(spec, "null") == 0 || strcmp(spec, "print") == 0) return 0;
  if (strncmp(spec, "file:", 5) == 0) {
    if (spec[5] == '\0')
      return spec_error(err, errlen, "sink '%s' needs a directory, as in file:out", spec);
    return 0;
  }
  return spec_error(err, errlen, "unknown sink '%s': " SPEC_HELP, spec);
}

static void sink_arg_free(void *p) {
  weir__sink_arg *a = p;
  if (!a) return;
  weir_free(a->dir);
  weir_free(a);
}

int weir_sink_to(weir_stream *s, const char *name, const char *spec, weir_format_fn fmt,
                 int parallelism) {
  weir_job *job = weir_stream_job(s);
  /* s is NULL after a build error: weir_job_run() reports the first one. */
  if (!job) return WEIR_EINVAL;
  char err[256];
  if (weir_sink_spec_check(spec, err, sizeof err) < 0)
    return weir_job_fail(job, WEIR_ESINK, "sink '%s': %s", name ? name : "?", err);
  const weir_operator_vt *vt = &weir__null_sink_vt;
  weir__sink_arg *a = weir_calloc(1, sizeof *a);
  a->fmt = fmt ? fmt : weir_format_default;
  if (strcmp(spec, "print") == 0) {
    vt = &weir__print_sink_vt;
  } else if (strncmp(spec, "file:", 5) == 0) {
    vt = &weir__file_sink_vt;
    a->dir = weir_strdup(spec + 5);
  }
  int rc = weir_job_adopt(job, a, sink_arg_free);
  if (rc < 0) return rc;
  return weir_sink(s, name, vt, a, parallelism);
}
