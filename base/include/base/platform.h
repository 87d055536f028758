/* base/platform.h: which of the operating system's own facilities weir uses,
 * decided in one place.
 *
 * DESIGN. weir builds on Linux and on macOS. Where Linux has something that
 * macOS lacks, the code has a portable fallback, the branch macOS takes.
 * Each such site tests one WEIR_HAVE_* macro from here (always defined, 0 or
 * 1: test it with #if, never #ifdef) instead of __linux__, __GLIBC__ or the
 * flag itself. Defining WEIR_PORTABLE_ONLY (CMake -DWEIR_FORCE_FALLBACKS=ON;
 * `scripts/test --portable`) sets them all to 0, so that a Linux build takes
 * every fallback exactly as the macOS build does, and the whole test suite
 * runs them in CI, where no Mac runs. The build uses -Wundef: a site that
 * tests one of these without including this header fails to compile rather
 * than silently taking its fallback.
 *
 * The sites:
 *   WEIR_HAVE_PROC_FS        /proc/self/maps: where the store's map starts,
 *                            so that a restore reads chunks with pread
 *                            (snapshot/load.c; fallback: read through the
 *                            map, and the check child touches every page);
 *                            /proc/self/exe: the weir binary that `weir
 *                            verify` starts its workers with (tools/verify.c;
 *                            fallback: argv[0], looked up in PATH if bare);
 *                            /proc/self/statm: the resident memory that
 *                            `weir run --http` reports (jobs/http.c;
 *                            fallback: macOS's task_info, elsewhere only
 *                            the peak from getrusage).
 *   WEIR_HAVE_MADV_HUGEPAGE  transparent huge pages for large tables
 *                            (base/alloc.c, engine/src/state.c,
 *                            bench/bench_counter.c; fallback: 4 KiB pages).
 *   WEIR_HAVE_MALLOPT        glibc's malloc tuning for the store writer
 *                            (snapshot/writer.c; fallback: the allocator's
 *                            defaults).
 *
 * Not sites, so not switched off here (each is the same on both systems, or
 * each system has its own way of doing it rather than a fallback):
 *   - snapshot/lease.c reads a process's start time and the boot id from
 *     /proc on Linux and from sysctl on macOS: two native sources of the
 *     same facts. Its third branch (neither: no boot id, owners judged by
 *     expiry alone, so a restart after a crash waits out the lease) is what
 *     neither system does.
 *   - connectors/file/file.c uses F_FULLFSYNC where it exists (macOS) and
 *     fsync otherwise: Linux already runs the fallback.
 *   - CLOCK_MONOTONIC, CLOCK_REALTIME and CLOCK_THREAD_CPUTIME_ID, O_CLOEXEC,
 *     MAP_ANON, getentropy, backtrace: both systems have them.
 *   - bench/bench_abs.c, jobs/http.c: ru_maxrss is in bytes on macOS, KiB
 *     on Linux.
 *   - The CPU's own instructions (snapshot/envelope.c's CRC32C,
 *     engine/src/spin.h) depend on the architecture, not the system; the
 *     software CRC is checked against the hardware one in every build.
 */
#ifndef WEIR_PLATFORM_H
#define WEIR_PLATFORM_H

/* Defines __GLIBC__ (through <features.h>) and, where they exist, the
 * MADV_* flags tested below. */
#include <sys/mman.h>

#if defined(__linux__) && !defined(WEIR_PORTABLE_ONLY)
#define WEIR_HAVE_PROC_FS 1
#else
#define WEIR_HAVE_PROC_FS 0
#endif

#if defined(MADV_HUGEPAGE) && !defined(WEIR_PORTABLE_ONLY)
#define WEIR_HAVE_MADV_HUGEPAGE 1
#else
#define WEIR_HAVE_MADV_HUGEPAGE 0
#endif

#if defined(__GLIBC__) && !defined(WEIR_PORTABLE_ONLY)
#define WEIR_HAVE_MALLOPT 1
#else
#define WEIR_HAVE_MALLOPT 0
#endif

#endif
