/* rpipe.c - a file range read ahead on a helper thread (see rpipe.h). */
#include "io/rpipe.h"

#include "base/crc32c.h"
#include "io/storage.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/mman.h>
#include <sys/uio.h>

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
    const uint64_t (*runs)[3];  /* rp_start_scatter's runs (else NULL), file offsets less rbase, addresses less dbase */
    size_t nruns;
    uint64_t rbase;
    uint8_t *dbase;
    int crc;                    /* scatter: each slice's CRC-32C is taken (into scrc) */
    uint32_t scrc[2];           /* slice i's CRC at i % 2 (at most two slices past the one handed out) */
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
    uint64_t overlapped;        /* slices of a queued range started while the current one had reads in flight */
};

/* Slice i of range g.  Into the caller's buffer, slices are whole ones from the range's start on: a
 * 16 MiB item is one read, where slices ending on multiples of 32 MiB split every other one into a
 * large read and a short one (0.2 ms of the disk's latency each, with O_DIRECT).  Into the pipe's own
 * buffers (and scatter ranges), the first ends at the next multiple of the slice size and the others are
 * whole ones. */
static void slice(const rp_range *g, uint64_t i, uint64_t *start, uint64_t *len) {
    uint64_t end = g->off + g->len, s, e;
    if (g->dst) {
        s = g->off + i * g->sl;
        e = s + g->sl;
    } else {
        uint64_t base = g->off / g->sl;
        s = i == 0 ? g->off : (base + i) * g->sl;
        e = (base + i + 1) * g->sl;
    }
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

#define RP_IOV (IOV_MAX < 1024 ? IOV_MAX : 1024) /* iovecs per preadv */
#define RP_GAP (64u << 10)                           /* a helper's buffer for the bytes between a scatter range's runs */

/* Reads [start, +len) of a scatter range: the bytes of runs straight into place, those between runs
 * into `gap` (bytes nobody keeps), RP_IOV pieces a call; with g->crc, *crc is the CRC-32C of the
 * slice, taken batch by batch right after each read, while the bytes are in the cache. */
static int read_scatter(const rp_range *g, uint8_t *gap, uint64_t start, uint64_t len, uint32_t *crc) {
    size_t lo = 0, hi = g->nruns; /* the first run that ends after start */
    while (lo < hi) {
        size_t m = lo + (hi - lo) / 2;
        if (g->rbase + g->runs[m][0] + g->runs[m][2] <= start) lo = m + 1;
        else hi = m;
    }
    struct iovec iov[RP_IOV], rd[RP_IOV];
    uint64_t end = start + len, pos = start, at = start, used = 0; /* used: of gap, by this batch */
    int n = 0;
    *crc = 0;
    for (size_t k = lo; pos < end;) {
        uint64_t rs = k < g->nruns ? g->rbase + g->runs[k][0] : end, re = k < g->nruns ? rs + g->runs[k][2] : end, e;
        uint8_t *b;
        if (rs <= pos) { /* in run k (which may have begun in the slice before) */
            b = g->dbase + g->runs[k][1] + (pos - rs);
            e = re < end ? re : end;
            if (e == re) k++;
        } else { /* up to the next run, as much as the gap buffer has left */
            e = rs < end ? rs : end;
            if (e - pos > RP_GAP - used) e = pos + (RP_GAP - used);
            b = gap + used;
            used += e - pos;
        }
        iov[n++] = (struct iovec){b, (size_t)(e - pos)};
        pos = e;
        if (n == RP_IOV || used == RP_GAP || pos == end) {
            memcpy(rd, iov, (size_t)n * sizeof *rd); /* the read advances rd; the CRC wants the pieces as they were */
            int rc = sck_preadv_full(g->fd, rd, n, at, g->what);
            if (rc) return rc;
            for (int i = 0; g->crc && i < n; i++) *crc = sck_crc32c(*crc, iov[i].iov_base, iov[i].iov_len);
            at = pos;
            n = 0;
            used = 0;
        }
    }
    return SCK_OK;
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
    uint8_t *gap = NULL; /* read_scatter's, from the helper's first scatter range on */
    pthread_mutex_lock(&p->mu);
    for (;;) {
        if (p->quit) break;
        /* The current range first; the queued one once every slice of the current is taken, and, with
         * O_DIRECT, read: this disk reads one item's slices side by side at full speed, but two items
         * at once slower than one after the other (1 and 2 ranks, 16 tensors, 256 MiB, 4 rounds
         * alternated: 0.92 -> 0.95 and 0.90 -> 0.91 of raw O_DIRECT reads; 64 MiB items 0.96 -> 0.98). */
        rp_range *cur = &p->r[p->head], *q = &p->r[!p->head];
        rp_range *g = claimable(cur) ? cur : claimable(q) && !(q->dfd >= 0 && cur->set && cur->inflight) ? q : NULL;
        if (g && g == q && cur->set && cur->inflight) p->overlapped++;
        if (g) {
            uint64_t i = g->claimed++, start, len;
            g->inflight++;
            slice(g, i, &start, &len);
            uint8_t *t = g->runs ? NULL : slice_target(p, g, i, start);
            pthread_mutex_unlock(&p->mu);
            uint32_t crc = 0;
            int rc = !g->runs                              ? read_span(g, t, start, len)
                     : !gap && !(gap = malloc(RP_GAP)) ? sck_err(SCK_ERR_NOMEM, "%s: out of memory for a read buffer", g->what)
                                                       : read_scatter(g, gap, start, len, &crc);
            pthread_mutex_lock(&p->mu);
            g->inflight--;
            if (rc && !g->status) {
                g->status = rc;
                snprintf(g->errmsg, sizeof g->errmsg, "%s", sck_last_error());
            } else if (!rc) {
                g->scrc[i % 2] = crc;
                slice_done(g, i);
            }
            pthread_cond_broadcast(&p->cv);
            continue;
        }
        pthread_cond_wait(&p->cv, &p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    free(gap);
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
    g->runs = NULL;
    g->nruns = 0;
    g->fd = fd;
    g->dfd = dst ? dfd : -1;
    g->off = off;
    g->len = len;
    g->dst = dst;
    g->sl = !dst ? RP_SLICE : g->dfd >= 0 ? RP_DIRECT_SLICE : RP_DST_SLICE;
    g->nslices = !len ? 0 : dst ? (len + g->sl - 1) / g->sl : (off + len - 1) / g->sl - off / g->sl + 1;
    g->claimed = g->produced = g->consumed = g->released = 0;
    g->done_after = 0;
    g->stop = 0;
    g->inflight = 0;
    g->status = SCK_OK;
    snprintf(g->what, sizeof g->what, "%s", what);
    g->set = 1;
}

static int same_range(const rp_range *g, int fd, int dfd, uint64_t off, uint64_t len, const uint8_t *dst) {
    return g->set && !g->stop && !g->runs && g->fd == fd && g->dfd == (dst ? dfd : -1) && g->off == off && g->len == len && g->dst == dst;
}

static int start_range(rpipe *p, int fd, int dfd, uint64_t off, uint64_t len, uint8_t *dst, const rp_range *sc, const char *what);

int rp_start(rpipe *p, int fd, int dfd, uint64_t off, uint64_t len, uint8_t *dst, const char *what) {
    return start_range(p, fd, dfd, off, len, dst, NULL, what);
}

int rp_start_scatter(rpipe *p, int fd, uint64_t off, uint64_t len, const uint64_t (*runs)[3], size_t n, uint64_t src_base,
                     uint8_t *dst_base, int crc, const char *what) {
    rp_range sc = {0};
    sc.crc = crc;
    sc.runs = runs;
    sc.nruns = n;
    sc.rbase = src_base;
    sc.dbase = dst_base;
    return start_range(p, fd, -1, off, len, NULL, &sc, what);
}

/* rp_start, with sc's runs for a scatter range. */
static int start_range(rpipe *p, int fd, int dfd, uint64_t off, uint64_t len, uint8_t *dst, const rp_range *sc, const char *what) {
    pthread_mutex_lock(&p->mu);
    if (!sc && same_range(&p->r[!p->head], fd, dfd, off, len, dst)) { /* queued already: it becomes the current one */
        drop_range(p, &p->r[p->head]);
        p->head = !p->head;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        return SCK_OK;
    }
    drop_range(p, &p->r[0]); /* a previous range, if the caller did not drain it, and one queued for nothing */
    drop_range(p, &p->r[1]);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; !dst && !sc && i < 2; i++) {
        if (p->buf[i]) continue;
        void *m = mmap(NULL, RP_SLICE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return sck_err(SCK_ERR_NOMEM, "%s: out of memory for a read buffer", what);
        madvise(m, RP_SLICE, MADV_HUGEPAGE); /* advice only */
        p->buf[i] = m;
    }
    pthread_mutex_lock(&p->mu);
    rp_range *g = &p->r[p->head];
    set_range(g, fd, dfd, off, len, dst, what);
    if (sc) {
        g->runs = sc->runs;
        g->nruns = sc->nruns;
        g->rbase = sc->rbase;
        g->dbase = sc->dbase;
        g->crc = sc->crc;
    }
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

uint64_t rp_overlapped(rpipe *p) {
    pthread_mutex_lock(&p->mu);
    uint64_t n = p->overlapped;
    pthread_mutex_unlock(&p->mu);
    return n;
}

int rp_queued_read(rpipe *p) {
    pthread_mutex_lock(&p->mu);
    const rp_range *q = &p->r[!p->head];
    int done = q->set && !q->stop && q->produced == q->nslices;
    pthread_mutex_unlock(&p->mu);
    return done;
}

int rp_next(rpipe *p, const uint8_t **s, uint64_t *n) { return rp_next_crc(p, s, n, NULL); }

int rp_next_crc(rpipe *p, const uint8_t **s, uint64_t *n, uint32_t *crc) {
    *s = NULL;
    *n = 0;
    if (crc) *crc = 0;
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
        *s = g->runs ? NULL : slice_target(p, g, g->consumed, start);
        *n = len;
        if (crc) *crc = g->scrc[g->consumed % 2];
        g->consumed++;
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}
