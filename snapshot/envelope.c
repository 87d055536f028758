/* envelope.c: owns the stored-value envelope and the CRC32C it carries (see
 * envelope.h for the layout).
 *
 * DESIGN: LMDB has no page checksums, so weir adds its own per value. CRC32C
 * is the checksum of choice because modern CPUs compute it in hardware
 * (SSE4.2 crc32, ARMv8 crc32c*); without them a slicing-by-8 table does about
 * 1-2 GB/s, far above the store's write rate. The tables are built once
 * (pthread_once) and are read-only afterwards. Decoding checks, in order:
 * size >= header, magic, length == size - header, checksum, version, kind;
 * each check reads only bytes already known to be inside the value.
 */
#include "envelope.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "weir/error.h"
#include "snapshot/store.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define WEIR_CRC_X86 1
#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
#include <arm_acle.h>
#define WEIR_CRC_ARM 1
#endif

/* ---- software CRC32C: slicing-by-8 -------------------------------------- */

#define POLY 0x82f63b78u /* Castagnoli, reflected */

static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ POLY : c >> 1;
    table[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = table[0][i];
    for (int t = 1; t < 8; t++) {
      c = table[0][c & 0xff] ^ (c >> 8);
      table[t][i] = c;
    }
  }
}

static uint32_t load_le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint32_t weir__crc32c_sw(uint32_t crc, const void *data, size_t n) {
  pthread_once(&table_once, table_init);
  const uint8_t *p = data;
  uint32_t c = ~crc;
  while (n > 0 && ((uintptr_t)p & 7) != 0) {
    c = table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    n--;
  }
  while (n >= 8) {
    uint32_t lo = load_le32(p) ^ c, hi = load_le32(p + 4);
    c = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^ table[5][(lo >> 16) & 0xff] ^
        table[4][lo >> 24] ^ table[3][hi & 0xff] ^ table[2][(hi >> 8) & 0xff] ^
        table[1][(hi >> 16) & 0xff] ^ table[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
  return ~c;
}

/* ---- hardware CRC32C ----------------------------------------------------- */

/* The CRC instruction has a latency of about 3 cycles but issues every
 * cycle, so one stream runs at a third of what the unit can do: long
 * buffers go as three interleaved streams of CRC_BLOCK bytes, joined with
 * the operator "append CRC_BLOCK zero bytes" (a 32x32 matrix over GF(2),
 * applied with four table lookups). For raw registers (no inversions):
 * R(c, A B) = shift(R(c, A)) ^ R(0, B) when |B| = CRC_BLOCK. */
#define CRC_BLOCK 4096u

#if defined(WEIR_CRC_X86) || defined(WEIR_CRC_ARM)
static uint32_t shift_tab[4][256]; /* the operator, byte by byte of c */
static pthread_once_t shift_once = PTHREAD_ONCE_INIT;

/* mat[i]: the image of bit i. */
static uint32_t gf2_times(const uint32_t *mat, uint32_t vec) {
  uint32_t sum = 0;
  for (int i = 0; vec; i++, vec >>= 1)
    if (vec & 1) sum ^= mat[i];
  return sum;
}

static void gf2_mul(uint32_t *out, const uint32_t *a, const uint32_t *b) { /* out = a b */
  uint32_t t[32];
  for (int i = 0; i < 32; i++) t[i] = gf2_times(a, b[i]);
  memcpy(out, t, sizeof t);
}

static void shift_init(void) {
  uint32_t op[32], acc[32];
  op[0] = POLY; /* one zero bit */
  for (int i = 1; i < 32; i++) op[i] = 1u << (i - 1);
  for (int i = 0; i < 3; i++) gf2_mul(op, op, op); /* one zero byte */
  for (int i = 0; i < 32; i++) acc[i] = 1u << i;
  for (uint32_t n = CRC_BLOCK; n; n >>= 1) { /* op^CRC_BLOCK */
    if (n & 1) gf2_mul(acc, acc, op);
    gf2_mul(op, op, op);
  }
  for (int k = 0; k < 4; k++)
    for (uint32_t b = 0; b < 256; b++) shift_tab[k][b] = gf2_times(acc, b << (8 * k));
}

static uint32_t crc_shift(uint32_t c) {
  return shift_tab[0][c & 0xff] ^ shift_tab[1][(c >> 8) & 0xff] ^ shift_tab[2][(c >> 16) & 0xff] ^
         shift_tab[3][c >> 24];
}
#endif

#if defined(WEIR_CRC_X86)
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const void *data,
                                                            size_t n) {
  const uint8_t *p = data;
  uint64_t c = ~crc;
  while (n > 0 && ((uintptr_t)p & 7) != 0) {
    c = _mm_crc32_u8((uint32_t)c, *p++);
    n--;
  }
  while (n >= 3 * CRC_BLOCK) {
    uint64_t c1 = 0, c2 = 0, v0, v1, v2;
    for (size_t i = 0; i < CRC_BLOCK; i += 8) {
      memcpy(&v0, p + i, 8);
      memcpy(&v1, p + CRC_BLOCK + i, 8);
      memcpy(&v2, p + 2 * CRC_BLOCK + i, 8);
      c = _mm_crc32_u64(c, v0);
      c1 = _mm_crc32_u64(c1, v1);
      c2 = _mm_crc32_u64(c2, v2);
    }
    c = crc_shift(crc_shift((uint32_t)c) ^ (uint32_t)c1) ^ (uint32_t)c2;
    p += 3 * CRC_BLOCK;
    n -= 3 * CRC_BLOCK;
  }
  while (n >= 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = _mm_crc32_u8((uint32_t)c, *p++);
  return ~(uint32_t)c;
}
static int hw;
static pthread_once_t hw_once = PTHREAD_ONCE_INIT;
static void hw_init(void) {
  __builtin_cpu_init();
  hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
}
static int have_hw(void) {
  pthread_once(&hw_once, hw_init);
  return hw;
}
#elif defined(WEIR_CRC_ARM)
static uint32_t crc32c_hw(uint32_t crc, const void *data, size_t n) {
  const uint8_t *p = data;
  uint32_t c = ~crc;
  while (n > 0 && ((uintptr_t)p & 7) != 0) {
    c = __crc32cb(c, *p++);
    n--;
  }
  while (n >= 3 * CRC_BLOCK) {
    uint32_t c1 = 0, c2 = 0;
    uint64_t v0, v1, v2;
    for (size_t i = 0; i < CRC_BLOCK; i += 8) {
      memcpy(&v0, p + i, 8);
      memcpy(&v1, p + CRC_BLOCK + i, 8);
      memcpy(&v2, p + 2 * CRC_BLOCK + i, 8);
      c = __crc32cd(c, v0);
      c1 = __crc32cd(c1, v1);
      c2 = __crc32cd(c2, v2);
    }
    c = crc_shift(crc_shift(c) ^ c1) ^ c2;
    p += 3 * CRC_BLOCK;
    n -= 3 * CRC_BLOCK;
  }
  while (n >= 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    c = __crc32cd(c, v);
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = __crc32cb(c, *p++);
  return ~c;
}
static int have_hw(void) {
  return 1; /* __ARM_FEATURE_CRC32: the compiler targets a CPU that has it */
}
#endif

uint32_t weir__crc32c(uint32_t crc, const void *p, size_t n) {
#if defined(WEIR_CRC_X86) || defined(WEIR_CRC_ARM)
  if (have_hw()) {
    pthread_once(&shift_once, shift_init);
    return crc32c_hw(crc, p, n);
  }
#endif
  return weir__crc32c_sw(crc, p, n);
}

/* ---- the envelope --------------------------------------------------------- */

static void store_le16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static void store_le32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t load_le16(const uint8_t *p) {
  return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t env_crc(const uint8_t *value, uint32_t len) {
  return weir__crc32c(weir__crc32c(0, value, 12), value + WEIR__ENV_HDR, len);
}

void weir__env_seal(uint8_t *value, uint16_t version, uint16_t kind, uint32_t len) {
  memcpy(value, "WEIR", 4);
  store_le16(value + 4, version);
  store_le16(value + 6, kind);
  store_le32(value + 8, len);
  store_le32(value + 12, env_crc(value, len));
}

int weir__env_open(const void *value, size_t len, uint16_t *kind, const uint8_t **payload,
                   size_t *plen, char *err, size_t errlen) {
  const uint8_t *v = value;
  if (v == NULL || len < WEIR__ENV_HDR) {
    snprintf(err, errlen, "value of %zu bytes is shorter than its %u-byte envelope header", len,
             WEIR__ENV_HDR);
    return WEIR_ECORRUPT;
  }
  if (memcmp(v, "WEIR", 4) != 0) {
    snprintf(err, errlen, "bad magic %02x %02x %02x %02x (expected \"WEIR\")", v[0], v[1], v[2],
             v[3]);
    return WEIR_ECORRUPT;
  }
  uint32_t n = load_le32(v + 8);
  if ((uint64_t)n != (uint64_t)len - WEIR__ENV_HDR) {
    snprintf(err, errlen, "%s value: the envelope announces %u payload bytes, %zu are stored",
             (uint64_t)n > (uint64_t)len - WEIR__ENV_HDR ? "truncated" : "overlong", n,
             len - WEIR__ENV_HDR);
    return WEIR_ECORRUPT;
  }
  uint32_t stored = load_le32(v + 12), computed = env_crc(v, n);
  if (stored != computed) {
    snprintf(err, errlen, "checksum mismatch (stored 0x%08x, computed 0x%08x over %u bytes)",
             stored, computed, n);
    return WEIR_ECORRUPT;
  }
  uint16_t version = load_le16(v + 4), k = load_le16(v + 6);
  if (version > WEIR_STORE_FORMAT) {
    snprintf(err, errlen,
             "written in store format %u by a newer weir (this weir reads formats %u to %u)",
             version, WEIR_STORE_MIN_READER, WEIR_STORE_FORMAT);
    return WEIR_EFORMAT;
  }
  if (version < WEIR_STORE_MIN_READER) {
    snprintf(err, errlen, "written in store format %u, which this weir no longer reads (%u to %u)",
             version, WEIR_STORE_MIN_READER, WEIR_STORE_FORMAT);
    return version == 0 ? WEIR_ECORRUPT : WEIR_EFORMAT;
  }
  if (k == 0 || k > WEIR__KIND_MAX) {
    snprintf(err, errlen, "unknown value kind %u", k);
    return WEIR_ECORRUPT;
  }
  *kind = k;
  *payload = v + WEIR__ENV_HDR;
  *plen = n;
  return 0;
}

uint16_t weir__env_version(const void *value) {
  return load_le16((const uint8_t *)value + 4);
}
