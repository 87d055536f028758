/* tests/fuzz/fuzz_chanstate.c: the libFuzzer target over the channel-state
 * reader (engine/src/chanstate.c), the decoder of the records an unaligned
 * checkpoint stores.
 *
 * DESIGN: all the work is in fz_chanstate (chanstate_input.c), which
 * tests/test_chanstate.c also runs over the seed corpus and every finding.
 * Built only with -DWEIR_FUZZ=ON and clang; run it with scripts/fuzz. The
 * input format is in chanstate_input.h.
 */
#include <stddef.h>
#include <stdint.h>

#include "chanstate_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_chanstate(data, size);
  return 0;
}
