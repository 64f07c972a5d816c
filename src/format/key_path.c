/* key_path.c - entry paths in the nested state dict (see key_path.h). */
#include "format/key_path.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* The default path's split: the length of the first element, or 0 for a path of one element. */
static size_t default_split(const char *key) {
    const char *dot = strchr(key, '.');
    return !dot || dot == key || !dot[1] ? 0 : (size_t)(dot - key);
}

/* One element of an encoded path: a string (s, len) or an index. */
typedef struct kp_elem {
    int is_index;
    const char *s;
    uint64_t len, index;
} kp_elem;

/* Walks p[*at..n); 1 with the next element, 0 at the end, -1 if malformed. */
static int next_elem(const uint8_t *p, size_t n, size_t *at, kp_elem *el) {
    if (*at >= n) return 0;
    const uint8_t *q = p + *at + 1, *end = p + n;
    unsigned tag = p[*at];
    uint64_t v;
    if (tag > KP_INDEX || !sck_get_varint(&q, end, &v)) return -1;
    el->is_index = tag == KP_INDEX;
    if (el->is_index) {
        el->index = v;
    } else {
        if (v > (uint64_t)(end - q)) return -1;
        el->s = (const char *)q;
        el->len = v;
        q += v;
    }
    *at = (size_t)(q - p);
    return 1;
}

static int put_str(sck_buf *out, const char *s, size_t len) {
    uint8_t h[11];
    h[0] = KP_STR;
    size_t hn = (size_t)(sck_put_varint(h + 1, len) - h);
    return sck_buf_append(out, h, hn) || sck_buf_append(out, s, len) ? SCK_ERR_NOMEM : SCK_OK;
}

static int put_index(sck_buf *out, uint64_t i) {
    uint8_t h[11];
    h[0] = KP_INDEX;
    size_t hn = (size_t)(sck_put_varint(h + 1, i) - h);
    return sck_buf_append(out, h, hn) ? SCK_ERR_NOMEM : SCK_OK;
}

int kp_from_value(const sck_value *path, const char *key, sck_buf *out) {
    size_t n = sck_value_len(path);
    if (!path || sck_value_kind_of(path) != SCK_VAL_LIST || n == 0)
        return sck_err(SCK_ERR_INVALID_ARG, "'%s': a path is a non-empty list of strings and list indices", key);
    size_t start = out->len, kl = strlen(key), at = 0;
    int rc = SCK_OK;
    for (size_t i = 0; i < n && !rc; i++) {
        const sck_value *el = sck_value_at(path, i);
        char num[24];
        const char *s;
        size_t len;
        if (sck_value_kind_of(el) == SCK_VAL_STRING) {
            s = sck_value_get_string(el, &len);
            rc = put_str(out, s, len);
        } else if (sck_value_kind_of(el) == SCK_VAL_INT && sck_value_get_int(el) >= 0) {
            len = (size_t)snprintf(num, sizeof num, "%" PRId64, sck_value_get_int(el));
            s = num;
            rc = put_index(out, (uint64_t)sck_value_get_int(el));
        } else {
            rc = sck_err(SCK_ERR_INVALID_ARG, "'%s': path element %zu is neither a string nor a list index", key, i);
            break;
        }
        if (rc == SCK_ERR_NOMEM) rc = sck_err(rc, "'%s': out of memory for its path", key);
        /* torch's flattening: the key is the elements joined by dots */
        else if ((i && (at >= kl || key[at++] != '.')) || len > kl - at || memcmp(key + at, s, len))
            rc = sck_err(SCK_ERR_INVALID_ARG, "'%s': the path's elements joined by '.' do not make the key", key);
        at += len;
    }
    if (!rc && at != kl) rc = sck_err(SCK_ERR_INVALID_ARG, "'%s': the path's elements joined by '.' do not make the key", key);
    if (rc) out->len = start;
    return rc;
}

int kp_from_pickle(const pk_obj *t, sck_buf *out) {
    if (!t || (t->kind != PK_TUPLE && t->kind != PK_LIST) || t->n == 0) return 0;
    size_t start = out->len;
    for (size_t i = 0; i < t->n; i++) {
        const pk_obj *el = t->items[i];
        int rc = el->kind == PK_STR ? put_str(out, el->s, el->len)
               : el->kind == PK_INT && el->i >= 0 ? put_index(out, (uint64_t)el->i) : -1;
        if (rc) {
            out->len = start;
            return rc == SCK_ERR_NOMEM ? sck_err(rc, "out of memory reading planner_data") : 0;
        }
    }
    return 1;
}

int kp_valid(const uint8_t *p, size_t n) {
    size_t at = 0, count = 0;
    kp_elem el;
    int k;
    while ((k = next_elem(p, n, &at, &el)) > 0) count++;
    return k == 0 && count > 0;
}

int kp_is_default(const uint8_t *p, size_t n, const char *key) {
    if (!p) return 1;
    size_t split = default_split(key), kl = strlen(key), at = 0;
    kp_elem a, b;
    if (next_elem(p, n, &at, &a) != 1 || a.is_index) return 0;
    if (!split) return a.len == kl && !memcmp(a.s, key, kl) && at == n;
    if (next_elem(p, n, &at, &b) != 1 || b.is_index || at != n) return 0;
    return a.len == split && !memcmp(a.s, key, split) && b.len == kl - split - 1 && !memcmp(b.s, key + split + 1, b.len);
}

size_t kp_count(const uint8_t *p, size_t n, const char *key) {
    if (!p) return default_split(key) ? 2 : 1;
    size_t at = 0, count = 0;
    kp_elem el;
    while (next_elem(p, n, &at, &el) > 0) count++;
    return count;
}

sck_value *kp_to_value(const uint8_t *p, size_t n, const char *key) {
    sck_value *list = sck_value_list();
    if (!list) return NULL;
    int ok = 1;
    if (!p) {
        size_t split = default_split(key);
        ok = !sck_value_list_append(list, split ? sck_value_string_n(key, split) : sck_value_string(key));
        if (ok && split) ok = !sck_value_list_append(list, sck_value_string(key + split + 1));
    } else {
        size_t at = 0;
        kp_elem el;
        while (ok && next_elem(p, n, &at, &el) > 0)
            ok = !sck_value_list_append(list, el.is_index ? sck_value_int((int64_t)el.index) : sck_value_string_n(el.s, (size_t)el.len));
    }
    if (!ok) {
        sck_value_free(list);
        return NULL;
    }
    return list;
}

void kp_pickle(pk_writer *w, const uint8_t *p, size_t n, const char *key) {
    if (!p) { /* the default's strings are the key's: memoized as CPython's pickler would */
        size_t split = default_split(key);
        if (!split) {
            pk_cstr_memo(w, key);
            pk_tuple(w, 1);
            return;
        }
        pk_str(w, key, split);
        pk_cstr_memo(w, key + split + 1);
        pk_tuple(w, 2);
        return;
    }
    size_t count = kp_count(p, n, key), at = 0;
    kp_elem el;
    if (count > 3) pk_mark(w);
    while (next_elem(p, n, &at, &el) > 0) {
        if (el.is_index) pk_int(w, (int64_t)el.index);
        else pk_str(w, el.s, (size_t)el.len);
    }
    pk_tuple(w, count);
}
