/* ckpt.c - reading checkpoints: open, list, and read any box of a tensor from whichever chunks
 * overlap it, touching only the bytes needed. */
#include "ckpt.h"

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

#include "commit.h"
#include "crc32c.h"
#include "key_path.h"
#include "meta_pt.h"
#include "meta_side.h"
#include "meta_wire.h"
#include "torch_item.h"
#include "zip.h"

#define FEW_RUNS 8                   /* a part of a small item read as this many runs or fewer is read run by run */
#define HEAD_BYTES (64u << 10)       /* a large item's headers: read this much at its start or end */
#define DIRECT_RUN (1u << 20)        /* runs at least this long: O_DIRECT where asked, read ahead on the pipe */
#define WINDOW_RUN (64u << 10)       /* runs of large items shorter than this are copied out of a read window;
                                      * longer ones are read straight into the caller's buffer (a window is
                                      * filled to the item's end: a 680 KiB run of a 2 MiB item read 2 MiB,
                                      * then copied).  Small items stay in windows: they are read whole
                                      * with their neighbours, and checked from there. */
#define MAX_PKL (64u << 20)
#define MAX_RUNS (1u << 20)          /* one-pass check-and-copy keeps at most this many runs in memory */
#define WS_DIO_ALIGN 4096u           /* O_DIRECT alignment of offsets, lengths and memory */
#define PIPE_MIN (1u << 20)          /* ranges this long are read ahead on the pipe's thread */
#define PREFETCH_AHEAD (64u << 20)   /* of a large item, asked of the kernel before it is needed */
#define BATCH_IOV 1024               /* small items read together: iovecs per preadv (IOV_MAX) */
#define BATCH_BYTES (8u << 20)       /* file bytes per preadv */
#define BATCH_SCRATCH (1u << 20)     /* bytes around the runs (headers, trailers, gaps) per preadv */
#define BATCH_GAP (64u << 10)        /* a gap between two items this short is read, not skipped */
#define PEER_GAP (16u << 10)         /* the same before a run of an item another rank checks (thread ranks) */

static void ckpt_free_res(sck_ckpt *ck) {
    for (int i = 0; i < 3; i++) {
        free(ck->runbuf[i].r);
        ck->runbuf[i] = (ck_runbuf){NULL, 0};
    }
    free(ck->res);
    ck->res = NULL;
    free(ck->strides);
    ck->strides = NULL;
    ck->nstrides = ck->capstrides = 0;
    sck_huge_free(ck->res_pool, ck->res_pool_n, sizeof *ck->res_pool);
    ck->res_pool = NULL;
}

void sck_ckpt_close(sck_ckpt *ck) {
    if (!ck) return;
    if (ck->files) {
        for (size_t i = 0; i < ck->m.nfiles; i++)
            if (ck->files[i].fd >= 0) close(ck->files[i].fd);
        for (size_t i = 0; i < ck->m.nfiles; i++) {
            if (ck->files[i].dfd >= 0) close(ck->files[i].dfd);
            if (ck->files[i].sfd >= 0) close(ck->files[i].sfd);
        }
    }
    free(ck->files);
    rc_free(&ck->rc);
    rp_free(ck->rp);
    ckpt_free_res(ck);
    free(ck->peer_checks);
    sck_big_free(ck->hands);
    for (size_t i = 0; i < ck->ncombs; i++) free(ck->combs[i].r);
    free(ck->combs);
    free(ck->segs);
    if (ck->shared) ckpt_shared_release(ck->shared, 1);
    else ck_meta_free(&ck->m);
    free(ck->dir);
    free(ck->order);
    free(ck->spans);
    free(ck->bigs);
    sck_big_free(ck->scratch);
    sck_value_free(ck->meta_pt);
    free(ck->meta_order);
    free(ck->meta_nbytes);
    free(ck);
}

/* Whether entry e's chunks are non-empty row blocks, in order, each starting where the one before
 * ends: they cannot overlap.  How a row-split save stores every tensor; checked without copying a box. */
static int row_blocks_in_order(const ck_entry *e) {
    if (e->ndim < 1) return 0;
    int64_t next = 0;
    for (size_t c = 0; c < e->nchunks; c++) {
        const int64_t *off = ck_chunk_off(e, c), *size = ck_chunk_size(e, c);
        if (off[0] != next || size[0] <= 0) return 0;
        for (int d = 1; d < e->ndim; d++)
            if (off[d] != 0 || size[d] != e->shape[d]) return 0;
        next += size[0];
    }
    return 1;
}

/* Saved chunks of one tensor must not overlap: which copy would a read return?  Holes are allowed
 * (reads of covered boxes still work; others fail with SCK_ERR_COVERAGE). */
static int check_overlaps(const sck_ckpt *ck) {
    size_t most = 0;
    for (size_t i = 0; i < ck->m.n; i++)
        if (!ck->m.e[i].is_bytes && ck->m.e[i].nchunks > most) most = ck->m.e[i].nchunks;
    if (most < 2) return SCK_OK;
    sck_box *boxes = malloc(most * sizeof *boxes);
    if (!boxes) return sck_err(SCK_ERR_NOMEM, "%s: out of memory checking chunk overlaps", ck->dir);
    int rc = SCK_OK;
    for (size_t i = 0; i < ck->m.n && !rc; i++) {
        const ck_entry *e = &ck->m.e[i];
        if (e->is_bytes || e->nchunks < 2 || row_blocks_in_order(e)) continue;
        for (size_t c = 0; c < e->nchunks; c++) ck_chunk_box(e, c, &boxes[c]);
        long a, b;
        if (!box_cover_exact(e->ndim, e->shape, boxes, e->nchunks, &a, &b) && a >= 0 && b >= 0)
            rc = sck_err(SCK_ERR_COVERAGE, "%s: tensor '%s': saved chunks %ld and %ld overlap", ck->dir, e->key, a, b);
    }
    free(boxes);
    return rc;
}

/* A new sck_ckpt for dir on model m (a struct copy: the caller settles who owns the model). */
static int ckpt_alloc(const char *dir, const ck_meta *m, sck_ckpt **out) {
    sck_ckpt *ck = calloc(1, sizeof *ck);
    if (!ck) return sck_err(SCK_ERR_NOMEM, "%s: out of memory", dir);
    ck->m = *m;
    ck->dir = sck_strdup(dir);
    ck->files = calloc(m->nfiles ? m->nfiles : 1, sizeof *ck->files);
    ck->res = calloc(m->n ? m->n : 1, sizeof *ck->res);
    if (!ck->dir || !ck->files || !ck->res) {
        free(ck->dir);
        free(ck->files);
        free(ck->res);
        free(ck);
        return sck_err(SCK_ERR_NOMEM, "%s: out of memory", dir);
    }
    for (size_t i = 0; i < m->nfiles; i++) ck->files[i].fd = ck->files[i].dfd = ck->files[i].sfd = -1;
    rc_init(&ck->rc);
    ck->verify = 1;
    ck->nranks = 1;
    ck->advised_off = UINT64_MAX; /* nothing asked for yet */
    *out = ck;
    return SCK_OK;
}

/* m->file_end, m->item_base and each chunk's `tail`, computed once: every rank's reading order and
 * check plan use them, and thread ranks share the model (ckpt_share). */
static int model_index(const char *dir, ck_meta *m) {
    uint64_t *ext = calloc(m->nfiles ? m->nfiles : 1, sizeof *ext);
    size_t *base = malloc((m->n + 1) * sizeof *base);
    if (!ext || !base) {
        free(ext);
        free(base);
        return sck_err(SCK_ERR_NOMEM, "%s: out of memory", dir);
    }
    base[0] = 0;
    for (size_t i = 0; i < m->n; i++) {
        base[i + 1] = base[i] + m->e[i].nchunks;
        const ck_entry *e = &m->e[i];
        for (size_t k = 0; k < e->nchunks; k++) {
            ck_chunk *c = &e->chunks[k];
            if (c->file < m->nfiles && c->offset + c->length > ext[c->file]) ext[c->file] = c->offset + c->length;
            /* Where our save laid the item out, its headers and zip directory are known to the byte:
             * reading them costs a page each, not a 64 KiB guess (fill_range, advise_headers). */
            uint64_t plen = c->payload && !e->is_bytes && e->dtype >= 0 ? sck_dtype_size((sck_dtype)e->dtype) : 0;
            for (int d = 0; plen && d < e->ndim; d++) plen *= (uint64_t)ck_chunk_size(e, k)[d];
            c->tail = plen && c->payload + plen < c->length && c->length - c->payload - plen <= UINT32_MAX
                          ? (uint32_t)(c->length - c->payload - plen) : 0;
        }
    }
    free(m->file_end);
    free(m->item_base);
    m->file_end = ext;
    m->item_base = base;
    return SCK_OK;
}

int ckpt_from_model(const char *dir, ck_meta *m, int checked, sck_ckpt **out) {
    *out = NULL;
    sck_ckpt *ck;
    int rc = model_index(dir, m);
    if (rc) {
        ck_meta_free(m);
        return rc;
    }
    rc = ckpt_alloc(dir, m, &ck);
    if (rc) {
        ck_meta_free(m);
        return rc;
    }
    memset(m, 0, sizeof *m);
    if ((rc = checked ? SCK_OK : check_overlaps(ck))) {
        sck_ckpt_close(ck);
        return rc;
    }
    *out = ck;
    return SCK_OK;
}

struct ck_shared {
    ck_meta m;
    atomic_int refs;
};

int ckpt_share(sck_ckpt *ck, int extra, ck_shared **out) {
    ck_shared *s = malloc(sizeof *s);
    if (!s) return sck_err(SCK_ERR_NOMEM, "%s: out of memory", ck->dir);
    s->m = ck->m;
    atomic_init(&s->refs, 1 + extra);
    ck->shared = *out = s;
    return SCK_OK;
}

int ckpt_from_shared(const char *dir, ck_shared *s, sck_ckpt **out) {
    *out = NULL;
    int rc = ckpt_alloc(dir, &s->m, out);
    if (rc) ckpt_shared_release(s, 1);
    else (*out)->shared = s;
    return rc;
}

void ckpt_shared_release(ck_shared *s, int n) {
    if (n > 0 && atomic_fetch_sub(&s->refs, n) == n) {
        ck_meta_free(&s->m);
        free(s);
    }
}

int ckpt_open_dcp(const char *dir, sck_ckpt **out, uint8_t **wire, size_t *wire_len) {
    char what[4096];
    ck_meta m;
    uint8_t *w, *data;
    size_t wn, n;
    *out = NULL;
    if (wire) *wire = NULL;
    int rc = meta_side_open(dir, &w, &wn, &data, &n);
    if (rc) return rc;
    if (w) {
        snprintf(what, sizeof what, "%s/%s", dir, META_SIDE_NAME);
        if ((rc = meta_wire_decode(w, wn, what, &m)) == SCK_OK) {
            sck_big_free(data);
            if ((rc = ckpt_from_model(dir, &m, 0, out)) || (rc = ckpt_attach_meta_pt(*out))) {
                sck_ckpt_close(*out);
                *out = NULL;
                sck_big_free(w);
                return rc;
            }
            (*out)->from_side = 1;
            if (wire) *wire = w, *wire_len = wn;
            else sck_big_free(w);
            return SCK_OK;
        }
        sck_big_free(w); /* not this build's layout after all: the pickle says what is there */
        sck_err_clear();
    }
    snprintf(what, sizeof what, "%s/.metadata", dir);
    if (!data && (rc = sck_read_file_big(what, &data, &n))) return rc;
    rc = dcp_meta_decode(data, n, what, &m);
    sck_big_free(data);
    if (!rc && !(rc = ckpt_from_model(dir, &m, 0, out)) && (rc = ckpt_attach_meta_pt(*out))) {
        sck_ckpt_close(*out);
        *out = NULL;
    }
    return rc;
}

static int open_path(const char *path, sck_ckpt **out);

int sck_ckpt_open(const char *dir, sck_ckpt **out) {
    if (!dir || !out) return sck_err(SCK_ERR_INVALID_ARG, "sck_ckpt_open: NULL argument");
    *out = NULL;
    /* A crash inside a save's two-rename fallback leaves the checkpoint beside dir (src/commit.h). */
    char *path;
    int rc = commit_resolve(dir, &path);
    if (rc) return rc;
    rc = open_path(path, out);
    free(path);
    return rc;
}

static int open_path(const char *path, sck_ckpt **out) {
    struct stat sb;
    if (stat(path, &sb) != 0) return sck_err_errno(SCK_ERR_IO, errno, "%s: cannot open checkpoint", path);
    char mp[4096];
    if (S_ISDIR(sb.st_mode)) {
        snprintf(mp, sizeof mp, "%s/.metadata", path);
        if (access(mp, F_OK) != 0) {
            snprintf(mp, sizeof mp, "%s/model.safetensors.index.json", path);
            if (access(mp, F_OK) == 0) return ckpt_open_safetensors(path, out);
            return sck_err(SCK_ERR_FORMAT, "%s: no .metadata: not a DCP checkpoint, or an incomplete one", path);
        }
        return ckpt_open_dcp(path, out, NULL, NULL);
    }
    return ckpt_open_safetensors(path, out);
}

size_t sck_ckpt_count(const sck_ckpt *ck) { return ck ? ckpt_count(ck) : 0; }

long sck_ckpt_find(const sck_ckpt *ck, const char *key) {
    if (!ck || !key) return -1;
    long i = ck_meta_find(&ck->m, key);
    return i >= 0 ? i : ckpt_meta_find(ck, key);
}

int sck_ckpt_entry_path(const sck_ckpt *ck, size_t i, sck_value **out) {
    if (!out || (*out = NULL, !ck) || i >= ckpt_count(ck))
        return sck_err(SCK_ERR_INVALID_ARG, "sck_ckpt_entry_path: index %zu out of range", i);
    if (i >= ck->m.n) { /* meta.pt's dict keys are the state's top level */
        sck_value *l = sck_value_list();
        if (l && sck_value_list_append(l, sck_value_string(ckpt_key(ck, i)))) {
            sck_value_free(l);
            l = NULL;
        }
        *out = l;
    } else {
        const ck_entry *e = &ck->m.e[i];
        *out = kp_to_value(e->path, e->path_len, e->key);
    }
    return *out ? SCK_OK : sck_err(SCK_ERR_NOMEM, "'%s': out of memory", ckpt_key(ck, i));
}

int sck_ckpt_entry(const sck_ckpt *ck, size_t i, sck_entry_info *info) {
    if (!ck || !info || i >= ckpt_count(ck)) return sck_err(SCK_ERR_INVALID_ARG, "sck_ckpt_entry: index %zu out of range", i);
    memset(info, 0, sizeof *info);
    if (i >= ck->m.n) {
        info->key = ckpt_key(ck, i);
        info->kind = SCK_ENTRY_BYTES;
        info->dtype = SCK_DTYPE_COUNT;
        info->nchunks = 1;
        info->nbytes = ck->meta_nbytes[ck->meta_order[i - ck->m.n]];
        info->file = META_PT_NAME;
        return SCK_OK;
    }
    const ck_entry *e = &ck->m.e[i];
    info->key = e->key;
    info->kind = e->is_bytes ? SCK_ENTRY_BYTES : SCK_ENTRY_TENSOR;
    info->dtype = e->dtype >= 0 ? (sck_dtype)e->dtype : SCK_DTYPE_COUNT;
    info->ndim = e->ndim;
    memcpy(info->shape, e->shape, sizeof info->shape);
    info->nchunks = e->nchunks;
    if (e->is_bytes) {
        info->nbytes = e->nchunks ? e->chunks[0].length : 0;
    } else {
        uint64_t numel = 0;
        sck_numel(e->ndim, e->shape, &numel);
        info->nbytes = numel * (e->dtype >= 0 ? sck_dtype_size((sck_dtype)e->dtype) : 0);
    }
    info->file = e->nchunks ? ck->m.files[e->chunks[0].file] : "";
    return SCK_OK;
}

int sck_ckpt_chunk(const sck_ckpt *ck, size_t i, size_t j, sck_chunk_info *info) {
    if (ck && info && i >= ck->m.n && i < ckpt_count(ck) && j == 0) { /* the whole of meta.pt */
        memset(info, 0, sizeof *info);
        info->file = META_PT_NAME;
        return SCK_OK;
    }
    if (!ck || !info || i >= ck->m.n || j >= ck->m.e[i].nchunks)
        return sck_err(SCK_ERR_INVALID_ARG, "sck_ckpt_chunk: index (%zu, %zu) out of range", i, j);
    const ck_entry *e = &ck->m.e[i];
    const ck_chunk *c = &e->chunks[j];
    memset(info, 0, sizeof *info);
    for (int d = 0; d < e->ndim; d++) info->offsets[d] = ck_chunk_off(e, j)[d], info->sizes[d] = ck_chunk_size(e, j)[d];
    info->file = ck->m.files[c->file];
    info->offset = c->offset;
    info->length = c->length;
    return SCK_OK;
}

/* Opens a data file on first use and checks it is a regular file. */
static int get_file(sck_ckpt *ck, uint32_t fi, int *fd, uint64_t *size) {
    ck_file *f = &ck->files[fi];
    if (f->fd < 0) {
        char p[4096];
        int k = snprintf(p, sizeof p, "%s/%s", ck->dir, ck->m.files[fi]);
        if (k < 0 || (size_t)k >= sizeof p) return sck_err(SCK_ERR_INVALID_ARG, "%s: path too long", ck->m.files[fi]);
        int d = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (d < 0) return sck_err_errno(SCK_ERR_IO, errno, "%s: cannot open data file", p);
        struct stat sb;
        if (fstat(d, &sb) != 0 || !S_ISREG(sb.st_mode)) {
            close(d);
            return sck_err(SCK_ERR_IO, "%s: not a regular file", p);
        }
        f->fd = d;
        f->size = (uint64_t)sb.st_size;
    }
    *fd = f->fd;
    *size = f->size;
    return SCK_OK;
}

static void item_what(const sck_ckpt *ck, const ck_entry *e, const ck_chunk *c, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s: '%s' item at offset %llu", ck->dir, ck->m.files[c->file], e->key, (unsigned long long)c->offset);
}

static int check_window(const sck_ckpt *ck, const ck_entry *e, const ck_chunk *c, uint64_t fsize) {
    if (c->offset > fsize || c->length > fsize - c->offset) {
        return sck_err(SCK_ERR_FORMAT, "%s/%s: '%s' item [%llu, +%llu) extends past the end of the file (%llu bytes)", ck->dir,
                       ck->m.files[c->file], e->key, (unsigned long long)c->offset, (unsigned long long)c->length,
                       (unsigned long long)fsize);
    }
    return SCK_OK;
}

static int cmp_span(const void *a, const void *b) {
    const ck_span *x = a, *y = b;
    if (x->file != y->file) return x->file < y->file ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* The index of the first span of `file` in sp[0..n) (sorted by cmp_span) that starts at or after
 * `off`; n if there is none. */
static size_t span_at_or_after(const ck_span *sp, size_t n, uint32_t file, uint64_t off) {
    size_t lo = 0, hi = n;
    ck_span key = {file, 0, off, 0, 0};
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cmp_span(&sp[mid], &key) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && sp[lo].file == file ? lo : n;
}

/* Sorted spans of every item (all: ck->spans) or of the large ones only (ck->bigs), made on first use;
 * 0 when out of memory (they only serve hints and bounds). */
static int spans_ready(sck_ckpt *ck, int all) {
    ck_span **sp = all ? &ck->spans : &ck->bigs;
    size_t *n = all ? &ck->nspans : &ck->nbigs;
    if (*sp) return 1;
    size_t cap = 0;
    for (size_t i = 0; i < ck->m.n; i++)
        for (size_t k = 0; k < ck->m.e[i].nchunks; k++) cap += all || ck->m.e[i].chunks[k].length > SMALL_ITEM;
    if (!(*sp = malloc((cap ? cap : 1) * sizeof **sp))) return 0;
    for (size_t i = 0; i < ck->m.n; i++)
        for (size_t k = 0; k < ck->m.e[i].nchunks; k++) {
            const ck_chunk *x = &ck->m.e[i].chunks[k];
            if (all || x->length > SMALL_ITEM) (*sp)[(*n)++] = (ck_span){x->file, x->tail, x->offset, x->length, x->payload};
        }
    sck_sort(*sp, *n, sizeof **sp, cmp_span);
    return 1;
}

/* The window to fill when [off, off+n) of chunk c's item is not in memory: a small item whole, with
 * what follows it (the next small items, usually read next) up to RC_CAP, but not past the start of
 * the next large item, which is read its own way (a window reaching into it copied megabytes for
 * nothing: a norm's weight before its layer's matrix); for a large item 64 KiB at its start or end
 * (its headers), else up to RC_CAP from `off` on.  Always inside the file and holding the request. */
static void fill_range(sck_ckpt *ck, const ck_chunk *c, uint64_t fsize, uint64_t off, uint64_t n, uint64_t *lo, uint64_t *hi) {
    uint64_t end = c->offset + c->length;
    if (c->length <= SMALL_ITEM) {
        *lo = c->offset;
        *hi = fsize - c->offset > RC_CAP ? c->offset + RC_CAP : fsize;
        size_t k = spans_ready(ck, 0) ? span_at_or_after(ck->bigs, ck->nbigs, c->file, end) : ck->nbigs;
        if (k < ck->nbigs && ck->bigs[k].off < *hi) *hi = ck->bigs[k].off;
    } else if (c->payload && off + n <= c->offset + c->payload) { /* our layout: the headers, exactly */
        *lo = c->offset;
        *hi = c->offset + c->payload;
    } else if (c->tail && off >= end - c->tail) { /* and the zip directory */
        *lo = end - c->tail;
        *hi = end;
    } else if (off + n - c->offset <= HEAD_BYTES) {
        *lo = c->offset;
        *hi = c->offset + HEAD_BYTES;
    } else if (end - off <= HEAD_BYTES) {
        *lo = end - HEAD_BYTES;
        *hi = end;
    } else {
        *lo = off;
        *hi = end - off > RC_CAP ? off + RC_CAP : end;
    }
}

/* Reads inside one item through the checkpoint's windows (zip_pread_fn for zip_read_dir). */
typedef struct item_rd {
    sck_ckpt *ck;
    int fd;
    const ck_chunk *c;
    uint64_t fsize;
    const char *what;
} item_rd;

/* Points *p at [off, off+n) of the item (n <= RC_CAP); valid until the next read. */
static int item_view(item_rd *r, uint64_t off, uint64_t n, const uint8_t **p) {
    uint64_t lo, hi;
    fill_range(r->ck, r->c, r->fsize, off, n, &lo, &hi);
    return rc_get(&r->ck->rc, r->fd, off, n, lo, hi, r->what, p);
}

static int item_pread(void *ctx, void *buf, size_t n, uint64_t off) {
    item_rd *r = ctx;
    if (n > HEAD_BYTES) return sck_pread_full(r->fd, buf, n, off, r->what);
    const uint8_t *p;
    int rc = item_view(r, off, n, &p);
    if (!rc && n) memcpy(buf, p, n);
    return rc;
}

/* The element strides of the stored view of a chunk at cbox (r resolved); buf holds them when they are
 * row-major.  Valid until the next resolve. */
static const int64_t *res_strides(const sck_ckpt *ck, const sck_box *cbox, const ck_res *r, int64_t *buf) {
    if (r->strides) return ck->strides[r->strides - 1];
    box_strides(cbox, buf);
    return buf;
}

/* Whether resolving chunk c reads its item's headers (zip directory, data.pkl): not for raw payloads,
 * nor for our own items, whose payload offset the model cache records. */
static int resolve_reads(const sck_ckpt *ck, const ck_chunk *c) { return !c->raw && !(c->payload && !ck->full_resolve); }

/* The table of every chunk's resolution, made on first use. */
static int res_ready(sck_ckpt *ck, const char *key) {
    if (ck->res_pool) return SCK_OK;
    size_t n = ck_meta_nchunks(&ck->m);
    if (!(ck->res_pool = sck_huge_calloc(n ? n : 1, sizeof *ck->res_pool))) return sck_err(SCK_ERR_NOMEM, "'%s': out of memory", key);
    ck->res_pool_n = n ? n : 1;
    n = 0;
    for (size_t i = 0; i < ck->m.n; i++) ck->res[i] = ck->res_pool + n, n += ck->m.e[i].nchunks;
    return SCK_OK;
}

/* Resolves where a chunk's elements are: parses the item's zip and data.pkl (or trusts the raw layout). */
int ckpt_resolve_chunk(sck_ckpt *ck, size_t ei, size_t ci, ck_res **out) {
    ck_entry *e = &ck->m.e[ei];
    ck_chunk *c = &e->chunks[ci];
    int rc = res_ready(ck, e->key);
    if (rc) return rc;
    ck_res *r = &ck->res[ei][ci];
    *out = r;
    if (r->done) return SCK_OK;
    /* Named only where a message needs it: formatting the name for each of 80 000 chunks took a
     * twentieth of a load of small tensors. */
    char what[4600];
    if (c->transformed) {
        item_what(ck, e, c, what, sizeof what);
        return sck_err(SCK_ERR_UNSUPPORTED, "%s: stored with DCP transforms (e.g. compression), not supported", what);
    }
    int fd;
    uint64_t fsize;
    rc = get_file(ck, c->file, &fd, &fsize);
    if (rc) return rc;
    if ((rc = check_window(ck, e, c, fsize))) return rc;
    size_t elem = sck_dtype_size((sck_dtype)e->dtype);
    uint64_t numel = ck_chunk_numel(e, ci), need;
    int big = sck_mul_overflow_u64(numel, elem, &need);
    if (!big && c->raw && c->length == need) {
        r->data_off = c->offset;
        r->done = 1;
        return SCK_OK;
    }
    if (!big && !c->raw && !resolve_reads(ck, c) && need <= c->length - c->payload) { /* our own item: the model cache says where its payload is */
        r->data_off = c->offset + c->payload;
        r->done = 1;
        return SCK_OK;
    }
    item_what(ck, e, c, what, sizeof what);
    if (big) return sck_err(SCK_ERR_FORMAT, "%s: chunk too large", what);
    if (c->raw)
        return sck_err(SCK_ERR_FORMAT, "%s: holds %llu bytes, expected %llu", what, (unsigned long long)c->length, (unsigned long long)need);
    if (!resolve_reads(ck, c))
        return sck_err(SCK_ERR_FORMAT, "%s: a payload of %llu bytes at %llu does not fit the item", what, (unsigned long long)need,
                       (unsigned long long)c->payload);
    item_rd ird = {ck, fd, c, fsize, what};
    zip_dir zd;
    memset(&zd, 0, sizeof zd);
    rc = zip_read_dir(item_pread, &ird, c->offset, c->length, what, &zd);
    if (rc) return rc;
    const zip_rec *pk = zip_find(&zd, "data.pkl");
    uint8_t *pkl = NULL;
    ti_tensor t;
    if (!pk) {
        rc = sck_err(SCK_ERR_FORMAT, "%s: archive has no data.pkl", what);
        goto out;
    }
    if (pk->size > MAX_PKL) {
        rc = sck_err(SCK_ERR_FORMAT, "%s: data.pkl of %llu bytes is implausibly large", what, (unsigned long long)pk->size);
        goto out;
    }
    pkl = malloc(pk->size ? pk->size : 1);
    if (!pkl) {
        rc = sck_err(SCK_ERR_NOMEM, "%s: out of memory", what);
        goto out;
    }
    if ((rc = item_pread(&ird, pkl, pk->size, pk->data_off))) goto out;
    if ((rc = ti_decode_tensor_pkl(pkl, pk->size, what, &t))) goto out;
    if (t.dtype != (sck_dtype)e->dtype) {
        rc = sck_err(SCK_ERR_FORMAT, "%s: stored dtype %s differs from metadata dtype %s", what, sck_dtype_name(t.dtype),
                     e->dtype_name);
        goto out;
    }
    if (t.ndim != e->ndim || (t.ndim && memcmp(t.size, ck_chunk_size(e, ci), (size_t)t.ndim * sizeof *t.size))) {
        rc = sck_err(SCK_ERR_FORMAT, "%s: stored tensor shape differs from the chunk's sizes in metadata", what);
        goto out;
    }
    char rec[80];
    snprintf(rec, sizeof rec, "data/%s", t.storage_key);
    const zip_rec *dr = zip_find(&zd, rec);
    if (!dr && need == 0) {
        r->data_off = c->offset;
    } else if (!dr) {
        rc = sck_err(SCK_ERR_FORMAT, "%s: archive lacks storage record %s", what, rec);
        goto out;
    } else {
        if (dr->size < t.storage_bytes) {
            rc = sck_err(SCK_ERR_FORMAT, "%s: storage record %s holds %llu bytes, data.pkl declares %llu", what, rec,
                         (unsigned long long)dr->size, (unsigned long long)t.storage_bytes);
            goto out;
        }
        r->data_off = dr->data_off + (uint64_t)t.storage_offset * elem;
    }
    int64_t rm[SCK_MAX_DIMS];
    sck_box cbox;
    ck_chunk_box(e, ci, &cbox);
    box_strides(&cbox, rm);
    r->strides = 0;
    if (e->ndim && memcmp(rm, t.stride, (size_t)e->ndim * sizeof *rm)) { /* a view torch saved as it was */
        if (ck->nstrides == ck->capstrides) {
            size_t cap = ck->capstrides ? 2 * ck->capstrides : 16;
            int64_t(*p)[SCK_MAX_DIMS] = cap < UINT32_MAX ? realloc(ck->strides, cap * sizeof *p) : NULL;
            if (!p) {
                rc = sck_err(SCK_ERR_NOMEM, "%s: out of memory", what);
                goto out;
            }
            ck->strides = p;
            ck->capstrides = cap;
        }
        memcpy(ck->strides[ck->nstrides++], t.stride, sizeof *ck->strides);
        r->strides = (uint32_t)ck->nstrides;
    }
    const zip_rec *bo = zip_find(&zd, "byteorder");
    if (bo) {
        char b[8] = {0};
        if (bo->size > 6 || (rc = item_pread(&ird, b, bo->size, bo->data_off))) {
            if (!rc) rc = sck_err(SCK_ERR_FORMAT, "%s: bad byteorder record", what);
            goto out;
        }
        if (!strcmp(b, "big")) r->swap = (uint8_t)(sck_dtype_swap_unit((sck_dtype)e->dtype) > 1 ? sck_dtype_swap_unit((sck_dtype)e->dtype) : 0);
        else if (strcmp(b, "little")) {
            rc = sck_err(SCK_ERR_FORMAT, "%s: byteorder record '%s' is neither little nor big", what, b);
            goto out;
        }
    }
    if (c->payload) { /* verifying: the archive must agree with the model cache */
        if (r->data_off != c->offset + c->payload || r->swap || (need && r->strides)) {
            rc = sck_err(SCK_ERR_FORMAT, "%s: the archive's payload (at %llu) is not where %s says (at %llu, row-major, little-endian)",
                         what, (unsigned long long)(r->data_off - c->offset), META_SIDE_NAME, (unsigned long long)c->payload);
            goto out;
        }
    }
    r->done = 1;
out:
    free(pkl);
    zip_dir_free(&zd);
    return rc;
}

static void fmt_dims(char *buf, size_t cap, int ndim, const int64_t *off) {
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && k < cap; d++) k += (size_t)snprintf(buf + k, cap - k, d ? ", %lld" : "%lld", (long long)off[d]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}

int ckpt_crc_mismatch(const sck_ckpt *ck, size_t ei, size_t ci, uint32_t crc) {
    const ck_entry *e = &ck->m.e[ei];
    const ck_chunk *c = &e->chunks[ci];
    char what[4600], at[400] = "";
    item_what(ck, e, c, what, sizeof what);
    if (!e->is_bytes) {
        char dims[360];
        fmt_dims(dims, sizeof dims, e->ndim, ck_chunk_off(e, ci));
        snprintf(at, sizeof at, " (chunk %zu at %s)", ci, dims);
    }
    return sck_err(SCK_ERR_CHECKSUM, "%s%s: bytes [%llu, %llu) have CRC-32C 0x%08x, .metadata records 0x%08x", what, at,
                   (unsigned long long)c->offset, (unsigned long long)(c->offset + c->length), crc, c->crc32c);
}

static int stream_fd(sck_ckpt *ck, uint32_t fi);

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

/* Helper threads for this reader's pipe: two keep a lone stream's disk busy between slices; where more
 * than two ranks share a node, their pipes already keep several reads in flight, and a second read
 * each made O_DIRECT loads of 16 tensors, 256 MiB, slower: 4 ranks 0.82 -> 0.88-0.90 of plain reads
 * with one, 8 ranks 0.71-0.74 -> 0.79-0.80 (1 rank: 0.86-0.96 with two, 0.82-0.83 with one). */
static int pipe_helpers(const sck_ckpt *ck) { return ck->one_cache && ck->nranks > 2 ? 1 : RP_HELPERS; }

/* With runs (rp_start_scatter's), a piped span reads the runs' bytes into place (it->scatter). */
static void span_begin_runs(span_it *it, item_rd *ird, uint64_t from, uint64_t to, const uint64_t (*runs)[3], size_t n,
                            uint64_t src_base, uint8_t *dst_base, int crc) {
    sck_ckpt *ck = ird->ck;
    it->ird = ird;
    it->pos = from;
    it->end = to;
    it->piped = it->scatter = 0;
    if (to - from < PIPE_MIN || ck->rp_failed) return;
    if (!ck->rp && rp_new(&ck->rp, pipe_helpers(ck)) != SCK_OK) {
        ck->rp_failed = 1; /* no thread: the windows do the job, without the overlap */
        return;
    }
    int fd = stream_fd(ck, ird->c->file);
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
    fill_range(it->ird->ck, it->ird->c, it->ird->fsize, it->pos, k, &lo, &hi);
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

/* CRC-32C of item bytes [from, to), continuing from *crc. */
static int crc_span(item_rd *ird, uint64_t from, uint64_t to, uint32_t *crc) {
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
        *crc = sck_crc32c(*crc, p, (size_t)n);
    }
}

int ckpt_check_item(sck_ckpt *ck, size_t ei, size_t ci, const uint8_t *known, uint64_t known_off, uint64_t known_len) {
    const ck_entry *e = &ck->m.e[ei];
    const ck_chunk *c = &e->chunks[ci];
    char what[4600];
    item_what(ck, e, c, what, sizeof what);
    int fd;
    uint64_t fsize;
    int rc = get_file(ck, c->file, &fd, &fsize);
    if (rc || (rc = check_window(ck, e, c, fsize))) return rc;
    item_rd ird = {ck, fd, c, fsize, what};
    uint64_t end = c->offset + c->length;
    uint32_t crc = 0;
    if (!known || known_off < c->offset || known_off + known_len > end) {
        rc = crc_span(&ird, c->offset, end, &crc);
    } else { /* before the known bytes, the known bytes, after them */
        rc = crc_span(&ird, c->offset, known_off, &crc);
        crc = sck_crc32c(crc, known, (size_t)known_len);
        if (!rc) rc = crc_span(&ird, known_off + known_len, end, &crc);
    }
    if (!rc && c->has_crc && crc != c->crc32c) rc = ckpt_crc_mismatch(ck, ei, ci, crc);
    return rc;
}

/* The O_DIRECT descriptor of file fi, or -1 where the file system refuses O_DIRECT (or the path no
 * longer names the file already open: then buffered reads go on from the first descriptor). */
static int direct_fd(sck_ckpt *ck, uint32_t fi) {
    ck_file *f = &ck->files[fi];
    if (f->dfd == -1) {
        f->dfd = -2;
        char p[4096];
        int k = snprintf(p, sizeof p, "%s/%s", ck->dir, ck->m.files[fi]);
        int d = k > 0 && (size_t)k < sizeof p ? open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_DIRECT) : -1;
        struct stat a, b;
        if (d >= 0 && fstat(d, &a) == 0 && fstat(f->fd, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) f->dfd = d;
        else if (d >= 0) close(d);
    }
    return f->dfd >= 0 ? f->dfd : -1;
}

/* The descriptor long runs are read through: a second one on the same file (checked to be the same
 * file), or the first one if that cannot be had. */
static int stream_fd(sck_ckpt *ck, uint32_t fi) {
    ck_file *f = &ck->files[fi];
    if (f->sfd == -1) {
        f->sfd = -2;
        char p[4096];
        int k = snprintf(p, sizeof p, "%s/%s", ck->dir, ck->m.files[fi]);
        int d = k > 0 && (size_t)k < sizeof p ? open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW) : -1;
        struct stat a, b;
        if (d >= 0 && fstat(d, &a) == 0 && fstat(f->fd, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
            f->sfd = d;
            posix_fadvise(d, 0, 0, POSIX_FADV_SEQUENTIAL); /* advice only: a larger read-ahead window */
        } else if (d >= 0) {
            close(d);
        }
    }
    return f->sfd >= 0 ? f->sfd : f->fd;
}

/* Reads a long run into dst: the page-aligned middle with O_DIRECT when asked for and possible (file
 * offset and memory equally misaligned), the ends and everything else buffered. */
static int read_long(sck_ckpt *ck, uint32_t fi, uint8_t *d, uint64_t n, uint64_t abs, const char *what) {
    int fd = stream_fd(ck, fi), dfd;
    uint64_t head = (WS_DIO_ALIGN - abs % WS_DIO_ALIGN) % WS_DIO_ALIGN;
    if (!ck->direct || (uintptr_t)d % WS_DIO_ALIGN != abs % WS_DIO_ALIGN || n < head + WS_DIO_ALIGN || (dfd = direct_fd(ck, fi)) < 0)
        return sck_pread_full(fd, d, n, abs, what);
    uint64_t mid = (n - head) / WS_DIO_ALIGN * WS_DIO_ALIGN;
    int rc = head ? sck_pread_full(fd, d, head, abs, what) : SCK_OK;
    if (!rc) rc = sck_pread_full(dfd, d + head, mid, abs + head, what);
    if (!rc && n > head + mid) rc = sck_pread_full(fd, d + head + mid, n - head - mid, abs + head + mid, what);
    return rc;
}

/* Copies runs of one chunk from the file into the destination: long runs straight into it, short
 * ones through the checkpoint's windows. */
typedef struct run_ctx {
    item_rd *ird;
    uint64_t base;          /* absolute offset of the chunk view's element 0 */
    uint8_t *dst;
    size_t elem;
    int swap;               /* bytes per component to reverse (ck_res.swap), or 0 */
    int no_window;          /* short runs too are read straight from the file (see copy_peer_checked) */
} run_ctx;

static void swap_elems(uint8_t *p, uint64_t nbytes, size_t elem) {
    for (uint64_t i = 0; i + elem <= nbytes; i += elem) {
        for (size_t a = 0, b = elem - 1; a < b; a++, b--) {
            uint8_t t = p[i + a];
            p[i + a] = p[i + b];
            p[i + b] = t;
        }
    }
}

/* A run's file bytes into d as stored (no swap): long runs straight from the file, short ones from
 * the windows. */
static int read_run_raw(run_ctx *r, uint64_t abs, uint8_t *d, uint64_t nbytes) {
    if ((nbytes >= WINDOW_RUN && r->ird->c->length > SMALL_ITEM) || nbytes >= DIRECT_RUN || r->no_window) return read_long(r->ird->ck, r->ird->c->file, d, nbytes, abs, r->ird->what);
    const uint8_t *p;
    int rc = item_view(r->ird, abs, nbytes, &p);
    if (!rc) memcpy(d, p, nbytes);
    return rc;
}

static int copy_run(void *vctx, uint64_t src_off, uint64_t dst_off, uint64_t nbytes) {
    run_ctx *r = vctx;
    uint8_t *d = r->dst + dst_off;
    int rc = read_run_raw(r, r->base + src_off, d, nbytes);
    if (!rc && r->swap) swap_elems(d, nbytes, (size_t)r->swap);
    return rc;
}

/* The runs of one overlap, kept for checking and copying in a single pass over the item. */
typedef struct run_list {
    uint64_t (*r)[3];       /* src offset, dst offset, bytes: runs [from, n) (NULL: only counted) */
    size_t n, cap;
    int ordered;            /* src offsets ascend without overlap (known for runs stored) */
    uint64_t first_src, first_dst, first_len;
    int abs;                /* the dst offsets are addresses (runs into several ranks' buffers: merge_hands) */
    ck_runbuf *buf;         /* r grows in it, up to MAX_RUNS runs (past that they are only counted: n > cap) */
    size_t from;            /* where this list begins in r (lists appended one after another) */
    size_t stop;            /* the walk stops once this many are found (0: never): "one run or more?" */
} run_list;

/* A list collected into b (runs appended from b's index `from`). */
static run_list run_list_in(ck_runbuf *b, size_t from) {
    run_list l = {b->r, from, b->cap, 1, 0, 0, 0, 0, b, from, 0};
    return l;
}

/* A walk that only finds the first run and whether there are more. */
static run_list run_list_first(void) {
    run_list l = {NULL, 0, 0, 1, 0, 0, 0, 0, NULL, 0, 2};
    return l;
}

static int runbuf_grow(ck_runbuf *b, size_t need) {
    size_t c = b->cap ? b->cap : 256;
    while (c < need) c *= 2;
    void *p = realloc(b->r, c * sizeof *b->r);
    if (!p) return 0;
    b->r = p;
    b->cap = c;
    return 1;
}

static int collect_run(void *vctx, uint64_t s, uint64_t d, uint64_t n) {
    run_list *l = vctx;
    if (l->n == l->from) {
        l->first_src = s;
        l->first_dst = d;
        l->first_len = n;
    } else if (l->r && l->n <= l->cap && s < l->r[l->n - 1][0] + l->r[l->n - 1][2]) {
        l->ordered = 0;
    }
    if (l->buf && l->n == l->cap && l->n - l->from < MAX_RUNS && runbuf_grow(l->buf, l->n + 1)) {
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
static int check_and_copy(sck_ckpt *ck, size_t ei, size_t ci, run_ctx *rx, const run_list *l, int check) {
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
            if (rx->swap) swap_elems(d, l->r[k][2], (size_t)rx->swap);
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
static int pipe_begin(sck_ckpt *ck, item_rd *ird, uint8_t *d, uint64_t abs, uint64_t len) {
    const ck_chunk *c = ird->c;
    return rp_start(ck->rp, stream_fd(ck, c->file), ck->direct ? direct_fd(ck, c->file) : -1, abs, len, d, ird->what);
}

/* Takes the len bytes of the range pipe_begin started, extending *crc over each slice as it arrives;
 * with `last`, all but the last slice, which is left in *last (in the caller's buffer) for the caller
 * to checksum. */
static int pipe_drain_crc(sck_ckpt *ck, item_rd *ird, uint64_t len, uint32_t *crc, const uint8_t **last, uint64_t *last_len) {
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

static int hand_over(sck_ckpt *ck, size_t ei, size_t ci, const uint8_t *const *p, const uint64_t *at);

/* Ends the check left pending (ck->pend): the item's CRC-32C compared, the item marked verified and
 * handed to the thread ranks that wait for its runs. */
static int finish_pending(sck_ckpt *ck) {
    ck_pending *q = &ck->pend;
    if (!q->on) return SCK_OK;
    q->on = 0;
    const ck_chunk *c = &ck->m.e[q->ei].chunks[q->ci];
    uint32_t crc = sck_crc32c_combine(sck_crc32c(q->crc, q->last, (size_t)q->last_len), q->tail_crc, q->tail_len);
    if (c->has_crc && crc != c->crc32c) return ckpt_crc_mismatch(ck, q->ei, q->ci, crc);
    ck->res[q->ei][q->ci].verified = 1;
    return hand_over(ck, q->ei, q->ci, NULL, NULL);
}

/* Whether this rank checks chunk c's item as it reads it (peer: ckpt_peer_mark's answer, 0 when no comb
 * was planned for it after all). */
static int checked_here(const sck_ckpt *ck, const ck_chunk *c, const ck_res *r, int peer) {
    return ck->verify && c->has_crc && !r->verified && !peer;
}

/* Whether a checked read of runs l goes through the read-ahead pipe (read_run_checked): one run, no
 * byte swap, long enough. */
static int piped_run(int check, const ck_res *r, const run_list *l) {
    return check && l->n == 1 && !r->swap && l->first_len >= DIRECT_RUN;
}

static int item_peer(sck_ckpt *ck, size_t ei, size_t ci, ck_comb **cb);
static void prefetch_next(sck_ckpt *ck, const ck_chunk *c);
static void queue_next(sck_ckpt *ck, const uint8_t *d, uint64_t len);
static int choose_direct(sck_ckpt *ck, const ck_chunk *c, uintptr_t skew, int long_runs);
static void advise_headers(const sck_ckpt *ck, uint32_t file, uint64_t off, uint64_t len, uint64_t ahead, uint64_t tail);

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
    if (!ck->rp && !ck->rp_failed && rp_new(&ck->rp, pipe_helpers(ck)) != SCK_OK) ck->rp_failed = 1;
    if (!ck->rp) { /* no thread: read, then check (nothing is pending: only piped reads leave a check) */
        if (ahead) prefetch_next(ck, c);
        int rc = read_long(ck, c->file, d, len, abs, ird->what);
        return rc ? rc : ckpt_check_item(ck, ei, ci, d, abs, len);
    }
    uint32_t crc = 0, tail = 0;
    int rc = SCK_OK, early = abs - c->offset < PIPE_MIN; /* a longer head is checksummed on the pipe itself */
    if (!early && (rc = finish_pending(ck))) return rc; /* the head goes through the pipe first */
    /* The first large item of a run of them: its own headers asked for before its payload's read, or
     * the reads of its zip directory wait behind it, one after the other (6 to 7 ms each, cold). */
    if (ahead && (ck->advised_file != c->file || ck->advised_off != c->offset))
        advise_headers(ck, c->file, c->offset, c->length, c->payload ? c->payload : HEAD_BYTES, c->tail ? c->tail : HEAD_BYTES);
    if (!early && (rc = crc_span(ird, c->offset, abs, &crc))) return rc;
    if ((rc = pipe_begin(ck, ird, d, abs, len))) return rc;
    if (ahead) prefetch_next(ck, c);
    if (ahead) queue_next(ck, d, len);
    if (early && ((rc = finish_pending(ck)) || (rc = crc_span(ird, c->offset, abs, &crc)))) {
        rp_finish(ck->rp);
        return rc;
    }
    const uint8_t *last;
    uint64_t last_len, end = c->offset + c->length;
    if ((rc = pipe_drain_crc(ck, ird, len, &crc, &last, &last_len))) return rc;
    if ((rc = crc_span(ird, abs + len, end, &tail))) return rc;
    ck->pend = (ck_pending){1, ei, ci, crc, last, last_len, tail, end - abs - len};
    *pending = 1;
    return SCK_OK;
}

/* Asks the kernel to start reading the head (headers and first MiBs) and the tail (zip directory) of
 * the item after c in its file: reading a large item begins with small reads far apart, and without
 * this each one waits for the disk and breaks the read-ahead of the payload. */
static void prefetch_next(sck_ckpt *ck, const ck_chunk *c) {
    size_t at = spans_ready(ck, 1) ? span_at_or_after(ck->spans, ck->nspans, c->file, c->offset + c->length) : ck->nspans;
    if (at >= ck->nspans) return;
    const ck_span *nx = &ck->spans[at];
    /* Its headers and first slices; with O_DIRECT only the headers: cached pages in the way of a direct
     * read must be written back and dropped first, which would cost more than it saves. */
    advise_headers(ck, nx->file, nx->off, nx->len, !ck->direct ? PREFETCH_AHEAD : nx->head ? nx->head : HEAD_BYTES,
                   nx->tail ? nx->tail : HEAD_BYTES);
    ck->advised_file = nx->file;
    ck->advised_off = nx->off;
}

/* Queues the next read's range on the pipe behind the current one ([d, +len)), where that read will be
 * a piped one too (read_overlap's choice, made here the same way): the helpers go on to it as soon as
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
    if (c->length <= SMALL_ITEM || resolve_reads(ck, c) || ckpt_resolve_chunk(ck, ei, ci, &r) != SCK_OK) return;
    ck_comb *cb;
    int check = checked_here(ck, c, r, item_peer(ck, ei, ci, &cb)); /* a peer's item: read_overlap copies its runs */
    if (!check) return;
    sck_box ov, cbox;
    ck_chunk_intersect(e, ci, x->box, &cbox, &ov);
    int64_t sb[SCK_MAX_DIMS];
    const int64_t *strides = res_strides(ck, &cbox, r, sb);
    run_list l = run_list_first();
    box_runs(&cbox, strides, x->box, &ov, sck_dtype_size((sck_dtype)e->dtype), collect_run, &l);
    if (!piped_run(check, r, &l)) return;
    uint8_t *nd = (uint8_t *)x->dst + l.first_dst;
    if (nd < d + len && d < nd + l.first_len) return; /* the same bytes of memory: read in order */
    int direct = choose_direct(ck, c, (uintptr_t)x->dst - r->data_off, 1);
    char what[4600];
    item_what(ck, e, c, what, sizeof what);
    rp_queue(ck->rp, stream_fd(ck, c->file), direct ? direct_fd(ck, c->file) : -1, r->data_off + l.first_src, l.first_len, nd,
             what); /* advice only: without it the read waits its turn */
}

/* Asks the kernel for the first `ahead` bytes of the item at [off, +len) of file `file` and for its
 * last `tail` (its zip directory). */
static void advise_headers(const sck_ckpt *ck, uint32_t file, uint64_t off, uint64_t len, uint64_t ahead, uint64_t tail) {
    int fd = ck->files[file].fd;
    posix_fadvise(fd, (off_t)off, (off_t)(len < ahead ? len : ahead), POSIX_FADV_WILLNEED); /* advice only */
    if (len <= ahead) return;
    uint64_t from = tail < len - ahead ? off + len - tail : off + ahead; /* not again what the head asked for */
    posix_fadvise(fd, (off_t)from, (off_t)(off + len - from), POSIX_FADV_WILLNEED);
}

/* The runs of an item another rank checks, and no more of it: long runs straight into the destination;
 * many short runs in file order (column blocks) in one pass from the first to the end of the last,
 * read ahead as the checked pass is, rather than run by run through the windows.  l: the overlap's
 * runs as read_overlap collected them (counted all, stored up to l->cap). */
static int copy_peer_checked(sck_ckpt *ck, size_t ei, size_t ci, const sck_box *cbox, const sck_box *want, const sck_box *ov,
                             const int64_t *strides, run_ctx *rx, const run_list *l) {
    const ck_chunk *c = &ck->m.e[ei].chunks[ci];
    if (c->length <= SMALL_ITEM && l->n <= FEW_RUNS) {
        /* A part of a small item (a row block of a reshard): a window would bring in the whole item
         * and its neighbours, which the item's owner reads already. */
        rx->no_window = 1;
        int rc = box_runs(cbox, strides, want, ov, rx->elem, copy_run, rx);
        rx->no_window = 0;
        return rc;
    }
    if (l->n > 1 && l->n <= l->cap && l->ordered && box_numel(ov) * rx->elem / l->n < DIRECT_RUN) return check_and_copy(ck, ei, ci, rx, l, 0);
    return box_runs(cbox, strides, want, ov, rx->elem, copy_run, rx); /* else run by run */
}

void ckpt_prefetch_headers(sck_ckpt *ck, size_t ei, size_t ci) {
    const ck_chunk *c = &ck->m.e[ei].chunks[ci];
    if (!resolve_reads(ck, c)) return; /* asking would only pull in bytes the reads may not need, now */
    int fd;
    uint64_t fsize;
    if (get_file(ck, c->file, &fd, &fsize) != SCK_OK) { /* opens the file advise_headers asks about */
        sck_err_clear(); /* the read will say what is wrong */
        return;
    }
    advise_headers(ck, c->file, c->offset, c->length, HEAD_BYTES, HEAD_BYTES);
}

/* Collects absolute file ranges of runs (ckpt_overlap_runs). */
typedef struct range_list {
    uint64_t base, lo, hi;  /* view's element 0; the item's bounds */
    uint64_t (*rg)[2];
    size_t n, cap;
    int outside;
} range_list;

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
    box_runs(&cbox, res_strides(ck, &cbox, r, sb), want, ov, sck_dtype_size((sck_dtype)ck->m.e[ei].dtype), collect_range, &l);
    if (l.outside) {
        char what[4600];
        item_what(ck, &ck->m.e[ei], c, what, sizeof what);
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
static int item_peer(sck_ckpt *ck, size_t ei, size_t ci, ck_comb **cb) {
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
    if (n >= PIPE_MIN && !ck->rp && !ck->rp_failed && rp_new(&ck->rp, pipe_helpers(ck)) != SCK_OK) ck->rp_failed = 1;
    if (n >= PIPE_MIN && ck->rp) rc = (rc = pipe_begin(ck, rx->ird, d, abs, n)) ? rc : pipe_drain_crc(ck, rx->ird, n, crc, NULL, NULL);
    else if (!(rc = read_run_raw(rx, abs, d, n))) *crc = sck_crc32c(0, d, (size_t)n);
    if (!rc && rx->swap) swap_elems(d, n, (size_t)rx->swap);
    return rc;
}

typedef struct comb_ctx {
    run_ctx *rx;
    ck_comb *cb;
} comb_ctx;

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
    return copy_run(x->rx, src_off, dst_off, n);
}

/* This rank's part of an item checked by combining CRCs (src/load_checks.h): the owner first
 * checksums the gaps, once; then every reader copies its runs, checksumming its segments. */
static int read_combined(sck_ckpt *ck, ck_comb *cb, const sck_box *cbox, const sck_box *want, const sck_box *ov, const int64_t *strides,
                         run_ctx *rx) {
    for (size_t k = cb->nseg; k < cb->nseg + cb->ngap; k++) {
        uint64_t *g = cb->r[k];
        if (g[2]) continue;
        uint32_t crc = 0;
        int rc = crc_span(rx->ird, g[0], g[0] + g[1], &crc);
        if (!rc) rc = push_seg(ck, cb->item, g[0], g[1], crc, rx->ird->what);
        if (rc) return rc;
        g[2] = 1;
    }
    comb_ctx x = {rx, cb};
    return box_runs(cbox, strides, want, ov, rx->elem, copy_comb_run, &x);
}

/* Whether a page of file fd is in the page cache: mincore over a one-page mapping, which reads nothing
 * (a RWF_NOWAIT read would start read-ahead there).  Where that cannot be told, "yes". */
static int page_cached(int fd, uint64_t off) {
    long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0) return 1;
    off -= off % (uint64_t)pg;
    void *m = mmap(NULL, (size_t)pg, PROT_READ, MAP_SHARED, fd, (off_t)off);
    if (m == MAP_FAILED) return 1;
    unsigned char v = 1;
    int in = mincore(m, (size_t)pg, &v) != 0 || (v & 1);
    munmap(m, (size_t)pg);
    return in;
}

/* Whether chunk c's long runs are read with O_DIRECT (see CK_IO_AUTO): always or never when asked
 * for; else for a large item read as long runs (`long_runs`) that is not in the page cache (going by
 * the page in its middle: its headers are read buffered) and a destination whose element 0 is as
 * misaligned to a page as the item's (`skew` = destination address minus file offset of element 0),
 * as O_DIRECT needs. */
static int choose_direct(sck_ckpt *ck, const ck_chunk *c, uintptr_t skew, int long_runs) {
    if (ck->io != CK_IO_AUTO) return ck->io == CK_IO_DIRECT;
    if (!long_runs || c->length <= SMALL_ITEM || skew % WS_DIO_ALIGN) return 0;
    return !page_cached(ck->files[c->file].fd, c->offset + c->length / 2);
}

/* preadv until all of iov is read (advancing it), or an error or the end of the file; an error names
 * the item chunk ci of entry ei (formatted only then). */
static int preadv_full(const sck_ckpt *ck, size_t ei, size_t ci, int fd, struct iovec *iov, int n, uint64_t off) {
    int rc = sck_preadv_full(fd, iov, n, off, ""); /* the item is named only on error: batches of small items call this often */
    if (rc) {
        char what[4600], msg[5700];
        item_what(ck, &ck->m.e[ei], &ck->m.e[ei].chunks[ci], what, sizeof what);
        snprintf(msg, sizeof msg, "%s%s", what, sck_last_error());
        sck_err_set_raw(msg);
    }
    return rc;
}

/* This rank's hand-overs of item (ei, ci): *n of them from the returned one (ck->hands is sorted). */
static int hand_before(const ck_hand *h, size_t ei, size_t ci) { return h->ei < ei || (h->ei == ei && h->ci < ci); }

static ck_hand *hands_of(sck_ckpt *ck, size_t ei, size_t ci, size_t *n) {
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
    item_what(ck, e, c, what, sizeof what);
    item_rd ird = {ck, ck->files[c->file].fd, c, ck->files[c->file].size, what};
    run_ctx rx = {&ird, r->data_off, h->dst, sck_dtype_size((sck_dtype)e->dtype), r->swap, 0};
    sck_box cbox, ov;
    ck_chunk_intersect(e, ci, h->want, &cbox, &ov);
    int64_t sb[SCK_MAX_DIMS];
    if (!(rc = box_runs(&cbox, res_strides(ck, &cbox, r, sb), h->want, &ov, rx.elem, copy_run, &rx))) h->done = 1;
    return rc;
}

static void hands_done(sck_ckpt *ck, size_t ei, size_t ci) {
    size_t n;
    ck_hand *h = hands_of(ck, ei, ci, &n);
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
 * add, or the lists cannot be merged (out of order, overlapping runs, too many, no memory): hand_over
 * then copies them, after the check. */
static int merge_hands(sck_ckpt *ck, size_t ei, size_t ci, const sck_box *cbox, const int64_t *strides, const run_ctx *rx,
                       const run_list *l, run_list *out) {
    size_t nh = 0, nb = 0;
    ck_hand *h = ck->nhands ? hands_of(ck, ei, ci, &nh) : NULL;
    for (size_t i = 0; i < nh; i++) nb += h[i].want && !h[i].done;
    if (!nb) return 0;
    run_list *ls = calloc(nb + 1, sizeof *ls);
    uint8_t **base = calloc(nb + 1, sizeof *base);
    size_t *at = calloc(nb + 1, sizeof *at), *heap = calloc(nb + 1, sizeof *heap), total = l->n, k = 1, nheap = 0;
    int ok = ls && base && at && heap;
    if (ok) ls[0] = *l, base[0] = rx->dst;
    run_list x = run_list_in(&ck->runbuf[1], 0); /* the hand-overs' lists, one after another */
    for (size_t i = 0; ok && i < nh; i++) {
        if (!h[i].want || h[i].done) continue;
        sck_box cb, ov;
        ck_chunk_intersect(&ck->m.e[ei], ci, h[i].want, &cb, &ov);
        x.from = x.n;
        box_runs(cbox, strides, h[i].want, &ov, rx->elem, collect_run, &x);
        total += x.n - x.from;
        ok = x.ordered && x.n <= x.cap && total <= MAX_RUNS;
        ls[k].n = x.n - x.from;
        at[k] = x.from; /* made relative once the buffer has stopped moving */
        base[k++] = h[i].dst;
    }
    for (size_t q = 1; ok && q < k; q++) ls[q].r = x.r + at[q], at[q] = 0;
    ok = ok && (total <= ck->runbuf[2].cap || runbuf_grow(&ck->runbuf[2], total));
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
    *out = run_list_in(&ck->runbuf[2], 0);
    out->n = total;
    out->abs = 1;
    return 1;
}

/* Item (ei, ci) has just been checked here: the other thread ranks' runs of it go into their buffers.
 * The item's bytes are at hand as three pieces (p[k] holding file bytes [at[k], at[k+1])), or, where
 * p is NULL, read again from the page cache. */
static int hand_over(sck_ckpt *ck, size_t ei, size_t ci, const uint8_t *const *p, const uint64_t *at) {
    size_t n;
    ck_hand *h = ck->nhands ? hands_of(ck, ei, ci, &n) : NULL;
    for (size_t i = 0; h && i < n; i++) {
        if (h[i].want) {
            int rc = h[i].done ? SCK_OK : copy_hand_box(ck, ei, ci, &h[i]);
            if (rc) return rc;
            continue;
        }
        if (h[i].done) continue; /* read straight into place (read_small_batch) */
        if (!p) {
            struct iovec v = {h[i].dst, (size_t)h[i].len};
            int rc = preadv_full(ck, ei, ci, ck->files[ck->m.e[ei].chunks[ci].file].fd, &v, 1, h[i].run);
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

/* cbox: chunk ci's box (ck_chunk_box). */
static int read_overlap(sck_ckpt *ck, size_t ei, size_t ci, const sck_box *cbox, const sck_box *want, const sck_box *ov, void *dst) {
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
    item_what(ck, e, c, what, sizeof what);
    item_rd ird = {ck, ck->files[c->file].fd, c, ck->files[c->file].size, what};
    run_ctx rx = {&ird, r->data_off, dst, sck_dtype_size((sck_dtype)e->dtype), r->swap, 0};
    ck_comb *cb;
    int peer = item_peer(ck, ei, ci, &cb);
    int check = checked_here(ck, c, r, peer), ahead = c->length > SMALL_ITEM;
    int64_t sb[SCK_MAX_DIMS];
    const int64_t *strides = res_strides(ck, cbox, r, sb);
    run_list l = run_list_in(&ck->runbuf[0], 0);
    box_runs(cbox, strides, want, ov, rx.elem, collect_run, &l);
    int piped = piped_run(check, r, &l), pending = 0;
    /* The check left pending ends before anything else here writes into a destination; a piped read
     * ends it once its own read is under way. */
    if (!piped && (rc = finish_pending(ck))) return rc;
    /* O_DIRECT serves long runs read into dst (one checked run, or unchecked runs); many short runs,
     * and an item checked around several runs, are read through the cache, with its read-ahead. */
    int long_runs = l.n && box_numel(ov) * rx.elem / l.n >= DIRECT_RUN && (piped || !check);
    ck->direct = choose_direct(ck, c, (uintptr_t)dst - r->data_off, long_runs);
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
    if (ahead && !piped && !pass) prefetch_next(ck, c);
    if (!check) {
        rc = cb     ? read_combined(ck, cb, cbox, want, ov, strides, &rx)
             : peer ? copy_peer_checked(ck, ei, ci, cbox, want, ov, strides, &rx, &l)
                    : box_runs(cbox, strides, want, ov, rx.elem, copy_run, &rx);
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
            if (pending) return SCK_OK; /* checked, marked and handed over by finish_pending */
        } else if (!(rc = copy_run(&rx, l.first_src, l.first_dst, l.first_len)))
            rc = ckpt_check_item(ck, ei, ci, (const uint8_t *)dst + l.first_dst, r->data_off + l.first_src, l.first_len);
        r->verified = !rc;
        return rc ? rc : hand_over(ck, ei, ci, NULL, NULL);
    }
    if (l.n <= l.cap && l.ordered) {
        run_list all;
        int merged = merge_hands(ck, ei, ci, cbox, strides, &rx, &l, &all);
        rc = check_and_copy(ck, ei, ci, &rx, merged ? &all : &l, 1);
        if (merged && !rc) hands_done(ck, ei, ci);
        r->verified = !rc;
        return rc ? rc : hand_over(ck, ei, ci, NULL, NULL);
    }
    if ((rc = ckpt_check_item(ck, ei, ci, NULL, 0, 0))) return rc;
    r->verified = 1;
    if ((rc = hand_over(ck, ei, ci, NULL, NULL))) return rc;
    return box_runs(cbox, strides, want, ov, rx.elem, copy_run, &rx);
}

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
    if (c->transformed || c->raw || resolve_reads(ck, c) || !c->has_crc) return;
    sck_box cbox;
    ck_chunk_box(e, ci, &cbox);
    size_t elem = sck_dtype_size((sck_dtype)e->dtype);
    run_list l = run_list_first();
    if (box_single_run(&cbox, want, ov, elem, &l.first_src, &l.first_dst, &l.first_len)) { /* rows, flat slices */
        l.n = 1;
    } else {
        int64_t sb[SCK_MAX_DIMS];
        box_strides(&cbox, sb);
        box_runs(&cbox, sb, want, ov, elem, collect_run, &l);
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
        if (res_ready(ck, e->key) != SCK_OK || get_file(ck, c->file, &fd, &fsize) != SCK_OK || check_window(ck, e, c, fsize) != SCK_OK) {
            sck_err_clear(); /* read_overlap says what is wrong */
            return 0;
        }
        if (ck->res[x->ei][ci].verified && !peer) return 0;
        uint64_t a = o->run, len = o->len;
        *s = (small_rd){x->ei, ci, a, len, o->dst, !peer, peer ? a : c->offset, peer ? a + len : c->offset + c->length, 0, {NULL}};
        return 1;
    }
    if (ckpt_resolve_chunk(ck, x->ei, ci, &r) != SCK_OK) {
        sck_err_clear(); /* read_overlap says what is wrong */
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
    run_list l = run_list_first();
    int64_t sb[SCK_MAX_DIMS];
    box_runs(&cbox, res_strides(ck, &cbox, r, sb), x->box, &ov, elem, collect_run, &l);
    uint64_t a = r->data_off + l.first_src;
    if (l.n != 1 || a < c->offset || a > c->offset + c->length || l.first_len > c->offset + c->length - a) return 0;
    *s = (small_rd){x->ei, ci, a, l.first_len, (uint8_t *)x->dst + l.first_dst, !peer, peer ? a : c->offset,
                    peer ? a + l.first_len : c->offset + c->length, 0, {NULL}};
    return 1;
}


/* The other ranks' single runs of small item s this rank checks (hand-overs, load_handoff.h), to be read
 * straight into their buffers with the item rather than copied out of the scratch after: all of them
 * or none (then hand_over copies them), when they are few, inside the item and apart from ours and
 * from each other. */
static void place_hands(sck_ckpt *ck, small_rd *s) {
    s->nh = 0;
    size_t n = 0, k = 0;
    ck_hand *h = s->check && ck->nhands ? hands_of(ck, s->ei, s->ci, &n) : NULL;
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
    int rc = preadv_full(ck, s[0].ei, s[0].ci, ck->files[c0->file].fd, iov, k, s[0].from);
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
        rc = hand_over(ck, s[i].ei, s[i].ci, p, pat);
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
            rc = finish_pending(ck);
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
        rc = read_overlap(ck, x->ei, op[j].ci, &cbox, x->box, &ov, x->dst);
        j++;
    }
    ck->look = NULL;
    if (!rc) rc = finish_pending(ck);
    ck->pend.on = 0; /* after an error: nothing is left to check */
    if (ck->rp) rp_finish(ck->rp); /* a range queued for a read an error left undone: nothing lands later */
    free(sb);
    sck_big_free(op);
    return rc;
}

int ckpt_read_box(sck_ckpt *ck, size_t ei, const sck_box *want, void *dst) {
    ck_want w = {ei, want, dst};
    return ckpt_read_boxes(ck, &w, 1);
}

int sck_ckpt_read_box(sck_ckpt *ck, size_t i, const int64_t *offsets, const int64_t *sizes, void *dst) {
    if (ck && i >= ck->m.n && i < ckpt_count(ck))
        return sck_err(SCK_ERR_MISMATCH, "'%s': is a value in %s, not a tensor", ckpt_key(ck, i), META_PT_NAME);
    if (!ck || i >= ck->m.n) return sck_err(SCK_ERR_INVALID_ARG, "sck_ckpt_read_box: index %zu out of range", i);
    const ck_entry *e = &ck->m.e[i];
    sck_box b;
    memset(&b, 0, sizeof b);
    b.ndim = e->ndim;
    for (int d = 0; d < e->ndim; d++) {
        b.off[d] = offsets ? offsets[d] : 0;
        b.size[d] = sizes ? sizes[d] : e->shape[d];
    }
    if (!dst && box_numel(&b) > 0) return sck_err(SCK_ERR_INVALID_ARG, "'%s': NULL destination", e->key);
    return ckpt_read_box(ck, i, &b, dst);
}

int ckpt_read_item(sck_ckpt *ck, size_t ei, uint8_t **data, size_t *n) {
    ck_entry *e = &ck->m.e[ei];
    *data = NULL;
    *n = 0;
    if (!e->is_bytes || e->nchunks != 1) return sck_err(SCK_ERR_MISMATCH, "'%s': is a tensor, not a bytes entry", e->key);
    ck_chunk *c = &e->chunks[0];
    char what[4600];
    item_what(ck, e, c, what, sizeof what);
    if (c->transformed) return sck_err(SCK_ERR_UNSUPPORTED, "%s: stored with DCP transforms, not supported", what);
    int fd;
    uint64_t fsize;
    int rc = get_file(ck, c->file, &fd, &fsize);
    if (rc || (rc = check_window(ck, e, c, fsize))) return rc;
    if (c->length > SIZE_MAX - 1) return sck_err(SCK_ERR_NOMEM, "%s: too large", what);
    uint8_t *p = malloc(c->length ? c->length : 1);
    if (!p) return sck_err(SCK_ERR_NOMEM, "%s: out of memory for %llu bytes", what, (unsigned long long)c->length);
    if ((rc = sck_pread_full(fd, p, c->length, c->offset, what)) ||
        (ck->verify && c->has_crc && (rc = ckpt_check_item(ck, ei, 0, p, c->offset, c->length)))) {
        free(p);
        return rc;
    }
    *data = p;
    *n = c->length;
    return SCK_OK;
}

int sck_ckpt_read_bytes(sck_ckpt *ck, size_t i, void **data, size_t *n, sck_value **value) {
    if (!ck || i >= ckpt_count(ck) || !data || !n || !value)
        return sck_err(SCK_ERR_INVALID_ARG, "sck_ckpt_read_bytes: bad argument");
    *data = NULL;
    *n = 0;
    *value = NULL;
    if (i >= ck->m.n) { /* decoded with meta.pt when the checkpoint was opened */
        *value = sck_value_clone(ckpt_meta_value(ck, i));
        return *value ? SCK_OK : sck_err(SCK_ERR_NOMEM, "'%s': out of memory", ckpt_key(ck, i));
    }
    uint8_t *raw;
    size_t len;
    int rc = ckpt_read_item(ck, i, &raw, &len);
    if (rc) return rc;
    /* A torch.save archive (zip magic) holding data.pkl is decoded; anything else is raw bytes. */
    if (len >= 4 && !memcmp(raw, "PK\x03\x04", 4)) {
        zip_mem zm = {raw, len};
        zip_dir zd;
        char what[4600];
        item_what(ck, &ck->m.e[i], &ck->m.e[i].chunks[0], what, sizeof what);
        rc = zip_read_dir(zip_pread_mem, &zm, 0, len, what, &zd);
        if (rc == SCK_OK) {
            const zip_rec *pk = zip_find(&zd, "data.pkl");
            if (!pk) rc = sck_err(SCK_ERR_FORMAT, "%s: archive has no data.pkl", what);
            else rc = ti_decode_value_pkl(raw + pk->data_off, pk->size, what, value);
            zip_dir_free(&zd);
        }
        if (rc != SCK_ERR_UNSUPPORTED) {
            free(raw);
            return rc;
        }
        sck_err_clear();   /* a value with storages of its own: the archive as it is */
    }
    *data = raw;
    *n = len;
    return SCK_OK;
}
