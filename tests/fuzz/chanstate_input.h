/* tests/fuzz/chanstate_input.h: the oracle over the channel-state reader
 * (engine/src/chanstate.c) that the fuzzer fuzz_chanstate and the plain test
 * tests/test_chanstate.c share.
 *
 * An input is one byte m, then a channel-state blob (chanstate.h: header,
 * output section, input section) read with max_record = 16 * m.
 *
 * DESIGN: fz_chanstate is an oracle, not only a driver. It copies the blob
 * into a buffer of its exact size (so AddressSanitizer sees any read past
 * it), reads both sections, and checks every promise of the reader: an
 * error comes with a reason; a record's payload lies inside the blob and
 * within max_record, and every byte of it is touched; on success the
 * records are written again in the current format and read back, and must come out
 * the same. A broken promise prints the reason and aborts (the fuzzer
 * records a crash, the plain test dies).
 */
#ifndef WEIR_TESTS_FUZZ_CHANSTATE_INPUT_H
#define WEIR_TESTS_FUZZ_CHANSTATE_INPUT_H

#include <stddef.h>
#include <stdint.h>

/* Reads `data` as described above. Returns 1 if the blob was accepted, 0 if
 * it was refused (cleanly); aborts on a broken promise. Leaks nothing. */
int fz_chanstate(const uint8_t *data, size_t size);

#endif
