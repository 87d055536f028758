/* tests/old_abi_job.c: a job module that claims an ABI version this weir no
 * longer runs (2: callback tables without their size), for test_cli's
 * bad_so: the loader must refuse it with a clear message before calling
 * anything in it. */
#include "weir/weir.h"

__attribute__((visibility("default"))) const unsigned weir_job_abi_version = 2;
__attribute__((visibility("default"))) int weir_job_build(weir_job *job, int argc, char **argv) {
  (void)argc;
  (void)argv;
  return weir_job_fail(job, WEIR_EINVAL, "an old-ABI job must not be built");
}
