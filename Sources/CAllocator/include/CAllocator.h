#ifndef C_ALLOCATOR_H
#define C_ALLOCATOR_H
// glibc's allocator tuning, which Swift's Glibc module does not export (malloc.h).
#include <malloc.h>

/// Blocks of at least `bytes` get their own mapping, and glibc stops raising that threshold.
static inline int callocator_set_mmap_threshold(int bytes) { return mallopt(M_MMAP_THRESHOLD, bytes); }

/// Returns the free pages of every arena to the system; 1 when some memory was released.
static inline int callocator_trim(void) { return malloc_trim(0); }

#endif
