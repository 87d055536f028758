/* base/assert.h: assertions on weir's own invariants.
 *
 * WEIR_ASSERT is always on and must stay cheap. WEIR_DEBUG_ASSERT is for
 * O(n) invariant checks and compiles away unless WEIR_DEBUG is defined.
 * Never assert on input, I/O results or stored bytes: return an error.
 */
#ifndef WEIR_ASSERT_H
#define WEIR_ASSERT_H

void weir__assert_fail(const char *expr, const char *file, int line);

#define WEIR_ASSERT(e) ((e) ? (void)0 : weir__assert_fail(#e, __FILE__, __LINE__))
#ifdef WEIR_DEBUG
#define WEIR_DEBUG_ASSERT(e) WEIR_ASSERT(e)
#else
#define WEIR_DEBUG_ASSERT(e) ((void)0)
#endif

#endif
