/* copy_par.h - many memcpys split over a few threads (an async save's snapshot of the state). */
#ifndef SCK_COPY_PAR_H
#define SCK_COPY_PAR_H

#include <stddef.h>
#include <stdint.h>

#define COPY_THREADS_MAX 4         /* memory bandwidth, not cores, limits a copy beyond this */
#define COPY_SPLIT_MIN (32u << 20) /* below this, starting threads costs more than it saves */

typedef struct copy_op {
    uint8_t *dst;
    const uint8_t *src;
    size_t n;
} copy_op;

/* Performs every copy of op[0..n) (non-overlapping), split into `threads` parts of equal bytes (one on
 * the calling thread) when there are COPY_SPLIT_MIN bytes or more.  A thread that cannot be started
 * leaves its part to the caller: never an error. */
void copy_parallel(const copy_op *op, size_t n, int threads);

/* How many threads an async save's copy may use: the CPUs this thread may run on, shared among the
 * `ranks_here` ranks of the process, at least 1 and at most COPY_THREADS_MAX. */
int copy_threads(int ranks_here);

#endif
