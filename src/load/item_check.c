/* item_check.c - reading runs of one item and checking its CRC-32C on the way: spans over the read-ahead pipe,
 * check-and-copy in one pass, and the CRC pieces ranks combine when several read parts of one item. */
#include "load/ckpt_read.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/commit.h"
#include "base/crc32c.h"
#include "format/key_path.h"
#include "format/meta_pt.h"
#include "format/meta_side.h"
#include "format/meta_wire.h"
#include "format/torch_item.h"
#include "format/zip.h"

/* Consecutive pieces of item bytes [pos, end): long ranges come from the read-ahead pipe (the next
 * slice is read while this one is used), through the file's streaming descriptor, whose read-ahead
 * the header and window reads between passes do not reset; short ones from the windows. */
typedef struct span_it {
    item_rd *ird;
    uint64_t pos, end;
    int piped;
    int scatter;            /* piped with rp_start_scatter: the runs' bytes are read into place */
    uint32_t crc;           /* scatter: the CRC-32C of the slice span_next gave last */
} span_it;

/* Collects absolute file ranges of runs (ckpt_overlap_runs). */
typedef struct range_list {
    uint64_t base, lo, hi;  /* view's element 0; the item's bounds */
    uint64_t (*rg)[2];
    size_t n, cap;
    int outside;
} range_list;

typedef struct comb_ctx {
    run_ctx *rx;
    ck_comb *cb;
} comb_ctx;

/* Helper threads for this reader's pipe: two keep a lone stream's disk busy between slices; where more
 * than two ranks share a node, their pipes already keep several reads in flight, and a second read
 * each made O_DIRECT loads of 16 tensors, 256 MiB, slower: 4 ranks 0.82 -> 0.88-0.90 of plain reads
 * with one, 8 ranks 0.71-0.74 -> 0.79-0.80 (1 rank: 0.86-0.96 with two, 0.82-0.83 with one). */
int ck_pipe_helpers(const sck_ckpt *ck) { return ck->one_cache && ck->nranks > 2 ? 1 : RP_HELPERS; }

/* With runs (rp_start_scatter's), a piped span reads the runs' bytes into place (it->scatter). */
static void span_begin_runs(span_it *it, item_rd *ird, uint64_t from, uint64_t to, const uint64_t (*runs)[3], size_t n,
                            uint64_t src_base, uint8_t *dst_base, int crc) {
    sck_ckpt *ck = ird->ck;
    it->ird = ird;
    it->pos = from;
    it->end = to;
    it->piped = it->scatter = 0;
    if (to - from < PIPE_MIN || ck->rp_failed) return;
    if (!ck->rp && rp_new(&ck->rp, ck_pipe_helpers(ck)) != SCK_OK) {
        ck->rp_failed = 1; /* no thread: the windows do the job, without the overlap */
        return;
    }
    int fd = ck_stream_fd(ck, ird->c->file);
    if (runs) it->piped = it->scatter = rp_start_scatter(ck->rp, fd, from, to - from, runs, n, src_base, dst_base, crc, ird->what) == SCK_OK;
    else it->piped = rp_start(ck->rp, fd, -1, from, to - from, NULL, ird->what) == SCK_OK;
}

static void span_begin(span_it *it, item_rd *ird, uint64_t from, uint64_t to) { span_begin_runs(it, ird, from, to, NULL, 0, 0, NULL, 0); }

static int span_next(span_it *it, const uint8_t **p, uint64_t *n) {
    if (it->piped) return rp_next_crc(it->ird->ck->rp, p, n, &it->crc);
    *p = NULL;
    *n = 0;
    if (it->pos >= it->end) return SCK_OK;
    uint64_t k = it->end - it->pos < RC_CAP ? it->end - it->pos : RC_CAP, lo, hi;
    ck_fill_range(it->ird->ck, it->ird->c, it->ird->fsize, it->pos, k, &lo, &hi);
    if (hi - it->pos < k) k = hi - it->pos;
    int rc = rc_get(&it->ird->ck->rc, it->ird->fd, it->pos, k, lo, hi, it->ird->what, p);
    if (rc) return rc;
    *n = k;
    it->pos += k;
    return SCK_OK;
}

/* Stops a span left before its end (after an error). */
static void span_end(span_it *it) {
    if (it->piped) rp_finish(it->ird->ck->rp);
}

/* CRC-32C (zip 0) or zip CRC-32 (zip 1) of item bytes [from, to), continuing from *crc. */
static int span_crc(item_rd *ird, uint64_t from, uint64_t to, uint32_t *crc, int zip) {
    span_it it;
    span_begin(&it, ird, from, to);
    for (;;) {
        const uint8_t *p;
        uint64_t n;
        int rc = span_next(&it, &p, &n);
        if (rc) {
            span_end(&it);
            return rc;
        }
        if (!n) return SCK_OK;
        *crc = zip ? sck_crc32(*crc, p, (size_t)n) : sck_crc32c(*crc, p, (size_t)n);
    }
}

/* CRC-32C of item bytes [from, to), continuing from *crc. */
int ck_crc_span(item_rd *ird, uint64_t from, uint64_t to, uint32_t *crc) { return span_crc(ird, from, to, crc, 0); }

/* The zip CRC-32 of item bytes [from, to), continuing from *crc (torch-written items). */
int ck_crc32_span(item_rd *ird, uint64_t from, uint64_t to, uint32_t *crc) { return span_crc(ird, from, to, crc, 1); }

int ckpt_check_zip_item(sck_ckpt *ck, size_t ei, size_t ci, int *summed) {
    const ck_entry *e = &ck->m.e[ei];
    const ck_chunk *c = &e->chunks[ci];
    char what[4600];
    ck_item_what(ck, e, c, what, sizeof what);
    if (summed) *summed = 0;
    int fd;
    uint64_t fsize;
    int rc = ck_get_file(ck, c->file, &fd, &fsize);
    if (rc || (rc = ck_check_window(ck, e, c, fsize))) return rc;
    item_rd ird = {ck, fd, c, fsize, what};
    if (e->is_bytes) { /* torch writes every byte item as a torch.save archive: raw bytes here are damage */
        uint8_t magic[4] = {0};
        if (c->length >= 4 && (rc = ck_item_pread(&ird, magic, 4, c->offset))) return rc;
        if (memcmp(magic, "PK\x03\x04", 4)) return ckpt_unvouched_bytes(ck, ei);
    }
    zip_dir zd;
    if ((rc = zip_read_dir(ck_item_pread, &ird, c->offset, c->length, what, &zd))) return rc;
    for (size_t k = 0; k < zd.n && !rc; k++) { /* in directory order: file order, as torch writes them */
        const zip_rec *z = &zd.rec[k];
        uint32_t crc = 0;
        rc = ck_crc32_span(&ird, z->data_off, z->data_off + z->size, &crc);
        if (!rc && crc != z->crc) rc = ckpt_zip_mismatch(ck, ei, ci, z->name, z->data_off, z->size, z->crc);
    }
    zip_dir_free(&zd);
    if (!rc && summed) *summed = 1;
    return rc;
}

int ckpt_check_item(sck_ckpt *ck, size_t ei, size_t ci, const uint8_t *known, uint64_t known_off, uint64_t known_len) {
    const ck_entry *e = &ck->m.e[ei];
    const ck_chunk *c = &e->chunks[ci];
    char what[4600];
    ck_item_what(ck, e, c, what, sizeof what);
    int fd;
    uint64_t fsize;
    int rc = ck_get_file(ck, c->file, &fd, &fsize);
    if (rc || (rc = ck_check_window(ck, e, c, fsize))) return rc;
    if (!c->has_crc && !c->raw) return ckpt_check_zip_item(ck, ei, ci, NULL);
    item_rd ird = {ck, fd, c, fsize, what};
    uint64_t end = c->offset + c->length;
    uint32_t crc = 0;
    if (!known || known_off < c->offset || known_off + known_len > end) {
        rc = ck_crc_span(&ird, c->offset, end, &crc);
    } else { /* before the known bytes, the known bytes, after them */
        rc = ck_crc_span(&ird, c->offset, known_off, &crc);
        crc = sck_crc32c(crc, known, (size_t)known_len);
        if (!rc) rc = ck_crc_span(&ird, known_off + known_len, end, &crc);
    }
    if (!rc && c->has_crc && crc != c->crc32c) rc = ckpt_crc_mismatch(ck, ei, ci, crc);
    return rc;
}

/* A run's file bytes into d as stored (no swap): long runs straight from the file, short ones from
 * the windows. */
static int read_run_raw(run_ctx *r, uint64_t abs, uint8_t *d, uint64_t nbytes) {
    if ((nbytes >= WINDOW_RUN && r->ird->c->length > SMALL_ITEM) || nbytes >= DIRECT_RUN || r->no_window) return ck_read_long(r->ird->ck, r->ird->c->file, d, nbytes, abs, r->ird->what);
    const uint8_t *p;
    int rc = ck_item_view(r->ird, abs, nbytes, &p);
    if (!rc) memcpy(d, p, nbytes);
    return rc;
}

int ck_copy_run(void *vctx, uint64_t src_off, uint64_t dst_off, uint64_t nbytes) {
    run_ctx *r = vctx;
    uint8_t *d = r->dst + dst_off;
    int rc = read_run_raw(r, r->base + src_off, d, nbytes);
    if (!rc && r->swap) ck_swap_elems(d, nbytes, (size_t)r->swap);
    return rc;
}

/* A list collected into b (runs appended from b's index `from`). */
run_list ck_run_list_in(ck_runbuf *b, size_t from) {
    run_list l = {b->r, from, b->cap, 1, 0, 0, 0, 0, b, from, 0};
    return l;
}

/* A walk that only finds the first run and whether there are more. */
run_list ck_run_list_first(void) {
    run_list l = {NULL, 0, 0, 1, 0, 0, 0, 0, NULL, 0, 2};
    return l;
}

int ck_runbuf_grow(ck_runbuf *b, size_t need) {
    size_t c = b->cap ? b->cap : 256;
    while (c < need) c *= 2;
    void *p = realloc(b->r, c * sizeof *b->r);
    if (!p) return 0;
    b->r = p;
    b->cap = c;
    return 1;
}

int ck_collect_run(void *vctx, uint64_t s, uint64_t d, uint64_t n) {
    run_list *l = vctx;
    if (l->n == l->from) {
        l->first_src = s;
        l->first_dst = d;
        l->first_len = n;
    } else if (l->r && l->n <= l->cap && s < l->r[l->n - 1][0] + l->r[l->n - 1][2]) {
        l->ordered = 0;
    }
    if (l->buf && l->n == l->cap && l->n - l->from < MAX_RUNS && ck_runbuf_grow(l->buf, l->n + 1)) {
        l->r = l->buf->r;
        l->cap = l->buf->cap;
    }
    if (l->r && l->n < l->cap) {
        l->r[l->n][0] = s;
        l->r[l->n][1] = d;
        l->r[l->n][2] = n;
    }
    l->n++;
    return l->stop && l->n - l->from >= l->stop;
}

/* Reads the whole item once, slice by slice: each is checksummed and the parts of the runs it holds
 * land in their destinations.  The item is read once, not once to check and again to copy.  Piped
 * (items of PIPE_MIN or more), the runs are read straight into place and the pipe's helper checksums
 * each slice as it reads it; else the runs are copied out of the windows.  Without `check` (another
 * rank checks the item), only the bytes from the first run to the end of the last are streamed, and
 * not checksummed. */
int ck_check_and_copy(sck_ckpt *ck, size_t ei, size_t ci, run_ctx *rx, const run_list *l, int check) {
    const ck_chunk *c = &ck->m.e[ei].chunks[ci];
    item_rd *ird = rx->ird;
    uint64_t pos = c->offset, to = c->offset + c->length;
    if (!check && l->n) {
        pos = rx->base + l->r[0][0];
        to = rx->base + l->r[l->n - 1][0] + l->r[l->n - 1][2];
        if (pos < c->offset || to > c->offset + c->length || pos > to)
            return sck_err(SCK_ERR_FORMAT, "%s: a run of the chunk lies outside its item", ird->what);
    }
    uint32_t crc = 0;
    size_t k = 0;
    uint64_t done = 0; /* bytes of run k already in place */
    span_it it;
    span_begin_runs(&it, ird, pos, to, l->r, l->n, rx->base, l->abs ? NULL : rx->dst, check);
    for (;;) {
        const uint8_t *p;
        uint64_t len;
        int rc = span_next(&it, &p, &len);
        if (rc) {
            span_end(&it);
            return rc;
        }
        if (!len) break;
        if (check) crc = it.scatter ? sck_crc32c_combine(crc, it.crc, len) : sck_crc32c(crc, p, (size_t)len);
        while (k < l->n) {
            uint64_t a = rx->base + l->r[k][0] + done, left = l->r[k][2] - done;
            if (a < pos) { /* only a view reaching before its own item gets here */
                span_end(&it);
                return sck_err(SCK_ERR_FORMAT, "%s: a run of the chunk lies outside its item", ird->what);
            }
            if (a >= pos + len) break;
            uint64_t take = pos + len - a < left ? pos + len - a : left;
            uint8_t *d = l->abs ? (uint8_t *)(uintptr_t)l->r[k][1] : rx->dst + l->r[k][1];
            if (!it.scatter) memcpy(d + done, p + (a - pos), take);
            done += take;
            if (done < l->r[k][2]) break;
            if (rx->swap) ck_swap_elems(d, l->r[k][2], (size_t)rx->swap);
            k++;
            done = 0;
        }
        pos += len;
    }
    if (k < l->n) return sck_err(SCK_ERR_FORMAT, "%s: a run of the chunk lies outside its item", ird->what);
    return check && crc != c->crc32c ? ckpt_crc_mismatch(ck, ei, ci, crc) : SCK_OK;
}

/* Starts reading [abs, abs+len) of the item's file into d on the read-ahead pipe (ck->rp, which must
 * exist). */
int ck_pipe_begin(sck_ckpt *ck, item_rd *ird, uint8_t *d, uint64_t abs, uint64_t len) {
    const ck_chunk *c = ird->c;
    return rp_start(ck->rp, ck_stream_fd(ck, c->file), ck->direct ? ck_direct_fd(ck, c->file) : -1, abs, len, d, ird->what);
}

/* Takes the len bytes of the range ck_pipe_begin started, extending *crc over each slice as it arrives;
 * with `last`, all but the last slice, which is left in *last (in the caller's buffer) for the caller
 * to checksum. */
int ck_pipe_drain_crc(sck_ckpt *ck, item_rd *ird, uint64_t len, uint32_t *crc, const uint8_t **last, uint64_t *last_len) {
    int rc = SCK_OK;
    const uint8_t *lp = NULL;
    uint64_t ln = 0;
    for (uint64_t got = 0; got < len;) {
        const uint8_t *p;
        uint64_t n;
        if ((rc = rp_next(ck->rp, &p, &n))) break;
        if (!n) {
            rc = sck_err(SCK_ERR_IO, "%s: read ahead stopped at %llu of %llu bytes", ird->what, (unsigned long long)got,
                         (unsigned long long)len);
            break;
        }
        if (ln) *crc = sck_crc32c(*crc, lp, (size_t)ln);
        lp = p;
        ln = n;
        got += n;
    }
    if (rc) {
        rp_finish(ck->rp);
        return rc;
    }
    if (last) {
        *last = lp;
        *last_len = ln;
    } else if (ln) {
        *crc = sck_crc32c(*crc, lp, (size_t)ln);
    }
    return SCK_OK;
}

/* Whether this rank checks chunk c's item as it reads it (peer: ckpt_peer_mark's answer, 0 when no comb
 * was planned for it after all). */
int ck_checked_here(const sck_ckpt *ck, const ck_chunk *c, const ck_res *r, int peer) {
    return ck->verify && c->has_crc && !r->verified && !peer;
}

/* Whether a checked read of runs l goes through the read-ahead pipe (read_run_checked): one run, no
 * byte swap, long enough. */
int ck_piped_run(int check, const ck_res *r, const run_list *l) {
    return check && l->n == 1 && !r->swap && l->first_len >= DIRECT_RUN;
}

/* Asks the kernel to start reading the head (headers and first MiBs) and the tail (zip directory) of
 * the item after c in its file: reading a large item begins with small reads far apart, and without
 * this each one waits for the disk and breaks the read-ahead of the payload. */
void ck_prefetch_next(sck_ckpt *ck, const ck_chunk *c) {
    size_t at = ck_spans_ready(ck, 1) ? ck_span_at_or_after(ck->spans, ck->nspans, c->file, c->offset + c->length) : ck->nspans;
    if (at >= ck->nspans) return;
    const ck_span *nx = &ck->spans[at];
    /* Its headers and first slices; with O_DIRECT only the headers: cached pages in the way of a direct
     * read must be written back and dropped first, which would cost more than it saves. */
    ck_advise_headers(ck, nx->file, nx->off, nx->len, !ck->direct ? PREFETCH_AHEAD : nx->head ? nx->head : HEAD_BYTES,
                   nx->tail ? nx->tail : HEAD_BYTES);
    ck->advised_file = nx->file;
    ck->advised_off = nx->off;
}

/* The runs of an item another rank checks, and no more of it: long runs straight into the destination;
 * many short runs in file order (column blocks) in one pass from the first to the end of the last,
 * read ahead as the checked pass is, rather than run by run through the windows.  l: the overlap's
 * runs as ck_read_overlap collected them (counted all, stored up to l->cap). */
int ck_copy_peer_checked(sck_ckpt *ck, size_t ei, size_t ci, const sck_box *cbox, const sck_box *want, const sck_box *ov,
                             const int64_t *strides, run_ctx *rx, const run_list *l) {
    const ck_chunk *c = &ck->m.e[ei].chunks[ci];
    if (c->length <= SMALL_ITEM && l->n <= FEW_RUNS) {
        /* A part of a small item (a row block of a reshard): a window would bring in the whole item
         * and its neighbours, which the item's owner reads already. */
        rx->no_window = 1;
        int rc = box_runs(cbox, strides, want, ov, rx->elem, ck_copy_run, rx);
        rx->no_window = 0;
        return rc;
    }
    if (l->n > 1 && l->n <= l->cap && l->ordered && box_numel(ov) * rx->elem / l->n < DIRECT_RUN) return ck_check_and_copy(ck, ei, ci, rx, l, 0);
    return box_runs(cbox, strides, want, ov, rx->elem, ck_copy_run, rx); /* else run by run */
}

void ckpt_prefetch_headers(sck_ckpt *ck, size_t ei, size_t ci) {
    const ck_chunk *c = &ck->m.e[ei].chunks[ci];
    if (!ck_resolve_reads(ck, c)) return; /* asking would only pull in bytes the reads may not need, now */
    int fd;
    uint64_t fsize;
    if (ck_get_file(ck, c->file, &fd, &fsize) != SCK_OK) { /* opens the file ck_advise_headers asks about */
        sck_err_clear(); /* the read will say what is wrong */
        return;
    }
    ck_advise_headers(ck, c->file, c->offset, c->length, HEAD_BYTES, HEAD_BYTES);
}

static int collect_range(void *vctx, uint64_t s, uint64_t d, uint64_t n) {
    range_list *l = vctx;
    (void)d;
    uint64_t a = l->base + s;
    if (a < l->lo || a > l->hi || n > l->hi - a) l->outside = 1;
    if (l->n < l->cap) l->rg[l->n][0] = a, l->rg[l->n][1] = n;
    l->n++;
    return 0;
}

int ckpt_overlap_runs(sck_ckpt *ck, size_t ei, size_t ci, const sck_box *want, const sck_box *ov, uint64_t (*rg)[2], size_t cap,
                      size_t *n) {
    const ck_chunk *c = &ck->m.e[ei].chunks[ci];
    ck_res *r = NULL;
    *n = 0;
    int rc = ckpt_resolve_chunk(ck, ei, ci, &r);
    if (rc) return rc;
    range_list l = {r->data_off, c->offset, c->offset + c->length, rg, 0, cap, 0};
    int64_t sb[SCK_MAX_DIMS];
    sck_box cbox;
    ck_chunk_box(&ck->m.e[ei], ci, &cbox);
    box_runs(&cbox, ck_res_strides(ck, &cbox, r, sb), want, ov, sck_dtype_size((sck_dtype)ck->m.e[ei].dtype), collect_range, &l);
    if (l.outside) {
        char what[4600];
        ck_item_what(ck, &ck->m.e[ei], c, what, sizeof what);
        return sck_err(SCK_ERR_FORMAT, "%s: a run of the chunk lies outside its item", what);
    }
    *n = l.n;
    return SCK_OK;
}

static int push_seg(sck_ckpt *ck, uint64_t item, uint64_t off, uint64_t len, uint32_t crc, const char *what) {
    if (ck->nsegs == ck->capsegs) {
        size_t cap = ck->capsegs ? 2 * ck->capsegs : 64;
        ck_seg *p = realloc(ck->segs, cap * sizeof *p);
        if (!p) return sck_err(SCK_ERR_NOMEM, "%s: out of memory for checksums", what);
        ck->segs = p;
        ck->capsegs = cap;
    }
    ck->segs[ck->nsegs++] = (ck_seg){item, off, len, crc, 0};
    return SCK_OK;
}

static ck_comb *find_comb(sck_ckpt *ck, size_t ei, size_t ci) {
    size_t lo = 0, hi = ck->ncombs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const ck_comb *m = &ck->combs[mid];
        if (m->ei < ei || (m->ei == ei && m->ci < ci)) lo = mid + 1;
        else hi = mid;
    }
    return lo < ck->ncombs && ck->combs[lo].ei == ei && ck->combs[lo].ci == ci ? &ck->combs[lo] : NULL;
}

/* ckpt_peer_mark's answer for chunk ci of entry ei as a read acts on it: 2 (combined) only where the
 * combined check was planned here (*cb, else NULL), which otherwise falls back to 0 (checked whole). */
int ck_item_peer(sck_ckpt *ck, size_t ei, size_t ci, ck_comb **cb) {
    int peer = ckpt_peer_mark(ck, ei, ci);
    *cb = peer == 2 ? find_comb(ck, ei, ci) : NULL;
    return peer == 2 && !*cb ? 0 : peer;
}

/* One run read into the destination with the CRC-32C of its file bytes (taken before any swap):
 * long runs on the read-ahead pipe, checksummed slice by slice as they arrive. */
static int read_run_crc(run_ctx *rx, uint64_t src_off, uint64_t dst_off, uint64_t n, uint32_t *crc) {
    sck_ckpt *ck = rx->ird->ck;
    uint64_t abs = rx->base + src_off;
    uint8_t *d = rx->dst + dst_off;
    int rc;
    *crc = 0;
    if (n >= PIPE_MIN && !ck->rp && !ck->rp_failed && rp_new(&ck->rp, ck_pipe_helpers(ck)) != SCK_OK) ck->rp_failed = 1;
    if (n >= PIPE_MIN && ck->rp) rc = (rc = ck_pipe_begin(ck, rx->ird, d, abs, n)) ? rc : ck_pipe_drain_crc(ck, rx->ird, n, crc, NULL, NULL);
    else if (!(rc = read_run_raw(rx, abs, d, n))) *crc = sck_crc32c(0, d, (size_t)n);
    if (!rc && rx->swap) ck_swap_elems(d, n, (size_t)rx->swap);
    return rc;
}

/* A run of a combined item: a segment of this rank is read with its CRC recorded, any other run
 * (one another rank's segment already covers) is only copied. */
static int copy_comb_run(void *vctx, uint64_t src_off, uint64_t dst_off, uint64_t n) {
    comb_ctx *x = vctx;
    uint64_t abs = x->rx->base + src_off;
    for (size_t k = 0; k < x->cb->nseg; k++) {
        uint64_t *g = x->cb->r[k];
        if (g[2] || g[0] != abs || g[1] != n) continue;
        uint32_t crc;
        int rc = read_run_crc(x->rx, src_off, dst_off, n, &crc);
        if (!rc) rc = push_seg(x->rx->ird->ck, x->cb->item, abs, n, crc, x->rx->ird->what);
        if (!rc) g[2] = 1;
        return rc;
    }
    return ck_copy_run(x->rx, src_off, dst_off, n);
}

/* This rank's part of an item checked by combining CRCs (src/load_checks.h): the owner first
 * checksums the gaps, once; then every reader copies its runs, checksumming its segments. */
int ck_read_combined(sck_ckpt *ck, ck_comb *cb, const sck_box *cbox, const sck_box *want, const sck_box *ov, const int64_t *strides,
                         run_ctx *rx) {
    for (size_t k = cb->nseg; k < cb->nseg + cb->ngap; k++) {
        uint64_t *g = cb->r[k];
        if (g[2]) continue;
        uint32_t crc = 0;
        int rc = ck_crc_span(rx->ird, g[0], g[0] + g[1], &crc);
        if (!rc) rc = push_seg(ck, cb->item, g[0], g[1], crc, rx->ird->what);
        if (rc) return rc;
        g[2] = 1;
    }
    comb_ctx x = {rx, cb};
    return box_runs(cbox, strides, want, ov, rx->elem, copy_comb_run, &x);
}
