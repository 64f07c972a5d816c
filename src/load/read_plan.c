/* read_plan.c - planning a load's reads: one read op per (requested box, saved chunk) overlap, sorted by file
 * and offset, small items batched into preadv calls, the start staggered between ranks; then running
 * them in that order. */
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

/* A small item this rank reads as one run, in a batch of such items (read_small_batch): one it checks
 * (read whole), or, when the ranks are threads sharing a page cache, one another rank checks (only the
 * run, and the bytes before it since the last one, are read). */
#define SMALL_HANDS 2 /* other ranks' runs of a small item this rank checks read straight into their buffers */
typedef struct small_rd {
    size_t ei, ci;
    uint64_t run, len;      /* the run's file offset and length, inside the item */
    uint8_t *dst;
    int check;
    uint64_t from, to;      /* the file bytes this entry covers: the item, or the run */
    int nh;                 /* hand-overs read in place (place_hands), by file offset */
    ck_hand *hand[SMALL_HANDS];
} small_rd;

static int cmp_read_op(const void *a, const void *b) {
    const read_op *x = a, *y = b;
    if (x->file != y->file) return x->file < y->file ? -1 : 1;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    return x->k < y->k ? -1 : x->k > y->k;
}

/* The read ops of want k (appended to *op, which grows), after checking it: kind, dtype, fit and
 * coverage. */
/* Fills o->runs (and the run, if one) for overlap ov of want w with chunk ci of e, when the chunk is an
 * item of ours with a checksum: its payload's place is known without reading anything. */
static void own_runs(const sck_ckpt *ck, const ck_entry *e, size_t ci, const ck_want *w, const sck_box *ov, read_op *o) {
    const sck_box *want = w->box;
    const ck_chunk *c = &e->chunks[ci];
    if (c->transformed || c->raw || ck_resolve_reads(ck, c) || !c->has_crc) return;
    sck_box cbox;
    ck_chunk_box(e, ci, &cbox);
    size_t elem = sck_dtype_size((sck_dtype)e->dtype);
    run_list l = ck_run_list_first();
    if (box_single_run(&cbox, want, ov, elem, &l.first_src, &l.first_dst, &l.first_len)) { /* rows, flat slices */
        l.n = 1;
    } else {
        int64_t sb[SCK_MAX_DIMS];
        box_strides(&cbox, sb);
        box_runs(&cbox, sb, want, ov, elem, ck_collect_run, &l);
    }
    if (l.n != 1) {
        o->runs = l.n > 1 ? 2 : 0;
        return;
    }
    uint64_t a = c->offset + c->payload + l.first_src;
    if (c->payload >= c->length || l.first_src > c->length - c->payload || l.first_len > c->offset + c->length - a) return;
    o->runs = 1, o->run = a, o->len = l.first_len, o->dst = (uint8_t *)w->dst + l.first_dst;
}

static int plan_want(const sck_ckpt *ck, const ck_want *w, size_t k, read_op **op, size_t *m, size_t *cap) {
    const ck_entry *e = &ck->m.e[w->ei];
    if (e->is_bytes) return sck_err(SCK_ERR_MISMATCH, "'%s': is a bytes entry, not a tensor", e->key);
    if (e->dtype < 0) return sck_err(SCK_ERR_UNSUPPORTED, "'%s': stored dtype %s is not supported", e->key, e->dtype_name);
    if (w->box->ndim != e->ndim || !box_within(w->box, e->shape))
        return sck_err(SCK_ERR_INVALID_ARG, "'%s': requested box does not fit the stored shape", e->key);
    uint64_t need = box_numel(w->box), got = 0;
    if (need == 0) return SCK_OK;
    if (k > UINT32_MAX || e->nchunks > UINT32_MAX || w->ei > UINT32_MAX) /* read_op's fields */
        return sck_err(SCK_ERR_UNSUPPORTED, "'%s': more than 2^32 boxes, chunks or entries in one load", e->key);
    ck_ov_it it;
    size_t ci;
    sck_box ov;
    ck_ov_begin(&it, e, w->box, ckpt_chunk_hint(ck, e));
    while (ck_ov_next(&it, &ci, &ov)) {
        uint64_t elems = box_numel(&ov);
        got += elems;
        if (*m == *cap) {
            size_t c2 = *cap ? 2 * *cap : 64;
            read_op *p = c2 <= SIZE_MAX / sizeof *p ? sck_big_realloc(*op, c2 * sizeof *p) : NULL;
            if (!p) return sck_err(SCK_ERR_NOMEM, "%s: out of memory planning %zu reads", ck->dir, c2);
            *op = p;
            *cap = c2;
        }
        read_op *o = &(*op)[(*m)++];
        *o = (read_op){e->chunks[ci].file, 0, elems == need, elems == ck_chunk_numel(e, ci), 0, e->chunks[ci].offset, (uint32_t)k,
                       (uint32_t)ci, (uint32_t)w->ei, elems, 0, 0, NULL};
        own_runs(ck, e, ci, w, &ov, o);
    }
    if (got != need) /* never more: saved chunks do not overlap */
        return sck_err(SCK_ERR_COVERAGE, "'%s': saved chunks cover %llu of the %llu requested elements (the checkpoint has holes)",
                       e->key, (unsigned long long)got, (unsigned long long)need);
    return SCK_OK;
}

/* Whether want x's part of chunk o->ci can go in a batch: a small item stored little-endian whose
 * overlap is one run inside it, which this rank checks (and has not yet) or, with thread ranks, which
 * another rank checks whole.  Fills *s. */
static int small_batchable(sck_ckpt *ck, const ck_want *x, const read_op *o, small_rd *s) {
    size_t ci = o->ci;
    const ck_entry *e = &ck->m.e[x->ei];
    const ck_chunk *c = &e->chunks[ci];
    int peer = ckpt_peer_mark(ck, x->ei, ci);
    if (c->length > SMALL_ITEM || c->transformed || peer > 1 || (peer && !ck->one_cache)) return 0;
    if (!peer && (!ck->verify || !c->has_crc)) return 0;
    ck_res *r = NULL;
    if (o->runs == 1) { /* an item of ours (little-endian): the run was worked out when planned */
        int fd; /* opened and the item's window checked here, as a resolve would: the batch reads through it */
        uint64_t fsize;
        if (ck_res_ready(ck, e->key) != SCK_OK || ck_get_file(ck, c->file, &fd, &fsize) != SCK_OK || ck_check_window(ck, e, c, fsize) != SCK_OK) {
            sck_err_clear(); /* ck_read_overlap says what is wrong */
            return 0;
        }
        if (ck->res[x->ei][ci].verified && !peer) return 0;
        uint64_t a = o->run, len = o->len;
        *s = (small_rd){x->ei, ci, a, len, o->dst, !peer, peer ? a : c->offset, peer ? a + len : c->offset + c->length, 0, {NULL}};
        return 1;
    }
    if (ckpt_resolve_chunk(ck, x->ei, ci, &r) != SCK_OK) {
        sck_err_clear(); /* ck_read_overlap says what is wrong */
        return 0;
    }
    if ((r->verified && !peer) || r->swap) return 0;
    uint64_t elem = sck_dtype_size((sck_dtype)e->dtype), n = ck_chunk_numel(e, ci);
    if (!r->strides && o->elems == n && o->whole) { /* the box is the chunk (a same-layout load) */
        if (n * elem > c->length || r->data_off < c->offset || r->data_off - c->offset > c->length - n * elem) return 0;
        uint64_t a = r->data_off, len = n * elem;
        *s = (small_rd){x->ei, ci, a, len, x->dst, !peer, peer ? a : c->offset, peer ? a + len : c->offset + c->length, 0, {NULL}};
        return 1;
    }
    sck_box ov, cbox;
    ck_chunk_intersect(e, ci, x->box, &cbox, &ov);
    run_list l = ck_run_list_first();
    int64_t sb[SCK_MAX_DIMS];
    box_runs(&cbox, ck_res_strides(ck, &cbox, r, sb), x->box, &ov, elem, ck_collect_run, &l);
    uint64_t a = r->data_off + l.first_src;
    if (l.n != 1 || a < c->offset || a > c->offset + c->length || l.first_len > c->offset + c->length - a) return 0;
    *s = (small_rd){x->ei, ci, a, l.first_len, (uint8_t *)x->dst + l.first_dst, !peer, peer ? a : c->offset,
                    peer ? a + l.first_len : c->offset + c->length, 0, {NULL}};
    return 1;
}

/* The other ranks' single runs of small item s this rank checks (hand-overs, load_handoff.h), to be read
 * straight into their buffers with the item rather than copied out of the scratch after: all of them
 * or none (then ck_hand_over copies them), when they are few, inside the item and apart from ours and
 * from each other. */
static void place_hands(sck_ckpt *ck, small_rd *s) {
    s->nh = 0;
    size_t n = 0, k = 0;
    ck_hand *h = s->check && ck->nhands ? ck_hands_of(ck, s->ei, s->ci, &n) : NULL;
    for (size_t i = 0; i < n; i++) {
        if (h[i].want || h[i].done) continue;
        if (k == SMALL_HANDS || h[i].run < s->from || h[i].run > s->to || h[i].len > s->to - h[i].run || !h[i].len) return;
        uint64_t a = h[i].run, b = a + h[i].len;
        if (a < s->run + s->len && s->run < b) return; /* the same bytes as ours (a replicated box) */
        for (size_t j = 0; j < k; j++)
            if (a < s->hand[j]->run + s->hand[j]->len && s->hand[j]->run < b) return;
        size_t j = k++;
        for (; j > 0 && s->hand[j - 1]->run > a; j--) s->hand[j] = s->hand[j - 1]; /* by offset */
        s->hand[j] = &h[i];
    }
    s->nh = (int)k;
}

/* Entry s's runs read into place, ours and the placed hand-overs', by file offset: returns how many. */
static int placed_runs(const small_rd *s, uint64_t (*r)[2], uint8_t **d) {
    int n = 0, ours = 0;
    for (int h = 0; h <= s->nh; h++) {
        if (!ours && (h == s->nh || s->run < s->hand[h]->run)) r[n][0] = s->run, r[n][1] = s->len, d[n++] = s->dst, ours = 1;
        if (h < s->nh) r[n][0] = s->hand[h]->run, r[n][1] = s->hand[h]->len, d[n++] = s->hand[h]->dst;
    }
    return n;
}

/* Small items back to back in one file, read by one preadv: each run straight into its destination,
 * every other byte (headers, trailers, short gaps) into ck->scratch, then each item this rank checks
 * checked from those pieces.  The page cache's copy is the only one, where a read window would add a
 * second; and one system call serves up to 256 items, where the runs of items other ranks check took
 * one each. */
static int read_small_batch(sck_ckpt *ck, const small_rd *s, size_t n) {
    const ck_chunk *c0 = &ck->m.e[s[0].ei].chunks[s[0].ci];
    struct iovec iov[BATCH_IOV];
    int k = 0;
    uint8_t *sp = ck->scratch;
    uint64_t pos = s[0].from, r[1 + SMALL_HANDS][2];
    uint8_t *d[1 + SMALL_HANDS];
    for (size_t i = 0; i < n; i++) {
        int nr = placed_runs(&s[i], r, d);
        for (int q = 0; q <= nr; q++) { /* the bytes before each run (and after the last) into the scratch */
            uint64_t end = q < nr ? r[q][0] : s[i].to;
            uint8_t *to[2] = {sp, q < nr ? d[q] : NULL};
            size_t len[2] = {(size_t)(end - pos), q < nr ? (size_t)r[q][1] : 0};
            sp += len[0];
            pos = end + len[1];
            for (int x = 0; x < 2; x++) {
                if (!len[x]) continue;
                if (k && (uint8_t *)iov[k - 1].iov_base + iov[k - 1].iov_len == to[x]) iov[k - 1].iov_len += len[x];
                else iov[k++] = (struct iovec){to[x], len[x]};
            }
        }
    }
    int rc = ck_preadv_full(ck, s[0].ei, s[0].ci, ck->files[c0->file].fd, iov, k, s[0].from);
    sp = ck->scratch;
    pos = s[0].from;
    for (size_t i = 0; i < n && !rc; i++) {
        const ck_chunk *c = &ck->m.e[s[i].ei].chunks[s[i].ci];
        sp += s[i].from - pos;
        pos = s[i].to;
        if (!s[i].check) continue; /* another rank checks it */
        int nr = placed_runs(&s[i], r, d);
        const uint8_t *item = sp; /* its scratch bytes: head, between the runs, tail */
        uint64_t at = c->offset;
        uint32_t crc = 0;
        for (int q = 0; q <= nr; q++) {
            uint64_t end = q < nr ? r[q][0] : c->offset + c->length;
            crc = sck_crc32c(crc, sp, (size_t)(end - at));
            sp += end - at;
            at = end;
            if (q < nr) crc = sck_crc32c(crc, d[q], (size_t)r[q][1]), at += r[q][1];
        }
        if (crc != c->crc32c) {
            rc = ckpt_crc_mismatch(ck, s[i].ei, s[i].ci, crc);
            break;
        }
        ck->res[s[i].ei][s[i].ci].verified = 1;
        for (int h = 0; h < s[i].nh; h++) s[i].hand[h]->done = 1; /* in place already */
        uint64_t head = s[i].run - c->offset;
        const uint8_t *p[3] = {item, s[i].dst, item + head}; /* with no hand-over placed: the item in three pieces */
        const uint64_t pat[4] = {c->offset, s[i].run, s[i].run + s[i].len, c->offset + c->length};
        rc = ck_hand_over(ck, s[i].ei, s[i].ci, p, pat);
    }
    return rc;
}

/* How many ops from op[j] on go in one batch of small items (0 or 1: read op[j] alone); fills s. */
static size_t small_batch(sck_ckpt *ck, const ck_want *w, const read_op *op, size_t m, size_t j, small_rd *s) {
    if (!ck->scratch && !(ck->scratch = sck_big_alloc(BATCH_SCRATCH))) return 0; /* no batches: slower, not wrong */
    size_t n = 0;
    int iovs = 0;
    uint64_t scratch = 0, end = 0;
    for (; j + n < m; n++) {
        const read_op *o = &op[j + n];
        if (j + n + CK_AHEAD < m) ckpt_prefetch_box(w[op[j + n + CK_AHEAD].k].box);
        if ((n && o->file != op[j].file) || o->handed || iovs + 4 + 2 * SMALL_HANDS > BATCH_IOV || !small_batchable(ck, &w[o->k], o, &s[n]))
            break;
        place_hands(ck, &s[n]);
        if (n && (s[n].from < end || s[n].from - end > (s[n].check ? BATCH_GAP : PEER_GAP) || s[n].to - s[0].from > BATCH_BYTES)) break;
        uint64_t more = (n ? s[n].from - end : 0) + (s[n].to - s[n].from) - s[n].len;
        if (scratch + more > BATCH_SCRATCH) break;
        scratch += more;
        iovs += 4 + 2 * s[n].nh;
        end = s[n].to;
    }
    return n;
}

/* Rotates the ops (in file order) to start at this rank's share of the checkpoint: the first op at or
 * past rank/nranks of the way through the files (each file counted as one unit, up to the end of its
 * last item).  Ranks that read parts of the same items (a reshard) then start in different places,
 * several streams at once as the disk likes, each mostly finding the rest in the page cache when it
 * gets there; where every rank reads its own file, nothing moves. */
/* Whether this rank's ops are rotated (stagger), and the file position its share starts at. */
static int staggered(const sck_ckpt *ck, size_t m) { return m > 1 && ck->rank > 0 && ck->rank < ck->nranks; }

static double share_start(const sck_ckpt *ck) { return (double)ck->m.nfiles * ck->rank / ck->nranks; }

static int stagger(const sck_ckpt *ck, read_op *op, size_t m) {
    const uint64_t *ext = ck->m.file_end;
    double target = share_start(ck);
    size_t j = 0;
    while (j < m && ckpt_file_pos(ext, op[j].file, op[j].off) < target) j++;
    if (j == 0 || j == m) return SCK_OK;
    read_op *t = sck_big_alloc(j * sizeof *t);
    if (!t) return sck_err(SCK_ERR_NOMEM, "%s: out of memory ordering reads", ck->dir);
    memcpy(t, op, j * sizeof *t);
    memmove(op, op + j, (m - j) * sizeof *op);
    memcpy(op + (m - j), t, j * sizeof *t);
    sck_big_free(t);
    return SCK_OK;
}

/* Puts the ops (made in want order) in file order and staggers them, in one pass where it can: within
 * one file, want order is usually file order already (a save writes each rank's chunks in the order
 * of its state), and a stable distribution by file then sorts them, placed straight at their
 * staggered positions.  *used: 0 when the ops had to be sorted (sck_sort) and are not staggered yet. */
static void order_reads(sck_ckpt *ck, read_op **op, size_t m, int *used) {
    size_t nf = ck->m.nfiles;
    *used = 0;
    size_t *at = calloc(nf + 1, sizeof *at);
    uint64_t *last = calloc(nf ? nf : 1, sizeof *last);
    read_op *t = at && last ? sck_big_alloc(m * sizeof *t) : NULL;
    int ok = t != NULL, stag = staggered(ck, m);
    double target = stag ? share_start(ck) : 0;
    size_t j = 0; /* the ops before the rank's share of the files: they go last */
    for (size_t i = 0; ok && i < m; i++) {
        uint32_t f = (*op)[i].file;
        if (f >= nf || (at[f + 1] && (*op)[i].off < last[f])) ok = 0;
        else last[f] = (*op)[i].off, at[f + 1]++, j += stag && ckpt_file_pos(ck->m.file_end, f, (*op)[i].off) < target;
    }
    if (ok) {
        for (size_t f = 0; f < nf; f++) at[f + 1] += at[f];
        if (j == m) j = 0; /* nothing in the rank's share: no rotation (as stagger) */
        for (size_t i = 0; i < m; i++) {
            size_t k = at[(*op)[i].file]++;
            t[k >= j ? k - j : k + (m - j)] = (*op)[i];
        }
        sck_big_free(*op);
        *op = t;
        *used = 1;
    } else {
        sck_big_free(t);
    }
    free(at);
    free(last);
    if (!ok) sck_sort(*op, m, sizeof **op, cmp_read_op);
}

int ckpt_plan_reads(sck_ckpt *ck, const ck_want *w, size_t n, ck_reads *r) {
    size_t m = 0, cap = n < SIZE_MAX / 2 / sizeof(read_op) ? n + n / 2 + 16 : 0; /* most wants overlap a chunk or two */
    read_op *op = cap ? sck_big_alloc(cap * sizeof *op) : NULL;
    if (!op) cap = 0; /* plan_want grows it, or says it is out of memory */
    int rc = SCK_OK;
    r->op = NULL;
    r->m = 0;
    for (size_t k = 0; k < n && !rc; k++) {
        if (k + CK_AHEAD < n) ckpt_prefetch_box(w[k + CK_AHEAD].box), ckpt_prefetch_chunks(&ck->m.e[w[k + CK_AHEAD].ei]);
        if (k + 2 * CK_AHEAD < n) __builtin_prefetch(&ck->m.e[w[k + 2 * CK_AHEAD].ei]);
        rc = plan_want(ck, &w[k], k, &op, &m, &cap);
    }
    /* In file order: the windows and the kernel's read-ahead then serve consecutive items, where
     * tensor order would hop between the files of the saving ranks (a reshard reads each tensor
     * from several files) and refill a window for every item. */
    int placed = 0;
    if (!rc && m) order_reads(ck, &op, m, &placed);
    if (!rc && !placed && staggered(ck, m)) rc = stagger(ck, op, m);
    if (rc) {
        sck_big_free(op);
        return rc;
    }
    r->op = op;
    r->m = m;
    return SCK_OK;
}

int ckpt_read_boxes(sck_ckpt *ck, const ck_want *w, size_t n) {
    ck_reads r;
    int rc = ckpt_plan_reads(ck, w, n, &r);
    return rc ? rc : ckpt_run_reads(ck, w, &r);
}

int ckpt_run_reads(sck_ckpt *ck, const ck_want *w, ck_reads *r) {
    read_op *op = r->op;
    size_t m = r->m;
    int rc = SCK_OK;
    r->op = NULL;
    r->m = 0;
    small_rd *sb = m ? malloc((BATCH_IOV / 4) * sizeof *sb) : NULL;
    for (size_t j = 0; j < m && !rc;) {
        if (op[j].handed) { /* its owner copies it into place */
            j++;
            continue;
        }
        size_t nb = sb ? small_batch(ck, w, op, m, j, sb) : 0;
        if (nb > 1) {
            rc = ck_finish_pending(ck);
            if (!rc) rc = read_small_batch(ck, sb, nb);
            j += nb;
            continue;
        }
        const ck_want *x = &w[op[j].k];
        sck_box ov, cbox;
        ck_chunk_intersect(&ck->m.e[x->ei], op[j].ci, x->box, &cbox, &ov);
        size_t nx = j + 1;
        while (nx < m && op[nx].handed) nx++;
        ck->look = nx < m ? &w[op[nx].k] : NULL;
        ck->look_ci = nx < m ? op[nx].ci : 0;
        rc = ck_read_overlap(ck, x->ei, op[j].ci, &cbox, x->box, &ov, x->dst);
        j++;
    }
    ck->look = NULL;
    if (!rc) rc = ck_finish_pending(ck);
    ck->pend.on = 0; /* after an error: nothing is left to check */
    if (ck->rp) rp_finish(ck->rp); /* a range queued for a read an error left undone: nothing lands later */
    free(sb);
    sck_big_free(op);
    return rc;
}
