/* box_read.c - reading one requested box's overlap with one saved chunk: the choice between checked, piped and
 * plain runs, and the hand-over of runs to other thread ranks from the owner's pass over the item. */
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

/* Ends the check left pending (ck->pend): the item's CRC-32C compared, the item marked verified and
 * handed to the thread ranks that wait for its runs. */
int ck_finish_pending(sck_ckpt *ck) {
    ck_pending *q = &ck->pend;
    if (!q->on) return SCK_OK;
    q->on = 0;
    const ck_chunk *c = &ck->m.e[q->ei].chunks[q->ci];
    uint32_t crc = sck_crc32c_combine(sck_crc32c(q->crc, q->last, (size_t)q->last_len), q->tail_crc, q->tail_len);
    if (c->has_crc && crc != c->crc32c) return ckpt_crc_mismatch(ck, q->ei, q->ci, crc);
    ck->res[q->ei][q->ci].verified = 1;
    return ck_hand_over(ck, q->ei, q->ci, NULL, NULL);
}

static void queue_next(sck_ckpt *ck, const uint8_t *d, uint64_t len);

/* One long run of a chunk read into d and the whole item checked, in a single pass: the run is read
 * ahead slice by slice (with O_DIRECT where asked for and aligned) while the slices before are
 * checksummed; the item's other bytes are checksummed around it.  The pipe starts first, so the disk
 * is busy while the item's headers are checksummed, (`ahead`) the next item is asked for, and the
 * item before finishes its check (ck->pend).  This item's last slice is left pending in turn
 * (*pending = 1): the disk then goes on to the next item while it is checksummed. */
static int read_run_checked(sck_ckpt *ck, size_t ei, size_t ci, item_rd *ird, uint8_t *d, uint64_t abs, uint64_t len, int ahead,
                            int *pending) {
    const ck_chunk *c = &ck->m.e[ei].chunks[ci];
    *pending = 0;
    if (!ck->rp && !ck->rp_failed && rp_new(&ck->rp, ck_pipe_helpers(ck)) != SCK_OK) ck->rp_failed = 1;
    if (!ck->rp) { /* no thread: read, then check (nothing is pending: only piped reads leave a check) */
        if (ahead) ck_prefetch_next(ck, c);
        int rc = ck_read_long(ck, c->file, d, len, abs, ird->what);
        return rc ? rc : ckpt_check_item(ck, ei, ci, d, abs, len);
    }
    uint32_t crc = 0, tail = 0;
    int rc = SCK_OK, early = abs - c->offset < PIPE_MIN; /* a longer head is checksummed on the pipe itself */
    if (!early && (rc = ck_finish_pending(ck))) return rc; /* the head goes through the pipe first */
    /* The first large item of a run of them: its own headers asked for before its payload's read, or
     * the reads of its zip directory wait behind it, one after the other (6 to 7 ms each, cold). */
    if (ahead && (ck->advised_file != c->file || ck->advised_off != c->offset))
        ck_advise_headers(ck, c->file, c->offset, c->length, c->payload ? c->payload : HEAD_BYTES, c->tail ? c->tail : HEAD_BYTES);
    if (!early && (rc = ck_crc_span(ird, c->offset, abs, &crc))) return rc;
    if ((rc = ck_pipe_begin(ck, ird, d, abs, len))) return rc;
    if (ahead) ck_prefetch_next(ck, c);
    if (ahead) queue_next(ck, d, len);
    if (early && ((rc = ck_finish_pending(ck)) || (rc = ck_crc_span(ird, c->offset, abs, &crc)))) {
        rp_finish(ck->rp);
        return rc;
    }
    const uint8_t *last;
    uint64_t last_len, end = c->offset + c->length;
    if ((rc = ck_pipe_drain_crc(ck, ird, len, &crc, &last, &last_len))) return rc;
    if ((rc = ck_crc_span(ird, abs + len, end, &tail))) return rc;
    ck->pend = (ck_pending){1, ei, ci, crc, last, last_len, tail, end - abs - len};
    *pending = 1;
    return SCK_OK;
}

/* Queues the next read's range on the pipe behind the current one ([d, +len)), where that read will be
 * a piped one too (ck_read_overlap's choice, made here the same way): the helpers go on to it as soon as
 * the current range is taken, where otherwise the disk waited for this rank to be woken, finish the
 * item and start the next (0.5-1 ms on a busy machine, between every two items).  read_run_checked's
 * rp_start of the same range then takes it over as it is. */
static void queue_next(sck_ckpt *ck, const uint8_t *d, uint64_t len) {
    const ck_want *x = ck->look;
    if (!x) return;
    size_t ei = x->ei, ci = ck->look_ci;
    const ck_entry *e = &ck->m.e[ei];
    const ck_chunk *c = &e->chunks[ci];
    ck_res *r;
    if (c->length <= SMALL_ITEM || ck_resolve_reads(ck, c) || ckpt_resolve_chunk(ck, ei, ci, &r) != SCK_OK) return;
    ck_comb *cb;
    int check = ck_checked_here(ck, c, r, ck_item_peer(ck, ei, ci, &cb)); /* a peer's item: ck_read_overlap copies its runs */
    if (!check) return;
    sck_box ov, cbox;
    ck_chunk_intersect(e, ci, x->box, &cbox, &ov);
    int64_t sb[SCK_MAX_DIMS];
    const int64_t *strides = ck_res_strides(ck, &cbox, r, sb);
    run_list l = ck_run_list_first();
    box_runs(&cbox, strides, x->box, &ov, sck_dtype_size((sck_dtype)e->dtype), ck_collect_run, &l);
    if (!ck_piped_run(check, r, &l)) return;
    uint8_t *nd = (uint8_t *)x->dst + l.first_dst;
    if (nd < d + len && d < nd + l.first_len) return; /* the same bytes of memory: read in order */
    int direct = ck_choose_direct(ck, c, (uintptr_t)x->dst - r->data_off, 1);
    char what[4600];
    ck_item_what(ck, e, c, what, sizeof what);
    rp_queue(ck->rp, ck_stream_fd(ck, c->file), direct ? ck_direct_fd(ck, c->file) : -1, r->data_off + l.first_src, l.first_len, nd,
             what); /* advice only: without it the read waits its turn */
}

/* This rank's hand-overs of item (ei, ci): *n of them from the returned one (ck->hands is sorted). */
static int hand_before(const ck_hand *h, size_t ei, size_t ci) { return h->ei < ei || (h->ei == ei && h->ci < ci); }

ck_hand *ck_hands_of(sck_ckpt *ck, size_t ei, size_t ci, size_t *n) {
    size_t lo = 0, hi = ck->nhands, f = ck->hand_finger;
    /* Items are read in file order, which within a file is item order, and each is asked for twice
     * (its reads, then its hand-overs): searched on from the last one found (galloping), where a
     * binary search of the whole list missed the cache at every step. */
    if (f == 0 || (f <= hi && hand_before(&ck->hands[f - 1], ei, ci))) {
        size_t step = 1;
        lo = f;
        while (lo + step <= hi && hand_before(&ck->hands[lo + step - 1], ei, ci)) lo += step, step *= 2;
        if (lo + step - 1 < hi) hi = lo + step - 1;
    } else {
        hi = f; /* before the last one */
    }
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (hand_before(&ck->hands[mid], ei, ci)) lo = mid + 1;
        else hi = mid;
    }
    ck->hand_finger = lo;
    size_t k = lo;
    while (k < ck->nhands && ck->hands[k].ei == ei && ck->hands[k].ci == ci) k++;
    *n = k - lo;
    return ck->hands + lo;
}

/* Another rank's overlap with item (ei, ci), handed over (h->want) but not copied in this rank's pass
 * over the item: copied now, run by run, from the page cache (the item was just read). */
static int copy_hand_box(sck_ckpt *ck, size_t ei, size_t ci, ck_hand *h) {
    ck_entry *e = &ck->m.e[ei];
    ck_chunk *c = &e->chunks[ci];
    ck_res *r = NULL;
    int rc = ckpt_resolve_chunk(ck, ei, ci, &r);
    if (rc) return rc;
    char what[4600];
    ck_item_what(ck, e, c, what, sizeof what);
    item_rd ird = {ck, ck->files[c->file].fd, c, ck->files[c->file].size, what};
    run_ctx rx = {&ird, r->data_off, h->dst, sck_dtype_size((sck_dtype)e->dtype), r->swap, 0};
    sck_box cbox, ov;
    ck_chunk_intersect(e, ci, h->want, &cbox, &ov);
    int64_t sb[SCK_MAX_DIMS];
    if (!(rc = box_runs(&cbox, ck_res_strides(ck, &cbox, r, sb), h->want, &ov, rx.elem, ck_copy_run, &rx))) h->done = 1;
    return rc;
}

static void hands_done(sck_ckpt *ck, size_t ei, size_t ci) {
    size_t n;
    ck_hand *h = ck_hands_of(ck, ei, ci, &n);
    for (size_t i = 0; i < n; i++)
        if (h[i].want) h[i].done = 1;
}

/* A min-heap of run lists by their next run's file offset (ls[q].r[at[q]][0]), for merging them in
 * O(log k) a run: the column splits of k ranks interleave run by run. */
static uint64_t heap_key(const run_list *ls, const size_t *at, size_t q) { return ls[q].r[at[q]][0]; }

static void heap_down(size_t *h, size_t n, const run_list *ls, const size_t *at) {
    for (size_t i = 0;;) {
        size_t c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && heap_key(ls, at, h[c + 1]) < heap_key(ls, at, h[c])) c++;
        if (heap_key(ls, at, h[i]) <= heap_key(ls, at, h[c])) return;
        size_t t = h[i];
        h[i] = h[c];
        h[c] = t;
        i = c;
    }
}

static void heap_push(size_t *h, size_t *n, const run_list *ls, const size_t *at, size_t q) {
    size_t i = (*n)++;
    h[i] = q;
    while (i && heap_key(ls, at, h[(i - 1) / 2]) > heap_key(ls, at, h[i])) {
        size_t t = h[i];
        h[i] = h[(i - 1) / 2];
        h[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

/* This rank's runs l of item (ei, ci) (in order) and those of the other ranks' overlaps it hands over
 * (ck_hand with `want`), merged by file offset into *out with addresses for destinations, so that one
 * pass over the item serves them all.  1 if merged (out->r is ck->runbuf[2], valid until the next
 * merge); 0 if there is nothing to
 * add, or the lists cannot be merged (out of order, overlapping runs, too many, no memory): ck_hand_over
 * then copies them, after the check. */
static int merge_hands(sck_ckpt *ck, size_t ei, size_t ci, const sck_box *cbox, const int64_t *strides, const run_ctx *rx,
                       const run_list *l, run_list *out) {
    size_t nh = 0, nb = 0;
    ck_hand *h = ck->nhands ? ck_hands_of(ck, ei, ci, &nh) : NULL;
    for (size_t i = 0; i < nh; i++) nb += h[i].want && !h[i].done;
    if (!nb) return 0;
    run_list *ls = calloc(nb + 1, sizeof *ls);
    uint8_t **base = calloc(nb + 1, sizeof *base);
    size_t *at = calloc(nb + 1, sizeof *at), *heap = calloc(nb + 1, sizeof *heap), total = l->n, k = 1, nheap = 0;
    int ok = ls && base && at && heap;
    if (ok) ls[0] = *l, base[0] = rx->dst;
    run_list x = ck_run_list_in(&ck->runbuf[1], 0); /* the hand-overs' lists, one after another */
    for (size_t i = 0; ok && i < nh; i++) {
        if (!h[i].want || h[i].done) continue;
        sck_box cb, ov;
        ck_chunk_intersect(&ck->m.e[ei], ci, h[i].want, &cb, &ov);
        x.from = x.n;
        box_runs(cbox, strides, h[i].want, &ov, rx->elem, ck_collect_run, &x);
        total += x.n - x.from;
        ok = x.ordered && x.n <= x.cap && total <= MAX_RUNS;
        ls[k].n = x.n - x.from;
        at[k] = x.from; /* made relative once the buffer has stopped moving */
        base[k++] = h[i].dst;
    }
    for (size_t q = 1; ok && q < k; q++) ls[q].r = x.r + at[q], at[q] = 0;
    ok = ok && (total <= ck->runbuf[2].cap || ck_runbuf_grow(&ck->runbuf[2], total));
    for (size_t q = 0; ok && q < k; q++)
        if (ls[q].n) heap_push(heap, &nheap, ls, at, q);
    uint64_t (*o)[3] = ck->runbuf[2].r, end = 0;
    for (size_t m = 0; ok && m < total; m++) { /* the next run in file order: the heap's top list's head */
        size_t b = heap[0];
        const uint64_t *run = ls[b].r[at[b]++];
        if (m && run[0] < end) ok = 0; /* two ranks want the same bytes: each run is copied on its own */
        end = run[0] + run[2];
        o[m][0] = run[0];
        o[m][1] = (uint64_t)(uintptr_t)(base[b] + run[1]);
        o[m][2] = run[2];
        if (at[b] == ls[b].n) heap[0] = heap[--nheap];
        heap_down(heap, nheap, ls, at);
    }
    free(heap);
    free(ls);
    free(base);
    free(at);
    if (!ok) return 0;
    *out = ck_run_list_in(&ck->runbuf[2], 0);
    out->n = total;
    out->abs = 1;
    return 1;
}

/* Item (ei, ci) has just been checked here: the other thread ranks' runs of it go into their buffers.
 * The item's bytes are at hand as three pieces (p[k] holding file bytes [at[k], at[k+1])), or, where
 * p is NULL, read again from the page cache. */
int ck_hand_over(sck_ckpt *ck, size_t ei, size_t ci, const uint8_t *const *p, const uint64_t *at) {
    size_t n;
    ck_hand *h = ck->nhands ? ck_hands_of(ck, ei, ci, &n) : NULL;
    for (size_t i = 0; h && i < n; i++) {
        if (h[i].want) {
            int rc = h[i].done ? SCK_OK : copy_hand_box(ck, ei, ci, &h[i]);
            if (rc) return rc;
            continue;
        }
        if (h[i].done) continue; /* read straight into place (read_small_batch) */
        if (!p) {
            struct iovec v = {h[i].dst, (size_t)h[i].len};
            int rc = ck_preadv_full(ck, ei, ci, ck->files[ck->m.e[ei].chunks[ci].file].fd, &v, 1, h[i].run);
            if (rc) return rc;
            continue;
        }
        for (int k = 0; k < 3; k++) { /* the part of the run in each piece */
            uint64_t a = h[i].run > at[k] ? h[i].run : at[k], b = h[i].run + h[i].len < at[k + 1] ? h[i].run + h[i].len : at[k + 1];
            if (a < b) memcpy(h[i].dst + (a - h[i].run), p[k] + (a - at[k]), (size_t)(b - a));
        }
    }
    return SCK_OK;
}

/* A torch-written item (no CRC-32C) just read here: its storage record checked against its zip CRC-32,
 * once per open checkpoint (r->verified).  Where the read was one unswapped run that is the whole
 * record (a whole chunk, the same sharding as the save), the CRC-32 is taken of the destination;
 * any other read (a part of the chunk, a view of a larger storage, big-endian bytes) reads the whole
 * record again to check it, so a resharded load reads each record it touches in full. */
static int check_zip_read(sck_ckpt *ck, size_t ei, size_t ci, ck_res *r, const run_list *l, const run_ctx *rx) {
    const ck_zrec *z = ck_zrec_of(ck, r);
    uint32_t crc = 0;
    int rc = SCK_OK;
    if (!z) { /* no storage bytes: data.pkl, checked when resolved, was all */
    } else if (l->n == 1 && !r->swap && r->data_off + l->first_src == z->off && l->first_len == z->len) {
        crc = sck_crc32(0, rx->dst + l->first_dst, (size_t)z->len);
    } else if ((rc = ck_crc32_span(rx->ird, z->off, z->off + z->len, &crc))) {
        return rc;
    }
    if (z && crc != z->crc) return ckpt_zip_mismatch(ck, ei, ci, z->name, z->off, z->len, z->crc);
    r->verified = 1;
    return SCK_OK;
}

/* cbox: chunk ci's box (ck_chunk_box). */
int ck_read_overlap(sck_ckpt *ck, size_t ei, size_t ci, const sck_box *cbox, const sck_box *want, const sck_box *ov, void *dst) {
    ck_entry *e = &ck->m.e[ei];
    ck_chunk *c = &e->chunks[ci];
    ck_res *r = NULL;
    int rc = ckpt_resolve_chunk(ck, ei, ci, &r);
    if (rc && ck->verify && c->has_crc) {
        /* Undecodable: if the bytes are not what was saved, say that instead. */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", sck_last_error());
        if (ckpt_check_item(ck, ei, ci, NULL, 0, 0) == SCK_ERR_CHECKSUM) return SCK_ERR_CHECKSUM;
        sck_err_set_raw(msg);
    }
    if (rc) return rc;
    char what[4600];
    ck_item_what(ck, e, c, what, sizeof what);
    item_rd ird = {ck, ck->files[c->file].fd, c, ck->files[c->file].size, what};
    run_ctx rx = {&ird, r->data_off, dst, sck_dtype_size((sck_dtype)e->dtype), r->swap, 0};
    ck_comb *cb;
    int peer = ck_item_peer(ck, ei, ci, &cb);
    int check = ck_checked_here(ck, c, r, peer), ahead = c->length > SMALL_ITEM;
    int64_t sb[SCK_MAX_DIMS];
    const int64_t *strides = ck_res_strides(ck, cbox, r, sb);
    run_list l = ck_run_list_in(&ck->runbuf[0], 0);
    box_runs(cbox, strides, want, ov, rx.elem, ck_collect_run, &l);
    int piped = ck_piped_run(check, r, &l), pending = 0;
    /* The check left pending ends before anything else here writes into a destination; a piped read
     * ends it once its own read is under way. */
    if (!piped && (rc = ck_finish_pending(ck))) return rc;
    /* O_DIRECT serves long runs read into dst (one checked run, or unchecked runs); many short runs,
     * and an item checked around several runs, are read through the cache, with its read-ahead. */
    int long_runs = l.n && box_numel(ov) * rx.elem / l.n >= DIRECT_RUN && (piped || !check);
    ck->direct = ck_choose_direct(ck, c, (uintptr_t)dst - r->data_off, long_runs);
    /* A checked pass over the whole item (many runs) goes through the pipe, whose helpers' reads in file
     * order are the kernel's cue to read ahead; asking here instead put the page allocations of the
     * item and the next on the rank's thread (a sixth of a 2-rank column load's samples) while the
     * pass waited. */
    int pass = check && l.n > 1;
    if (ahead && !ck->direct && !pass) {
        /* All of the first 64 MiB of this item in flight at once, not one read-ahead window at a time
         * (its start follows the headers, so the kernel does not see a sequential stream). */
        posix_fadvise(ck->files[c->file].fd, (off_t)c->offset, (off_t)(c->length < PREFETCH_AHEAD ? c->length : PREFETCH_AHEAD),
                      POSIX_FADV_WILLNEED); /* advice only */
    }
    /* The next item is asked for before this one is read; read_run_checked asks once its read is under way. */
    if (ahead && !piped && !pass) ck_prefetch_next(ck, c);
    if (!check) {
        rc = cb     ? ck_read_combined(ck, cb, cbox, want, ov, strides, &rx)
             : peer ? ck_copy_peer_checked(ck, ei, ci, cbox, want, ov, strides, &rx, &l)
                    : box_runs(cbox, strides, want, ov, rx.elem, ck_copy_run, &rx);
        if (!rc && ck->verify && !c->has_crc && !c->raw && !r->verified && !peer) rc = check_zip_read(ck, ei, ci, r, &l, &rx);
        /* Another rank checks this item; should its bytes be what broke this read, say so here too. */
        if (rc && peer && ck->verify) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", sck_last_error());
            if (ckpt_check_item(ck, ei, ci, NULL, 0, 0) == SCK_ERR_CHECKSUM) return SCK_ERR_CHECKSUM;
            sck_err_set_raw(msg);
        }
        return rc;
    }
    /* Checksums cover whole items.  One run (a row block, the same sharding as the save): read it,
     * then only the rest of the item to check it.  Several runs: one pass over the item that checks
     * and copies.  Runs out of file order, or too many to keep: check first, then copy. */
    if (l.n == 1 && !r->swap) {
        if (piped) {
            rc = read_run_checked(ck, ei, ci, &ird, (uint8_t *)dst + l.first_dst, r->data_off + l.first_src, l.first_len, ahead,
                                  &pending);
            if (pending) return SCK_OK; /* checked, marked and handed over by ck_finish_pending */
        } else if (!(rc = ck_copy_run(&rx, l.first_src, l.first_dst, l.first_len)))
            rc = ckpt_check_item(ck, ei, ci, (const uint8_t *)dst + l.first_dst, r->data_off + l.first_src, l.first_len);
        r->verified = !rc;
        return rc ? rc : ck_hand_over(ck, ei, ci, NULL, NULL);
    }
    if (l.n <= l.cap && l.ordered) {
        run_list all;
        int merged = merge_hands(ck, ei, ci, cbox, strides, &rx, &l, &all);
        rc = ck_check_and_copy(ck, ei, ci, &rx, merged ? &all : &l, 1);
        if (merged && !rc) hands_done(ck, ei, ci);
        r->verified = !rc;
        return rc ? rc : ck_hand_over(ck, ei, ci, NULL, NULL);
    }
    if ((rc = ckpt_check_item(ck, ei, ci, NULL, 0, 0))) return rc;
    r->verified = 1;
    if ((rc = ck_hand_over(ck, ei, ci, NULL, NULL))) return rc;
    return box_runs(cbox, strides, want, ov, rx.elem, ck_copy_run, &rx);
}
