/* state.c - building an sck_state: named tensor boxes, flat ranges, replicated tensors, blobs, values. */
#include "core/state.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "format/key_path.h"

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static _Atomic uint64_t last_stamp; /* thread ranks build their states at the same time */

void state_touch(sck_state *st) { st->stamp = atomic_fetch_add(&last_stamp, 1) + 1; }

sck_state *sck_state_new(void) {
    sck_state *st = calloc(1, sizeof *st);
    if (st) state_touch(st);
    return st;
}

void state_clear_unexpected(sck_state *st) {
    for (size_t i = 0; i < st->nunexpected; i++) free(st->unexpected[i]);
    free(st->unexpected);
    st->unexpected = NULL;
    st->nunexpected = 0;
}

int state_add_unexpected(sck_state *st, const char *key) {
    char **p = realloc(st->unexpected, (st->nunexpected + 1) * sizeof *p);
    if (!p) return sck_err(SCK_ERR_NOMEM, "out of memory recording unexpected key '%s'", key);
    st->unexpected = p;
    if (!(p[st->nunexpected] = sck_strdup(key))) return sck_err(SCK_ERR_NOMEM, "out of memory recording unexpected key '%s'", key);
    st->nunexpected++;
    return SCK_OK;
}

int state_same_boxes(const st_entry *a, const st_entry *b) {
    if (a->ndim != b->ndim || a->npieces != b->npieces) return 0;
    size_t nb = (size_t)a->ndim * sizeof(int64_t);
    for (size_t k = 0; k < a->npieces; k++) {
        const sck_box *x = &a->pieces[k].box, *y = &b->pieces[k].box;
        if (memcmp(x->off, y->off, nb) || memcmp(x->size, y->size, nb)) return 0;
    }
    return 1;
}

void sck_state_free(sck_state *st) {
    if (!st) return;
    for (size_t i = 0; i < st->n; i++) {
        if (!st->flat) {
            free(st->e[i].key);
            free(st->e[i].pieces);
            free(st->e[i].blob);
            free(st->e[i].path);
        }
        sck_value_free(st->e[i].value);
    }
    if (!st->flat) free(st->e);
    ws_pool_free(&st->dev_stage);
    free(st->slots);
    state_clear_unexpected(st);
    free(st);
}

st_entry *state_find(const sck_state *st, const char *key) {
    if (!st || !st->nslots) return NULL;
    size_t mask = st->nslots - 1;
    for (size_t i = (size_t)hash_str(key) & mask;; i = (i + 1) & mask) {
        size_t s = st->slots[i];
        if (!s) return NULL;
        if (!strcmp(st->e[s - 1].key, key)) return &st->e[s - 1];
    }
}

static int rehash(sck_state *st, size_t nslots) {
    size_t *slots = calloc(nslots, sizeof *slots);
    if (!slots) return SCK_ERR_NOMEM;
    for (size_t k = 0; k < st->n; k++) {
        size_t i = (size_t)hash_str(st->e[k].key) & (nslots - 1);
        while (slots[i]) i = (i + 1) & (nslots - 1);
        slots[i] = k + 1;
    }
    free(st->slots);
    st->slots = slots;
    st->nslots = nslots;
    return SCK_OK;
}

/* Appends a new entry for `key` (which must not exist yet). */
static int new_entry(sck_state *st, const char *key, ent_kind kind, st_entry **out) {
    if (st->n == st->cap) {
        size_t cap = st->cap ? st->cap * 2 : 16;
        st_entry *e = realloc(st->e, cap * sizeof *e);
        if (!e) return sck_err(SCK_ERR_NOMEM, "out of memory adding key '%s'", key);
        st->e = e;
        st->cap = cap;
    }
    if ((st->n + 1) * 2 > st->nslots) {
        if (rehash(st, st->nslots ? st->nslots * 2 : 32)) return sck_err(SCK_ERR_NOMEM, "out of memory adding key '%s'", key);
    }
    state_touch(st);
    st_entry *e = &st->e[st->n];
    memset(e, 0, sizeof *e);
    if (!(e->key = sck_strdup(key))) return sck_err(SCK_ERR_NOMEM, "out of memory adding key '%s'", key);
    e->kind = kind;
    size_t mask = st->nslots - 1;
    size_t i = (size_t)hash_str(key) & mask;
    while (st->slots[i]) i = (i + 1) & mask;
    st->slots[i] = st->n + 1;
    st->n++;
    *out = e;
    return SCK_OK;
}

static int check_key(const char *key) {
    if (!key || !*key) return sck_err(SCK_ERR_INVALID_ARG, "empty or NULL key");
    return SCK_OK;
}

/* Finds or creates the tensor entry for key, checking that dtype/shape agree with earlier calls. */
static int tensor_entry(sck_state *st, const char *key, sck_dtype dtype, int ndim, const int64_t *shape,
                        int replicated, st_entry **out) {
    int rc = check_key(key);
    if (rc) return rc;
    if (!st) return sck_err(SCK_ERR_INVALID_ARG, "%s: NULL state", key);
    if (sck_dtype_size(dtype) == 0) return sck_err(SCK_ERR_INVALID_ARG, "%s: invalid dtype %d", key, (int)dtype);
    if (ndim < 0 || ndim > SCK_MAX_DIMS) return sck_err(SCK_ERR_INVALID_ARG, "%s: ndim %d out of range 0..%d", key, ndim, SCK_MAX_DIMS);
    if (ndim > 0 && !shape) return sck_err(SCK_ERR_INVALID_ARG, "%s: NULL shape", key);
    uint64_t numel, bytes;
    if (sck_numel(ndim, shape, &numel) || sck_mul_overflow_u64(numel, sck_dtype_size(dtype), &bytes) || bytes > (uint64_t)INT64_MAX)
        return sck_err(SCK_ERR_INVALID_ARG, "%s: invalid shape (negative or too large)", key);
    st_entry *e = state_find(st, key);
    if (e) {
        if (e->kind != ENT_TENSOR) return sck_err(SCK_ERR_INVALID_ARG, "%s: key already used for a non-tensor entry", key);
        if (e->dtype != dtype || e->ndim != ndim || (ndim && memcmp(e->shape, shape, (size_t)ndim * sizeof *shape)))
            return sck_err(SCK_ERR_MISMATCH, "'%s': dtype/shape differ from an earlier call for this key", key);
        if (e->replicated || replicated)
            return sck_err(SCK_ERR_INVALID_ARG, "%s: a replicated tensor cannot have other boxes on the same rank", key);
    } else {
        rc = new_entry(st, key, ENT_TENSOR, &e);
        if (rc) return rc;
        e->dtype = dtype;
        e->ndim = ndim;
        if (ndim) memcpy(e->shape, shape, (size_t)ndim * sizeof *shape);
        e->replicated = replicated;
    }
    *out = e;
    return SCK_OK;
}

static int add_piece(sck_state *st, st_entry *e, const sck_box *b, void *data, int dev) {
    state_touch(st);
    if (e->npieces == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 2;
        st_piece *p = realloc(e->pieces, cap * sizeof *p);
        if (!p) return sck_err(SCK_ERR_NOMEM, "%s: out of memory adding a box", e->key);
        e->pieces = p;
        e->cap = cap;
    }
    e->pieces[e->npieces].box = *b;
    e->pieces[e->npieces].data = data;
    e->pieces[e->npieces].dev = dev;
    e->npieces++;
    st->ndev += dev != 0;
    return SCK_OK;
}

static int add_box(sck_state *st, const char *key, sck_dtype dtype, int ndim, const int64_t *shape,
                   const int64_t *offsets, const int64_t *sizes, void *data, int dev) {
    st_entry *e;
    int rc = tensor_entry(st, key, dtype, ndim, shape, 0, &e);
    if (rc) return rc;
    if (ndim > 0 && (!offsets || !sizes)) return sck_err(SCK_ERR_INVALID_ARG, "%s: NULL offsets or sizes", key);
    sck_box b;
    memset(&b, 0, sizeof b);
    b.ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        b.off[i] = offsets[i];
        b.size[i] = sizes[i];
    }
    if (!box_within(&b, shape)) return sck_err(SCK_ERR_INVALID_ARG, "%s: box lies outside the tensor's shape", key);
    if (!data && box_numel(&b) > 0) return sck_err(SCK_ERR_INVALID_ARG, "%s: NULL data for a non-empty box", key);
    if (box_empty(&b)) return SCK_OK; /* nothing to save or load; the key still exists */
    return add_piece(st, e, &b, data, dev);
}

static int add_flat(sck_state *st, const char *key, sck_dtype dtype, int ndim, const int64_t *shape,
                    int64_t begin, int64_t count, void *data, int dev) {
    st_entry *e;
    int rc = tensor_entry(st, key, dtype, ndim, shape, 0, &e);
    if (rc) return rc;
    sck_box boxes[2 * SCK_MAX_DIMS];
    int nb = box_from_flat(ndim, shape, begin, count, boxes);
    if (nb < 0)
        return sck_err(SCK_ERR_INVALID_ARG, "%s: flat range [%lld, %lld) does not fit the tensor", key, (long long)begin,
                       (long long)begin + (long long)count);
    if (!data && count > 0) return sck_err(SCK_ERR_INVALID_ARG, "%s: NULL data for a non-empty flat range", key);
    size_t elem = sck_dtype_size(dtype);
    uint64_t done = 0;
    for (int i = 0; i < nb; i++) {
        rc = add_piece(st, e, &boxes[i], (uint8_t *)data + done * elem, dev);
        if (rc) return rc;
        done += box_numel(&boxes[i]);
    }
    return SCK_OK;
}

static int add_replicated(sck_state *st, const char *key, sck_dtype dtype, int ndim, const int64_t *shape, void *data, int dev) {
    st_entry *e;
    int rc = tensor_entry(st, key, dtype, ndim, shape, 1, &e);
    if (rc) return rc;
    sck_box b;
    memset(&b, 0, sizeof b);
    b.ndim = ndim;
    for (int i = 0; i < ndim; i++) b.size[i] = shape[i];
    if (!data && box_numel(&b) > 0) return sck_err(SCK_ERR_INVALID_ARG, "%s: NULL data for a replicated tensor", key);
    if (box_empty(&b)) return SCK_OK;
    return add_piece(st, e, &b, data, dev);
}

int sck_state_add_box(sck_state *st, const char *key, sck_dtype dtype, int ndim, const int64_t *shape,
                      const int64_t *offsets, const int64_t *sizes, void *data) {
    return add_box(st, key, dtype, ndim, shape, offsets, sizes, data, 0);
}

int sck_state_add_flat(sck_state *st, const char *key, sck_dtype dtype, int ndim, const int64_t *shape,
                       int64_t begin, int64_t count, void *data) {
    return add_flat(st, key, dtype, ndim, shape, begin, count, data, 0);
}

int sck_state_add_replicated(sck_state *st, const char *key, sck_dtype dtype, int ndim, const int64_t *shape, void *data) {
    return add_replicated(st, key, dtype, ndim, shape, data, 0);
}

/* Device pieces: the same entries, whose data only the state's dev_ops may touch. */
int sck_state_set_device(sck_state *st, const sck_device_ops *ops, void *ctx) {
    if (!st || !ops) return sck_err(SCK_ERR_INVALID_ARG, "sck_state_set_device: NULL state or ops");
    if (!ops->copy_to_host || !ops->copy_to_device)
        return sck_err(SCK_ERR_INVALID_ARG, "sck_state_set_device: copy_to_host and copy_to_device are required");
    if (ops->host_alloc && !ops->host_free) return sck_err(SCK_ERR_INVALID_ARG, "sck_state_set_device: host_alloc without host_free");
    if (st->ndev && (st->dev_ops != ops || st->dev_ctx != ctx))
        return sck_err(SCK_ERR_INVALID_ARG, "sck_state_set_device: the state already holds device pieces of other ops");
    ws_pool_free(&st->dev_stage); /* allocated by the ops before */
    st->dev_ops = ops;
    st->dev_ctx = ctx;
    st->dev_stage.alloc = ops->host_alloc;
    st->dev_stage.release = ops->host_free;
    st->dev_stage.ctx = ctx;
    return SCK_OK;
}

static int need_device(const sck_state *st, const char *key) {
    if (st && !st->dev_ops) return sck_err(SCK_ERR_INVALID_ARG, "%s: a device piece needs sck_state_set_device first", key ? key : "(null)");
    return SCK_OK;
}

int sck_state_add_device_box(sck_state *st, const char *key, sck_dtype dtype, int ndim, const int64_t *shape,
                             const int64_t *offsets, const int64_t *sizes, void *data) {
    int rc = need_device(st, key);
    return rc ? rc : add_box(st, key, dtype, ndim, shape, offsets, sizes, data, 1);
}

int sck_state_add_device_flat(sck_state *st, const char *key, sck_dtype dtype, int ndim, const int64_t *shape,
                              int64_t begin, int64_t count, void *data) {
    int rc = need_device(st, key);
    return rc ? rc : add_flat(st, key, dtype, ndim, shape, begin, count, data, 1);
}

int sck_state_add_device_replicated(sck_state *st, const char *key, sck_dtype dtype, int ndim, const int64_t *shape, void *data) {
    int rc = need_device(st, key);
    return rc ? rc : add_replicated(st, key, dtype, ndim, shape, data, 1);
}

int sck_state_add_blob(sck_state *st, const char *key, const void *data, size_t n) {
    int rc = check_key(key);
    if (rc) return rc;
    if (!st) return sck_err(SCK_ERR_INVALID_ARG, "%s: NULL state", key);
    if (state_find(st, key)) return sck_err(SCK_ERR_INVALID_ARG, "%s: duplicate key", key);
    if (!data && n) return sck_err(SCK_ERR_INVALID_ARG, "%s: NULL data with length %zu", key, n);
    uint8_t *copy = NULL;
    if (data) {
        copy = malloc(n ? n : 1);
        if (!copy) return sck_err(SCK_ERR_NOMEM, "%s: out of memory copying a %zu-byte blob", key, n);
        memcpy(copy, data, n);
    }
    st_entry *e;
    rc = new_entry(st, key, ENT_BLOB, &e);
    if (rc) {
        free(copy);
        return rc;
    }
    e->blob = copy;
    e->blob_n = n;
    e->present = data != NULL;
    return SCK_OK;
}

int sck_state_add_item_bytes(sck_state *st, const char *key, const void *data, size_t n) {
    if (!data || !n) {
        int rc = check_key(key);
        return rc ? rc : sck_err(SCK_ERR_INVALID_ARG, "%s: an item of %zu bytes at %p: an item needs bytes", key, n, data);
    }
    int rc = sck_state_add_blob(st, key, data, n);
    if (!rc) state_find(st, key)->verbatim = 1;
    return rc;
}

int sck_state_add_value(sck_state *st, const char *key, sck_value *v) {
    int rc = check_key(key);
    if (rc || !st || state_find(st, key)) {
        sck_value_free(v);
        if (rc) return rc;
        return sck_err(SCK_ERR_INVALID_ARG, "%s: %s", key, st ? "duplicate key" : "NULL state");
    }
    st_entry *e;
    rc = new_entry(st, key, ENT_VALUE, &e);
    if (rc) {
        sck_value_free(v);
        return rc;
    }
    e->value = v;
    e->present = v != NULL;
    return SCK_OK;
}

int sck_state_set_path(sck_state *st, const char *key, const sck_value *path) {
    st_entry *e = st && key ? state_find(st, key) : NULL;
    if (!e) return sck_err(SCK_ERR_INVALID_ARG, "%s: sck_state_set_path: no such entry in the state", key ? key : "(null)");
    sck_buf b;
    sck_buf_init(&b);
    int rc = kp_from_value(path, key, &b);
    if (!rc && b.len > UINT32_MAX) rc = sck_err(SCK_ERR_INVALID_ARG, "'%s': path too long", key);
    if (rc) {
        sck_buf_free(&b);
        return rc;
    }
    free(e->path);
    e->path = NULL;
    e->path_len = 0;
    if (kp_is_default(b.data, b.len, key)) sck_buf_free(&b); /* recorded as no path: the same on disk */
    else e->path = b.data, e->path_len = (uint32_t)b.len;
    state_touch(st);
    return SCK_OK;
}

int sck_state_blob(const sck_state *st, const char *key, const void **data, size_t *n) {
    st_entry *e = key ? state_find(st, key) : NULL;
    if (!e || e->kind != ENT_BLOB || !e->present) return sck_err(SCK_ERR_MISSING_KEY, "%s: no blob loaded for this key", key ? key : "(null)");
    if (data) *data = e->blob;
    if (n) *n = e->blob_n;
    return SCK_OK;
}

const sck_value *sck_state_value(const sck_state *st, const char *key) {
    st_entry *e = key ? state_find(st, key) : NULL;
    return e && e->kind == ENT_VALUE ? e->value : NULL;
}

size_t sck_state_count(const sck_state *st) { return st ? st->n : 0; }

const char *sck_state_key(const sck_state *st, size_t i) { return st && i < st->n ? st->e[i].key : NULL; }

int sck_state_loaded(const sck_state *st, const char *key) {
    st_entry *e = key ? state_find(st, key) : NULL;
    return e ? e->loaded : 0;
}

size_t sck_state_unexpected(const sck_state *st, const char *const **keys) {
    if (keys) *keys = st ? (const char *const *)st->unexpected : NULL;
    return st ? st->nunexpected : 0;
}
