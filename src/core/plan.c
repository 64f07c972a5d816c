/* plan.c - gathering local states into one global save plan (see plan.h).
 *
 * Every rank checks all ranks' plans, so errors agree without another collective, but cheaply: the
 * local plans arrive sorted by key and are merged one key at a time through a heap of per-rank
 * cursors, decoding in place (no per-entry copies or allocations), and only the rank that needs it
 * builds the model.  The model and the item lists live in an arena of huge-page blocks: tens of
 * thousands of chunks from a malloc heap mean growing into fresh 4 KiB pages, each a costly first
 * touch (about 16 us on a VM). */
#include "core/plan.h"

#include "format/key_path.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Wire format of a local plan (varint = unsigned LEB128):
 *   varint n; then n records in strictly increasing key order (strcmp), each:
 *     u8 flags: bits 0-1 kind, PF_PRESENT, PF_REPLICATED,
 *               PF_SAME_META   dtype, ndim and shape as in the record before,
 *               PF_SAME_PIECES boxes as in the record before,
 *               PF_NEXT_INDEX  index in the state = the record before's + 1 (0 for the first record),
 *               PF_EXT         a second flags byte follows
 *     [PF_EXT] u8 PX_PATH (the entry has a path, after the boxes) | PX_META (a Fabric layout's meta.pt entry)
 *     [!PF_NEXT_INDEX] varint index
 *     varint shared (leading bytes of the key before that this key repeats), varint suffix length, suffix
 *     [!PF_SAME_META] u8 dtype, u8 ndim, varint shape[ndim]
 *     [!PF_SAME_PIECES] varint npieces, npieces x { varint off[ndim], varint size[ndim] }
 *     [PX_PATH] varint length, path (src/key_path.h)
 * Consecutive keys of a model share most of their bytes, and shards split every tensor the same way,
 * so a typical record is a few bytes: the exchange copies every rank's plan to every rank. */
#define PF_KIND 3u
#define PF_PRESENT 4u
#define PF_REPLICATED 8u
#define PF_SAME_META 16u
#define PF_SAME_PIECES 32u
#define PF_NEXT_INDEX 64u
#define PF_EXT 128u
#define PX_PATH 1u
#define PX_META 2u
#define VARINT_MAX 10
#define MAX_SCALAR_PIECES (1u << 20) /* boxes of a 0-d tensor take no bytes: bound a corrupt count */

typedef struct keyidx {
    const char *key;
    size_t i;
} keyidx;

static int cmp_keyidx(const void *a, const void *b) { return strcmp(((const keyidx *)a)->key, ((const keyidx *)b)->key); }

/* 1 if entry e goes to meta.pt in the Fabric layout: a value or blob at the top of the state dict. */
/* A verbatim item stays a DCP item: meta.pt is one pickle of plain values, and the item may hold any object. */
int plan_in_meta_pt(const st_entry *e) { return e->kind != ENT_TENSOR && !e->verbatim && kp_count(e->path, e->path_len, e->key) == 1; }

int plan_encode_local(const sck_state *st, int fabric, sck_buf *out) {
    size_t n = st->n;
    keyidx *order = NULL;
    for (size_t i = 1; i < n && !order; i++) {
        if (strcmp(st->e[i - 1].key, st->e[i].key) < 0) continue;
        /* Not inserted in key order: sort an index (keys are unique, so the order is total). */
        if (!(order = malloc(n * sizeof *order))) return sck_err(SCK_ERR_NOMEM, "out of memory encoding the local save plan");
        for (size_t k = 0; k < n; k++) order[k] = (keyidx){st->e[k].key, k};
        qsort(order, n, sizeof *order, cmp_keyidx);
    }
    int rc = sck_buf_reserve(out, VARINT_MAX);
    if (!rc) out->len = (size_t)(sck_put_varint(out->data + out->len, n) - out->data);
    const st_entry *prev = NULL;
    size_t prev_i = 0;
    for (size_t k = 0; k < n && !rc; k++) {
        size_t i = order ? order[k].i : k;
        const st_entry *e = &st->e[i];
        size_t kl = strlen(e->key), shared = 0, nb = (size_t)e->ndim * sizeof(int64_t);
        if (prev)
            while (shared < kl && prev->key[shared] == e->key[shared]) shared++;
        size_t need = 2 + 3 * VARINT_MAX + (kl - shared) + 2 + (size_t)(e->ndim + 1) * VARINT_MAX +
                      e->npieces * 2 * (size_t)e->ndim * VARINT_MAX + (e->path ? VARINT_MAX + e->path_len : 0);
        if ((rc = sck_buf_reserve(out, need))) break;
        uint8_t *q = out->data + out->len, *flags = q++;
        unsigned f = (unsigned)e->kind | (e->present ? PF_PRESENT : 0) | (e->replicated ? PF_REPLICATED : 0);
        if (prev && prev->dtype == e->dtype && prev->ndim == e->ndim && !memcmp(prev->shape, e->shape, nb)) f |= PF_SAME_META;
        if (prev && state_same_boxes(prev, e)) f |= PF_SAME_PIECES;
        if (prev ? i == prev_i + 1 : i == 0) f |= PF_NEXT_INDEX;
        unsigned x = (e->path ? PX_PATH : 0) | (fabric && plan_in_meta_pt(e) ? PX_META : 0);
        if (x) f |= PF_EXT;
        *flags = (uint8_t)f;
        if (x) *q++ = (uint8_t)x;
        if (!(f & PF_NEXT_INDEX)) q = sck_put_varint(q, i);
        q = sck_put_varint(q, shared);
        q = sck_put_varint(q, kl - shared);
        memcpy(q, e->key + shared, kl - shared);
        q += kl - shared;
        if (!(f & PF_SAME_META)) {
            *q++ = (uint8_t)e->dtype;
            *q++ = (uint8_t)e->ndim;
            for (int d = 0; d < e->ndim; d++) q = sck_put_varint(q, (uint64_t)e->shape[d]);
        }
        if (!(f & PF_SAME_PIECES)) {
            q = sck_put_varint(q, e->npieces);
            for (size_t p = 0; p < e->npieces; p++) {
                for (int d = 0; d < e->ndim; d++) q = sck_put_varint(q, (uint64_t)e->pieces[p].box.off[d]);
                for (int d = 0; d < e->ndim; d++) q = sck_put_varint(q, (uint64_t)e->pieces[p].box.size[d]);
            }
        }
        if (e->path) {
            q = sck_put_varint(q, e->path_len);
            memcpy(q, e->path, e->path_len);
            q += e->path_len;
        }
        out->len = (size_t)(q - out->data);
        prev = e;
        prev_i = i;
    }
    free(order);
    return rc ? sck_err(SCK_ERR_NOMEM, "out of memory encoding the local save plan") : SCK_OK;
}

/* ---- decoding: one cursor per rank ---- */

typedef struct rd {
    const uint8_t *p, *end;
    int bad;
} rd;

static uint64_t rd_var(rd *r) {
    uint64_t v;
    if (sck_get_varint(&r->p, r->end, &v)) return v;
    r->bad = 1;
    return 0;
}

/* One rank's plan, positioned on its current record. */
typedef struct cur {
    rd r;
    uint64_t left;            /* records not decoded yet */
    int rank;
    int started;
    char *key;                /* the current record's key (NUL-terminated) */
    size_t klen, kcap;
    int kind, present, replicated, dtype, ndim;
    int64_t shape[SCK_MAX_DIMS];
    size_t index;             /* the entry's index in that rank's state */
    const uint8_t *pieces;    /* the boxes' varints */
    uint64_t npieces;
    int pieces_ndim;
    int meta;                 /* PX_META */
    const uint8_t *path;      /* PX_PATH: the path's bytes, else NULL */
    uint64_t path_len;
} cur;

enum { CUR_END = 0, CUR_OK = 1, CUR_BAD = -1, CUR_NOMEM = -2 };

/* Decodes the next record; CUR_END after the last one. */
static int cur_next(cur *c) {
    rd *r = &c->r;
    if (!c->left) return r->p == r->end ? CUR_END : CUR_BAD;
    c->left--;
    if (r->p == r->end) return CUR_BAD;
    unsigned f = *r->p++, x = 0;
    if ((f & PF_KIND) > ENT_VALUE) return CUR_BAD;
    if (f & PF_EXT) {
        if (r->p == r->end) return CUR_BAD;
        x = *r->p++;
        if (x & ~(PX_PATH | PX_META) || !x) return CUR_BAD;
    }
    c->meta = !!(x & PX_META);
    c->index = f & PF_NEXT_INDEX ? (c->started ? c->index + 1 : 0) : (size_t)rd_var(r);
    uint64_t shared = rd_var(r), sl = rd_var(r);
    if (r->bad || shared > c->klen || sl > (uint64_t)(r->end - r->p) || shared + sl == 0 || (!c->started && shared))
        return CUR_BAD;
    const uint8_t *suf = r->p;
    if (memchr(suf, 0, sl)) return CUR_BAD;
    if (c->started) { /* strictly after the key before: the merge relies on it */
        size_t old = c->klen - shared, m = old < sl ? old : sl;
        int cmp = memcmp(suf, c->key + shared, m);
        if (cmp < 0 || (cmp == 0 && sl <= old)) return CUR_BAD;
    }
    if (shared + sl + 1 > c->kcap) {
        size_t cap = (shared + sl + 1) * 2;
        char *k = realloc(c->key, cap);
        if (!k) return CUR_NOMEM;
        c->key = k;
        c->kcap = cap;
    }
    memcpy(c->key + shared, suf, sl);
    c->klen = shared + sl;
    c->key[c->klen] = 0;
    r->p += sl;
    c->kind = (int)(f & PF_KIND);
    c->present = !!(f & PF_PRESENT);
    c->replicated = !!(f & PF_REPLICATED);
    if (!(f & PF_SAME_META)) {
        if (r->end - r->p < 2) return CUR_BAD;
        c->dtype = *r->p++;
        c->ndim = *r->p++;
        if (c->ndim > SCK_MAX_DIMS) return CUR_BAD;
        memset(c->shape, 0, sizeof c->shape);
        for (int d = 0; d < c->ndim; d++) c->shape[d] = (int64_t)rd_var(r);
    } else if (!c->started) {
        return CUR_BAD;
    }
    if (!(f & PF_SAME_PIECES)) {
        c->npieces = rd_var(r);
        c->pieces = r->p;
        c->pieces_ndim = c->ndim;
        if (c->ndim == 0 ? c->npieces > MAX_SCALAR_PIECES : c->npieces > (uint64_t)(r->end - r->p) / (2u * (unsigned)c->ndim))
            return CUR_BAD;
        for (uint64_t v = 2 * (uint64_t)c->ndim * c->npieces; v > 0; v--) { /* skip them; decoded when merged */
            while (r->p < r->end && *r->p & 0x80) r->p++;
            if (r->p == r->end) return CUR_BAD;
            r->p++;
        }
    } else if (!c->started || c->pieces_ndim != c->ndim) {
        return CUR_BAD;
    }
    c->path = NULL;
    c->path_len = 0;
    if (x & PX_PATH) {
        c->path_len = rd_var(r);
        if (r->bad || c->path_len > (uint64_t)(r->end - r->p) || c->path_len > UINT32_MAX || !kp_valid(r->p, (size_t)c->path_len))
            return CUR_BAD;
        c->path = r->p;
        r->p += c->path_len;
    }
    if (r->bad) return CUR_BAD;
    c->started = 1;
    return CUR_OK;
}

/* The current record's boxes (already checked to be well-formed varints). */
static void cur_boxes(const cur *c, sck_box *out) {
    rd r = {c->pieces, c->r.end, 0};
    for (uint64_t j = 0; j < c->npieces; j++) {
        sck_box *b = &out[j];
        b->ndim = c->ndim;
        for (int d = 0; d < c->ndim; d++) b->off[d] = (int64_t)rd_var(&r);
        for (int d = 0; d < c->ndim; d++) b->size[d] = (int64_t)rd_var(&r);
    }
}

/* Heap of cursors by (key, rank): popping a key's group yields it in rank order. */
static int cur_before(const cur *a, const cur *b) {
    int c = strcmp(a->key, b->key);
    return c ? c < 0 : a->rank < b->rank;
}

static void heap_push(cur **h, size_t *n, cur *c) {
    size_t i = (*n)++;
    while (i > 0 && cur_before(c, h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = c;
}

static cur *heap_pop(cur **h, size_t *n) {
    cur *top = h[0], *last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t k = 2 * i + 1;
        if (k >= *n) break;
        if (k + 1 < *n && cur_before(h[k + 1], h[k])) k++;
        if (!cur_before(h[k], last)) break;
        h[i] = h[k];
        i = k;
    }
    if (*n) h[i] = last;
    return top;
}

/* ---- the arena ---- */

typedef struct plan_block {
    struct plan_block *next;
    size_t size, used;
    int mapped;
} plan_block;

struct plan_arena {
    plan_block *head;
    size_t next_size;
};

#define BLOCK_HDR ((sizeof(plan_block) + 63) & ~(size_t)63)
#define HUGE_BLOCK ((size_t)2 << 20)

static void arena_free(struct plan_arena *a) {
    if (!a) return;
    for (plan_block *b = a->head, *nx; b; b = nx) {
        nx = b->next;
        if (b->mapped) munmap(b, b->size);
        else free(b);
    }
    free(a);
}

/* n bytes, 16-aligned, uninitialized; NULL when out of memory.  Small plans use the malloc heap; from
 * 2 MiB on, blocks are mapped with huge pages. */
static void *arena_alloc(save_plan *p, size_t n) {
    if (n > SIZE_MAX / 2) return NULL;
    n = (n + 15) & ~(size_t)15;
    struct plan_arena *a = p->arena;
    if (!a) {
        if (!(a = calloc(1, sizeof *a))) return NULL;
        a->next_size = 64 << 10;
        p->arena = a;
    }
    plan_block *b = a->head;
    if (!b || b->size - b->used < n) {
        size_t sz = a->next_size;
        while (sz < n + BLOCK_HDR) sz *= 2;
        if (sz >= HUGE_BLOCK) {
            sz = (sz + HUGE_BLOCK - 1) & ~(HUGE_BLOCK - 1);
            void *m = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (m == MAP_FAILED) return NULL;
            madvise(m, sz, MADV_HUGEPAGE); /* advice only */
            b = m;
            b->mapped = 1;
        } else {
            if (!(b = malloc(sz))) return NULL;
            b->mapped = 0;
        }
        b->size = sz;
        b->used = BLOCK_HDR;
        b->next = a->head;
        a->head = b;
        a->next_size = sz * 2 < ((size_t)64 << 20) ? sz * 2 : sz;
    }
    void *r = (uint8_t *)b + b->used;
    b->used += n;
    return r;
}

/* Grows an arena array of *cap elements of size el (holding n) to at least want elements. */
static int arena_grow(save_plan *p, void **arr, size_t *cap, size_t n, size_t want, size_t el) {
    if (want <= *cap) return SCK_OK;
    size_t c = *cap ? *cap * 2 : 16;
    while (c < want) c *= 2;
    if (c > SIZE_MAX / el) return SCK_ERR_NOMEM;
    void *na = arena_alloc(p, c * el);
    if (!na) return SCK_ERR_NOMEM;
    if (n) memcpy(na, *arr, n * el);
    *arr = na;
    *cap = c;
    return SCK_OK;
}

void plan_free(save_plan *p) {
    /* The model's entries, keys, chunks and files all live in the arena (see plan.h: not ck_meta_free). */
    arena_free(p->arena);
    free(p->items);
    free(p->nitems);
    memset(p, 0, sizeof *p);
}

/* ---- merging ---- */

typedef struct builder {
    save_plan *p;
    int only;                 /* -1: the model and every rank's items */
    size_t nent;              /* entries so far (the model's index of the next one) */
    size_t cap_e;
    size_t *caps;             /* per rank: capacity of items[rank] */
    uint64_t *load;           /* per rank: data assigned so far */
    sck_box *boxes;           /* scratch: one key's boxes */
    int *owner;
    size_t cap_boxes;
} builder;

static int nomem(void) { return sck_err(SCK_ERR_NOMEM, "out of memory building the save plan"); }

static int add_item(builder *B, int rank, size_t entry, size_t chunk, size_t local_entry, size_t piece) {
    if (B->only >= 0 && B->only != rank) return SCK_OK;
    save_plan *p = B->p;
    size_t n = p->nitems[rank];
    if (n == B->caps[rank] && arena_grow(p, (void **)&p->items[rank], &B->caps[rank], n, n + 1, sizeof(plan_item)))
        return nomem();
    p->items[rank][n] = (plan_item){entry, chunk, local_entry, piece};
    p->nitems[rank] = n + 1;
    return SCK_OK;
}

/* Zeroed arrays of n chunks for model entry e, with their dims when e has dimensions. */
static int new_chunks(builder *B, ck_entry *e, size_t n) {
    size_t nd = 2 * (size_t)e->ndim * n;
    e->chunks = arena_alloc(B->p, (n ? n : 1) * sizeof *e->chunks);
    e->dims = nd ? arena_alloc(B->p, nd * sizeof *e->dims) : NULL;
    if (!e->chunks || (nd && !e->dims)) return nomem();
    memset(e->chunks, 0, (n ? n : 1) * sizeof *e->chunks);
    if (nd) memset(e->dims, 0, nd * sizeof *e->dims);
    return SCK_OK;
}

static int model_entry(builder *B, const cur *f, const cur *pw, ck_entry **out) {
    ck_meta *m = &B->p->m;
    if (m->n == B->cap_e && arena_grow(B->p, (void **)&m->e, &B->cap_e, m->n, m->n + 1, sizeof(ck_entry))) return nomem();
    m->cap = B->cap_e;
    ck_entry *e = &m->e[m->n];
    memset(e, 0, sizeof *e);
    e->dtype = -1;
    if (!(e->key = arena_alloc(B->p, f->klen + 1))) return nomem();
    memcpy(e->key, f->key, f->klen + 1);
    if (pw) { /* the path some rank gave */
        if (!(e->path = arena_alloc(B->p, (size_t)pw->path_len))) return nomem();
        memcpy(e->path, pw->path, (size_t)pw->path_len);
        e->path_len = (uint32_t)pw->path_len;
    }
    m->n++;
    *out = e;
    return SCK_OK;
}

static const char *kind_name(int k) { return k == ENT_TENSOR ? "tensor" : k == ENT_BLOB ? "blob" : "value"; }

/* 1 if the boxes, in order, are row blocks that tile the tensor: the common layout, checked in one
 * pass.  Anything else (and every failure) goes to box_cover_exact. */
static int rows_tile(int ndim, const int64_t *shape, const sck_box *b, size_t n) {
    if (ndim < 1 || n == 0) return 0;
    for (int d = 1; d < ndim; d++)
        if (shape[d] <= 0) return 0;
    int64_t pos = 0;
    for (size_t k = 0; k < n; k++) {
        if (b[k].size[0] <= 0 || b[k].off[0] != pos || b[k].size[0] > shape[0] - pos) return 0;
        for (int d = 1; d < ndim; d++)
            if (b[k].off[d] != 0 || b[k].size[d] != shape[d]) return 0;
        pos += b[k].size[0];
    }
    return pos == shape[0];
}

/* Merges the ranks' views of one key (g: in rank order) into a model entry and assigns its chunks. */
static int merge_key(builder *B, cur *const *g, size_t ng) {
    const cur *f = g[0];
    for (size_t i = 1; i < ng; i++) {
        const cur *x = g[i];
        if (x->kind != f->kind)
            return sck_err(SCK_ERR_MISMATCH, "'%s': rank %d saves a %s, rank %d a %s", f->key, f->rank, kind_name(f->kind),
                           x->rank, kind_name(x->kind));
        if (f->kind == ENT_TENSOR &&
            (x->dtype != f->dtype || x->ndim != f->ndim || memcmp(x->shape, f->shape, (size_t)f->ndim * 8)))
            return sck_err(SCK_ERR_MISMATCH, "'%s': rank %d and rank %d disagree on dtype or global shape", f->key, f->rank,
                           x->rank);
        if (f->kind == ENT_TENSOR && x->replicated != f->replicated)
            return sck_err(SCK_ERR_MISMATCH, "'%s': replicated on rank %d but sharded on rank %d", f->key,
                           f->replicated ? f->rank : x->rank, f->replicated ? x->rank : f->rank);
    }
    const cur *pw = NULL; /* ranks that give a path give the same one */
    for (size_t i = 0; i < ng; i++) {
        const cur *x = g[i];
        if (x->meta != f->meta)
            return sck_err(SCK_ERR_MISMATCH, "'%s': rank %d and rank %d disagree on whether it goes to meta.pt (their paths differ)",
                           f->key, f->rank, x->rank);
        if (!x->path) continue;
        if (!pw) pw = x;
        else if (pw->path_len != x->path_len || memcmp(pw->path, x->path, (size_t)x->path_len))
            return sck_err(SCK_ERR_MISMATCH, "'%s': rank %d and rank %d give it different paths", f->key, pw->rank, x->rank);
    }
    if (f->meta) { /* rank 0 writes it into meta.pt: neither an entry of .metadata nor an item */
        const cur *w = NULL;
        for (size_t i = 0; i < ng && !w; i++)
            if (g[i]->present) w = g[i];
        if (!w) return sck_err(SCK_ERR_INVALID_ARG, "'%s': no rank supplied data for this %s", f->key, kind_name(f->kind));
        if (w->rank != 0)
            return sck_err(SCK_ERR_INVALID_ARG, "'%s': a top-level %s of the Fabric layout goes to meta.pt, which rank 0 writes, but "
                           "only rank %d supplied it", f->key, kind_name(f->kind), w->rank);
        return SCK_OK;
    }
    size_t ei = B->nent++;
    ck_entry *e = NULL;
    int rc = B->only < 0 ? model_entry(B, f, pw, &e) : SCK_OK;
    if (rc) return rc;
    if (f->kind != ENT_TENSOR) {
        const cur *w = NULL;
        for (size_t i = 0; i < ng && !w; i++)
            if (g[i]->present) w = g[i]; /* lowest rank with data keeps its copy */
        if (!w) return sck_err(SCK_ERR_INVALID_ARG, "'%s': no rank supplied data for this %s", f->key, kind_name(f->kind));
        if (e) {
            e->is_bytes = 1;
            if ((rc = new_chunks(B, e, 1))) return rc;
            e->chunks[0].file = (uint32_t)w->rank;
            e->nchunks = 1;
        }
        B->load[w->rank] += 1;
        return add_item(B, w->rank, ei, 0, w->index, 0);
    }
    if (e) {
        e->dtype = f->dtype;
        e->ndim = f->ndim;
        memcpy(e->shape, f->shape, sizeof e->shape);
        snprintf(e->dtype_name, sizeof e->dtype_name, "%s", sck_dtype_name((sck_dtype)f->dtype));
    }
    uint64_t numel = 0, esize = sck_dtype_size((sck_dtype)f->dtype);
    int numel_ok = sck_numel(f->ndim, f->shape, &numel) == 0;
    if (f->replicated) {
        if (numel == 0) return SCK_OK;
        /* Written once, by the holder with the least data so far (as DCP's dedup does). */
        const cur *w = g[0];
        for (size_t i = 1; i < ng; i++)
            if (B->load[g[i]->rank] < B->load[w->rank]) w = g[i];
        if (e) {
            if ((rc = new_chunks(B, e, 1))) return rc;
            if (f->ndim) memcpy(e->dims + f->ndim, f->shape, (size_t)f->ndim * sizeof *e->dims); /* offsets 0 */
            e->chunks[0].file = (uint32_t)w->rank;
            e->nchunks = 1;
        }
        B->load[w->rank] += numel * esize;
        return add_item(B, w->rank, ei, 0, w->index, 0);
    }
    size_t total = 0;
    for (size_t i = 0; i < ng; i++) total += (size_t)g[i]->npieces;
    if (total > B->cap_boxes) {
        size_t cap = total * 2;
        sck_box *nb = realloc(B->boxes, cap * sizeof *nb);
        if (nb) B->boxes = nb;
        int *no = nb ? realloc(B->owner, cap * sizeof *no) : NULL;
        if (no) B->owner = no;
        if (!nb || !no) return sck_err(SCK_ERR_NOMEM, "'%s': out of memory checking coverage", f->key);
        B->cap_boxes = cap;
    }
    sck_box *boxes = B->boxes;
    size_t k = 0;
    for (size_t i = 0; i < ng; i++) {
        cur_boxes(g[i], boxes + k);
        for (uint64_t j = 0; j < g[i]->npieces; j++) B->owner[k++] = g[i]->rank;
    }
    long ba = -1, bb = -1;
    if (!(numel_ok && rows_tile(f->ndim, f->shape, boxes, total)) && !box_cover_exact(f->ndim, f->shape, boxes, total, &ba, &bb)) {
        if (ba >= 0 && bb >= 0)
            return sck_err(SCK_ERR_COVERAGE, "'%s': shards overlap (a box of rank %d and a box of rank %d)", f->key,
                           B->owner[ba], B->owner[bb]);
        if (ba >= 0) return sck_err(SCK_ERR_COVERAGE, "'%s': a box of rank %d lies outside the tensor", f->key, B->owner[ba]);
        return sck_err(SCK_ERR_COVERAGE, "'%s': the shards of all ranks do not cover the whole tensor", f->key);
    }
    if (e) {
        if ((rc = new_chunks(B, e, total))) return rc;
        for (k = 0; k < total; k++) {
            int64_t *dims = e->dims + 2 * (size_t)f->ndim * k;
            if (f->ndim) memcpy(dims, boxes[k].off, (size_t)f->ndim * sizeof *dims);
            if (f->ndim) memcpy(dims + f->ndim, boxes[k].size, (size_t)f->ndim * sizeof *dims);
            e->chunks[k].file = (uint32_t)B->owner[k];
        }
        e->nchunks = total;
    }
    k = 0;
    for (size_t i = 0; i < ng && !rc; i++) {
        for (uint64_t j = 0; j < g[i]->npieces && !rc; j++, k++) {
            rc = add_item(B, g[i]->rank, ei, k, g[i]->index, (size_t)j);
            B->load[g[i]->rank] += box_numel(&boxes[k]) * esize;
        }
    }
    return rc;
}

static int corrupt(int rank, int why) {
    return why == CUR_NOMEM ? nomem() : sck_err(SCK_ERR_FORMAT, "save plan from rank %d is corrupt", rank);
}

static int build(const uint8_t *const *parts, const size_t *lens, int nranks, int only_rank, save_plan *out) {
    memset(out, 0, sizeof *out);
    out->nranks = nranks;
    builder B;
    memset(&B, 0, sizeof B);
    B.p = out;
    B.only = only_rank < nranks ? only_rank : -1;
    size_t nr = (size_t)(nranks > 0 ? nranks : 1);
    out->items = calloc(nr, sizeof *out->items);
    out->nitems = calloc(nr, sizeof *out->nitems);
    B.caps = calloc(nr, sizeof *B.caps);
    B.load = calloc(nr, sizeof *B.load);
    cur *cs = calloc(nr, sizeof *cs);
    cur **heap = malloc(nr * sizeof *heap), **group = malloc(nr * sizeof *group);
    int rc = SCK_OK;
    if (!out->items || !out->nitems || !B.caps || !B.load || !cs || !heap || !group) rc = nomem();
    size_t nh = 0, most = 0;
    for (int r = 0; r < nranks && !rc; r++) {
        cur *c = &cs[r];
        c->r = (rd){parts[r], parts[r] + lens[r], 0};
        c->rank = r;
        c->left = rd_var(&c->r);
        if (c->r.bad || c->left > lens[r]) {
            rc = corrupt(r, CUR_BAD);
            break;
        }
        if (c->left > most) most = (size_t)c->left;
        if (B.only < 0 || B.only == r) { /* usually one item per record: no regrowth */
            if (arena_grow(out, (void **)&out->items[r], &B.caps[r], 0, (size_t)c->left + 1, sizeof(plan_item))) rc = nomem();
        }
        int k = rc ? CUR_OK : cur_next(c);
        if (k < 0) rc = corrupt(r, k);
        else if (k == CUR_OK && !rc) heap_push(heap, &nh, c);
    }
    if (!rc && B.only < 0) {
        ck_meta *m = &out->m;
        if (arena_grow(out, (void **)&m->e, &B.cap_e, 0, most + 1, sizeof(ck_entry)) ||
            !(m->files = arena_alloc(out, nr * sizeof *m->files)))
            rc = nomem();
        m->cap = B.cap_e;
        for (int r = 0; r < nranks && !rc; r++) {
            char name[64];
            int len = snprintf(name, sizeof name, "__%d_0.distcp", r);
            if (!(m->files[r] = arena_alloc(out, (size_t)len + 1))) rc = nomem();
            else memcpy(m->files[r], name, (size_t)len + 1);
            m->nfiles = (size_t)r + 1;
        }
    }
    while (nh && !rc) {
        size_t ng = 0;
        group[ng++] = heap_pop(heap, &nh);
        while (nh && !strcmp(heap[0]->key, group[0]->key)) group[ng++] = heap_pop(heap, &nh);
        rc = merge_key(&B, group, ng);
        for (size_t i = 0; i < ng && !rc; i++) {
            int k = cur_next(group[i]);
            if (k < 0) rc = corrupt(group[i]->rank, k);
            else if (k == CUR_OK) heap_push(heap, &nh, group[i]);
        }
    }
    for (size_t r = 0; cs && r < nr; r++) free(cs[r].key);
    free(cs);
    free(heap);
    free(group);
    free(B.caps);
    free(B.load);
    free(B.boxes);
    free(B.owner);
    if (rc) plan_free(out);
    return rc;
}

int plan_build_ex(const uint8_t *all, const size_t *counts, size_t skip, int nranks, int only_rank, save_plan *out) {
    memset(out, 0, sizeof *out);
    size_t n = (size_t)(nranks > 0 ? nranks : 1);
    const uint8_t **parts = malloc(n * sizeof *parts);
    size_t *lens = malloc(n * sizeof *lens);
    if (!parts || !lens) {
        free(parts);
        free(lens);
        return nomem();
    }
    size_t off = 0;
    int rc = SCK_OK;
    for (int r = 0; r < nranks && !rc; r++) {
        if (counts[r] < skip) rc = sck_err(SCK_ERR_FORMAT, "rank %d's save plan: %zu bytes, shorter than its %zu-byte header", r, counts[r], skip);
        parts[r] = all + off + skip;
        lens[r] = counts[r] - skip;
        off += counts[r];
    }
    if (!rc) rc = build(parts, lens, nranks, only_rank, out);
    free(parts);
    free(lens);
    return rc;
}

int plan_build(const uint8_t *all, const size_t *counts, int nranks, save_plan *out) {
    return plan_build_ex(all, counts, 0, nranks, -1, out);
}
