/* spill.h: append-only scratch files for data that outgrows its memory
 * bound: a loop's feedback queue and a loop head's back-edge log.
 *
 * A spill file is created in a directory and unlinked at once, so a crash
 * leaves nothing behind and nothing in it outlives the process; it is
 * written through a buffer, read back sequentially, and can be mapped
 * whole. One thread owns a spill file.
 */
#ifndef WEIR_SPILL_H
#define WEIR_SPILL_H

#include <stddef.h>
#include <stdint.h>

typedef struct weir__spill {
  int fd;        /* -1 until the first write opens the file */
  uint64_t size; /* bytes written, buffered ones included */
  uint64_t rd;   /* next byte to read */
  uint8_t *buf;  /* write buffer: the file's last buf_len bytes */
  uint32_t buf_len;
  char *dir; /* where the file goes (owned) */
  int err;   /* first error (negative errno), sticky */
} weir__spill;

/* A spill file in `dir` (NULL: $TMPDIR or /tmp), created on first write. */
void weir__spill_init(weir__spill *s, const char *dir);
/* Closes and forgets the file and the buffer. */
void weir__spill_close(weir__spill *s);
/* Appends na bytes from a, then nb bytes from b (either may be 0). Returns
 * 0 or a negative errno: then nothing was appended, every later write fails
 * too, and the caller keeps its data in memory. */
int weir__spill_write2(weir__spill *s, const void *a, size_t na, const void *b, size_t nb);
/* Reads the next n bytes written. Returns 0, or a negative errno
 * (-EIO for a short file). */
int weir__spill_read(weir__spill *s, void *p, size_t n);
/* Bytes written and not yet read. */
static inline uint64_t weir__spill_unread(const weir__spill *s) {
  return s->size - s->rd;
}
/* Forgets the contents (the file shrinks to nothing and stays open). */
int weir__spill_reset(weir__spill *s);
/* Maps everything written, read-only. Returns the address (release it with
 * weir__spill_unmap(p, len)) or NULL with *err set. The mapping stays
 * valid after weir__spill_close(). */
uint8_t *weir__spill_map(weir__spill *s, uint64_t *len, int *err);
void weir__spill_unmap(uint8_t *p, uint64_t len);

#endif
