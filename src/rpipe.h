/* rpipe.h - a file range read ahead on a helper thread, slice by slice, so that the caller checksums
 * (or copies out of) one slice while the next is being read: checking a load's data costs no more
 * time than reading it.  Slices go straight into the caller's buffer, or into two rotating buffers of
 * the pipe's own.  Two helper threads per pipe, kept for the pipe's life, each reading a slice of its
 * own (two reads in flight); one range at a time. */
#ifndef SCK_RPIPE_H
#define SCK_RPIPE_H

#include <stdint.h>

#include "util.h"

#define RP_SLICE (4u << 20)   /* bytes per slice into the pipe's buffers (larger into the caller's); slices
                               * after the first start on a multiple of the slice size */
#define RP_DST_SLICE (4u << 20) /* into the caller's buffer: small enough that the checksum of the last
                                 * slice, which nothing overlaps, is short */
#define RP_ALIGN 4096u        /* O_DIRECT alignment of offsets, lengths and memory */

typedef struct rpipe rpipe;

/* A pipe with its helper thread started.  Errors: SCK_ERR_NOMEM (also: no thread). */
int rp_new(rpipe **out);
/* Stops the helper (after its current read) and frees everything.  NULL allowed. */
void rp_free(rpipe *p);
/* Starts reading [off, off+len) of fd.  dst: where the range goes (len bytes), or NULL for the pipe's
 * own buffers.  dfd >= 0: slices of dst that are page-aligned in the file and in memory are read
 * through dfd (O_DIRECT).  `what` names the file in errors (copied).  The previous range must be
 * finished (rp_next returned 0 bytes or an error, or rp_finish). */
int rp_start(rpipe *p, int fd, int dfd, uint64_t off, uint64_t len, uint8_t *dst, const char *what);
/* The next slice in order: *s points at it and *n is its length (0 once the range is done).  A slice
 * in the pipe's own buffers stays valid until the next rp_next.  Errors: the read's (SCK_ERR_IO,
 * SCK_ERR_FORMAT "truncated"), with its message. */
int rp_next(rpipe *p, const uint8_t **s, uint64_t *n);
/* Abandons the current range: waits for the helper to stop reading it. */
void rp_finish(rpipe *p);

#endif
