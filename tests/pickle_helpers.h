/* pickle_helpers.h - parsing and node checks the pickle tests share. */
#ifndef SCK_TEST_PICKLE_HELPERS_H
#define SCK_TEST_PICKLE_HELPERS_H

#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "format/pickle.h"

/* ---- helpers ---- */

#define LIT(s) (const uint8_t *)(s), sizeof(s) - 1

static inline int allow_all(void *ctx, const char *module, const char *name) {
    (void)ctx;
    (void)module;
    (void)name;
    return 1;
}

/* ctx: NULL-terminated array of "module.name" strings. */
static inline int allow_listed(void *ctx, const char *module, const char *name) {
    char full[256];
    snprintf(full, sizeof full, "%s.%s", module, name);
    for (const char *const *p = ctx; *p; p++)
        if (strcmp(*p, full) == 0) return 1;
    return 0;
}

static inline int parse(const uint8_t *d, size_t n, pk_arena **a, pk_obj **r) {
    return pk_parse(d, n, "t.pkl", allow_all, NULL, NULL, a, r);
}

static inline int parse_lim(const uint8_t *d, size_t n, const pk_limits *lim) {
    pk_arena *a = NULL;
    pk_obj *r = NULL;
    int st = pk_parse(d, n, "t.pkl", allow_all, NULL, lim, &a, &r);
    if (st) CHECK(a == NULL && r == NULL);
    pk_arena_free(a);
    return st;
}

static inline int parse_only(const uint8_t *d, size_t n) { return parse_lim(d, n, NULL); }

static inline int is_int(const pk_obj *o, int64_t v) { return o && o->kind == PK_INT && o->i == v; }
static inline int is_bool(const pk_obj *o, int v) { return o && o->kind == PK_BOOL && o->i == v; }
static inline int is_none(const pk_obj *o) { return o && o->kind == PK_NONE; }
static inline int is_float(const pk_obj *o, double v) { return o && o->kind == PK_FLOAT && o->f == v; }
static inline int is_blob(const pk_obj *o, pk_kind k, const void *p, size_t n) {
    return o && o->kind == k && o->len == n && memcmp(o->s, p, n) == 0 && o->s[n] == 0;
}
static inline int is_str(const pk_obj *o, const char *s) { return is_blob(o, PK_STR, s, strlen(s)); }
static inline int is_seq(const pk_obj *o, pk_kind k, size_t n) { return o && o->kind == k && o->n == n; }
static inline const pk_obj *at(const pk_obj *o, size_t i) { return o && i < o->n ? o->items[i] : NULL; }

/* Ints in a sequence, e.g. is_ints(list, 3, (int64_t[]){1, 2, 3}). */
static inline int is_ints(const pk_obj *o, pk_kind k, size_t n, const int64_t *v) {
    if (!is_seq(o, k, n)) return 0;
    for (size_t i = 0; i < n; i++)
        if (!is_int(o->items[i], v[i])) return 0;
    return 1;
}

/* Touches every reachable byte (so ASan sees bad pointers); caps visits since the DAG may share. */
static inline void walk(const pk_obj *o, size_t depth, size_t *budget) {
    if (!o || !*budget) return;
    (*budget)--;
    CHECK(depth <= 257);
    if (o->kind == PK_STR || o->kind == PK_BYTES || o->kind == PK_GLOBAL) CHECK(o->s && o->s[o->len] == 0);
    if (o->kind == PK_GLOBAL) CHECK(o->name && strlen(o->name) > 0);
    if (o->kind < PK_TUPLE || o->kind == PK_GLOBAL) return; /* leaves: the fields below share their memory */
    size_t entries = o->kind == PK_DICT || o->kind == PK_REDUCE || o->kind == PK_NEWOBJ ? 2 * o->n : o->n;
    CHECK(entries <= o->cap);
    for (size_t i = 0; i < entries; i++) walk(o->items[i], depth + 1, budget);
    walk(o->a, depth + 1, budget);
    walk(o->b, depth + 1, budget);
    walk(o->state, depth + 1, budget);
}


#endif
