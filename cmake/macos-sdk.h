/* cmake/macos-sdk.h: what macOS's SDK says about some libc functions that
 * glibc's headers do not, included before every file of a build with
 * WEIR_FORCE_FALLBACKS (CMakeLists.txt).
 *
 * DESIGN. A Linux build stands in for the macOS one in CI. The SDK (macOS 13
 * and later) marks sprintf and vsprintf deprecated, so a use compiles
 * silently here but fails a macOS build with -Werror; redeclared with the
 * same mark, it fails here too. Only what the SDK marks and glibc declares
 * alike belongs here.
 */
#ifndef WEIR_MACOS_SDK_H
#define WEIR_MACOS_SDK_H

#include <stdarg.h>
#include <stdio.h>

int sprintf(char *restrict, const char *restrict, ...)
    __attribute__((__deprecated__("deprecated in macOS's SDK: use snprintf")));
int vsprintf(char *restrict, const char *restrict, va_list)
    __attribute__((__deprecated__("deprecated in macOS's SDK: use vsnprintf")));
char *tmpnam(char *) __attribute__((__deprecated__("deprecated in macOS's SDK: use mkstemp")));

#endif
