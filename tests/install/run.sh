#!/bin/sh
# tests/install/run.sh BUILD_DIR [CC]: installs the weir built in BUILD_DIR
# into a temporary prefix and uses it as a user would, compiling with CC
# (default cc; the tests pass the compiler weir was built with, as a macOS
# user has clang alone).
#   1. the prefix holds the public headers alone (include/weir/*.h), the
#      libraries, the weir binary, weir.pc and the CMake package;
#   2. a job module compiled with `cc $(pkg-config --cflags weir)` (the
#      README's way) runs under the installed `weir run`, exact output;
#   3. a CMake project with find_package(weir) builds a job module on
#      weir::job (which links no copy of the library) and a program on
#      weir::weir and on weir::weir_static; all three run.
# Exits 0 when all hold; prints what failed otherwise.
set -eu
build=$1
cc=${2:-cc}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weir-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_install: FAIL: $*"; exit 1; }

cmake --install "$build" --prefix "$tmp/p" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; fail "cmake --install"; }
p=$tmp/p
libdir=$(dirname "$(find "$p" -name weir.pc | head -n 1)")/..
[ -x "$p/bin/weir" ] || fail "no bin/weir"
[ -f "$p/include/weir/weir.h" ] || fail "no include/weir/weir.h"
others=$(cd "$p/include" && find . -type f ! -path './weir/*.h')
[ -z "$others" ] || fail "headers other than weir/*.h installed: $others"
ls "$libdir"/libweir.a >/dev/null || fail "no libweir.a"
ls "$libdir"/libweir.so* "$libdir"/libweir*.dylib 2>/dev/null | grep -q . || fail "no shared libweir"

# 2. pkg-config, as the README shows it.
cflags=$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags weir) || fail "pkg-config weir"
extra=""
[ "$(uname)" = Darwin ] && extra="-undefined dynamic_lookup"
# shellcheck disable=SC2086
"$cc" -std=c11 -Wall -Wextra -Werror -shared -fPIC $cflags $extra "$here/user_job.c" \
  -o "$tmp/user_job.so" || fail "$cc \$(pkg-config --cflags weir) user_job.c"
(cd "$tmp" && "$p/bin/weir" run --quiet --state-dir none ./user_job.so 700 file:out) ||
  fail "weir run ./user_job.so (pkg-config build)"
# 7 keys, 100 records each: every key's last count is 100.
last=$(cat "$tmp"/out/*.txt | sort -k1,1n -k2,2n | awk '{ c[$1] = $2 } END { for (k in c) print k, c[k] }' | sort -n | tr '\n' ' ')
[ "$last" = "0 200 1 200 2 200 3 200 4 200 5 200 6 200 " ] || fail "user_job output: $last"

# 3. find_package(weir).
cmake -S "$here" -B "$tmp/user" -DCMAKE_PREFIX_PATH="$p" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_COMPILER="$cc" \
  >"$tmp/user.log" 2>&1 || { cat "$tmp/user.log"; fail "find_package(weir)"; }
cmake --build "$tmp/user" >>"$tmp/user.log" 2>&1 || { cat "$tmp/user.log"; fail "building against weir::*"; }
(cd "$tmp" && rm -rf out && "$p/bin/weir" run --quiet --state-dir none "$tmp/user/user_job.so" 70 null) ||
  fail "weir run user_job.so (weir::job build)"
out=$("$tmp/user/run_shared" 5000) || fail "run_shared: $out"
[ "$out" = "records 5000" ] || fail "run_shared printed: $out"
out=$("$tmp/user/run_static" 5000) || fail "run_static: $out"
[ "$out" = "records 5000" ] || fail "run_static printed: $out"
echo "test_install: PASS ($p: headers, libraries, weir, weir.pc, find_package(weir))"
