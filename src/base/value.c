/* value.c - the JSON-like sck_value tree: constructors, list/dict operations, clone, free, equality.
 *
 * Values may be nested as deeply as callers like, so free, clone and equal walk the tree with an
 * explicit stack instead of recursion.  Dicts keep insertion order in an entry array; once a dict
 * grows past DICT_INDEX_MIN keys it also gets an open-addressing hash index so big dicts stay linear. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/* Below this many keys a linear scan (with cached hashes) beats maintaining an index. */
#define DICT_INDEX_MIN 16

typedef struct dict_entry {
    char *key;
    uint64_t hash;
    sck_value *val;
} dict_entry;

struct sck_value {
    sck_value_kind kind;
    sck_value *free_next;  /* links containers waiting to be freed, so free needs no memory */
    union {
        int b;
        int64_t i;
        double f;
        struct { char *data; size_t len; } str;  /* STRING and BYTES, always NUL-terminated */
        struct { sck_value **items; size_t len, cap; } list;
        struct {
            dict_entry *entries;
            size_t len, cap;
            size_t *slots;  /* entry index + 1, 0 = empty; NULL until the dict is big */
            size_t nslots;  /* power of two */
        } dict;
    } u;
};

static uint64_t key_hash(const char *key) {
    uint64_t h = 0xcbf29ce484222325ull;  /* FNV-1a, then a final mix so low bits are usable */
    for (const unsigned char *p = (const unsigned char *)key; *p; p++) h = (h ^ *p) * 0x100000001b3ull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}

static sck_value *value_new(sck_value_kind kind) {
    sck_value *v = calloc(1, sizeof *v);
    if (v) v->kind = kind;
    return v;
}

sck_value *sck_value_null(void) { return value_new(SCK_VAL_NULL); }

sck_value *sck_value_bool(int b) {
    sck_value *v = value_new(SCK_VAL_BOOL);
    if (v) v->u.b = b ? 1 : 0;
    return v;
}

sck_value *sck_value_int(int64_t i) {
    sck_value *v = value_new(SCK_VAL_INT);
    if (v) v->u.i = i;
    return v;
}

sck_value *sck_value_float(double f) {
    sck_value *v = value_new(SCK_VAL_FLOAT);
    if (v) v->u.f = f;
    return v;
}

static sck_value *value_bytes_kind(sck_value_kind kind, const void *data, size_t n) {
    if (!data && n) return NULL;
    if (n == SIZE_MAX) return NULL;
    sck_value *v = value_new(kind);
    if (!v) return NULL;
    v->u.str.data = malloc(n + 1);
    if (!v->u.str.data) {
        free(v);
        return NULL;
    }
    if (n) memcpy(v->u.str.data, data, n);
    v->u.str.data[n] = 0;
    v->u.str.len = n;
    return v;
}

sck_value *sck_value_string(const char *s) { return s ? value_bytes_kind(SCK_VAL_STRING, s, strlen(s)) : NULL; }
sck_value *sck_value_string_n(const char *s, size_t n) { return value_bytes_kind(SCK_VAL_STRING, s, n); }
sck_value *sck_value_bytes(const void *data, size_t n) { return value_bytes_kind(SCK_VAL_BYTES, data, n); }
sck_value *sck_value_list(void) { return value_new(SCK_VAL_LIST); }
sck_value *sck_value_tuple(void) { return value_new(SCK_VAL_TUPLE); }
sck_value *sck_value_pickle(const void *data, size_t n) { return n ? value_bytes_kind(SCK_VAL_PICKLE, data, n) : NULL; }

sck_value *sck_value_bigint(const char *s) {
    if (!s) return NULL;
    const char *d = s + (*s == '-');
    size_t nd = strlen(d);
    if (nd == 0 || (nd > 1 && d[0] == '0')) return NULL;   /* canonical: no leading zeros */
    for (size_t i = 0; i < nd; i++)
        if (d[i] < '0' || d[i] > '9') return NULL;
    if (nd > 20000) return NULL;
    /* one that fits in int64 is an INT, so equal numbers always compare equal */
    if (nd <= 19) {
        char *end;
        errno = 0;
        long long x = strtoll(s, &end, 10);
        if (!errno && !*end) return sck_value_int((int64_t)x);
    }
    if (!strcmp(s, "-0")) return NULL;
    return value_bytes_kind(SCK_VAL_BIGINT, s, strlen(s));
}
sck_value *sck_value_dict(void) { return value_new(SCK_VAL_DICT); }

/* ---- freeing ---- */

static int is_seq(const sck_value *v) { return v->kind == SCK_VAL_LIST || v->kind == SCK_VAL_TUPLE; }
static int is_container(const sck_value *v) { return is_seq(v) || v->kind == SCK_VAL_DICT; }
/* kinds whose payload is u.str */
static int is_text(sck_value_kind k) {
    return k == SCK_VAL_STRING || k == SCK_VAL_BYTES || k == SCK_VAL_BIGINT || k == SCK_VAL_PICKLE;
}

/* Frees a scalar now, or queues a container on *pending (its children are handled later). */
static void free_or_queue(sck_value *v, sck_value **pending) {
    if (!v) return;
    if (is_container(v)) {
        v->free_next = *pending;
        *pending = v;
        return;
    }
    if (is_text(v->kind)) free(v->u.str.data);
    free(v);
}

void sck_value_free(sck_value *v) {
    sck_value *pending = NULL;
    free_or_queue(v, &pending);
    while (pending) {
        sck_value *c = pending;
        pending = c->free_next;
        if (is_seq(c)) {
            for (size_t i = 0; i < c->u.list.len; i++) free_or_queue(c->u.list.items[i], &pending);
            free(c->u.list.items);
        } else {
            for (size_t i = 0; i < c->u.dict.len; i++) {
                free(c->u.dict.entries[i].key);
                free_or_queue(c->u.dict.entries[i].val, &pending);
            }
            free(c->u.dict.entries);
            free(c->u.dict.slots);
        }
        free(c);
    }
}

/* ---- lists ---- */

static int list_push(sck_value *list, sck_value *item) {
    if (list->u.list.len == list->u.list.cap) {
        size_t cap = list->u.list.cap ? list->u.list.cap * 2 : 4;
        if (cap > SIZE_MAX / sizeof(sck_value *)) return SCK_ERR_NOMEM;
        sck_value **p = realloc(list->u.list.items, cap * sizeof *p);
        if (!p) return SCK_ERR_NOMEM;
        list->u.list.items = p;
        list->u.list.cap = cap;
    }
    list->u.list.items[list->u.list.len++] = item;
    return SCK_OK;
}

int sck_value_list_append(sck_value *list, sck_value *item) {
    if (!item) return sck_err(SCK_ERR_INVALID_ARG, "sck_value_list_append: NULL item (did its constructor run out of memory?)");
    if (!list || !is_seq(list) || item == list) {
        if (item != list) sck_value_free(item);  /* a list given to itself stays the caller's */
        return sck_err(SCK_ERR_INVALID_ARG, "sck_value_list_append: %s", !list ? "NULL list"
                       : item == list ? "cannot append a list to itself" : "not a list");
    }
    if (list_push(list, item)) {
        sck_value_free(item);
        return sck_err(SCK_ERR_NOMEM, "sck_value_list_append: out of memory growing a list of %zu items",
                       list->u.list.len);
    }
    return SCK_OK;
}

/* ---- dicts ---- */

static void index_put(size_t *slots, size_t nslots, uint64_t hash, size_t entry) {
    size_t mask = nslots - 1;
    size_t s = (size_t)hash & mask;
    while (slots[s]) s = (s + 1) & mask;
    slots[s] = entry + 1;
}

/* (Re)builds the hash index with room for twice the entries, keeping the load factor <= 1/2. */
static int index_rebuild(sck_value *d) {
    size_t want = 64;
    while (want < d->u.dict.len * 2 + 2) {
        if (want > SIZE_MAX / 2 / sizeof(size_t)) return SCK_ERR_NOMEM;
        want *= 2;
    }
    size_t *slots = calloc(want, sizeof *slots);
    if (!slots) return SCK_ERR_NOMEM;
    for (size_t i = 0; i < d->u.dict.len; i++) index_put(slots, want, d->u.dict.entries[i].hash, i);
    free(d->u.dict.slots);
    d->u.dict.slots = slots;
    d->u.dict.nslots = want;
    return SCK_OK;
}

/* Index of `key` in dict d, or -1 (as SIZE_MAX). */
static size_t dict_find(const sck_value *d, const char *key, uint64_t hash) {
    const dict_entry *e = d->u.dict.entries;
    if (d->u.dict.slots) {
        size_t mask = d->u.dict.nslots - 1;
        for (size_t s = (size_t)hash & mask; d->u.dict.slots[s]; s = (s + 1) & mask) {
            size_t i = d->u.dict.slots[s] - 1;
            if (e[i].hash == hash && !strcmp(e[i].key, key)) return i;
        }
        return SIZE_MAX;
    }
    for (size_t i = 0; i < d->u.dict.len; i++)
        if (e[i].hash == hash && !strcmp(e[i].key, key)) return i;
    return SIZE_MAX;
}

/* Appends a key known to be absent; copies `key`.  On failure the dict is unchanged. */
static int dict_append(sck_value *d, const char *key, uint64_t hash, sck_value *val) {
    if (d->u.dict.len == d->u.dict.cap) {
        size_t cap = d->u.dict.cap ? d->u.dict.cap * 2 : 4;
        if (cap > SIZE_MAX / sizeof(dict_entry)) return SCK_ERR_NOMEM;
        dict_entry *p = realloc(d->u.dict.entries, cap * sizeof *p);
        if (!p) return SCK_ERR_NOMEM;
        d->u.dict.entries = p;
        d->u.dict.cap = cap;
    }
    char *k = sck_strdup(key);
    if (!k) return SCK_ERR_NOMEM;
    size_t i = d->u.dict.len;
    d->u.dict.entries[i] = (dict_entry){k, hash, val};
    d->u.dict.len++;
    if (d->u.dict.slots && d->u.dict.len * 2 <= d->u.dict.nslots) {
        index_put(d->u.dict.slots, d->u.dict.nslots, hash, i);
    } else if (d->u.dict.len > DICT_INDEX_MIN && index_rebuild(d)) {
        /* Without a complete index lookups would miss keys; undo the append. */
        d->u.dict.len--;
        free(k);
        return SCK_ERR_NOMEM;
    }
    return SCK_OK;
}

int sck_value_dict_set(sck_value *dict, const char *key, sck_value *item) {
    if (!item) return sck_err(SCK_ERR_INVALID_ARG, "sck_value_dict_set: NULL item (did its constructor run out of memory?)");
    if (!dict || dict->kind != SCK_VAL_DICT || !key || item == dict) {
        if (item != dict) sck_value_free(item);
        return sck_err(SCK_ERR_INVALID_ARG, "sck_value_dict_set: %s", !dict ? "NULL dict" : !key ? "NULL key"
                       : item == dict ? "cannot store a dict in itself" : "not a dict");
    }
    uint64_t hash = key_hash(key);
    size_t i = dict_find(dict, key, hash);
    if (i != SIZE_MAX) {
        sck_value_free(dict->u.dict.entries[i].val);
        dict->u.dict.entries[i].val = item;
        return SCK_OK;
    }
    if (dict_append(dict, key, hash, item)) {
        sck_value_free(item);
        return sck_err(SCK_ERR_NOMEM, "sck_value_dict_set: out of memory adding key \"%.200s\"", key);
    }
    return SCK_OK;
}

/* ---- accessors ---- */

sck_value_kind sck_value_kind_of(const sck_value *v) { return v ? v->kind : SCK_VAL_NULL; }
int sck_value_get_bool(const sck_value *v) { return v && v->kind == SCK_VAL_BOOL ? v->u.b : 0; }
int64_t sck_value_get_int(const sck_value *v) { return v && v->kind == SCK_VAL_INT ? v->u.i : 0; }

double sck_value_get_float(const sck_value *v) {
    if (v && v->kind == SCK_VAL_FLOAT) return v->u.f;
    if (v && v->kind == SCK_VAL_INT) return (double)v->u.i;
    return 0.0;
}

const char *sck_value_get_string(const sck_value *v, size_t *n) {
    if (v && is_text(v->kind)) {
        if (n) *n = v->u.str.len;
        return v->u.str.data;
    }
    if (n) *n = 0;
    return NULL;
}

size_t sck_value_len(const sck_value *v) {
    if (v && is_seq(v)) return v->u.list.len;
    if (v && v->kind == SCK_VAL_DICT) return v->u.dict.len;
    return 0;
}

sck_value *sck_value_at(const sck_value *v, size_t i) {
    if (v && is_seq(v)) return i < v->u.list.len ? v->u.list.items[i] : NULL;
    if (v && v->kind == SCK_VAL_DICT) return i < v->u.dict.len ? v->u.dict.entries[i].val : NULL;
    return NULL;
}

const char *sck_value_key_at(const sck_value *v, size_t i) {
    if (v && v->kind == SCK_VAL_DICT && i < v->u.dict.len) return v->u.dict.entries[i].key;
    return NULL;
}

sck_value *sck_value_dict_get(const sck_value *v, const char *key) {
    if (!v || v->kind != SCK_VAL_DICT || !key) return NULL;
    size_t i = dict_find(v, key, key_hash(key));
    return i == SIZE_MAX ? NULL : v->u.dict.entries[i].val;
}

/* ---- explicit walk stack shared by clone and equal ---- */

typedef struct walk_frame {
    const sck_value *a;  /* container being walked */
    sck_value *b;        /* its copy (clone) or counterpart (equal) */
    size_t i;            /* next child */
} walk_frame;

typedef struct walk_stack {
    walk_frame *f;
    size_t len, cap;
    walk_frame small[32];  /* most trees are shallow: no allocation */
} walk_stack;

static void walk_init(walk_stack *s) {
    s->f = s->small;
    s->len = 0;
    s->cap = sizeof s->small / sizeof s->small[0];
}

static void walk_free(walk_stack *s) {
    if (s->f != s->small) free(s->f);
}

static int walk_push(walk_stack *s, const sck_value *a, sck_value *b) {
    if (s->len == s->cap) {
        if (s->cap > SIZE_MAX / 2 / sizeof(walk_frame)) return SCK_ERR_NOMEM;
        size_t cap = s->cap * 2;
        walk_frame *p = s->f == s->small ? malloc(cap * sizeof *p) : realloc(s->f, cap * sizeof *p);
        if (!p) return SCK_ERR_NOMEM;
        if (s->f == s->small) memcpy(p, s->small, sizeof s->small);
        s->f = p;
        s->cap = cap;
    }
    s->f[s->len++] = (walk_frame){a, b, 0};
    return SCK_OK;
}

/* ---- clone ---- */

/* Copies a scalar, or makes an empty container of the same kind with room for its children. */
static sck_value *clone_shallow(const sck_value *v) {
    switch (v->kind) {
    case SCK_VAL_NULL: return sck_value_null();
    case SCK_VAL_BOOL: return sck_value_bool(v->u.b);
    case SCK_VAL_INT: return sck_value_int(v->u.i);
    case SCK_VAL_FLOAT: return sck_value_float(v->u.f);
    case SCK_VAL_STRING:
    case SCK_VAL_BYTES:
    case SCK_VAL_BIGINT:
    case SCK_VAL_PICKLE: return value_bytes_kind(v->kind, v->u.str.data, v->u.str.len);
    case SCK_VAL_LIST:
    case SCK_VAL_TUPLE: {
        sck_value *c = value_new(v->kind);
        if (c && v->u.list.len) {
            c->u.list.items = malloc(v->u.list.len * sizeof *c->u.list.items);
            if (!c->u.list.items) { free(c); return NULL; }
            c->u.list.cap = v->u.list.len;
        }
        return c;
    }
    case SCK_VAL_DICT: {
        sck_value *c = sck_value_dict();
        if (c && v->u.dict.len) {
            c->u.dict.entries = malloc(v->u.dict.len * sizeof *c->u.dict.entries);
            if (!c->u.dict.entries) { free(c); return NULL; }
            c->u.dict.cap = v->u.dict.len;
        }
        return c;
    }
    }
    return NULL;
}

sck_value *sck_value_clone(const sck_value *v) {
    if (!v) return NULL;
    sck_value *root = clone_shallow(v);
    if (!root || !is_container(v)) return root;
    walk_stack st;
    walk_init(&st);
    if (walk_push(&st, v, root)) goto oom;
    while (st.len) {
        walk_frame *f = &st.f[st.len - 1];
        const sck_value *src = f->a;
        sck_value *dst = f->b;
        if (f->i == sck_value_len(src)) {
            st.len--;
            continue;
        }
        size_t i = f->i++;
        const sck_value *child = sck_value_at(src, i);
        sck_value *copy = clone_shallow(child);
        if (!copy) goto oom;
        /* Attach before descending so that on failure freeing `root` frees everything. */
        if (is_seq(dst)) {
            dst->u.list.items[dst->u.list.len++] = copy;
        } else if (dict_append(dst, src->u.dict.entries[i].key, src->u.dict.entries[i].hash, copy)) {
            sck_value_free(copy);
            goto oom;
        }
        if (is_container(child) && walk_push(&st, child, copy)) goto oom;
    }
    walk_free(&st);
    return root;
oom:
    walk_free(&st);
    sck_value_free(root);
    return NULL;
}

/* ---- equality ---- */

static int scalar_equal(const sck_value *a, const sck_value *b) {
    switch (a->kind) {
    case SCK_VAL_NULL: return 1;
    case SCK_VAL_BOOL: return a->u.b == b->u.b;
    case SCK_VAL_INT: return a->u.i == b->u.i;
    case SCK_VAL_FLOAT: return memcmp(&a->u.f, &b->u.f, sizeof(double)) == 0;
    case SCK_VAL_STRING:
    case SCK_VAL_BYTES:
    case SCK_VAL_BIGINT:
    case SCK_VAL_PICKLE:
        return a->u.str.len == b->u.str.len && memcmp(a->u.str.data, b->u.str.data, a->u.str.len) == 0;
    case SCK_VAL_LIST:
    case SCK_VAL_TUPLE: return a->u.list.len == b->u.list.len;
    case SCK_VAL_DICT: return a->u.dict.len == b->u.dict.len;
    }
    return 0;
}

/* Lists compare element-wise; dicts compare as mappings (key order does not matter, as in Python).
 * Returns 0 also if the walk stack cannot be allocated (only for trees deeper than 32). */
int sck_value_equal(const sck_value *a, const sck_value *b) {
    if (!a || !b) return a == b;
    if (a->kind != b->kind || !scalar_equal(a, b)) return 0;
    if (!is_container(a)) return 1;
    walk_stack st;
    walk_init(&st);
    int eq = walk_push(&st, a, (sck_value *)b) == SCK_OK;
    while (eq && st.len) {
        walk_frame *f = &st.f[st.len - 1];
        if (f->i == sck_value_len(f->a)) {
            st.len--;
            continue;
        }
        size_t i = f->i++;
        const sck_value *x = sck_value_at(f->a, i), *y;
        if (is_seq(f->a)) {
            y = f->b->u.list.items[i];
        } else {
            const dict_entry *e = &f->a->u.dict.entries[i];
            size_t j = dict_find(f->b, e->key, e->hash);
            y = j == SIZE_MAX ? NULL : f->b->u.dict.entries[j].val;
        }
        if (!y || x->kind != y->kind || !scalar_equal(x, y)) eq = 0;
        else if (is_container(x) && walk_push(&st, x, (sck_value *)y)) eq = 0;
    }
    walk_free(&st);
    return eq;
}
