/* dcp_meta.c - the checkpoint model and DCP's `.metadata` pickle, both directions.
 * Decoding never runs anything: the pickle becomes a tree (pickle_read.c) that we read by class name. */
#include "format/dcp_meta.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/key_path.h"
#include "format/pickle.h"

#define MOD_META "torch.distributed.checkpoint.metadata"
#define MOD_FS "torch.distributed.checkpoint.filesystem"

void ck_meta_free(ck_meta *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n; i++) {
        if (!m->key_pool) free(m->e[i].key);
        if (!m->chunk_pool) free(m->e[i].chunks);
        if (!m->dims_pool) free(m->e[i].dims);
        if (!m->key_pool) free(m->e[i].path);
    }
    if (m->chunk_pool) sck_huge_free(m->e, m->cap, sizeof *m->e);
    else free(m->e);
    if (!m->file_pool)
        for (size_t i = 0; i < m->nfiles; i++) free(m->files[i]);
    free(m->files);
    free(m->key_pool);
    sck_huge_free(m->chunk_pool, m->chunk_pool_n, sizeof *m->chunk_pool);
    sck_big_free(m->dims_pool);
    free(m->file_pool);
    free(m->path_pool);
    free(m->file_end);
    free(m->item_base);
    memset(m, 0, sizeof *m);
}

int ck_meta_add(ck_meta *m, const char *key, ck_entry **out) {
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 16;
        ck_entry *e = realloc(m->e, cap * sizeof *e);
        if (!e) return sck_err(SCK_ERR_NOMEM, "out of memory adding entry '%s'", key);
        m->e = e;
        m->cap = cap;
    }
    ck_entry *e = &m->e[m->n];
    memset(e, 0, sizeof *e);
    e->dtype = -1;
    if (!(e->key = sck_strdup(key))) return sck_err(SCK_ERR_NOMEM, "out of memory adding entry '%s'", key);
    m->n++;
    *out = e;
    return SCK_OK;
}

int ck_entry_add_chunk(ck_entry *e, const ck_chunk *c, const int64_t *off, const int64_t *size) {
    /* grow by doubling: capacity is implicit (power of two >= n) */
    size_t n = e->nchunks, nd = (size_t)e->ndim;
    if ((n & (n - 1)) == 0) {
        size_t cap = n ? n * 2 : 1;
        ck_chunk *p = realloc(e->chunks, cap * sizeof *p);
        if (!p) return sck_err(SCK_ERR_NOMEM, "%s: out of memory adding a chunk", e->key);
        e->chunks = p;
        if (nd) {
            int64_t *d = realloc(e->dims, cap * 2 * nd * sizeof *d);
            if (!d) return sck_err(SCK_ERR_NOMEM, "%s: out of memory adding a chunk", e->key);
            e->dims = d;
        }
    }
    e->chunks[n] = *c;
    if (nd) {
        memcpy(e->dims + 2 * nd * n, off, nd * sizeof *off);
        memcpy(e->dims + 2 * nd * n + nd, size, nd * sizeof *size);
    }
    e->nchunks++;
    return SCK_OK;
}

void ck_chunk_box(const ck_entry *e, size_t c, sck_box *out) {
    out->ndim = e->ndim;
    if (!e->ndim) return;
    const int64_t *o = ck_chunk_off(e, c), *s = o + e->ndim;
    for (int d = 0; d < e->ndim; d++) out->off[d] = o[d], out->size[d] = s[d];
}

int ck_chunk_intersect(const ck_entry *e, size_t c, const sck_box *want, sck_box *cbox, sck_box *ov) {
    ck_chunk_box(e, c, cbox);
    return box_intersect(cbox, want, ov);
}

uint64_t ck_chunk_numel(const ck_entry *e, size_t c) {
    if (!e->ndim) return 1;
    const int64_t *s = ck_chunk_size(e, c);
    uint64_t n = 1;
    for (int d = 0; d < e->ndim; d++) n *= (uint64_t)s[d];
    return n;
}

int ck_meta_file(ck_meta *m, const char *name, uint32_t *idx) {
    /* Files are few (one per rank); a linear scan from the end hits the common case first. */
    for (size_t i = m->nfiles; i-- > 0;) {
        if (!strcmp(m->files[i], name)) {
            *idx = (uint32_t)i;
            return SCK_OK;
        }
    }
    char **f = realloc(m->files, (m->nfiles + 1) * sizeof *f);
    if (!f) return sck_err(SCK_ERR_NOMEM, "out of memory adding file '%s'", name);
    m->files = f;
    if (!(f[m->nfiles] = sck_strdup(name))) return sck_err(SCK_ERR_NOMEM, "out of memory adding file '%s'", name);
    *idx = (uint32_t)m->nfiles++;
    return SCK_OK;
}

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const ck_entry *)a)->key, ((const ck_entry *)b)->key);
}

int ck_meta_finish(ck_meta *m, const char *what) {
    if (m->n > 1) qsort(m->e, m->n, sizeof *m->e, cmp_entry);
    for (size_t i = 1; i < m->n; i++) {
        if (!strcmp(m->e[i - 1].key, m->e[i].key)) return sck_err(SCK_ERR_FORMAT, "%s: key '%s' appears twice", what, m->e[i].key);
    }
    return SCK_OK;
}

void ck_ov_begin(ck_ov_it *it, const ck_entry *e, const sck_box *want, size_t from) {
    it->e = e;
    it->want = want;
    it->left = box_numel(want);
    it->from = e->nchunks ? from % e->nchunks : 0;
    it->k = 0;
}

int ck_ov_next(ck_ov_it *it, size_t *ci, sck_box *ov) {
    while (it->left && it->k < it->e->nchunks) {
        size_t c = it->from + it->k++;
        if (c >= it->e->nchunks) c -= it->e->nchunks;
        sck_box cb;
        if (!ck_chunk_intersect(it->e, c, it->want, &cb, ov)) continue;
        uint64_t n = box_numel(ov);
        it->left = n < it->left ? it->left - n : 0;
        *ci = c;
        return 1;
    }
    return 0;
}

size_t ck_meta_nchunks(const ck_meta *m) {
    size_t n = 0;
    for (size_t i = 0; i < m->n; i++) n += m->e[i].nchunks;
    return n;
}

long ck_meta_find_near(const ck_meta *m, const char *key, long hint) {
    if (hint >= 0 && (size_t)hint < m->n && !strcmp(m->e[hint].key, key)) return hint;
    return ck_meta_find(m, key);
}

long ck_meta_find(const ck_meta *m, const char *key) {
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(m->e[mid].key, key);
        if (c == 0) return (long)mid;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

/* ------------------------------------------------------------------------ */
/* Encoding                                                                  */
/* ------------------------------------------------------------------------ */

static void enc_size(pk_writer *w, int ndim, const int64_t *dims) {
    pk_global_static(w, "torch", "Size");
    if (ndim > 3) pk_mark(w); /* TUPLE1..3 need no MARK */
    for (int i = 0; i < ndim; i++) pk_int(w, dims[i]);
    pk_tuple(w, (size_t)ndim);
    pk_tuple(w, 1);
    pk_reduce(w);
}

/* cls() via NEWOBJ with the dataclass field dict as BUILD state, as pickle does for dataclasses. */
static void enc_obj_begin(pk_writer *w, const char *module, const char *cls) {
    pk_global_static(w, module, cls);
    pk_tuple(w, 0);
    pk_newobj(w);
    pk_empty_dict(w);
    pk_mark(w);
}

static void enc_obj_end(pk_writer *w) {
    pk_setitems(w);
    pk_build(w);
}

static void enc_tensor_props(pk_writer *w, sck_dtype dt) {
    pk_global_static(w, MOD_META, "TensorProperties");
    pk_tuple(w, 0);
    pk_newobj(w);
    pk_mark(w);
    pk_global_static(w, "torch", sck_dtype_torch_name(dt));
    pk_global_static(w, "torch.serialization", "_get_layout");
    pk_cstr_memo(w, "torch.strided");
    pk_tuple(w, 1);
    pk_reduce(w);
    pk_bool(w, 0);
    pk_global_static(w, MOD_META, "_MEM_FORMAT_ENCODING");
    pk_int(w, 0);
    pk_tuple(w, 1);
    pk_reduce(w);
    pk_bool(w, 0);
    pk_tuple(w, 5);
    pk_build(w);
}

/* The pickle of m; with `at` (3 per chunk), each chunk's storage offset, length and CRC-32C are left
 * out (the CRC key is written for every chunk) and at[] receives where in out they go. */
static int encode(const ck_meta *m, sck_buf *out, size_t *at) {
    pk_writer w;
    pk_begin(&w, out, 4);
    pk_global_static(&w, MOD_META, "Metadata");
    pk_tuple(&w, 0);
    pk_newobj(&w);
    pk_empty_dict(&w);
    pk_mark(&w);

    pk_cstr_memo(&w, "state_dict_metadata");
    pk_empty_dict(&w);
    for (size_t i = 0; i < m->n; i++) {
        const ck_entry *e = &m->e[i];
        if (i % 1000 == 0) pk_mark(&w); /* SETITEMS in batches of 1000, as pickle does */
        pk_cstr_memo(&w, e->key);
        if (e->is_bytes) {
            pk_global_static(&w, MOD_META, "BytesStorageMetadata");
            pk_tuple(&w, 0);
            pk_newobj(&w);
        } else {
            enc_obj_begin(&w, MOD_META, "TensorStorageMetadata");
            pk_cstr_memo(&w, "properties");
            enc_tensor_props(&w, (sck_dtype)e->dtype);
            pk_cstr_memo(&w, "size");
            enc_size(&w, e->ndim, e->shape);
            pk_cstr_memo(&w, "chunks");
            pk_empty_list(&w);
            for (size_t c = 0; c < e->nchunks; c++) {
                if (c % 1000 == 0) pk_mark(&w);
                enc_obj_begin(&w, MOD_META, "ChunkStorageMetadata");
                pk_cstr_memo(&w, "offsets");
                enc_size(&w, e->ndim, ck_chunk_off(e, c));
                pk_cstr_memo(&w, "sizes");
                enc_size(&w, e->ndim, ck_chunk_size(e, c));
                enc_obj_end(&w);
                if (c % 1000 == 999 || c + 1 == e->nchunks) pk_appends(&w);
            }
            enc_obj_end(&w);
        }
        if (i % 1000 == 999 || i + 1 == m->n) pk_setitems(&w);
    }

    pk_cstr_memo(&w, "planner_data");
    pk_empty_dict(&w);
    for (size_t i = 0; i < m->n; i++) {
        if (i % 1000 == 0) pk_mark(&w);
        pk_cstr_memo(&w, m->e[i].key);
        kp_pickle(&w, m->e[i].path, m->e[i].path_len, m->e[i].key);
        if (i % 1000 == 999 || i + 1 == m->n) pk_setitems(&w);
    }

    pk_cstr_memo(&w, "storage_data");
    pk_empty_dict(&w);
    size_t total = ck_meta_nchunks(m), k = 0;
    for (size_t i = 0; i < m->n; i++) {
        const ck_entry *e = &m->e[i];
        for (size_t c = 0; c < e->nchunks; c++, k++) {
            if (k % 1000 == 0) pk_mark(&w);
            const ck_chunk *ch = &e->chunks[c];
            /* MetadataIndex: its __init__ sets fqn, index, then offset; offset omitted for bytes */
            enc_obj_begin(&w, MOD_META, "MetadataIndex");
            pk_cstr_memo(&w, "fqn");
            pk_cstr_memo(&w, e->key);
            pk_cstr_memo(&w, "index");
            if (e->is_bytes) pk_none(&w);
            else pk_int(&w, (int64_t)c);
            if (!e->is_bytes) {
                pk_cstr_memo(&w, "offset");
                enc_size(&w, e->ndim, ck_chunk_off(e, c));
            }
            enc_obj_end(&w);
            enc_obj_begin(&w, MOD_FS, "_StorageInfo");
            pk_cstr_memo(&w, "relative_path");
            pk_cstr_memo(&w, m->files[ch->file]);
            pk_cstr_memo(&w, "offset");
            if (at) at[3 * k] = out->len;
            else pk_int(&w, (int64_t)ch->offset);
            pk_cstr_memo(&w, "length");
            if (at) at[3 * k + 1] = out->len;
            else pk_int(&w, (int64_t)ch->length);
            if (ch->has_crc || at) {
                /* An extra BUILD key: pickle sets it as an instance attribute, which torch never reads. */
                pk_cstr_memo(&w, DCP_CRC_KEY);
                if (at) at[3 * k + 2] = out->len;
                else pk_int(&w, (int64_t)ch->crc32c);
            }
            enc_obj_end(&w);
            if (k % 1000 == 999 || k + 1 == total) pk_setitems(&w);
        }
    }
    pk_setitems(&w);
    pk_build(&w);
    int rc = pk_finish(&w);
    if (rc) return sck_err(rc, "out of memory encoding .metadata");
    return SCK_OK;
}

int dcp_meta_encode(const ck_meta *m, sck_buf *out) { return encode(m, out, NULL); }

int dcp_meta_encode_early(const ck_meta *m, dcp_meta_early *e) {
    memset(e, 0, sizeof *e);
    sck_buf_init(&e->pre);
    e->n = ck_meta_nchunks(m);
    if (e->n > SIZE_MAX / (3 * sizeof *e->at) || !(e->at = malloc(3 * e->n * sizeof *e->at + 1)))
        return sck_err(SCK_ERR_NOMEM, "out of memory encoding .metadata");
    int rc = encode(m, &e->pre, e->at);
    if (rc) dcp_meta_early_free(e);
    return rc;
}

int dcp_meta_encode_late(dcp_meta_early *e, const ck_meta *m, sck_buf *out) {
    if (ck_meta_nchunks(m) != e->n) return sck_err(SCK_ERR_INVALID_ARG, ".metadata: the model has %zu chunks, encoded early with %zu", ck_meta_nchunks(m), e->n);
    uint8_t b[PK_INT_MAX];
    size_t grow = 0;
    for (size_t i = 0; i < m->n; i++) { /* checked and measured before anything moves */
        const ck_entry *en = &m->e[i];
        for (size_t c = 0; c < en->nchunks; c++) {
            const ck_chunk *ch = &en->chunks[c];
            if (!ch->has_crc) return sck_err(SCK_ERR_INVALID_ARG, ".metadata: '%s' chunk %zu has no CRC-32C, encoded early with one", en->key, c);
            grow += pk_int_bytes(b, (int64_t)ch->offset) + pk_int_bytes(b, (int64_t)ch->length) + pk_int_bytes(b, (int64_t)ch->crc32c);
        }
    }
    if (sck_buf_reserve(&e->pre, grow)) return sck_err(SCK_ERR_NOMEM, "out of memory encoding .metadata");
    /* In place, from the end: each stretch of early bytes moves up by the integers before it, and the
     * integer before it goes into the room that opens (no second buffer of the whole size to fault in). */
    uint8_t *d = e->pre.data;
    size_t end = e->pre.len, shift = grow, k = e->n;
    for (size_t i = m->n; i-- > 0;) {
        const ck_entry *en = &m->e[i];
        for (size_t c = en->nchunks; c-- > 0;) {
            const ck_chunk *ch = &en->chunks[c];
            const int64_t v[3] = {(int64_t)ch->offset, (int64_t)ch->length, (int64_t)ch->crc32c};
            k--;
            for (int j = 3; j-- > 0;) {
                size_t at = e->at[3 * k + (size_t)j], n = pk_int_bytes(b, v[j]);
                memmove(d + at + shift, d + at, end - at);
                shift -= n;
                memcpy(d + at + shift, b, n);
                end = at;
            }
        }
    }
    e->pre.len += grow;
    sck_buf_free(out);
    *out = e->pre;
    sck_buf_init(&e->pre);
    dcp_meta_early_free(e);
    return SCK_OK;
}

void dcp_meta_early_free(dcp_meta_early *e) {
    sck_buf_free(&e->pre);
    free(e->at);
    memset(e, 0, sizeof *e);
}

/* ------------------------------------------------------------------------ */
/* Decoding                                                                  */
/* ------------------------------------------------------------------------ */

static int is_dcp_module(const char *m) {
    return !strcmp(m, MOD_META) || !strcmp(m, "torch.distributed._shard.checkpoint.metadata") ||
           !strcmp(m, "torch.distributed._shard.sharded_tensor.metadata") || !strcmp(m, MOD_FS) ||
           !strcmp(m, "torch.distributed._shard.checkpoint.filesystem");
}

static int allow_meta(void *ctx, const char *module, const char *name) {
    (void)ctx;
    static const char *const dcp_names[] = {"Metadata", "TensorStorageMetadata", "ChunkStorageMetadata",
                                            "BytesStorageMetadata", "MetadataIndex", "TensorProperties",
                                            "_MEM_FORMAT_ENCODING", "MEM_FORMAT_ENCODING", "StorageMeta",
                                            "_StorageInfo"};
    if (is_dcp_module(module)) {
        for (size_t i = 0; i < sizeof dcp_names / sizeof *dcp_names; i++)
            if (!strcmp(name, dcp_names[i])) return 1;
        return 0;
    }
    if (!strcmp(module, "torch")) {
        /* torch.Size and dtypes (any attribute that is a dtype name; unknown dtypes are reported later) */
        return !strcmp(name, "Size") || !strstr(name, "Storage");
    }
    if (!strcmp(module, "torch.serialization")) return !strcmp(name, "_get_layout");
    if (!strcmp(module, "builtins")) return !strcmp(name, "getattr");
    if (!strcmp(module, "pathlib") || !strcmp(module, "pathlib._local"))
        return !strcmp(name, "PosixPath") || !strcmp(name, "WindowsPath") || !strcmp(name, "PurePosixPath");
    if (!strcmp(module, "collections")) return !strcmp(name, "OrderedDict");
    if (!strcmp(module, "copyreg")) return !strcmp(name, "_reconstructor");
    return 0;
}

/* The class name of an object built by NEWOBJ or copyreg._reconstructor(cls, object, None). */
static const char *class_of(const pk_obj *o) {
    if (!o) return NULL;
    if (o->kind == PK_NEWOBJ && o->a && o->a->kind == PK_GLOBAL) return o->a->name;
    if (o->kind == PK_REDUCE && o->a && o->a->kind == PK_GLOBAL && !strcmp(o->a->name, "_reconstructor") && o->b &&
        o->b->kind == PK_TUPLE && o->b->n >= 1 && o->b->items[0]->kind == PK_GLOBAL)
        return o->b->items[0]->name;
    return NULL;
}

/* What BUILD set on an object (NULL for other kinds, whose fields share state's memory). */
static const pk_obj *build_state(const pk_obj *o) {
    return o && (o->kind == PK_REDUCE || o->kind == PK_NEWOBJ || o->kind == PK_PERSID) ? o->state : NULL;
}

/* The attribute dict set by BUILD; (None, {slots}) and ({dict}, {slots}) forms are accepted. */
static const pk_obj *state_of(const pk_obj *o) {
    const pk_obj *s = build_state(o);
    if (s && s->kind == PK_TUPLE && s->n == 2) {
        if (s->items[0]->kind == PK_DICT) return s->items[0];
        if (s->items[1]->kind == PK_DICT) return s->items[1];
    }
    return s;
}

static const pk_obj *attr(const pk_obj *o, const char *name) {
    const pk_obj *s = state_of(o);
    return s && s->kind == PK_DICT ? pk_dict_get(s, name) : NULL;
}

static int get_dims(const pk_obj *o, int *ndim, int64_t *dims) {
    if (o && o->kind == PK_REDUCE && o->a && o->a->kind == PK_GLOBAL && !strcmp(o->a->name, "Size") && o->b &&
        o->b->kind == PK_TUPLE && o->b->n == 1)
        o = o->b->items[0];
    if (!o || (o->kind != PK_TUPLE && o->kind != PK_LIST) || o->n > SCK_MAX_DIMS) return 0;
    for (size_t i = 0; i < o->n; i++) {
        if (o->items[i]->kind != PK_INT) return 0;
        dims[i] = o->items[i]->i;
    }
    *ndim = (int)o->n;
    return 1;
}

static int get_u64(const pk_obj *o, uint64_t *out) {
    if (!o || o->kind != PK_INT || o->i < 0) return 0;
    *out = (uint64_t)o->i;
    return 1;
}

/* dtype from TensorProperties (tuple state from __getstate__, or a field dict in old pickles). */
static void props_dtype(const pk_obj *props, ck_entry *e) {
    const pk_obj *d = NULL;
    const pk_obj *s = build_state(props);
    if (s && s->kind == PK_TUPLE && s->n >= 1) d = s->items[0];
    else if (s && s->kind == PK_DICT) d = pk_dict_get(s, "dtype");
    if (!d || d->kind != PK_GLOBAL) {
        snprintf(e->dtype_name, sizeof e->dtype_name, "?");
        return;
    }
    snprintf(e->dtype_name, sizeof e->dtype_name, "%s", d->name);
    sck_dtype dt;
    if (!strcmp(d->s, "torch") && sck_dtype_from_name(d->name, &dt) == SCK_OK) e->dtype = (int)dt;
}

static int decode_entry(ck_meta *m, const pk_obj *key, const pk_obj *val, const char *what) {
    if (key->kind != PK_STR) return sck_err(SCK_ERR_FORMAT, "%s: state_dict_metadata key is not a string", what);
    const char *cls = class_of(val);
    ck_entry *e;
    int rc = ck_meta_add(m, key->s, &e);
    if (rc) return rc;
    if (cls && !strcmp(cls, "BytesStorageMetadata")) {
        e->is_bytes = 1;
        return SCK_OK;
    }
    if (!cls || strcmp(cls, "TensorStorageMetadata"))
        return sck_err(SCK_ERR_FORMAT, "%s: entry '%s' is neither TensorStorageMetadata nor BytesStorageMetadata", what, key->s);
    props_dtype(attr(val, "properties"), e);
    /* Refused here, at open: a tensor whose element size we do not know cannot even be listed right. */
    if (e->dtype < 0)
        return sck_err(SCK_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s%s, which shardckpt does not support", what,
                       key->s, strcmp(e->dtype_name, "?") ? "torch." : "", e->dtype_name);
    if (!get_dims(attr(val, "size"), &e->ndim, e->shape))
        return sck_err(SCK_ERR_FORMAT, "%s: tensor '%s' has no valid size", what, key->s);
    for (int d = 0; d < e->ndim; d++)
        if (e->shape[d] < 0) return sck_err(SCK_ERR_FORMAT, "%s: tensor '%s' has a negative dimension", what, key->s);
    uint64_t numel, bytes;
    if (sck_numel(e->ndim, e->shape, &numel) || sck_mul_overflow_u64(numel, 16, &bytes))
        return sck_err(SCK_ERR_FORMAT, "%s: tensor '%s' is impossibly large", what, key->s);
    const pk_obj *chunks = attr(val, "chunks");
    if (!chunks || chunks->kind != PK_LIST) return sck_err(SCK_ERR_FORMAT, "%s: tensor '%s' has no chunk list", what, key->s);
    for (size_t c = 0; c < chunks->n; c++) {
        ck_chunk ch;
        memset(&ch, 0, sizeof ch);
        ch.file = UINT32_MAX; /* marks "no storage info yet" */
        sck_box b;
        int nd1 = -1, nd2 = -1;
        const pk_obj *co = chunks->items[c];
        if (!get_dims(attr(co, "offsets"), &nd1, b.off) || !get_dims(attr(co, "sizes"), &nd2, b.size) || nd1 != e->ndim ||
            nd2 != e->ndim)
            return sck_err(SCK_ERR_FORMAT, "%s: tensor '%s' chunk %zu has malformed offsets/sizes", what, key->s, c);
        b.ndim = e->ndim;
        if (!box_within(&b, e->shape))
            return sck_err(SCK_ERR_FORMAT, "%s: tensor '%s' chunk %zu lies outside the tensor", what, key->s, c);
        if ((rc = ck_entry_add_chunk(e, &ch, b.off, b.size))) return rc;
    }
    return SCK_OK;
}

int ck_plain_file_name(const char *s) {
    return *s && !strchr(s, '/') && !strchr(s, '\\') && strcmp(s, ".") && strcmp(s, "..");
}

static int decode_storage(ck_meta *m, const pk_obj *key, const pk_obj *val, const char *what) {
    const char *kc = class_of(key), *vc = class_of(val);
    if (!kc || strcmp(kc, "MetadataIndex") || !vc || strcmp(vc, "_StorageInfo"))
        return sck_err(SCK_ERR_FORMAT, "%s: storage_data entry is not MetadataIndex -> _StorageInfo", what);
    const pk_obj *fqn = attr(key, "fqn");
    if (!fqn || fqn->kind != PK_STR) return sck_err(SCK_ERR_FORMAT, "%s: MetadataIndex without fqn", what);
    long idx = ck_meta_find(m, fqn->s);
    if (idx < 0) return sck_err(SCK_ERR_FORMAT, "%s: storage_data names '%s', which is not in state_dict_metadata", what, fqn->s);
    ck_entry *e = &m->e[idx];
    const pk_obj *rp = attr(val, "relative_path");
    uint64_t off, len;
    if (!rp || rp->kind != PK_STR || !get_u64(attr(val, "offset"), &off) || !get_u64(attr(val, "length"), &len))
        return sck_err(SCK_ERR_FORMAT, "%s: '%s': _StorageInfo lacks relative_path/offset/length", what, fqn->s);
    if (!ck_plain_file_name(rp->s))
        return sck_err(SCK_ERR_FORMAT, "%s: '%s': relative_path '%s' is not a plain file name in the checkpoint directory", what,
                       fqn->s, rp->s);
    if (off > UINT64_MAX - len) return sck_err(SCK_ERR_FORMAT, "%s: '%s': offset+length overflows", what, fqn->s);
    const pk_obj *crc = attr(val, DCP_CRC_KEY);
    if (crc && (crc->kind != PK_INT || crc->i < 0 || crc->i > (int64_t)UINT32_MAX))
        return sck_err(SCK_ERR_FORMAT, "%s: '%s': %s is not a 32-bit unsigned integer", what, fqn->s, DCP_CRC_KEY);
    const pk_obj *td = attr(val, "transform_descriptors");
    int transformed = td && td->kind == PK_LIST && td->n > 0;
    ck_chunk *ch = NULL;
    if (e->is_bytes) {
        if (e->nchunks) return sck_err(SCK_ERR_FORMAT, "%s: bytes entry '%s' has two storage records", what, fqn->s);
        ck_chunk c0;
        memset(&c0, 0, sizeof c0);
        int rc = ck_entry_add_chunk(e, &c0, NULL, NULL);
        if (rc) return rc;
        ch = &e->chunks[0];
    } else {
        int nd = -1;
        int64_t offs[SCK_MAX_DIMS];
        if (!get_dims(attr(key, "offset"), &nd, offs) || nd != e->ndim)
            return sck_err(SCK_ERR_FORMAT, "%s: '%s': MetadataIndex offset missing or of wrong rank", what, fqn->s);
        const pk_obj *hint = attr(key, "index");
        size_t start = hint && hint->kind == PK_INT && hint->i >= 0 && (uint64_t)hint->i < e->nchunks ? (size_t)hint->i : 0;
        for (size_t k = 0; k < e->nchunks && !ch; k++) {
            size_t c = (start + k) % e->nchunks;
            if (!nd || !memcmp(ck_chunk_off(e, c), offs, (size_t)nd * sizeof *offs)) ch = &e->chunks[c];
        }
        if (!ch) return sck_err(SCK_ERR_FORMAT, "%s: '%s': storage record for a chunk offset that has no chunk", what, fqn->s);
        if (ch->file != UINT32_MAX) return sck_err(SCK_ERR_FORMAT, "%s: '%s': chunk has two storage records", what, fqn->s);
    }
    int rc = ck_meta_file(m, rp->s, &ch->file);
    if (rc) return rc;
    ch->offset = off;
    ch->length = len;
    ch->transformed = transformed;
    ch->has_crc = crc != NULL;
    ch->crc32c = crc ? (uint32_t)crc->i : 0;
    return SCK_OK;
}

/* Memo references let a few bytes stand for a whole record again (one chunk list shared by a million
 * tensors, one chunk a million times in a list), and each reference becomes a full copy in the model.
 * So before building anything: every chunk needs a storage record of its own, and the model may take
 * at most DCP_EXPAND_PER_BYTE bytes per input byte (plus DCP_EXPAND_BASE), arrays grown by doubling
 * aside; a file written by torch or by us needs about one.  *left: what the keys' paths may still take. */
#define DCP_EXPAND_PER_BYTE 4u
#define DCP_EXPAND_BASE ((uint64_t)64 << 20)

static int check_expansion(const pk_obj *sdm, const pk_obj *sd, size_t n, const char *what, uint64_t *left) {
    uint64_t chunks = 0, bytes = (uint64_t)sdm->n * sizeof(ck_entry);
    for (size_t i = 0; i < sdm->n; i++) {
        const pk_obj *val = sdm->items[2 * i + 1];
        const pk_obj *cl = attr(val, "chunks");
        int ndim = 0;
        int64_t dims[SCK_MAX_DIMS];
        if (!cl || cl->kind != PK_LIST) {
            chunks++;   /* a bytes entry (anything else fails in decode_entry) */
            continue;
        }
        if (!get_dims(attr(val, "size"), &ndim, dims)) ndim = 0;
        chunks += cl->n;
        bytes += (uint64_t)cl->n * (sizeof(ck_chunk) + 2 * (uint64_t)ndim * sizeof(int64_t));
    }
    if (chunks > sd->n)
        return sck_err(SCK_ERR_FORMAT, "%s: state_dict_metadata lists %llu chunks but storage_data has only %zu records "
                       "(each chunk needs its own)", what, (unsigned long long)chunks, sd->n);
    uint64_t limit = (uint64_t)n * DCP_EXPAND_PER_BYTE + DCP_EXPAND_BASE;
    if (bytes > limit)
        return sck_err(SCK_ERR_FORMAT, "%s: %zu entries with %llu chunks would take %llu MiB, more than the limit of %u "
                       "bytes per byte of this %zu-byte file plus %llu MiB (memo references repeat records)",
                       what, sdm->n, (unsigned long long)chunks, (unsigned long long)(bytes >> 20), DCP_EXPAND_PER_BYTE,
                       n, (unsigned long long)(DCP_EXPAND_BASE >> 20));
    *left = limit - bytes;
    return SCK_OK;
}

/* planner_data's path of each key, where it is a tuple of strings and indices other than the key's
 * default; anything else keeps the default: torch itself only reads it when unflattening. */
static int decode_paths(ck_meta *m, const pk_obj *pd, const char *what, uint64_t left) {
    if (!pd || pd->kind != PK_DICT) return SCK_OK;
    sck_buf b;
    sck_buf_init(&b);
    int rc = SCK_OK;
    for (size_t i = 0; i < pd->n && !rc; i++) {
        const pk_obj *k = pd->items[2 * i];
        long ei = k->kind == PK_STR ? ck_meta_find(m, k->s) : -1;
        if (ei < 0 || m->e[ei].path) continue;
        /* a path's elements may be memo references to one long string: charge the copy first */
        const pk_obj *t = pd->items[2 * i + 1];
        uint64_t cost = 0;
        if (t->kind == PK_TUPLE || t->kind == PK_LIST)
            for (size_t j = 0; j < t->n; j++) cost += 16 + (t->items[j]->kind == PK_STR ? t->items[j]->len : 0);
        if (cost > left) {
            rc = sck_err(SCK_ERR_FORMAT, "%s: planner_data paths take more than the limit of %u bytes per byte of the "
                         "file plus %llu MiB (memo references repeat strings), at key '%s'", what, DCP_EXPAND_PER_BYTE,
                         (unsigned long long)(DCP_EXPAND_BASE >> 20), k->s);
            break;
        }
        left -= cost;
        b.len = 0;
        int got = kp_from_pickle(pd->items[2 * i + 1], &b);
        if (got < 0) rc = got;
        if (got != 1 || kp_is_default(b.data, b.len, m->e[ei].key) || b.len > UINT32_MAX) continue;
        if (!(m->e[ei].path = malloc(b.len))) rc = sck_err(SCK_ERR_NOMEM, "out of memory reading planner_data");
        else memcpy(m->e[ei].path, b.data, b.len), m->e[ei].path_len = (uint32_t)b.len;
    }
    sck_buf_free(&b);
    return rc;
}

int dcp_meta_decode(const uint8_t *data, size_t n, const char *what, ck_meta *out) {
    memset(out, 0, sizeof *out);
    pk_arena *arena = NULL;
    pk_obj *root = NULL;
    int rc = pk_parse(data, n, what, allow_meta, NULL, NULL, &arena, &root);
    if (rc) goto done;
    const char *cls = class_of(root);
    if (!cls || strcmp(cls, "Metadata")) {
        rc = sck_err(SCK_ERR_FORMAT, "%s: not a DCP Metadata object", what);
        goto done;
    }
    const pk_obj *sdm = attr(root, "state_dict_metadata");
    if (!sdm || sdm->kind != PK_DICT) {
        rc = sck_err(SCK_ERR_FORMAT, "%s: Metadata has no state_dict_metadata dict", what);
        goto done;
    }
    const pk_obj *sd = attr(root, "storage_data");
    if (!sd || sd->kind != PK_DICT) {
        rc = sck_err(SCK_ERR_FORMAT, "%s: Metadata has no storage_data dict (not written by a FileSystemWriter?)", what);
        goto done;
    }
    uint64_t left = 0;
    if ((rc = check_expansion(sdm, sd, n, what, &left))) goto done;
    for (size_t i = 0; i < sdm->n; i++) {
        if ((rc = decode_entry(out, sdm->items[2 * i], sdm->items[2 * i + 1], what))) goto done;
    }
    if ((rc = ck_meta_finish(out, what))) goto done;
    if ((rc = decode_paths(out, attr(root, "planner_data"), what, left))) goto done;
    for (size_t i = 0; i < sd->n; i++) {
        if ((rc = decode_storage(out, sd->items[2 * i], sd->items[2 * i + 1], what))) goto done;
    }
    for (size_t i = 0; i < out->n; i++) {
        ck_entry *e = &out->e[i];
        if (e->is_bytes && e->nchunks == 0) {
            rc = sck_err(SCK_ERR_FORMAT, "%s: bytes entry '%s' has no storage record", what, e->key);
            goto done;
        }
        for (size_t c = 0; c < e->nchunks; c++) {
            if (e->chunks[c].file == UINT32_MAX) {
                rc = sck_err(SCK_ERR_FORMAT, "%s: tensor '%s' chunk %zu has no storage record", what, e->key, c);
                goto done;
            }
        }
    }
done:
    pk_arena_free(arena);
    if (rc) ck_meta_free(out);
    return rc;
}
