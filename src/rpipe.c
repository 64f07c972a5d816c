/* rpipe.c - a file range read ahead on a helper thread (see rpipe.h). */
#include "rpipe.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* O_DIRECT slices into the caller's buffer are larger: they cost no memory, and O_DIRECT has no
 * read-ahead behind it, so one large read at a time keeps the disk busier.  Buffered slices stay
 * small (RP_DST_SLICE): the kernel's read-ahead keeps the disk busy between them. */
#define RP_DIRECT_SLICE (32u << 20)

/* Two helpers, each reading a slice of its own: one read is always in flight while the other's slice
 * is handed over, so the disk does not wait while the caller is woken (which, on a busy machine, can
 * take the helper's CPU for as long as the caller checksums). */
#define RP_HELPERS 2

struct rpipe {
    pthread_t th[RP_HELPERS];
    int nth;                    /* helpers started */
    pthread_mutex_t mu;
    pthread_cond_t cv;          /* every change of state below is broadcast on it */
    int quit;
    /* the current range */
    int active;                 /* a range is set (until rp_finish) */
    int stop;                   /* the caller abandoned the range */
    int inflight;               /* slices being read now */
    int fd, dfd;
    uint64_t off, len, nslices;
    uint64_t sl;                /* slice size of this range */
    uint8_t *dst;
    uint64_t claimed;           /* slices a helper has taken */
    uint64_t produced;          /* slices read, all of them from the first on */
    uint64_t done_after;        /* bit k: slice produced + 1 + k is read too (out of order) */
    uint64_t consumed;          /* slices handed out */
    uint64_t released;          /* slices the caller is done with (own buffers may be reused) */
    int status;
    char what[1024];
    char errmsg[1024];
    uint8_t *buf[2];
};

/* Slice i of the range: the first ends at the next multiple of RP_SLICE, the others are whole ones. */
static void slice(const rpipe *p, uint64_t i, uint64_t *start, uint64_t *len) {
    uint64_t base = p->off / p->sl, end = p->off + p->len;
    uint64_t s = i == 0 ? p->off : (base + i) * p->sl, e = (base + i + 1) * p->sl;
    *start = s;
    *len = (e < end ? e : end) - s;
}

/* Reads [start, +len) into t: the page-aligned middle through dfd when memory and offset allow it. */
static int read_span(const rpipe *p, uint8_t *t, uint64_t start, uint64_t len) {
    uint64_t head = (RP_ALIGN - start % RP_ALIGN) % RP_ALIGN;
    if (p->dfd < 0 || (uintptr_t)t % RP_ALIGN != start % RP_ALIGN || len < head + RP_ALIGN)
        return sck_pread_full(p->fd, t, (size_t)len, start, p->what);
    uint64_t mid = (len - head) / RP_ALIGN * RP_ALIGN;
    int rc = head ? sck_pread_full(p->fd, t, (size_t)head, start, p->what) : SCK_OK;
    if (!rc) rc = sck_pread_full(p->dfd, t + head, (size_t)mid, start + head, p->what);
    if (!rc && len > head + mid) rc = sck_pread_full(p->fd, t + head + mid, (size_t)(len - head - mid), start + head + mid, p->what);
    return rc;
}

static uint8_t *slice_target(const rpipe *p, uint64_t i, uint64_t start) {
    return p->dst ? p->dst + (start - p->off) : p->buf[i % 2];
}

/* Marks slice i read (under mu); slices finish out of order, at most RP_HELPERS apart. */
static void slice_done(rpipe *p, uint64_t i) {
    if (i != p->produced) {
        p->done_after |= 1ull << (i - p->produced - 1);
        return;
    }
    p->produced++;
    while (p->done_after & 1) {
        p->done_after >>= 1;
        p->produced++;
    }
    p->done_after >>= 1;
}

static void *helper_main(void *arg) {
    rpipe *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        if (p->quit) break;
        /* own buffers: slice i goes where slice i - 2 was, once the caller is done with it */
        if (p->active && !p->stop && !p->status && p->claimed < p->nslices && (p->dst || p->claimed < p->released + 2)) {
            uint64_t i = p->claimed++, start, len;
            p->inflight++;
            slice(p, i, &start, &len);
            uint8_t *t = slice_target(p, i, start);
            pthread_mutex_unlock(&p->mu);
            int rc = read_span(p, t, start, len);
            pthread_mutex_lock(&p->mu);
            p->inflight--;
            if (rc && !p->status) {
                p->status = rc;
                snprintf(p->errmsg, sizeof p->errmsg, "%s", sck_last_error());
            } else if (!rc) {
                slice_done(p, i);
            }
            pthread_cond_broadcast(&p->cv);
            continue;
        }
        pthread_cond_wait(&p->cv, &p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int rp_new(rpipe **out) {
    *out = NULL;
    rpipe *p = calloc(1, sizeof *p);
    if (!p) return sck_err(SCK_ERR_NOMEM, "out of memory for a read pipe");
    if (pthread_mutex_init(&p->mu, NULL)) {
        free(p);
        return sck_err(SCK_ERR_NOMEM, "cannot create a read pipe");
    }
    if (pthread_cond_init(&p->cv, NULL)) {
        pthread_mutex_destroy(&p->mu);
        free(p);
        return sck_err(SCK_ERR_NOMEM, "cannot create a read pipe");
    }
    while (p->nth < RP_HELPERS && !pthread_create(&p->th[p->nth], NULL, helper_main, p)) p->nth++;
    if (!p->nth) { /* one helper is enough to work, only slower */
        pthread_cond_destroy(&p->cv);
        pthread_mutex_destroy(&p->mu);
        free(p);
        return sck_err(SCK_ERR_NOMEM, "cannot start a reader thread");
    }
    *out = p;
    return SCK_OK;
}

void rp_free(rpipe *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nth; i++) pthread_join(p->th[i], NULL);
    for (int i = 0; i < 2; i++)
        if (p->buf[i]) munmap(p->buf[i], RP_SLICE);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

void rp_finish(rpipe *p) {
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    while (p->inflight) pthread_cond_wait(&p->cv, &p->mu); /* no read may land in dst after this */
    p->active = 0;
    pthread_mutex_unlock(&p->mu);
}

int rp_start(rpipe *p, int fd, int dfd, uint64_t off, uint64_t len, uint8_t *dst, const char *what) {
    rp_finish(p); /* a previous range, if the caller did not drain it */
    for (int i = 0; !dst && i < 2; i++) {
        if (p->buf[i]) continue;
        void *m = mmap(NULL, RP_SLICE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return sck_err(SCK_ERR_NOMEM, "%s: out of memory for a read buffer", what);
        madvise(m, RP_SLICE, MADV_HUGEPAGE); /* advice only */
        p->buf[i] = m;
    }
    pthread_mutex_lock(&p->mu);
    p->fd = fd;
    p->dfd = dst ? dfd : -1;
    p->off = off;
    p->len = len;
    p->dst = dst;
    p->sl = !dst ? RP_SLICE : p->dfd >= 0 ? RP_DIRECT_SLICE : RP_DST_SLICE;
    p->nslices = len ? (off + len - 1) / p->sl - off / p->sl + 1 : 0;
    p->claimed = p->produced = p->consumed = p->released = 0;
    p->done_after = 0;
    p->stop = 0;
    p->status = SCK_OK;
    snprintf(p->what, sizeof p->what, "%s", what);
    p->active = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return SCK_OK;
}

int rp_next(rpipe *p, const uint8_t **s, uint64_t *n) {
    *s = NULL;
    *n = 0;
    pthread_mutex_lock(&p->mu);
    p->released = p->consumed; /* the slice handed out last is done with */
    pthread_cond_broadcast(&p->cv);
    while (!p->status && p->consumed < p->nslices && p->produced <= p->consumed) pthread_cond_wait(&p->cv, &p->mu);
    int rc = SCK_OK;
    if (p->status) {
        rc = p->status;
        sck_err_set_raw(p->errmsg);
    } else if (p->consumed < p->nslices) {
        uint64_t start, len;
        slice(p, p->consumed, &start, &len);
        *s = slice_target(p, p->consumed, start);
        *n = len;
        p->consumed++;
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}
