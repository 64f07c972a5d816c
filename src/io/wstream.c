/* wstream.c - the background writer behind a rank's data file (see wstream.h). */
#include "io/wstream.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "io/fileio.h"
#include "io/storage.h"

/* Buffered mode: writeback is started per window as soon as it is written, and a window is waited for
 * (then its pages dropped) once WB_AHEAD bytes after it have been started.  Small windows get the disk
 * going early (a rank's first 32 MiB no longer wait for their last byte: 8 ranks of 32 MiB each, 0.87-0.89
 * of the raw writer -> 0.94-0.96); the depth keeps a lone writer's disk as busy as 32 MiB windows did. */
#define WB_WINDOW (8u << 20)
#define WB_AHEAD (32u << 20)
#define WS_IOV_MAX 512        /* pieces in one batch (one pwritev; the kernel takes up to 1024) */
#define WS_BATCH (4u << 20)   /* buffered mode: a batch goes to the writer once it spans this many bytes */
#define WS_HUGE_AFTER (2u << 20) /* a staging buffer filled past this gets huge pages */

/* One write: a batch (pieces listed in its staging buffer's list: bytes copied into the buffer and,
 * in buffered mode, small pieces by reference, written with one pwritev), or one large piece by
 * reference. */
typedef struct ws_op {
    const uint8_t *p;      /* the piece by reference (buf < 0) */
    uint64_t off, len;
    int buf;               /* the batch's staging buffer, or -1 */
    int iov0, niov;        /* its pieces: iov[buf][iov0 .. iov0 + niov) */
    uint64_t pad;          /* the file's unaligned end (direct mode): p, len bytes, from staging, written
                            * without O_DIRECT; or, where that cannot be switched off, len + pad bytes
                            * with it and the file truncated */
} ws_op;

struct wstream {
    int fd;
    char *path;
    int direct, do_fsync;
    uint64_t pos;          /* bytes appended */

    /* staging: buffers are mapped on first use; `cur` is being filled by the caller's thread.  A
     * buffer holds several batches in turn (each a run of its bytes and of its list of pieces): a
     * batch goes to the writer when a large piece by reference comes, and the next one fills the
     * buffer on from there, so that a caller whose headers go between large pieces does not wait
     * for the writer to give a buffer back after each of them.  A buffer is free again once the
     * caller has left it (full, or at close) and the writer has written each of its batches. */
    uint8_t **bufs;
    uint8_t *huge;         /* per buffer: advised to use huge pages */
    struct iovec **iov;    /* WS_IOV_MAX pieces per buffer */
    int *holds;            /* per buffer: its batches not yet written, plus 1 while it is `cur` (under mu) */
    unsigned nbufs;
    uint64_t stage;
    ws_pool *pool;         /* where bufs came from and go back to, or NULL */
    void *(*alloc)(void *, size_t); /* where bufs come from instead of mmap, or NULL (ws_opts) */
    void (*release)(void *, void *, size_t);
    void *actx;
    int *free_list;
    unsigned nfree;
    int cur;
    uint64_t cur_len;      /* bytes copied into bufs[cur], all its batches */
    uint64_t cur_bytes;    /* bytes the current batch writes (copied and by reference) */
    int cur_iov0;          /* the current batch's first piece in iov[cur] */
    int cur_niov;          /* its pieces */
    uint64_t copied;       /* bytes copied into staging, all batches */
    uint64_t waits;        /* times take_buf waited for the writer */
    int closing, close_rc; /* ws_close_start was called, and what it returned */

    /* the queue the writer thread drains, guarded by mu */
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    ws_op *q;
    size_t qhead, qlen, qcap;
    int stop, busy;
    int status;            /* first error of the writer (sticky) */
    char errmsg[1024];
    pthread_t th;
    int started;

    /* writer thread only: streaming writeback of buffered writes; the end written padded (direct) */
    int truncate;
    int wb_on;
    uint64_t written, wb_started, wb_waited;
};

/* ------------------------------------------------------------------ writer thread */

static void set_error(wstream *w, int rc) {
    pthread_mutex_lock(&w->mu);
    if (!w->status) {
        w->status = rc;
        snprintf(w->errmsg, sizeof w->errmsg, "%s", sck_last_error());
    }
    pthread_mutex_unlock(&w->mu);
}

/* Ends one hold on staging buffer b (under mu): the last one makes it free again. */
static void drop_hold(wstream *w, int b) {
    if (--w->holds[b] > 0) return;
    w->free_list[w->nfree++] = b;
    pthread_cond_broadcast(&w->done);
}

/* Starts writeback of each finished window and waits for the one WB_AHEAD behind, then drops its pages:
 * the disk works while we write, and a save does not fill the page cache with data nobody reads. */
static int stream_writeback(wstream *w) {
    while (w->wb_on && w->written - w->wb_started >= WB_WINDOW) {
        if (sync_file_range(w->fd, (off64_t)w->wb_started, WB_WINDOW, SYNC_FILE_RANGE_WRITE) != 0) {
            if (errno == EINVAL || errno == ENOSYS || errno == ESPIPE) { /* not supported here: leave it to fsync */
                w->wb_on = 0;
                return SCK_OK;
            }
            return sck_err_errno(SCK_ERR_IO, errno, "%s: writeback of [%llu, +%u) failed", w->path,
                                 (unsigned long long)w->wb_started, WB_WINDOW);
        }
        w->wb_started += WB_WINDOW;
        if (w->wb_started - w->wb_waited > WB_AHEAD) {
            unsigned flags = SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER;
            if (sync_file_range(w->fd, (off64_t)w->wb_waited, WB_WINDOW, flags) != 0)
                return sck_err_errno(SCK_ERR_IO, errno, "%s: writeback of [%llu, +%u) failed", w->path,
                                     (unsigned long long)w->wb_waited, WB_WINDOW);
            posix_fadvise(w->fd, (off_t)w->wb_waited, WB_WINDOW, POSIX_FADV_DONTNEED); /* advice only */
            w->wb_waited += WB_WINDOW;
        }
    }
    return SCK_OK;
}

/* The end of a file written in full: the alignment padding of O_DIRECT dropped (if it was written),
 * then the fsync asked for. */
static int end_file(wstream *w) {
    if (w->truncate && io_ftruncate(w->fd, w->pos, w->path) != 0)
        return sck_err_errno(SCK_ERR_IO, errno, "%s: cannot truncate to %llu bytes", w->path, (unsigned long long)w->pos);
    if (w->do_fsync && io_fsync(w->fd, w->path) != 0) return sck_err_errno(SCK_ERR_IO, errno, "%s: fsync failed", w->path);
    return SCK_OK;
}

/* The unaligned end of a direct-mode file: written through the page cache (the fsync writes it out),
 * so the file needs no truncation afterwards: on ext4 a truncation is a journal transaction of its own,
 * 1 to 3 ms a file with 8 ranks saving, at times over 100 ms behind a journal commit.  Where O_DIRECT
 * cannot be switched off, the padded block is written and the file truncated at its end. */
static int write_end(wstream *w, const ws_op *op) {
    int fl = fcntl(w->fd, F_GETFL);
    if (fl >= 0 && io_setfl(w->fd, fl & ~O_DIRECT, w->path) == 0) return io_pwrite_full(w->fd, op->p, (size_t)op->len, op->off, w->path);
    w->truncate = 1;
    return io_pwrite_full(w->fd, op->p, (size_t)(op->len + op->pad), op->off, w->path);
}

static void *writer_main(void *arg) {
    wstream *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->qlen && !w->stop) pthread_cond_wait(&w->work, &w->mu);
        if (!w->qlen) break;
        ws_op op = w->q[w->qhead];
        w->qhead = (w->qhead + 1) % w->qcap;
        w->qlen--;
        w->busy = 1;
        int skip = w->status != 0 || w->stop > 1;
        pthread_mutex_unlock(&w->mu);
        int rc = SCK_OK;
        if (!skip && op.pad) {
            rc = write_end(w, &op);
        } else if (!skip) {
            rc = op.buf >= 0 ? io_pwritev_full(w->fd, w->iov[op.buf] + op.iov0, op.niov, op.off, w->path)
                             : io_pwrite_full(w->fd, op.p, (size_t)op.len, op.off, w->path);
            if (!rc) {
                w->written = op.off + op.len;
                rc = stream_writeback(w);
            }
            if (rc) set_error(w, rc);
        }
        pthread_mutex_lock(&w->mu);
        w->busy = 0;
        if (op.buf >= 0) drop_hold(w, op.buf);
    }
    /* Closed (not aborted) with every write done: the file's end here too, so that the caller can
     * work meanwhile (ws_close_start). */
    int end = w->stop == 1 && !w->status;
    pthread_mutex_unlock(&w->mu);
    if (end) {
        int rc = end_file(w);
        if (rc) set_error(w, rc);
    }
    return NULL;
}

/* ------------------------------------------------------------------ caller's side */

/* Re-raises the writer's error in the caller's thread. */
static int writer_error(wstream *w) {
    sck_err_set_raw(w->errmsg);
    return w->status;
}

/* Queues one write; a batch (buf >= 0) holds its buffer until it is written. */
static int submit(wstream *w, const uint8_t *p, uint64_t off, uint64_t len, int buf, int iov0, int niov, uint64_t pad) {
    pthread_mutex_lock(&w->mu);
    if (w->status) {
        int rc = writer_error(w);
        pthread_mutex_unlock(&w->mu);
        return rc;
    }
    if (w->qlen == w->qcap) {
        size_t cap = w->qcap ? 2 * w->qcap : 64;
        ws_op *q = malloc(cap * sizeof *q);
        if (!q) {
            pthread_mutex_unlock(&w->mu);
            return sck_err(SCK_ERR_NOMEM, "%s: out of memory queueing a write", w->path);
        }
        for (size_t i = 0; i < w->qlen; i++) q[i] = w->q[(w->qhead + i) % w->qcap];
        free(w->q);
        w->q = q;
        w->qcap = cap;
        w->qhead = 0;
    }
    w->q[(w->qhead + w->qlen) % w->qcap] = (ws_op){p, off, len, buf, iov0, niov, pad};
    w->qlen++;
    if (buf >= 0) w->holds[buf]++;
    pthread_cond_signal(&w->work);
    pthread_mutex_unlock(&w->mu);
    return SCK_OK;
}

/* Takes a free staging buffer, waiting for the writer to return one. */
static int take_buf(wstream *w) {
    pthread_mutex_lock(&w->mu);
    w->waits += !w->nfree && !w->status;
    while (!w->nfree && !w->status) pthread_cond_wait(&w->done, &w->mu);
    if (w->status) {
        int rc = writer_error(w);
        pthread_mutex_unlock(&w->mu);
        return rc;
    }
    int b = w->free_list[--w->nfree];
    w->holds[b] = 1; /* the caller's */
    pthread_mutex_unlock(&w->mu);
    if (!w->bufs[b]) {
        void *m = w->alloc ? w->alloc(w->actx, w->stage) : mmap(NULL, w->stage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (w->alloc && (!m || (uintptr_t)m % WS_ALIGN)) {
            if (m) w->release(w->actx, m, w->stage);
            m = MAP_FAILED;
        }
        if (m == MAP_FAILED) {
            pthread_mutex_lock(&w->mu);
            w->holds[b] = 0;
            w->free_list[w->nfree++] = b;
            pthread_mutex_unlock(&w->mu);
            return sck_err(SCK_ERR_NOMEM, "%s: out of memory for a %llu-byte staging buffer", w->path, (unsigned long long)w->stage);
        }
        w->bufs[b] = m;
        w->huge[b] = w->alloc != NULL; /* pinned memory takes no advice */
    }
    w->cur = b;
    w->cur_len = 0;
    w->cur_bytes = 0;
    w->cur_iov0 = 0;
    w->cur_niov = 0;
    return SCK_OK;
}

/* Hands the current batch to the writer, if it has anything; the next batch fills the buffer on.  In
 * direct mode a batch is aligned everywhere but at the file's end (close), and so starts aligned in
 * the buffer too; there its unaligned last bytes, which end staged bytes that start on a block, go
 * to the writer as an operation of their own (write_end), zero-padded to a block in the buffer. */
static int flush_batch(wstream *w) {
    if (w->cur < 0 || w->cur_bytes == 0) return SCK_OK;
    int b = w->cur, iov0 = w->cur_iov0, niov = w->cur_niov;
    uint64_t len = w->cur_bytes, off = w->pos - w->cur_bytes, rem = w->direct ? len % WS_ALIGN : 0;
    w->cur_iov0 += niov;
    w->cur_niov = 0;
    w->cur_bytes = 0;
    if (!rem) return submit(w, NULL, off, len, b, iov0, niov, 0);
    uint64_t pad = WS_ALIGN - rem;
    struct iovec *last = &w->iov[b][iov0 + niov - 1];
    memset(w->bufs[b] + w->cur_len, 0, pad);
    w->cur_len += pad;
    last->iov_len -= rem;
    const uint8_t *end = (const uint8_t *)last->iov_base + last->iov_len;
    int rc = len > rem ? submit(w, NULL, off, len - rem, b, iov0, niov - !last->iov_len, 0) : SCK_OK;
    return rc ? rc : submit(w, end, off + len - rem, rem, b, 0, 0, pad);
}

/* Hands the current batch to the writer and leaves its buffer, which is free again once written. */
static int flush_cur(wstream *w) {
    if (w->cur < 0) return SCK_OK;
    int rc = flush_batch(w);
    pthread_mutex_lock(&w->mu);
    drop_hold(w, w->cur);
    pthread_mutex_unlock(&w->mu);
    w->cur = -1;
    return rc;
}

/* After a piece was added: the batch goes to the writer once its buffer is full (list of pieces or
 * bytes: then the buffer is left) or (buffered) it spans WS_BATCH bytes. */
static int after_piece(wstream *w) {
    if (w->cur_iov0 + w->cur_niov == WS_IOV_MAX || w->cur_len == w->stage) return flush_cur(w);
    if (!w->direct && w->cur_bytes >= WS_BATCH) return flush_batch(w);
    return SCK_OK;
}

/* Adds n bytes at p to the current batch's pieces, extending its last piece where p continues it. */
static void add_piece(wstream *w, const uint8_t *p, uint64_t n) {
    struct iovec *v = w->iov[w->cur] + w->cur_iov0;
    int k = w->cur_niov;
    if (k && (const uint8_t *)v[k - 1].iov_base + v[k - 1].iov_len == p) v[k - 1].iov_len += n;
    else v[w->cur_niov++] = (struct iovec){(void *)(uintptr_t)p, n};
    w->cur_bytes += n;
    w->pos += n;
}

/* Adds n bytes at p to the current batch by reference (taking a buffer for its list if none). */
static int add_ref(wstream *w, const uint8_t *p, uint64_t n) {
    int rc;
    if (w->cur < 0 && (rc = take_buf(w))) return rc;
    add_piece(w, p, n);
    return after_piece(w);
}

static int copy_in(wstream *w, const uint8_t *p, uint64_t n) {
    while (n > 0) {
        int rc;
        if (w->cur < 0 && (rc = take_buf(w))) return rc;
        uint64_t k = w->stage - w->cur_len < n ? w->stage - w->cur_len : n;
        uint8_t *d = w->bufs[w->cur] + w->cur_len;
        memcpy(d, p, k);
        w->cur_len += k;
        w->copied += k;
        if (w->cur_len > WS_HUGE_AFTER && !w->huge[w->cur]) {
            /* Huge pages only for a buffer that fills up (O_DIRECT, large copied pieces): a batch of
             * headers around small tensors stays in its first pages, where faulting in a 2 MiB huge
             * page for each of two buffers on every save took a tenth of a small-tensor save. */
            madvise(w->bufs[w->cur], w->stage, MADV_HUGEPAGE); /* advice only: fewer page faults */
            w->huge[w->cur] = 1;
        }
        add_piece(w, d, k);
        p += k;
        n -= k;
        if ((rc = after_piece(w))) return rc;
    }
    return SCK_OK;
}

int ws_append(wstream *w, const void *p, uint64_t n, int by_ref) {
    const uint8_t *b = p;
    int rc;
    if (n == 0) return SCK_OK;
    if (by_ref && n >= WS_REF_MIN) {
        uint64_t body = n;
        if (w->direct) {
            body = w->pos % WS_ALIGN || (uintptr_t)b % WS_ALIGN ? 0 : n / WS_ALIGN * WS_ALIGN;
        }
        if (body && w->cur >= 0 && w->cur_bytes && w->cur_iov0 + w->cur_niov < WS_IOV_MAX) {
            /* The piece ends the batch staged before it (its headers), in the same write: on its own,
             * a 4 KiB O_DIRECT write of headers waited in the device's queue as long as the payload's
             * did, one after the other, for every tensor. */
            add_piece(w, b, body);
            /* its list of pieces full: the buffer is left, as after_piece would */
            if ((rc = w->cur_iov0 + w->cur_niov == WS_IOV_MAX ? flush_cur(w) : flush_batch(w))) return rc;
            b += body;
            n -= body;
        } else if (body) {
            rc = flush_batch(w);
            if (!rc) rc = submit(w, b, w->pos, body, -1, 0, 0, 0);
            if (rc) return rc;
            w->pos += body;
            b += body;
            n -= body;
        }
    } else if (by_ref && !w->direct && n >= WS_IOV_MIN) {
        /* A small tensor goes into the batch's list as it is: the kernel copies it into the page
         * cache, where copying it into staging first took a second pass over it and faulted in the
         * staging buffer on every save. */
        return add_ref(w, b, n);
    }
    return copy_in(w, b, n);
}

int ws_reserve(wstream *w, uint64_t n, uint8_t **p, uint64_t *got) {
    int rc;
    if (w->cur < 0 && (rc = take_buf(w))) return rc;
    uint64_t room = w->stage - w->cur_len;
    *p = w->bufs[w->cur] + w->cur_len;
    *got = room < n ? room : n;
    return SCK_OK;
}

int ws_commit(wstream *w, uint64_t k) {
    if (k == 0) return SCK_OK;
    uint8_t *d = w->bufs[w->cur] + w->cur_len;
    w->cur_len += k;
    w->copied += k;
    add_piece(w, d, k);
    return after_piece(w);
}

int ws_append_const(wstream *w, const void *p, uint64_t n) {
    const uint8_t *b = p;
    if (n == 0) return SCK_OK;
    int by_ref = w->direct ? (w->pos | (uintptr_t)b | n) % WS_ALIGN == 0 : n >= WS_IOV_MIN;
    return by_ref ? add_ref(w, b, n) : copy_in(w, b, n);
}

uint64_t ws_pos(const wstream *w) { return w->pos; }

uint64_t ws_copied(const wstream *w) { return w->copied; }

uint64_t ws_waits(const wstream *w) { return w->waits; }

int ws_is_direct(const wstream *w) { return w->direct; }

/* Asks the writer to stop: once the queue is drained (1, and then it ends the file) or after its
 * current write (2). */
static void ask_stop(wstream *w, int how) {
    pthread_mutex_lock(&w->mu);
    if (how > w->stop) w->stop = how;
    pthread_cond_signal(&w->work);
    pthread_mutex_unlock(&w->mu);
}

/* Stops and joins the writer (after the queue drains and it has ended the file, or at once when hard),
 * then releases everything. */
static int finish(wstream *w, int hard) {
    if (w->started) {
        ask_stop(w, hard ? 2 : 1);
        pthread_join(w->th, NULL);
    }
    int rc = w->status;
    if (rc) sck_err_set_raw(w->errmsg);
    if (w->fd >= 0) {
        if (hard) io_close_quiet(w->fd, w->path); /* an error path must never fail again */
        else if (io_close(w->fd, w->path) != 0 && !rc) rc = sck_err_errno(SCK_ERR_IO, errno, "%s: close failed", w->path);
    }
    for (unsigned i = 0; w->bufs && i < w->nbufs; i++) {
        if (w->pool) w->pool->buf[i] = w->bufs[i]; /* kept, faulted in, for the next stream */
        else if (w->bufs[i] && w->alloc) w->release(w->actx, w->bufs[i], w->stage);
        else if (w->bufs[i]) munmap(w->bufs[i], w->stage);
    }
    if (w->started) {
        pthread_cond_destroy(&w->work);
        pthread_cond_destroy(&w->done);
        pthread_mutex_destroy(&w->mu);
    }
    for (unsigned i = 0; w->iov && i < w->nbufs; i++) free(w->iov[i]);
    free(w->iov);
    free(w->huge);
    free(w->holds);
    free(w->bufs);
    free(w->free_list);
    free(w->q);
    free(w->path);
    free(w);
    return rc;
}

void ws_pool_free(ws_pool *p) {
    for (unsigned i = 0; i < WS_POOL_MAX; i++) {
        if (p->buf[i] && p->release) p->release(p->ctx, p->buf[i], p->size);
        else if (p->buf[i]) munmap(p->buf[i], p->size);
        p->buf[i] = NULL;
    }
}

int ws_close_start(wstream *w) {
    if (w->closing) return w->close_rc;
    w->closing = 1;
    w->close_rc = flush_cur(w);
    if (w->started) ask_stop(w, 1);
    return w->close_rc;
}

int ws_close(wstream *w) {
    int rc = ws_close_start(w);
    int rc2 = finish(w, 0);
    return rc ? rc : rc2;
}

void ws_abort(wstream *w) {
    if (w) finish(w, 1);
}

int ws_open(wstream **out, const char *path, const ws_opts *o) {
    *out = NULL;
    wstream *w = calloc(1, sizeof *w);
    if (!w) return sck_err(SCK_ERR_NOMEM, "%s: out of memory", path);
    w->fd = -1;
    w->cur = -1;
    w->do_fsync = o && o->do_fsync;
    w->nbufs = o && o->nbufs ? o->nbufs : WS_NBUFS_DEFAULT;
    uint64_t st = o && o->stage_bytes ? o->stage_bytes : WS_STAGE_DEFAULT;
    w->stage = (st + WS_ALIGN - 1) / WS_ALIGN * WS_ALIGN;
    w->path = sck_strdup(path);
    w->bufs = calloc(w->nbufs, sizeof *w->bufs);
    w->free_list = calloc(w->nbufs, sizeof *w->free_list);
    w->iov = calloc(w->nbufs, sizeof *w->iov);
    w->huge = calloc(w->nbufs, 1);
    w->holds = calloc(w->nbufs, sizeof *w->holds);
    for (unsigned i = 0; w->iov && i < w->nbufs; i++)
        if (!(w->iov[i] = malloc(WS_IOV_MAX * sizeof **w->iov))) break;
    if (!w->path || !w->bufs || !w->free_list || !w->huge || !w->holds || !w->iov || !w->iov[w->nbufs - 1]) {
        finish(w, 1);
        return sck_err(SCK_ERR_NOMEM, "%s: out of memory", path);
    }
    for (unsigned i = 0; i < w->nbufs; i++) w->free_list[w->nfree++] = (int)(w->nbufs - 1 - i);
    if (o && o->pool && w->nbufs <= WS_POOL_MAX) {
        w->pool = o->pool;
        if (w->pool->alloc && w->pool->release) w->alloc = w->pool->alloc, w->release = w->pool->release, w->actx = w->pool->ctx;
        if (w->pool->size != w->stage) ws_pool_free(w->pool);
        w->pool->size = w->stage;
        for (unsigned i = 0; i < w->nbufs; i++) w->bufs[i] = w->pool->buf[i], w->pool->buf[i] = NULL;
    }
    int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
    if (o && o->direct) {
        w->fd = io_open(path, flags | O_DIRECT, 0644);
        w->direct = w->fd >= 0;
        if (w->fd < 0 && errno != EINVAL) {
            int e = errno;
            finish(w, 1);
            return sck_err_errno(SCK_ERR_IO, e, "%s: cannot create", path);
        }
    }
    if (w->fd < 0 && (w->fd = io_open(path, flags, 0644)) < 0) {
        int e = errno;
        finish(w, 1);
        return sck_err_errno(SCK_ERR_IO, e, "%s: cannot create", path);
    }
    w->wb_on = !w->direct && w->do_fsync;
    /* No fallocate of the file's expected size: writes into reserved (unwritten) blocks each convert
     * their extent when they complete, and with 4 or 8 ranks writing at once saves took 5 to 10%
     * longer, buffered or O_DIRECT, while loads read the unreserved files no slower (docs/PERFORMANCE.md). */
    if (pthread_mutex_init(&w->mu, NULL)) goto nothread;
    if (pthread_cond_init(&w->work, NULL)) {
        pthread_mutex_destroy(&w->mu);
        goto nothread;
    }
    if (pthread_cond_init(&w->done, NULL)) {
        pthread_cond_destroy(&w->work);
        pthread_mutex_destroy(&w->mu);
        goto nothread;
    }
    if (pthread_create(&w->th, NULL, writer_main, w)) {
        pthread_cond_destroy(&w->work);
        pthread_cond_destroy(&w->done);
        pthread_mutex_destroy(&w->mu);
        goto nothread;
    }
    w->started = 1;
    *out = w;
    return SCK_OK;
nothread:
    finish(w, 1);
    return sck_err(SCK_ERR_NOMEM, "%s: cannot start a writer thread", path);
}
