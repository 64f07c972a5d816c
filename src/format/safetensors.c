/* safetensors.c - parse and build safetensors headers, validating them the way the reference Rust
 * crate does (tensor.rs): header <= 100 MB, starts with '{', offsets contiguous and covering the
 * whole data section, shape * element size == byte span, "__metadata__" a str -> str map. */
#include "format/safetensors.h"

#include <stdlib.h>
#include <string.h>

#include "base/json.h"


void st_header_free(st_header *h) {
    if (!h) return;
    for (size_t i = 0; i < h->n; i++) free(h->t[i].name);
    free(h->t);
    sck_value_free(h->metadata);
    memset(h, 0, sizeof *h);
}

long st_find(const st_header *h, const char *name) {
    if (!h || !name) return -1;
    for (size_t i = 0; i < h->n; i++)
        if (!strcmp(h->t[i].name, name)) return (long)i;
    return -1;
}

/* ---- parsing ---- */

/* File order: by offsets; zero-length tensors share offsets, so the name breaks ties. */
static int cmp_tensor_offsets(const void *pa, const void *pb) {
    const st_tensor *a = pa, *b = pb;
    if (a->begin != b->begin) return a->begin < b->begin ? -1 : 1;
    if (a->end != b->end) return a->end < b->end ? -1 : 1;
    return strcmp(a->name, b->name);
}

/* The tensors, sorted, must tile [0, data_len) exactly. */
static int check_layout(const char *what, const st_header *h, uint64_t data_len) {
    uint64_t at = 0;
    for (size_t i = 0; i < h->n; i++) {
        const st_tensor *t = &h->t[i];
        if (t->begin < at)
            return sck_err(SCK_ERR_FORMAT, "%s: tensor \"%s\": data_offsets [%llu, %llu] overlap tensor \"%s\"", what,
                           t->name, (unsigned long long)t->begin, (unsigned long long)t->end, h->t[i - 1].name);
        if (t->begin > at)
            return sck_err(SCK_ERR_FORMAT, "%s: tensor \"%s\": gap of %llu unused bytes before data_offsets [%llu, %llu]",
                           what, t->name, (unsigned long long)(t->begin - at), (unsigned long long)t->begin,
                           (unsigned long long)t->end);
        if (t->end > data_len)
            return sck_err(SCK_ERR_FORMAT,
                           "%s: tensor \"%s\": data_offsets [%llu, %llu] run past the end of the %llu-byte data section",
                           what, t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                           (unsigned long long)data_len);
        at = t->end;
    }
    if (at != data_len)
        return sck_err(SCK_ERR_FORMAT, "%s: tensors cover %llu bytes but the data section has %llu", what,
                       (unsigned long long)at, (unsigned long long)data_len);
    return SCK_OK;
}

static int parse_json_header(const char *what, const uint8_t *json, uint64_t len, uint64_t data_len, st_header *h) {
    int rc = st_json_header(what, json, (size_t)len, h);
    if (rc) return rc;
    if (h->n > 1) qsort(h->t, h->n, sizeof *h->t, cmp_tensor_offsets); /* a values-only file has no array */
    return check_layout(what, h, data_len);
}

int st_parse_header(const uint8_t *buf, size_t buflen, uint64_t file_size, const char *what, st_header *out,
                    uint64_t *need) {
    if (!what) what = "safetensors";
    if (!out) return sck_err(SCK_ERR_INVALID_ARG, "%s: st_parse_header: NULL output", what);
    memset(out, 0, sizeof *out);
    if (need) *need = 0;
    if (!buf && buflen) return sck_err(SCK_ERR_INVALID_ARG, "%s: st_parse_header: NULL buffer", what);
    if (buflen > file_size) buflen = (size_t)file_size;  /* never look past the stated end */
    if (file_size < 8)
        return sck_err(SCK_ERR_FORMAT, "%s: %llu bytes is too short for a safetensors file (8-byte header length)",
                       what, (unsigned long long)file_size);
    if (buflen < 8) {
        if (!need) return sck_err(SCK_ERR_INVALID_ARG, "%s: st_parse_header: buffer shorter than 8 bytes", what);
        *need = 8;
        return 1;
    }
    uint64_t len = sck_le64(buf);
    if (len > ST_MAX_HEADER)
        return sck_err(SCK_ERR_FORMAT, "%s: header length %llu at offset 0 exceeds the %llu-byte limit", what,
                       (unsigned long long)len, ST_MAX_HEADER);
    if (len > file_size - 8)
        return sck_err(SCK_ERR_FORMAT, "%s: header length %llu at offset 0 runs past the end of the %llu-byte file",
                       what, (unsigned long long)len, (unsigned long long)file_size);
    if (buflen - 8 < len) {
        if (!need) return sck_err(SCK_ERR_INVALID_ARG, "%s: st_parse_header: buffer holds only part of the header", what);
        *need = 8 + len;
        return 1;
    }
    if (len == 0 || buf[8] != '{')
        return sck_err(SCK_ERR_FORMAT, "%s: header does not start with '{' at offset 8", what);
    out->header_len = len;
    out->data_start = 8 + len;
    int rc = parse_json_header(what, buf + 8, len, file_size - out->data_start, out);
    if (rc) st_header_free(out);
    return rc;
}

/* ---- building ---- */

static int cmp_name_ptr(const void *pa, const void *pb) {
    return strcmp(*(char *const *)pa, *(char *const *)pb);
}

static int check_utf8_name(const char *s, const char *role) {
    size_t n = strlen(s);
    if (sck_utf8_valid_prefix(s, n) != n)
        return sck_err(SCK_ERR_INVALID_ARG, "safetensors: %s \"%.200s\" is not valid UTF-8 (byte %zu)", role, s,
                       sck_utf8_valid_prefix(s, n));
    return SCK_OK;
}

static int check_build_args(st_tensor *t, size_t n, const sck_value *metadata) {
    if (n && !t) return sck_err(SCK_ERR_INVALID_ARG, "safetensors: NULL tensor array");
    if (metadata) {
        if (sck_value_kind_of(metadata) != SCK_VAL_DICT)
            return sck_err(SCK_ERR_INVALID_ARG, "safetensors: metadata is not a dict");
        for (size_t i = 0; i < sck_value_len(metadata); i++) {
            const char *key = sck_value_key_at(metadata, i);
            const sck_value *v = sck_value_at(metadata, i);
            size_t vn;
            const char *s = sck_value_get_string(v, &vn);
            if (sck_value_kind_of(v) != SCK_VAL_STRING)
                return sck_err(SCK_ERR_INVALID_ARG, "safetensors: metadata value of key \"%.200s\" is not a string", key);
            int rc = check_utf8_name(key, "metadata key");
            if (rc) return rc;
            if (sck_utf8_valid_prefix(s, vn) != vn)
                return sck_err(SCK_ERR_INVALID_ARG, "safetensors: metadata value of key \"%.200s\" is not valid UTF-8",
                               key);
        }
    }
    uint64_t at = 0;
    for (size_t i = 0; i < n; i++) {
        if (!t[i].name) return sck_err(SCK_ERR_INVALID_ARG, "safetensors: tensor %zu has no name", i);
        const char *name = t[i].name;
        int rc = check_utf8_name(name, "tensor name");
        if (rc) return rc;
        if (!strcmp(name, ST_METADATA_KEY))
            return sck_err(SCK_ERR_INVALID_ARG, "safetensors: tensor name \"%s\" is reserved", name);
        if (sck_dtype_size(t[i].dtype) == 0)
            return sck_err(SCK_ERR_INVALID_ARG, "safetensors: tensor \"%.200s\" has invalid dtype %d", name, (int)t[i].dtype);
        if (!sck_dtype_safetensors_name(t[i].dtype))
            return sck_err(SCK_ERR_UNSUPPORTED, "safetensors: tensor \"%.200s\" is %s, which safetensors has no dtype for",
                           name, sck_dtype_name(t[i].dtype));
        if (t[i].ndim < 0 || t[i].ndim > SCK_MAX_DIMS)
            return sck_err(SCK_ERR_INVALID_ARG, "safetensors: tensor \"%.200s\" has ndim %d", name, t[i].ndim);
        uint64_t numel, nbytes;
        if (sck_numel(t[i].ndim, t[i].shape, &numel) ||
            sck_mul_overflow_u64(numel, sck_dtype_size(t[i].dtype), &nbytes) || sck_add_overflow_u64(at, nbytes, &at))
            return sck_err(SCK_ERR_INVALID_ARG, "safetensors: tensor \"%.200s\" has a negative or overflowing shape",
                           name);
    }
    if (n < 2) return SCK_OK;
    /* Duplicate names: sort a copy of the name pointers. */
    char **names = malloc(n * sizeof *names);
    if (!names) return sck_err(SCK_ERR_NOMEM, "safetensors: out of memory");
    for (size_t i = 0; i < n; i++) names[i] = t[i].name;
    qsort(names, n, sizeof *names, cmp_name_ptr);
    int rc = SCK_OK;
    for (size_t i = 1; i < n && !rc; i++)
        if (!strcmp(names[i - 1], names[i]))
            rc = sck_err(SCK_ERR_INVALID_ARG, "safetensors: duplicate tensor name \"%.200s\"", names[i]);
    free(names);
    return rc;
}

static int put_tensor_json(sck_buf *b, const st_tensor *t) {
    if (sck_json_put_string(b, t->name, strlen(t->name)) ||
        sck_buf_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", sck_dtype_st_name(t->dtype)))
        return SCK_ERR_NOMEM;
    for (int d = 0; d < t->ndim; d++)
        if (sck_buf_printf(b, d ? ",%lld" : "%lld", (long long)t->shape[d])) return SCK_ERR_NOMEM;
    return sck_buf_printf(b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)t->begin,
                          (unsigned long long)t->end);
}

int st_build_header(st_tensor *t, size_t n, const sck_value *metadata, sck_buf *out) {
    if (!out) return sck_err(SCK_ERR_INVALID_ARG, "safetensors: NULL output buffer");
    int rc = check_build_args(t, n, metadata);
    if (rc) return rc;
    size_t start = out->len;
    if (sck_buf_zero(out, 8) || sck_buf_put_u8(out, '{')) goto oom;
    if (metadata) {
        if (sck_json_put_string(out, ST_METADATA_KEY, strlen(ST_METADATA_KEY)) || sck_buf_put_u8(out, ':') ||
            sck_json_write(out, metadata))
            goto oom;
    }
    uint64_t at = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t numel = 0;
        sck_numel(t[i].ndim, t[i].shape, &numel);  /* checked above */
        t[i].begin = at;
        t[i].end = at + numel * sck_dtype_size(t[i].dtype);
        at = t[i].end;
        if (((metadata || i) && sck_buf_put_u8(out, ',')) || put_tensor_json(out, &t[i])) goto oom;
    }
    if (sck_buf_put_u8(out, '}')) goto oom;
    /* Pad with spaces so the data section starts 8-byte aligned (8 + len is a multiple of 8). */
    while ((out->len - start) % 8)
        if (sck_buf_put_u8(out, ' ')) goto oom;
    uint64_t len = out->len - start - 8;
    for (int i = 0; i < 8; i++) out->data[start + (size_t)i] = (uint8_t)(len >> (8 * i));
    return SCK_OK;
oom:
    out->len = start;
    return sck_err(SCK_ERR_NOMEM, "safetensors: out of memory building the header");
}
