/* jobs/loader.c: owns loading job shared objects for `weir run ./job.so`.
 *
 * DESIGN. A job .so is built against <weir/weir.h> and links against
 * nothing: its weir_* references are resolved from the `weir` executable
 * that loads it (linked with ENABLE_EXPORTS, so its symbols are in the
 * dynamic symbol table). The engine libraries are static archives, linked
 * whole (see jobs/CMakeLists.txt): a plain static link keeps only the object
 * files the executable itself references, so a job calling, say,
 * weir_reduce would fail to load if no built-in job happened to use it.
 *
 * The .so is opened with RTLD_NOW (a missing symbol is reported at load time,
 * not as a crash in the middle of a run) and RTLD_LOCAL (two jobs never see
 * each other's symbols). It must export `weir_job_abi_version` (from this
 * binary's WEIR_ABI_MIN_VERSION to its WEIR_ABI_VERSION: callback tables
 * carry their size, so an older job's shorter tables still read right) and
 * `weir_job_build`; WEIR_JOB_EXPORT does both.
 */
#include "cli.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

int cli_is_job_path(const char *name) {
  size_t n = strlen(name);
  return strchr(name, '/') != NULL || (n >= 3 && strcmp(name + n - 3, ".so") == 0);
}

int cli_job_load(const char *path, cli_loaded *out) {
  memset(out, 0, sizeof *out);
  /* dlopen searches the library path for a name without a '/': a job named
   * "job.so" means the file in the current directory. */
  char *p = NULL;
  if (strchr(path, '/') == NULL) {
    size_t n = strlen(path);
    p = malloc(n + 3);
    if (p == NULL) {
      cli_error("out of memory");
      return -1;
    }
    memcpy(p, "./", 2);
    memcpy(p + 2, path, n + 1);
  }
  dlerror();
  void *h = dlopen(p ? p : path, RTLD_NOW | RTLD_LOCAL);
  free(p);
  if (h == NULL) {
    const char *e = dlerror();
    cli_error("cannot load job '%s': %s", path, e ? e : "unknown error");
    return -1;
  }
  const unsigned *abi = dlsym(h, "weir_job_abi_version");
  if (abi == NULL) {
    cli_error("'%s' is not a weir job: it does not export weir_job_abi_version "
              "(build it with WEIR_JOB_EXPORT)",
              path);
    dlclose(h);
    return -1;
  }
  if (*abi < WEIR_ABI_MIN_VERSION || *abi > WEIR_ABI_VERSION) {
    cli_error("cannot run job '%s': %s (the job has ABI version %u, this weir runs %u to %u): "
              "rebuild it against this weir's headers",
              path, weir_strerror(WEIR_EABI), *abi, (unsigned)WEIR_ABI_MIN_VERSION,
              (unsigned)WEIR_ABI_VERSION);
    dlclose(h);
    return -1;
  }
  /* dlsym returns a data pointer; converting it to a function pointer is
   * what POSIX requires to work. */
  void *sym = dlsym(h, "weir_job_build");
  if (sym == NULL) {
    cli_error("'%s' is not a weir job: it does not export weir_job_build "
              "(build it with WEIR_JOB_EXPORT)",
              path);
    dlclose(h);
    return -1;
  }
  memcpy(&out->build, &sym, sizeof out->build);
  out->handle = h;
  return 0;
}

void cli_job_unload(cli_loaded *l) {
  if (l->handle != NULL) dlclose(l->handle);
  l->handle = NULL;
  l->build = NULL;
}
