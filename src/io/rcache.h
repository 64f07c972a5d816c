/* rcache.h - a few cached windows over a checkpoint's data files.  Item headers, whole small items and
 * short runs are served from memory; each window is filled by one large pread, so a checkpoint of
 * 10k small tensors costs one read per few MiB instead of several small reads per item. */
#ifndef SCK_RCACHE_H
#define SCK_RCACHE_H

#include <stdint.h>

#include "base/util.h"

#define RC_SLOTS 4
#define RC_CAP (4u << 20)       /* bytes per window */
#define RC_SMALL (64u << 10)    /* a window that has held no more than this so far (rcache.c slot_room) */

typedef struct rc_slot {
    int fd;                     /* -1: empty */
    uint64_t off, len;          /* the file range held */
    uint64_t used;              /* LRU tick */
    uint8_t *buf;               /* cap bytes, made on first use */
    uint64_t cap;               /* RC_SMALL (heap) or RC_CAP (a huge-page mapping); 0: none yet */
} rc_slot;

typedef struct rcache {
    rc_slot slot[RC_SLOTS];
    uint64_t tick;
} rcache;

void rc_init(rcache *c);
void rc_free(rcache *c);
/* Makes bytes [off, off+n) of fd available: from a window that holds them, or by reading [lo, hi) into
 * the least recently used window (lo <= off, off+n <= hi, hi-lo <= RC_CAP).  *p points at byte `off`
 * and stays valid until the next rc_get.  `what` names the file in errors.
 * Errors: SCK_ERR_IO, SCK_ERR_FORMAT ("truncated"), SCK_ERR_NOMEM, SCK_ERR_INVALID_ARG (bad range). */
int rc_get(rcache *c, int fd, uint64_t off, uint64_t n, uint64_t lo, uint64_t hi, const char *what, const uint8_t **p);
/* Forgets every window of fd (its file is being closed). */
void rc_forget(rcache *c, int fd);

#endif
