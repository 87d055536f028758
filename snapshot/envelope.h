/* envelope.h (private to snapshot/): the wrapper around every stored value.
 *
 * Layout, little-endian, 16 bytes then the payload:
 *
 *   offset 0  magic    "WEIR"
 *          4  version  u16, the store format that wrote the value
 *          6  kind     u16, WEIR__KIND_*
 *          8  length   u32, payload bytes (the value is exactly 16 + length)
 *         12  crc      u32, CRC32C (Castagnoli) of bytes 0..11 and the payload
 *
 * The checksum covers the header fields too, so a flipped version, kind or
 * length byte reads as corruption, not as "newer format". Any future format
 * keeps magic, version, length and crc where they are, so an old reader can
 * always tell "damaged" (WEIR_ECORRUPT) from "written by a newer weir"
 * (WEIR_EFORMAT).
 */
#ifndef WEIR_SNAPSHOT_ENVELOPE_H
#define WEIR_SNAPSHOT_ENVELOPE_H

#include <stddef.h>
#include <stdint.h>

#define WEIR__ENV_HDR 16u

/* Kinds of stored values. */
enum {
  WEIR__KIND_JOB = 1,        /* weirpb.Job */
  WEIR__KIND_META = 2,       /* weirpb.Checkpoint */
  WEIR__KIND_U64 = 3,        /* weirpb.U64Chunk */
  WEIR__KIND_BYTES = 4,      /* weirpb.BytesChunk */
  WEIR__KIND_BLOB = 5,       /* weirpb.BlobChunk */
  WEIR__KIND_U64_VALUES = 6, /* weirpb.U64Values (format 3) */
  WEIR__KIND_NS = 7,         /* weirpb.NsChunk (format 4) */
  WEIR__KIND_TIMERS = 8,     /* weirpb.TimerChunk (format 4) */
  WEIR__KIND_MAX = 8
};

/* CRC32C (Castagnoli, reflected, as in iSCSI and ext4) of n bytes, continuing
 * from `crc` (0 to start): crc32c(crc32c(0, a), b) == crc32c(0, a ++ b).
 * Uses SSE4.2 or ARMv8 CRC instructions when the CPU has them. Thread-safe. */
uint32_t weir__crc32c(uint32_t crc, const void *p, size_t n);
/* The portable table-driven implementation (for tests). */
uint32_t weir__crc32c_sw(uint32_t crc, const void *p, size_t n);

/* Fills the 16-byte header at `value` for the `len` payload bytes that
 * follow it at value + WEIR__ENV_HDR. `version` is normally WEIR_STORE_FORMAT
 * (tests write others). */
void weir__env_seal(uint8_t *value, uint16_t version, uint16_t kind, uint32_t len);

/* Checks a stored value of `len` bytes: magic, length against the value's
 * size (truncation or trailing bytes), checksum, version (newer than
 * WEIR_STORE_FORMAT or older than WEIR_STORE_MIN_READER: WEIR_EFORMAT), kind
 * (1 .. WEIR__KIND_MAX). On success returns 0 with *kind, *payload and *plen
 * set (payload points into `value`). Otherwise WEIR_ECORRUPT or WEIR_EFORMAT
 * with a short explanation in err (no context: callers prefix it). Reads no
 * byte outside value[0 .. len). */
int weir__env_open(const void *value, size_t len, uint16_t *kind, const uint8_t **payload,
                   size_t *plen, char *err, size_t errlen);

/* The format version of a value that weir__env_open accepted. */
uint16_t weir__env_version(const void *value);

#endif
