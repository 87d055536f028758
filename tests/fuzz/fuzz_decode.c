/* tests/fuzz/fuzz_decode.c: the libFuzzer target over every stored-value
 * decoder: the envelope, protobuf-c's unpacking of each message and the
 * codec's semantic checks (snapshot/envelope.c, snapshot/codec.c).
 *
 * DESIGN: all the work is in fz_decode (decode_input.c), which the plain
 * regression test tests/test_decode_regress.c also runs over the seed corpus
 * and every finding, so a finding stays a test without libFuzzer. Built only
 * with -DWEIR_FUZZ=ON and clang (tests/fuzz/CMakeLists.txt); run it with
 * scripts/fuzz [SECONDS]. The input format is in decode_input.h.
 */
#include <stddef.h>
#include <stdint.h>

#include "decode_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_decode(data, size);
  return 0;
}
