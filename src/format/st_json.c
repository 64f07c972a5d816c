/* st_json.c - a safetensors header's JSON read one entry at a time into st_tensor records and the
 * __metadata__ dict, with the checks the reference crate makes on each entry.  No tree of the whole
 * header is built: a 100 MB header of small entries costs its records, not ten times its size. */
#include "format/safetensors.h"

#include <stdlib.h>
#include <string.h>

#include "base/json.h"

/* Valid safetensors dtypes we do not implement: SCK_ERR_UNSUPPORTED rather than "malformed". */
static const char *const g_other_spec_dtypes[] = {
    "F4", "F6_E2M3", "F6_E3M2",
};

typedef struct reader {
    const char *s;
    size_t n, pos;
    const char *what;
    sck_buf str;        /* the last string read */
} reader;

/* JSON-level errors read as sck_json_parse's, inside the header's wrapper. */
static int jwrap(const reader *r, int rc) { return sck_err_wrap(rc, "%s: header JSON at file offset 8", r->what); }

static int jerr(const reader *r, size_t at, const char *msg) {
    sck_err(SCK_ERR_FORMAT, "JSON: %s at byte %zu", msg, at);
    return jwrap(r, SCK_ERR_FORMAT);
}

static int dup_key(const reader *r, const char *key, size_t at) {
    sck_err(SCK_ERR_FORMAT, "JSON: duplicate key \"%.200s\" at byte %zu", key, at);
    return jwrap(r, SCK_ERR_FORMAT);
}

/* An object key and the ':' after it, into r->str; *at: where the key starts. */
static int read_key(reader *r, size_t *at) {
    int c = sck_json_peek(r->s, r->n, &r->pos);
    *at = r->pos;
    if (c != '"') return jerr(r, r->pos, c < 0 ? "unexpected end of input in object" : "expected a string key in object");
    int rc = sck_json_read_string(r->s, r->n, &r->pos, &r->str);
    if (rc) return jwrap(r, rc);
    if (memchr(r->str.data, 0, r->str.len)) return jerr(r, *at, "object key contains U+0000 (unsupported)");
    c = sck_json_peek(r->s, r->n, &r->pos);
    if (c != ':') return jerr(r, r->pos, c < 0 ? "unexpected end of input in object" : "expected ':' after object key");
    r->pos++;
    return SCK_OK;
}

/* After a member: 1 at ',', 0 at the closing '}'. */
static int next_member(reader *r) {
    int c = sck_json_peek(r->s, r->n, &r->pos);
    if (c == ',' || c == '}') {
        r->pos++;
        return c == ',';
    }
    return jerr(r, r->pos, c < 0 ? "unexpected end of input in object" : "expected ',' or '}' in object");
}

/* Opens an object; 1 when it is empty (and already closed). */
static int open_object(reader *r) {
    r->pos++;
    if (sck_json_peek(r->s, r->n, &r->pos) != '}') return 0;
    r->pos++;
    return 1;
}

/* ---- one tensor entry ---- */

/* What an entry said, checked once it is closed (in the order the reference crate checks). */
typedef struct fields {
    int has_dtype, has_shape, has_offs;
    int dtype_str;                  /* "dtype" is a string */
    char dtype[48];                 /* its first bytes, NUL-terminated */
    size_t dtype_len;
    int shape_list, offs_list;      /* the values are arrays */
    size_t ndim, noffs;             /* their lengths */
    long shape_bad, offs_bad;       /* the first element that is no count (-1: none) */
    int64_t shape[SCK_MAX_DIMS], offs[2];
} fields;

/* An array of counts (JSON integers >= 0; floats like 2.0 are not, as serde reads usize): the first
 * `cap` into v, how many in *count, the first that is no count in *bad.  Anything else: *is_list 0. */
static int read_counts(reader *r, int *is_list, int64_t *v, size_t cap, size_t *count, long *bad) {
    *count = 0;
    *bad = -1;
    *is_list = sck_json_peek(r->s, r->n, &r->pos) == '[';
    if (!*is_list) {
        int rc = sck_json_skip_value(r->s, r->n, &r->pos);
        return rc ? jwrap(r, rc) : SCK_OK;
    }
    r->pos++;
    int c = sck_json_peek(r->s, r->n, &r->pos);
    if (c == ']') {
        r->pos++;
        return SCK_OK;
    }
    for (;;) {
        c = sck_json_peek(r->s, r->n, &r->pos);
        int ok = 0, rc;
        int64_t x = 0;
        if (c == '[' || c == '{' || c == '"') {
            rc = sck_json_skip_value(r->s, r->n, &r->pos);   /* no count, and maybe big */
        } else {
            sck_value *e = NULL;
            rc = sck_json_read_value(r->s, r->n, &r->pos, 0, &e);
            if (!rc && sck_value_kind_of(e) == SCK_VAL_INT && sck_value_get_int(e) >= 0) ok = 1, x = sck_value_get_int(e);
            sck_value_free(e);
        }
        if (rc) return jwrap(r, rc);
        if (!ok && *bad < 0) *bad = (long)*count;
        if (*count < cap) v[*count] = x;
        (*count)++;
        c = sck_json_peek(r->s, r->n, &r->pos);
        if (c == ']') {
            r->pos++;
            return SCK_OK;
        }
        if (c != ',') return jerr(r, r->pos, c < 0 ? "unexpected end of input in array" : "expected ',' or ']' in array");
        r->pos++;
    }
}

static int read_fields(reader *r, fields *f) {
    memset(f, 0, sizeof *f);
    if (open_object(r)) return SCK_OK;
    int more = 1;
    while (more > 0) {
        size_t at;
        int rc = read_key(r, &at);
        if (rc) return rc;
        const char *k = (const char *)r->str.data;
        int *seen = !strcmp(k, "dtype") ? &f->has_dtype : !strcmp(k, "shape") ? &f->has_shape
                  : !strcmp(k, "data_offsets") ? &f->has_offs : NULL;
        if (seen && *seen) return dup_key(r, k, at);
        if (seen) *seen = 1;
        if (seen == &f->has_dtype && sck_json_peek(r->s, r->n, &r->pos) == '"') {
            if ((rc = sck_json_read_string(r->s, r->n, &r->pos, &r->str))) return jwrap(r, rc);
            f->dtype_str = 1;
            f->dtype_len = r->str.len;
            size_t keep = r->str.len < sizeof f->dtype - 1 ? r->str.len : sizeof f->dtype - 1;
            memcpy(f->dtype, r->str.data, keep);
            f->dtype[keep] = 0;
        } else if (seen == &f->has_shape) {
            rc = read_counts(r, &f->shape_list, f->shape, SCK_MAX_DIMS, &f->ndim, &f->shape_bad);
        } else if (seen == &f->has_offs) {
            rc = read_counts(r, &f->offs_list, f->offs, 2, &f->noffs, &f->offs_bad);
        } else if ((rc = sck_json_skip_value(r->s, r->n, &r->pos))) {   /* other fields: ignored, as serde does */
            rc = jwrap(r, rc);
        }
        if (rc) return rc;
        if ((more = next_member(r)) < 0) return more;
    }
    return SCK_OK;
}

static int check_dtype(const char *what, const char *name, const fields *f, sck_dtype *out) {
    if (!f->dtype_str) return sck_err(SCK_ERR_FORMAT, "%s: tensor \"%s\": \"dtype\" is not a string", what, name);
    const char *s = f->dtype;
    /* sck_dtype_from_name also takes torch names; the file must use the exact safetensors spelling. */
    if (strlen(s) == f->dtype_len && sck_dtype_from_name(s, out) == SCK_OK && !strcmp(sck_dtype_st_name(*out), s))
        return SCK_OK;
    for (size_t i = 0; i < sizeof g_other_spec_dtypes / sizeof g_other_spec_dtypes[0]; i++)
        if (strlen(s) == f->dtype_len && !strcmp(s, g_other_spec_dtypes[i]))
            return sck_err(SCK_ERR_UNSUPPORTED, "%s: tensor \"%s\" has dtype %s, which is not supported", what, name, s);
    return sck_err(SCK_ERR_FORMAT, "%s: tensor \"%s\" has unknown dtype \"%.40s\"", what, name, s);
}

static int check_tensor(const char *what, const char *name, const fields *f, st_tensor *t) {
    if (!f->has_dtype || !f->has_shape || !f->has_offs)
        return sck_err(SCK_ERR_FORMAT, "%s: tensor \"%s\": missing \"%s\"", what, name,
                       !f->has_dtype ? "dtype" : !f->has_shape ? "shape" : "data_offsets");
    int rc = check_dtype(what, name, f, &t->dtype);
    if (rc) return rc;
    if (!f->shape_list) return sck_err(SCK_ERR_FORMAT, "%s: tensor \"%s\": \"shape\" is not a list", what, name);
    if (f->ndim > SCK_MAX_DIMS)
        return sck_err(SCK_ERR_UNSUPPORTED, "%s: tensor \"%s\" has %zu dimensions, more than %d", what, name, f->ndim,
                       SCK_MAX_DIMS);
    if (f->shape_bad >= 0)
        return sck_err(SCK_ERR_FORMAT, "%s: tensor \"%s\": shape[%ld] is not a non-negative integer", what, name,
                       f->shape_bad);
    t->ndim = (int)f->ndim;
    memcpy(t->shape, f->shape, f->ndim * sizeof *t->shape);
    if (!f->offs_list || f->noffs != 2 || f->offs_bad >= 0)
        return sck_err(SCK_ERR_FORMAT, "%s: tensor \"%s\": \"data_offsets\" is not [begin, end] of non-negative integers",
                       what, name);
    int64_t b = f->offs[0], e = f->offs[1];
    if (e < b)
        return sck_err(SCK_ERR_FORMAT, "%s: tensor \"%s\": data_offsets [%lld, %lld] end before they begin", what,
                       name, (long long)b, (long long)e);
    t->begin = (uint64_t)b;
    t->end = (uint64_t)e;
    uint64_t numel, nbytes;
    if (sck_numel(t->ndim, t->shape, &numel) || sck_mul_overflow_u64(numel, sck_dtype_size(t->dtype), &nbytes))
        return sck_err(SCK_ERR_FORMAT, "%s: tensor \"%s\": shape overflows 64 bits", what, name);
    if (nbytes != t->end - t->begin)
        return sck_err(SCK_ERR_FORMAT,
                       "%s: tensor \"%s\": shape and dtype %s need %llu bytes but data_offsets [%llu, %llu] hold %llu",
                       what, name, sck_dtype_st_name(t->dtype), (unsigned long long)nbytes,
                       (unsigned long long)t->begin, (unsigned long long)t->end,
                       (unsigned long long)(t->end - t->begin));
    t->name = sck_strdup(name);
    return t->name ? SCK_OK : sck_err(SCK_ERR_NOMEM, "%s: out of memory", what);
}

/* ---- __metadata__: a str -> str map (null: none) ---- */

static int read_metadata(reader *r, st_header *h) {
    int c = sck_json_peek(r->s, r->n, &r->pos);
    if (c == 'n') {   /* serde reads null as "no metadata" */
        sck_value *v = NULL;
        int rc = sck_json_read_value(r->s, r->n, &r->pos, 0, &v);
        sck_value_free(v);
        return rc ? jwrap(r, rc) : SCK_OK;
    }
    if (c != '{') {
        int rc = sck_json_skip_value(r->s, r->n, &r->pos);
        return rc ? jwrap(r, rc) : sck_err(SCK_ERR_FORMAT, "%s: \"%s\" is not an object", r->what, ST_METADATA_KEY);
    }
    if (!(h->metadata = sck_value_dict())) return sck_err(SCK_ERR_NOMEM, "%s: out of memory", r->what);
    if (open_object(r)) return SCK_OK;
    char *key = NULL;
    int more = 1, rc = SCK_OK;
    while (more > 0 && !rc) {
        size_t at;
        if ((rc = read_key(r, &at))) break;
        if (sck_value_len(h->metadata) >= ST_MAX_METADATA) {
            rc = sck_err(SCK_ERR_FORMAT, "%s: \"%s\" has more than %d entries (at byte %zu of the header)", r->what,
                         ST_METADATA_KEY, ST_MAX_METADATA, at);
            break;
        }
        if (sck_value_dict_get(h->metadata, (const char *)r->str.data)) {
            rc = dup_key(r, (const char *)r->str.data, at);
            break;
        }
        if (!(key = sck_strndup((const char *)r->str.data, r->str.len))) {
            rc = sck_err(SCK_ERR_NOMEM, "%s: out of memory", r->what);
            break;
        }
        if (sck_json_peek(r->s, r->n, &r->pos) != '"') {
            rc = sck_json_skip_value(r->s, r->n, &r->pos);
            rc = rc ? jwrap(r, rc) : sck_err(SCK_ERR_FORMAT, "%s: \"%s\" value of key \"%.200s\" is not a string",
                                             r->what, ST_METADATA_KEY, key);
        } else if ((rc = sck_json_read_string(r->s, r->n, &r->pos, &r->str))) {
            rc = jwrap(r, rc);
        } else {
            sck_value *v = sck_value_string_n((const char *)r->str.data, r->str.len);
            if (!v || sck_value_dict_set(h->metadata, key, v)) rc = sck_err(SCK_ERR_NOMEM, "%s: out of memory", r->what);
        }
        free(key);
        key = NULL;
        if (!rc && (more = next_member(r)) < 0) rc = more;
    }
    return rc;
}

/* ---- the header ---- */

typedef struct name_at {
    const char *name;
    size_t at;
} name_at;

static int cmp_name_at(const void *pa, const void *pb) {
    const name_at *a = pa, *b = pb;
    int c = strcmp(a->name, b->name);
    return c ? c : a->at < b->at ? -1 : a->at > b->at;
}

/* Names that appear twice: the error names the first repeat in the file, as a tree parser would. */
static int check_dups(const reader *r, const st_header *h, const size_t *key_at) {
    if (h->n < 2) return SCK_OK;
    name_at *v = malloc(h->n * sizeof *v);
    if (!v) return sck_err(SCK_ERR_NOMEM, "%s: out of memory for %zu tensor names", r->what, h->n);
    for (size_t i = 0; i < h->n; i++) v[i].name = h->t[i].name, v[i].at = key_at[i];
    qsort(v, h->n, sizeof *v, cmp_name_at);
    size_t best = SIZE_MAX;
    const char *name = NULL;
    for (size_t i = 1; i < h->n; i++)
        if (!strcmp(v[i - 1].name, v[i].name) && v[i].at < best) best = v[i].at, name = v[i].name;
    int rc = name ? dup_key(r, name, best) : SCK_OK;
    free(v);
    return rc;
}

int st_json_header(const char *what, const uint8_t *json, size_t len, st_header *h) {
    reader r = {(const char *)json, len, 0, what, {NULL, 0, 0}};
    size_t *key_at = NULL, cap = 0;
    int rc = SCK_OK, more = 1, seen_meta = 0;
    if (sck_json_peek(r.s, r.n, &r.pos) != '{') return sck_err(SCK_ERR_FORMAT, "%s: header is not a JSON object", what);
    if (open_object(&r)) more = 0;
    while (more > 0 && !rc) {
        size_t at;
        if ((rc = read_key(&r, &at))) break;
        if (!strcmp((const char *)r.str.data, ST_METADATA_KEY)) {
            rc = seen_meta++ ? dup_key(&r, ST_METADATA_KEY, at) : read_metadata(&r, h);
        } else {
            if (h->n == cap) {
                size_t nc = cap ? cap * 2 : 64;
                st_tensor *t = realloc(h->t, nc * sizeof *t);
                size_t *ka = t ? realloc(key_at, nc * sizeof *ka) : NULL;
                if (t) h->t = t;
                if (!ka) {
                    rc = sck_err(SCK_ERR_NOMEM, "%s: out of memory for %zu tensors", what, nc);
                    break;
                }
                key_at = ka;
                cap = nc;
            }
            char *name = sck_strndup((const char *)r.str.data, r.str.len);
            fields f;
            if (!name) rc = sck_err(SCK_ERR_NOMEM, "%s: out of memory", what);
            else if (sck_json_peek(r.s, r.n, &r.pos) != '{') {
                rc = sck_json_skip_value(r.s, r.n, &r.pos);
                rc = rc ? jwrap(&r, rc) : sck_err(SCK_ERR_FORMAT, "%s: tensor \"%s\": entry is not an object", what, name);
            } else if (!(rc = read_fields(&r, &f))) {
                memset(&h->t[h->n], 0, sizeof h->t[h->n]);
                if (!(rc = check_tensor(what, name, &f, &h->t[h->n]))) key_at[h->n++] = at;
            }
            free(name);
        }
        if (!rc && (more = next_member(&r)) < 0) rc = more;
    }
    if (!rc && sck_json_peek(r.s, r.n, &r.pos) >= 0) rc = jerr(&r, r.pos, "trailing characters after the JSON value");
    if (!rc) rc = check_dups(&r, h, key_at);
    free(key_at);
    sck_buf_free(&r.str);
    return rc;
}
