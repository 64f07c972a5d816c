/* rpipe.h - a file range read ahead on a helper thread, slice by slice, so that the caller checksums
 * (or copies out of) one slice while the next is being read: checking a load's data costs no more
 * time than reading it.  Slices go straight into the caller's buffer, or into two rotating buffers of
 * the pipe's own.  One or two helper threads per pipe, kept for the pipe's life, each reading a slice
 * of its own (as many reads in flight); one range at a time. */
#ifndef SCK_RPIPE_H
#define SCK_RPIPE_H

#include <stddef.h>
#include <stdint.h>

#include "base/util.h"

#define RP_SLICE (4u << 20)   /* bytes per slice into the pipe's buffers (larger into the caller's); there,
                               * slices after the first start on a multiple of the slice size; into the
                               * caller's buffer, on multiples of it past the range's start */
#define RP_DST_SLICE (4u << 20) /* into the caller's buffer: small enough that the checksum of the last
                                 * slice, which nothing overlaps, is short */
#define RP_ALIGN 4096u        /* O_DIRECT alignment of offsets, lengths and memory */

typedef struct rpipe rpipe;

#define RP_HELPERS 2           /* the most helper threads a pipe has */

/* A pipe with `helpers` helper threads started (clamped to 1..RP_HELPERS; fewer where threads cannot be
 * made, at least one).  Errors: SCK_ERR_NOMEM (also: no thread). */
int rp_new(rpipe **out, int helpers);
/* Stops the helper (after its current read) and frees everything.  NULL allowed. */
void rp_free(rpipe *p);
/* Starts reading [off, off+len) of fd.  dst: where the range goes (len bytes), or NULL for the pipe's
 * own buffers.  dfd >= 0: slices of dst that are page-aligned in the file and in memory are read
 * through dfd (O_DIRECT).  `what` names the file in errors (copied).  A range rp_queue queued with the
 * same fd, dfd, off, len and dst becomes the current one as it is (what it has read is kept); any
 * other range is abandoned (rp_finish).  Errors: SCK_ERR_NOMEM. */
int rp_start(rpipe *p, int fd, int dfd, uint64_t off, uint64_t len, uint8_t *dst, const char *what);
/* Starts reading [off, off+len) of fd with the bytes that `runs` cover read straight to where the runs
 * say (preadv, one iovec a piece of a run; the bytes between runs are read and dropped): checking an item
 * while reading it into several ranks' buffers, without a copy.  runs: n of {file offset - src_base,
 * address - dst_base, length}, ascending and disjoint (a run reaching outside the range is read only
 * where inside it); the caller keeps them, and their memory, until the range is drained or rp_finish.
 * crc: each slice's CRC-32C is taken by the helper as it reads it (rp_next_crc).  rp_next's slices of
 * such a range have no bytes (*s NULL): a slice handed out has its runs' bytes in place.  Errors:
 * SCK_ERR_NOMEM. */
int rp_start_scatter(rpipe *p, int fd, uint64_t off, uint64_t len, const uint64_t (*runs)[3], size_t n, uint64_t src_base,
                     uint8_t *dst_base, int crc, const char *what);
/* Queues a range (same arguments as rp_start; dst required) behind the current one: the helpers read
 * it once every slice of the current range is taken (with O_DIRECT, dfd >= 0: and read), and rp_start
 * with the same arguments makes it
 * current.  A range queued before with other arguments is abandoned.  The caller must leave dst alone
 * until that rp_start or rp_finish.  Errors: SCK_ERR_INVALID_ARG (dst NULL). */
int rp_queue(rpipe *p, int fd, int dfd, uint64_t off, uint64_t len, uint8_t *dst, const char *what);
/* How many slices of a queued range a helper started while the current range still had reads in
 * flight (tests: never with an O_DIRECT queued range, which waits for the current one's reads). */
uint64_t rp_overlapped(rpipe *p);
/* 1 if a range is queued (rp_queue) and every slice of it is read, else 0 (tests wait on it). */
int rp_queued_read(rpipe *p);
/* The next slice in order: *s points at it and *n is its length (0 once the range is done).  A slice
 * in the pipe's own buffers stays valid until the next rp_next.  Errors: the read's (SCK_ERR_IO,
 * SCK_ERR_FORMAT "truncated"), with its message. */
int rp_next(rpipe *p, const uint8_t **s, uint64_t *n);
/* rp_next that also gives, with crc, the slice's CRC-32C (rp_start_scatter with crc; else 0). */
int rp_next_crc(rpipe *p, const uint8_t **s, uint64_t *n, uint32_t *crc);
/* Abandons the current range and the queued one: waits until no read of either is in flight. */
void rp_finish(rpipe *p);

#endif
