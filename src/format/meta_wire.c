/* meta_wire.c - ck_meta to flat bytes and back (see meta_wire.h).
 *
 * Layout, little-endian:
 *   header  magic[8] | u32 nfiles | u64 nentries | u64 nchunks (all entries) | u64 key bytes | u64 file bytes
 *           | u64 path bytes
 *           (key and file bytes count each string with its NUL: the sizes of the decoder's pools)
 *   file    u32 len | bytes
 *   entry   u32 keylen | key | u8 kind (bit 0: bytes, bit 1: a path follows the shape) | i32 dtype | u8 namelen
 *           | dtype_name | u8 ndim | i64 shape[ndim] | [u32 pathlen | path (src/key_path.h)] | u64 nchunks | chunks
 *   chunk   u8 ndim | i64 off[ndim] | i64 size[ndim] | u32 file | u64 offset | u64 length | u8 flags | u32 crc32c
 *           | u64 payload (only with flag MW_PAYLOAD)
 */
#include "format/meta_wire.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/box.h"
#include "format/key_path.h"

static const uint8_t mw_magic[8] = {'S', 'C', 'K', 'M', 'W', 0, 0, 3}; /* last byte: version */

#define MW_HEAD (8 + 4 + 8 + 8 + 8 + 8 + 8)
#define MW_FILE_MIN 4u
#define MW_ENTRY_MIN (4u + 1 + 4 + 1 + 1 + 8)     /* every field but the strings, shape and chunks */
#define MW_CHUNK_FIXED (4u + 8 + 8 + 1 + 4)        /* after ndim and the box */
#define MW_CHUNK_MIN (1u + MW_CHUNK_FIXED)

enum { MW_RAW = 1, MW_TRANSFORMED = 2, MW_HAS_CRC = 4, MW_PAYLOAD = 8 };
enum { MW_BYTES = 1, MW_PATH = 2 };

/* ---- encoding ---- */

static uint8_t *put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
    return p + 4;
}

static uint8_t *put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
    return p + 8;
}

static uint8_t *put_bytes(uint8_t *p, const void *s, size_t n) {
    memcpy(p, s, n);
    return p + n;
}

int meta_wire_encode(const ck_meta *m, sck_buf *out) {
    /* Sized exactly first, so the writing below needs no checks. */
    size_t size = MW_HEAD, nchunks = 0, key_bytes = 0, file_bytes = 0, path_bytes = 0;
    for (size_t i = 0; i < m->nfiles; i++) {
        size_t len = strlen(m->files[i]);
        if (len > UINT32_MAX) return sck_err(SCK_ERR_INVALID_ARG, "file name %zu is over 4 GiB long", i);
        size += MW_FILE_MIN + len;
        file_bytes += len + 1;
    }
    for (size_t i = 0; i < m->n; i++) {
        const ck_entry *e = &m->e[i];
        size_t len = strlen(e->key), name = strnlen(e->dtype_name, sizeof e->dtype_name);
        if (len > UINT32_MAX) return sck_err(SCK_ERR_INVALID_ARG, "key %zu is over 4 GiB long", i);
        if (name == sizeof e->dtype_name || e->ndim < 0 || e->ndim > SCK_MAX_DIMS)
            return sck_err(SCK_ERR_INVALID_ARG, "'%s': malformed entry (dtype name or rank)", e->key);
        size += MW_ENTRY_MIN + len + name + 8 * (size_t)e->ndim + (e->path ? 4 + (size_t)e->path_len : 0);
        key_bytes += len + 1;
        if (e->path) path_bytes += e->path_len;
        for (size_t c = 0; c < e->nchunks; c++) size += MW_CHUNK_MIN + 16 * (size_t)e->ndim + (e->chunks[c].payload ? 8 : 0);
        nchunks += e->nchunks;
    }
    int rc = sck_buf_reserve(out, size);
    if (rc) return sck_err(rc, "out of memory encoding a checkpoint model of %zu bytes", size);
    uint8_t *p = out->data + out->len;
    p = put_bytes(p, mw_magic, sizeof mw_magic);
    p = put32(p, (uint32_t)m->nfiles);
    p = put64(p, m->n);
    p = put64(p, nchunks);
    p = put64(p, key_bytes);
    p = put64(p, file_bytes);
    p = put64(p, path_bytes);
    for (size_t i = 0; i < m->nfiles; i++) {
        size_t len = strlen(m->files[i]);
        p = put32(p, (uint32_t)len);
        p = put_bytes(p, m->files[i], len);
    }
    for (size_t i = 0; i < m->n; i++) {
        const ck_entry *e = &m->e[i];
        size_t len = strlen(e->key), name = strnlen(e->dtype_name, sizeof e->dtype_name);
        p = put32(p, (uint32_t)len);
        p = put_bytes(p, e->key, len);
        *p++ = (uint8_t)((e->is_bytes ? MW_BYTES : 0) | (e->path ? MW_PATH : 0));
        p = put32(p, (uint32_t)e->dtype);
        *p++ = (uint8_t)name;
        p = put_bytes(p, e->dtype_name, name);
        *p++ = (uint8_t)e->ndim;
        for (int d = 0; d < e->ndim; d++) p = put64(p, (uint64_t)e->shape[d]);
        if (e->path) {
            p = put32(p, e->path_len);
            p = put_bytes(p, e->path, e->path_len);
        }
        p = put64(p, e->nchunks);
        for (size_t c = 0; c < e->nchunks; c++) {
            const ck_chunk *ch = &e->chunks[c];
            const int64_t *dims = ck_chunk_off(e, c); /* offsets, then sizes */
            *p++ = (uint8_t)e->ndim;
            for (int d = 0; d < 2 * e->ndim; d++) p = put64(p, (uint64_t)dims[d]);
            p = put32(p, ch->file);
            p = put64(p, ch->offset);
            p = put64(p, ch->length);
            *p++ = (uint8_t)((ch->raw ? MW_RAW : 0) | (ch->transformed ? MW_TRANSFORMED : 0) | (ch->has_crc ? MW_HAS_CRC : 0) |
                             (ch->payload ? MW_PAYLOAD : 0));
            p = put32(p, ch->crc32c);
            if (ch->payload) p = put64(p, ch->payload);
        }
    }
    out->len += size;
    return SCK_OK;
}

/* ---- decoding ---- */

typedef struct mw_rd {
    const uint8_t *p;
    size_t n, pos;
    const char *what;
} mw_rd;

static int bad(const mw_rd *r, size_t off, const char *fmt, ...) SCK_PRINTF(3, 4);

static int bad(const mw_rd *r, size_t off, const char *fmt, ...) {
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return sck_err(SCK_ERR_FORMAT, "%s: checkpoint model bytes, offset %zu: %s", r->what, off, detail);
}

/* Checks that k more bytes are there. */
static int need(const mw_rd *r, uint64_t k, const char *field) {
    if (k > r->n - r->pos)
        return bad(r, r->pos, "truncated: %s needs %llu bytes, %zu left", field, (unsigned long long)k, r->n - r->pos);
    return SCK_OK;
}

/* Unchecked reads: callers call need() first. */
static uint8_t get8(mw_rd *r) { return r->p[r->pos++]; }
static uint32_t get32(mw_rd *r) {
    uint32_t v = sck_le32(r->p + r->pos);
    r->pos += 4;
    return v;
}
static uint64_t get64(mw_rd *r) {
    uint64_t v = sck_le64(r->p + r->pos);
    r->pos += 8;
    return v;
}
static int64_t get_s64(mw_rd *r) {
    uint64_t v = get64(r);
    return v <= INT64_MAX ? (int64_t)v : -(int64_t)(~v) - 1;
}

/* A string of `len` bytes into pool[*used..]: no NUL inside, room for it and its NUL left. */
static int get_str(mw_rd *r, size_t len, char *pool, size_t cap, size_t *used, const char *field, char **out) {
    size_t at = r->pos;
    if (need(r, len, field)) return SCK_ERR_FORMAT;
    if (len >= cap - *used) return bad(r, at, "%s of %zu bytes overruns the %zu declared in the header", field, len, cap);
    if (memchr(r->p + r->pos, 0, len)) return bad(r, at, "%s holds a NUL byte", field);
    char *d = pool + *used;
    memcpy(d, r->p + r->pos, len);
    d[len] = 0;
    r->pos += len;
    *used += len + 1;
    *out = d;
    return SCK_OK;
}

static int decode_chunk(mw_rd *r, const ck_meta *m, const ck_entry *e, size_t c, ck_chunk *ch) {
    size_t at = r->pos;
    if (need(r, MW_CHUNK_MIN, "a chunk")) return SCK_ERR_FORMAT;
    int nd = get8(r);
    if (nd != e->ndim) return bad(r, at, "'%s' chunk %zu has rank %d, the tensor %d", e->key, c, nd, e->ndim);
    if (need(r, 16 * (uint64_t)nd + MW_CHUNK_FIXED, "a chunk")) return SCK_ERR_FORMAT;
    sck_box b; /* only its first nd dimensions: no zeroing per chunk */
    b.ndim = nd;
    for (int d = 0; d < nd; d++) b.off[d] = e->dims[2 * (size_t)nd * c + (size_t)d] = get_s64(r);
    for (int d = 0; d < nd; d++) b.size[d] = e->dims[2 * (size_t)nd * c + (size_t)(nd + d)] = get_s64(r);
    if (!box_within(&b, e->shape)) return bad(r, at, "'%s' chunk %zu lies outside the tensor", e->key, c);
    ch->file = get32(r);
    if (ch->file >= m->nfiles) return bad(r, at, "'%s' chunk %zu names file %u of %zu", e->key, c, ch->file, m->nfiles);
    ch->offset = get64(r);
    ch->length = get64(r);
    if (ch->offset > UINT64_MAX - ch->length) return bad(r, at, "'%s' chunk %zu: offset+length overflows", e->key, c);
    unsigned flags = get8(r);
    if (flags & ~(unsigned)(MW_RAW | MW_TRANSFORMED | MW_HAS_CRC | MW_PAYLOAD))
        return bad(r, at, "'%s' chunk %zu has unknown flags 0x%x", e->key, c, flags);
    ch->raw = !!(flags & MW_RAW);
    ch->transformed = !!(flags & MW_TRANSFORMED);
    ch->has_crc = !!(flags & MW_HAS_CRC);
    ch->crc32c = get32(r);
    ch->payload = 0;
    if (!(flags & MW_PAYLOAD)) return SCK_OK;
    if (need(r, 8, "a payload offset")) return SCK_ERR_FORMAT;
    ch->payload = get64(r);
    if (ch->payload == 0 || ch->payload >= ch->length || ch->raw || ch->transformed || e->is_bytes)
        return bad(r, at, "'%s' chunk %zu: payload offset %llu does not fit its item", e->key, c, (unsigned long long)ch->payload);
    return SCK_OK;
}

static int decode_entry(mw_rd *r, ck_meta *m, size_t i, size_t key_bytes, size_t *key_used, size_t nchunks, size_t *chunks_used,
                        size_t *dims_used, size_t path_bytes, size_t *path_used) {
    ck_entry *e = &m->e[i];
    size_t at = r->pos;
    if (need(r, 4, "a key length")) return SCK_ERR_FORMAT;
    size_t len = get32(r);
    int rc = get_str(r, len, m->key_pool, key_bytes, key_used, "a key", &e->key);
    if (rc) return rc;
    if (i > 0 && strcmp(m->e[i - 1].key, e->key) >= 0)
        return bad(r, at, "key '%s' does not follow '%s' (keys must be sorted and distinct)", e->key, m->e[i - 1].key);
    at = r->pos;
    if (need(r, MW_ENTRY_MIN - 4, "an entry")) return SCK_ERR_FORMAT;
    unsigned kind = get8(r), is_bytes = kind & MW_BYTES;
    int32_t dtype = (int32_t)get32(r);
    size_t name = get8(r);
    if (kind & ~(unsigned)(MW_BYTES | MW_PATH)) return bad(r, at, "'%s': unknown kind bits 0x%x", e->key, kind);
    if (dtype < -1 || dtype >= (int32_t)SCK_DTYPE_COUNT) return bad(r, at, "'%s': dtype %d is not one we know", e->key, (int)dtype);
    if (name >= sizeof e->dtype_name) return bad(r, at, "'%s': dtype name of %zu bytes", e->key, name);
    if (need(r, name + 1, "a dtype name")) return SCK_ERR_FORMAT;
    if (memchr(r->p + r->pos, 0, name)) return bad(r, r->pos, "'%s': dtype name holds a NUL byte", e->key);
    e->is_bytes = (int)is_bytes;
    e->dtype = dtype;
    memcpy(e->dtype_name, r->p + r->pos, name);
    r->pos += name;
    at = r->pos;
    e->ndim = get8(r);
    if (e->ndim > SCK_MAX_DIMS) return bad(r, at, "'%s' has %d dimensions", e->key, e->ndim);
    if (need(r, 8 * (uint64_t)e->ndim + 8, "a shape and chunk count")) return SCK_ERR_FORMAT;
    for (int d = 0; d < e->ndim; d++) e->shape[d] = get_s64(r);
    if (kind & MW_PATH) {
        at = r->pos;
        if (need(r, 4, "a path length")) return SCK_ERR_FORMAT;
        size_t plen = get32(r);
        if (need(r, (uint64_t)plen + 8, "a path and chunk count")) return SCK_ERR_FORMAT;
        if (plen > path_bytes - *path_used) return bad(r, at, "'%s': a path of %zu bytes overruns the header's total", e->key, plen);
        if (!kp_valid(r->p + r->pos, plen)) return bad(r, at, "'%s': malformed path", e->key);
        e->path = m->path_pool + *path_used;
        e->path_len = (uint32_t)plen;
        memcpy(e->path, r->p + r->pos, plen);
        r->pos += plen;
        *path_used += plen;
    }
    uint64_t numel, bytes;
    for (int d = 0; d < e->ndim; d++)
        if (e->shape[d] < 0) return bad(r, at, "'%s' has a negative dimension", e->key);
    if (sck_numel(e->ndim, e->shape, &numel) || sck_mul_overflow_u64(numel, 16, &bytes))
        return bad(r, at, "'%s' is impossibly large", e->key);
    at = r->pos;
    uint64_t k = get64(r);
    if (k > nchunks - *chunks_used) return bad(r, at, "'%s' has %llu chunks, more than the header's total left", e->key, (unsigned long long)k);
    if (e->is_bytes && k != 1) return bad(r, at, "bytes entry '%s' has %llu chunks, not 1", e->key, (unsigned long long)k);
    /* Each dimension of a chunk takes 16 bytes here and 2 values in the pool, which holds one value per 8 bytes of input. */
    if (e->ndim && k > (m->dims_pool_n - *dims_used) / (2 * (size_t)e->ndim))
        return bad(r, at, "'%s' has %llu chunks of %d dimensions, more than the bytes left hold", e->key, (unsigned long long)k, e->ndim);
    e->nchunks = (size_t)k;
    e->chunks = k ? m->chunk_pool + *chunks_used : NULL;
    e->dims = k && e->ndim ? m->dims_pool + *dims_used : NULL;
    *chunks_used += (size_t)k;
    *dims_used += (size_t)k * 2 * (size_t)e->ndim;
    for (size_t c = 0; c < e->nchunks; c++)
        if ((rc = decode_chunk(r, m, e, c, &e->chunks[c]))) return rc;
    return SCK_OK;
}

static int decode(mw_rd *r, ck_meta *m) {
    if (r->n < MW_HEAD) return bad(r, 0, "truncated: %zu bytes, the header alone is %d", r->n, MW_HEAD);
    if (memcmp(r->p, mw_magic, sizeof mw_magic)) return bad(r, 0, "bad magic (not made by this build's meta_wire_encode)");
    r->pos = sizeof mw_magic;
    uint64_t nfiles = get32(r), n = get64(r), nchunks = get64(r), key_bytes = get64(r), file_bytes = get64(r), path_bytes = get64(r);
    /* Every count is bounded by the bytes it needs, so nothing below allocates more than a small
     * multiple of the input. */
    uint64_t left = r->n - MW_HEAD;
    if (nfiles > left / MW_FILE_MIN || n > left / MW_ENTRY_MIN || nchunks > left / MW_CHUNK_MIN || key_bytes > left + n ||
        file_bytes > left + nfiles || key_bytes < n || file_bytes < nfiles || path_bytes > left)
        return bad(r, 8, "header counts (%llu files, %llu entries, %llu chunks, %llu+%llu string bytes) do not fit in %zu bytes",
                   (unsigned long long)nfiles, (unsigned long long)n, (unsigned long long)nchunks, (unsigned long long)key_bytes,
                   (unsigned long long)file_bytes, r->n);
    m->files = calloc(nfiles ? nfiles : 1, sizeof *m->files);
    m->file_pool = malloc(file_bytes ? file_bytes : 1);
    m->path_pool = malloc(path_bytes ? path_bytes : 1);
    m->key_pool = malloc(key_bytes ? key_bytes : 1);
    m->chunk_pool = sck_huge_calloc(nchunks ? nchunks : 1, sizeof *m->chunk_pool);
    m->chunk_pool_n = m->chunk_pool ? (nchunks ? nchunks : 1) : 0;
    m->e = m->chunk_pool ? sck_huge_calloc(n ? n : 1, sizeof *m->e) : NULL; /* freed as the pool's */
    m->cap = m->e ? (n ? n : 1) : 0;
    /* How many chunk dimensions there are is not in the header; the bytes bound them (8 a value).
     * Only what is used gets touched (each value is written before it is read): not zeroed. */
    size_t ndims = (size_t)(left / 8) + 1;
    m->dims_pool = ndims <= SIZE_MAX / sizeof *m->dims_pool ? sck_big_alloc(ndims * sizeof *m->dims_pool) : NULL;
    m->dims_pool_n = m->dims_pool ? ndims : 0;
    if (!m->files || !m->file_pool || !m->path_pool || !m->e || !m->key_pool || !m->chunk_pool || !m->dims_pool)
        return sck_err(SCK_ERR_NOMEM, "%s: out of memory for a model of %llu entries", r->what, (unsigned long long)n);
    m->nfiles = (size_t)nfiles; /* pooled: ck_meta_free needs no per-item state */
    m->n = (size_t)n;
    size_t file_used = 0, key_used = 0, chunks_used = 0, dims_used = 0, path_used = 0;
    for (size_t i = 0; i < m->nfiles; i++) {
        size_t at = r->pos;
        if (need(r, 4, "a file name length")) return SCK_ERR_FORMAT;
        int rc = get_str(r, get32(r), m->file_pool, (size_t)file_bytes, &file_used, "a file name", &m->files[i]);
        if (rc) return rc;
        if (!ck_plain_file_name(m->files[i])) return bad(r, at, "file name '%s' is not a plain name", m->files[i]);
    }
    for (size_t i = 0; i < m->n; i++) {
        int rc = decode_entry(r, m, i, (size_t)key_bytes, &key_used, (size_t)nchunks, &chunks_used, &dims_used, (size_t)path_bytes,
                              &path_used);
        if (rc) return rc;
    }
    if (file_used != file_bytes || key_used != key_bytes || chunks_used != nchunks || path_used != path_bytes)
        return bad(r, r->pos, "the header declares %llu chunks and %llu+%llu string bytes, the body holds %zu and %zu+%zu",
                   (unsigned long long)nchunks, (unsigned long long)key_bytes, (unsigned long long)file_bytes, chunks_used, key_used,
                   file_used);
    if (r->pos != r->n) return bad(r, r->pos, "%zu bytes after the model", r->n - r->pos);
    return SCK_OK;
}

int meta_wire_decode(const uint8_t *data, size_t n, const char *what, ck_meta *out) {
    memset(out, 0, sizeof *out);
    mw_rd r = {data, n, 0, what};
    int rc = decode(&r, out);
    if (rc) ck_meta_free(out);
    return rc;
}
