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

/* Two helpers (RP_HELPERS), each reading a slice of its own: one read is always in flight while the
 * other's slice is handed over, so the disk does not wait while the caller is woken (which, on a busy
 * machine, can take the helper's CPU for as long as the caller checksums).  Callers with many pipes on
 * one disk ask for one (ckpt.c's pipe_helpers). */

/* One range and how far it has got. */
typedef struct rp_range {
    int set;                    /* holds a range (until finished or replaced) */
    int stop;                   /* abandoned: no more slices are claimed */
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
} rp_range;

struct rpipe {
    pthread_t th[RP_HELPERS];
    int nth;                    /* helpers started */
    pthread_mutex_t mu;
    pthread_cond_t cv;          /* every change of state below is broadcast on it */
    int quit;
    rp_range r[2];              /* r[head]: the current range; r[!head]: the one queued behind it */
    int head;
    uint8_t *buf[2];
};

/* Slice i of range g: the first ends at the next multiple of the slice size, the others are whole ones. */
static void slice(const rp_range *g, uint64_t i, uint64_t *start, uint64_t *len) {
    uint64_t base = g->off / g->sl, end = g->off + g->len;
    uint64_t s = i == 0 ? g->off : (base + i) * g->sl, e = (base + i + 1) * g->sl;
    *start = s;
    *len = (e < end ? e : end) - s;
}

/* Reads [start, +len) into t: the page-aligned middle through dfd when memory and offset allow it. */
static int read_span(const rp_range *g, uint8_t *t, uint64_t start, uint64_t len) {
    uint64_t head = (RP_ALIGN - start % RP_ALIGN) % RP_ALIGN;
    if (g->dfd < 0 || (uintptr_t)t % RP_ALIGN != start % RP_ALIGN || len < head + RP_ALIGN)
        return sck_pread_full(g->fd, t, (size_t)len, start, g->what);
    uint64_t mid = (len - head) / RP_ALIGN * RP_ALIGN;
    int rc = head ? sck_pread_full(g->fd, t, (size_t)head, start, g->what) : SCK_OK;
    if (!rc) rc = sck_pread_full(g->dfd, t + head, (size_t)mid, start + head, g->what);
    if (!rc && len > head + mid) rc = sck_pread_full(g->fd, t + head + mid, (size_t)(len - head - mid), start + head + mid, g->what);
    return rc;
}

static uint8_t *slice_target(const rpipe *p, const rp_range *g, uint64_t i, uint64_t start) {
    return g->dst ? g->dst + (start - g->off) : p->buf[i % 2];
}

/* Marks slice i of g read (under mu); slices finish out of order, at most RP_HELPERS apart. */
static void slice_done(rp_range *g, uint64_t i) {
    if (i != g->produced) {
        g->done_after |= 1ull << (i - g->produced - 1);
        return;
    }
    g->produced++;
    while (g->done_after & 1) {
        g->done_after >>= 1;
        g->produced++;
    }
    g->done_after >>= 1;
}

/* Whether a helper may take g's next slice (own buffers: slice i goes where slice i - 2 was, once the
 * caller is done with it; only the current range uses them). */
static int claimable(const rp_range *g) {
    return g->set && !g->stop && !g->status && g->claimed < g->nslices && (g->dst || g->claimed < g->released + 2);
}

static void *helper_main(void *arg) {
    rpipe *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        if (p->quit) break;
        /* the current range first; the queued one once every slice of the current is taken */
        rp_range *g = claimable(&p->r[p->head]) ? &p->r[p->head] : claimable(&p->r[!p->head]) ? &p->r[!p->head] : NULL;
        if (g) {
            uint64_t i = g->claimed++, start, len;
            g->inflight++;
            slice(g, i, &start, &len);
            uint8_t *t = slice_target(p, g, i, start);
            pthread_mutex_unlock(&p->mu);
            int rc = read_span(g, t, start, len);
            pthread_mutex_lock(&p->mu);
            g->inflight--;
            if (rc && !g->status) {
                g->status = rc;
                snprintf(g->errmsg, sizeof g->errmsg, "%s", sck_last_error());
            } else if (!rc) {
                slice_done(g, i);
            }
            pthread_cond_broadcast(&p->cv);
            continue;
        }
        pthread_cond_wait(&p->cv, &p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int rp_new(rpipe **out, int helpers) {
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
    int want = helpers < 1 ? 1 : helpers > RP_HELPERS ? RP_HELPERS : helpers;
    while (p->nth < want && !pthread_create(&p->th[p->nth], NULL, helper_main, p)) p->nth++;
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

/* Abandons range g and waits until no read of it is in flight (under mu): none may land in its dst
 * afterwards. */
static void drop_range(rpipe *p, rp_range *g) {
    g->stop = 1;
    while (g->inflight) pthread_cond_wait(&p->cv, &p->mu);
    g->set = 0;
}

void rp_finish(rpipe *p) {
    pthread_mutex_lock(&p->mu);
    drop_range(p, &p->r[0]);
    drop_range(p, &p->r[1]);
    pthread_mutex_unlock(&p->mu);
}

/* Sets range g up (under mu). */
static void set_range(rp_range *g, int fd, int dfd, uint64_t off, uint64_t len, uint8_t *dst, const char *what) {
    g->fd = fd;
    g->dfd = dst ? dfd : -1;
    g->off = off;
    g->len = len;
    g->dst = dst;
    g->sl = !dst ? RP_SLICE : g->dfd >= 0 ? RP_DIRECT_SLICE : RP_DST_SLICE;
    g->nslices = len ? (off + len - 1) / g->sl - off / g->sl + 1 : 0;
    g->claimed = g->produced = g->consumed = g->released = 0;
    g->done_after = 0;
    g->stop = 0;
    g->inflight = 0;
    g->status = SCK_OK;
    snprintf(g->what, sizeof g->what, "%s", what);
    g->set = 1;
}

static int same_range(const rp_range *g, int fd, int dfd, uint64_t off, uint64_t len, const uint8_t *dst) {
    return g->set && !g->stop && g->fd == fd && g->dfd == (dst ? dfd : -1) && g->off == off && g->len == len && g->dst == dst;
}

int rp_start(rpipe *p, int fd, int dfd, uint64_t off, uint64_t len, uint8_t *dst, const char *what) {
    pthread_mutex_lock(&p->mu);
    if (same_range(&p->r[!p->head], fd, dfd, off, len, dst)) { /* queued already: it becomes the current one */
        drop_range(p, &p->r[p->head]);
        p->head = !p->head;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        return SCK_OK;
    }
    drop_range(p, &p->r[0]); /* a previous range, if the caller did not drain it, and one queued for nothing */
    drop_range(p, &p->r[1]);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; !dst && i < 2; i++) {
        if (p->buf[i]) continue;
        void *m = mmap(NULL, RP_SLICE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return sck_err(SCK_ERR_NOMEM, "%s: out of memory for a read buffer", what);
        madvise(m, RP_SLICE, MADV_HUGEPAGE); /* advice only */
        p->buf[i] = m;
    }
    pthread_mutex_lock(&p->mu);
    set_range(&p->r[p->head], fd, dfd, off, len, dst, what);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return SCK_OK;
}

int rp_queue(rpipe *p, int fd, int dfd, uint64_t off, uint64_t len, uint8_t *dst, const char *what) {
    if (!dst) return sck_err(SCK_ERR_INVALID_ARG, "%s: only a range into the caller's buffer can be queued", what);
    pthread_mutex_lock(&p->mu);
    rp_range *q = &p->r[!p->head];
    if (!same_range(q, fd, dfd, off, len, dst)) {
        drop_range(p, q);
        set_range(q, fd, dfd, off, len, dst, what);
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return SCK_OK;
}

int rp_queued_read(rpipe *p) {
    pthread_mutex_lock(&p->mu);
    const rp_range *q = &p->r[!p->head];
    int done = q->set && !q->stop && q->produced == q->nslices;
    pthread_mutex_unlock(&p->mu);
    return done;
}

int rp_next(rpipe *p, const uint8_t **s, uint64_t *n) {
    *s = NULL;
    *n = 0;
    pthread_mutex_lock(&p->mu);
    rp_range *g = &p->r[p->head];
    g->released = g->consumed; /* the slice handed out last is done with */
    pthread_cond_broadcast(&p->cv);
    while (g->set && !g->status && g->consumed < g->nslices && g->produced <= g->consumed) pthread_cond_wait(&p->cv, &p->mu);
    int rc = SCK_OK;
    if (g->status) {
        rc = g->status;
        sck_err_set_raw(g->errmsg);
    } else if (g->set && g->consumed < g->nslices) {
        uint64_t start, len;
        slice(g, g->consumed, &start, &len);
        *s = slice_target(p, g, g->consumed, start);
        *n = len;
        g->consumed++;
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}
