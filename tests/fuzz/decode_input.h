/* tests/fuzz/decode_input.h: the one decode function that the fuzzer
 * (fuzz_decode.c), the regression test (tests/test_decode_regress.c) and the
 * seed corpus generator (gen_corpus.c) share, and the format of its input.
 *
 * An input is a 17-byte header that says what to decode and what to expect,
 * then one stored value (envelope and payload, as the store holds it):
 *
 *   byte  0      control
 *                  bits 0-1  decoders: 0 all three, 1 job record,
 *                            2 checkpoint metadata, 3 chunk
 *                  bit  2    reseal: rewrite the envelope's length and CRC32C
 *                            to match the value before decoding, so that
 *                            damage behind the header reaches protobuf-c and
 *                            the semantic checks (without it nearly every
 *                            mutation stops at the checksum)
 *                  bit  3    metadata: expect job id FZ_JOB_ID (else none)
 *                  bits 4-7  f: if not 0, the f-th allocation that protobuf-c
 *                            makes in each decoder's first decode fails
 *                            (weir__codec_fail_alloc_after): the decoder
 *                            must then return WEIR_ENOMEM, an empty result,
 *                            and leak nothing
 *   bytes 1 - 8  expected checkpoint id (metadata key, chunk), little-endian
 *   bytes 9 -12  expected chunk record, little-endian
 *   bytes 13-16  expected chunk seq, little-endian
 *   bytes 17-    the value
 *
 * A shorter input is read as if padded with zero bytes to 17.
 *
 * DESIGN: fz_decode is an oracle, not only a driver. It cross-checks every
 * decoder against the envelope check, checks that every error is a clean
 * WEIR_ECORRUPT or WEIR_EFORMAT (WEIR_ENOMEM when it made an allocation
 * fail) with a message and an empty result, touches
 * every byte a successful decode hands out (so AddressSanitizer sees a view
 * that points outside the message), re-checks the promises of codec.h on
 * every success, and re-encodes what it decoded and decodes it again (the
 * round trip must give the same result). A broken promise prints the reason
 * and the input in hex, then aborts: the fuzzer records the input as a
 * crash, a Criterion test counts it as one.
 */
#ifndef WEIR_TESTS_FUZZ_DECODE_INPUT_H
#define WEIR_TESTS_FUZZ_DECODE_INPUT_H

#include <stddef.h>
#include <stdint.h>

#define FZ_HDR 17u

enum {
  FZ_ALL = 0,
  FZ_JOB = 1,
  FZ_META = 2,
  FZ_CHUNK = 3,
  FZ_DECODERS = 3,    /* mask of bits 0-1 */
  FZ_RESEAL = 1 << 2, /* rewrite length and checksum */
  FZ_WITH_JOB = 1 << 3,
  FZ_FAIL_SHIFT = 4 /* bits 4-7: fail that protobuf-c allocation */
};

/* The job id that FZ_WITH_JOB expects. */
#define FZ_JOB_ID "0f1e2d3c-4b5a-4978-8697-a5b4c3d2e1f0"

/* Decodes `data` as described above. Returns the number of decoders that
 * accepted the value (0: every one refused it, cleanly); aborts on a broken
 * promise. Leaks nothing. Not thread-safe (it remembers the current input
 * for fz_dump_current). */
int fz_decode(const uint8_t *data, size_t size);

/* Writes a 17-byte header for a value into hdr. */
void fz_header(uint8_t hdr[FZ_HDR], unsigned control, uint64_t ckpt, uint32_t record, uint32_t seq);

/* Prints the input fz_decode is working on (if any) to stderr in hex, with
 * a line saying how to keep it as a regression input; for crash handlers. */
void fz_dump_current(void);

#endif
