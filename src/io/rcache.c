/* rcache.c - cached windows over data files (see rcache.h). */
#include "io/rcache.h"
#include "io/storage.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

void rc_init(rcache *c) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < RC_SLOTS; i++) c->slot[i].fd = -1;
}

static void slot_release(rc_slot *s) {
    if (s->cap == RC_CAP) munmap(s->buf, RC_CAP);
    else free(s->buf);
    s->buf = NULL;
    s->cap = 0;
}

void rc_free(rcache *c) {
    for (int i = 0; i < RC_SLOTS; i++) slot_release(&c->slot[i]);
    rc_init(c);
}

/* Gives slot s room for n bytes.  A window is a 4 MiB huge-page mapping, but one that only ever holds a
 * large item's headers (a page or a few) gets RC_SMALL bytes of the heap: the first touch of a huge
 * page clears all 2 MiB of it, and 8 ranks' 4 windows each cost an 8-rank O_DIRECT load of 16 tensors
 * 7 ms of CPU that way.  Windows only grow, so mixed use does not map them again and again. */
static int slot_room(rc_slot *s, uint64_t n, const char *what) {
    if (s->cap >= n) return SCK_OK;
    if (n <= RC_SMALL) {
        uint8_t *b = malloc(RC_SMALL);
        if (!b) return sck_err(SCK_ERR_NOMEM, "%s: out of memory for a read window", what);
        s->buf = b;
        s->cap = RC_SMALL;
        return SCK_OK;
    }
    void *m = mmap(NULL, RC_CAP, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return sck_err(SCK_ERR_NOMEM, "%s: out of memory for a read window", what);
    madvise(m, RC_CAP, MADV_HUGEPAGE); /* advice only: fewer page faults */
    slot_release(s);
    s->buf = m;
    s->cap = RC_CAP;
    return SCK_OK;
}

void rc_forget(rcache *c, int fd) {
    for (int i = 0; i < RC_SLOTS; i++)
        if (c->slot[i].fd == fd) c->slot[i].fd = -1;
}

int rc_get(rcache *c, int fd, uint64_t off, uint64_t n, uint64_t lo, uint64_t hi, const char *what, const uint8_t **p) {
    *p = NULL;
    if (lo > off || off + n > hi || hi - lo > RC_CAP)
        return sck_err(SCK_ERR_INVALID_ARG, "%s: read window [%llu, %llu) cannot hold [%llu, +%llu)", what, (unsigned long long)lo,
                       (unsigned long long)hi, (unsigned long long)off, (unsigned long long)n);
    rc_slot *victim = &c->slot[0];
    for (int i = 0; i < RC_SLOTS; i++) {
        rc_slot *s = &c->slot[i];
        if (s->fd == fd && off >= s->off && off + n <= s->off + s->len) {
            s->used = ++c->tick;
            *p = s->buf + (off - s->off);
            return SCK_OK;
        }
        if (s->fd < 0 || s->used < victim->used) victim = s;
    }
    victim->fd = -1;
    int rs = slot_room(victim, hi - lo, what);
    if (rs) return rs;
    int rc = sck_pread_full(fd, victim->buf, (size_t)(hi - lo), lo, what);
    if (rc) return rc;
    victim->fd = fd;
    victim->off = lo;
    victim->len = hi - lo;
    victim->used = ++c->tick;
    *p = victim->buf + (off - lo);
    return SCK_OK;
}
