/* pickle_stack.c - the reader's machine state: the error that names file, opcode and offset, the stack, marks,
 * containers that may still be modified, and the memo (dense or hashed). */
#include "format/pickle_parse.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

int pk_fail(pk_parser *P, int status, const char *fmt, ...) {
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    unsigned long long off = P->op_off;
    if (P->op < 0) return sck_err(status, "%s: end of data at offset %llu: %s", P->what, off, detail);
    const char *name = pk_op_name(P->op);
    if (name) return sck_err(status, "%s: %s at offset %llu: %s", P->what, name, off, detail);
    return sck_err(status, "%s: opcode 0x%02x at offset %llu: %s", P->what, (unsigned)P->op, off, detail);
}

int pk_nomem(pk_parser *P) { return pk_fail(P, SCK_ERR_NOMEM, "out of memory"); }

/* Checks that `k` more bytes are there before anything is read or allocated for them. */
int pk_need(pk_parser *P, uint64_t k) {
    size_t left = P->n - P->pos;
    if (k > left)
        return pk_fail(P, SCK_ERR_FORMAT, "truncated: needs %llu bytes, %zu left", (unsigned long long)k, left);
    return SCK_OK;
}

/* Reads the text argument of a protocol-0 opcode, up to (not including) the newline. */
int pk_read_line(pk_parser *P, const uint8_t **s, size_t *len) {
    const uint8_t *start = P->p + P->pos;
    const uint8_t *nl = memchr(start, '\n', P->n - P->pos);
    if (!nl) return pk_fail(P, SCK_ERR_FORMAT, "truncated: no newline ending the argument");
    *s = start;
    *len = (size_t)(nl - start);
    P->pos += *len + 1;
    return SCK_OK;
}

int pk_new_obj(pk_parser *P, pk_kind kind, pk_obj **out) {
    *out = NULL;   /* out-parameters are always written, which also keeps gcc -O3 quiet */
    if (P->nobjects >= P->lim.max_objects)
        return pk_fail(P, SCK_ERR_FORMAT, "more than %zu objects", P->lim.max_objects);
    pk_obj *o = pk_arena_alloc_zero(P->arena, sizeof *o);
    if (!o) return pk_nomem(P);
    o->kind = kind;
    P->nobjects++;
    *out = o;
    return SCK_OK;
}

char *pk_arena_copy(pk_parser *P, const void *s, size_t len) {
    char *d = pk_arena_alloc(P->arena, len + 1);   /* len is bounded by the input size */
    if (!d) return NULL;
    if (len) memcpy(d, s, len);
    d[len] = 0;
    return d;
}

int pk_new_blob(pk_parser *P, pk_kind kind, const void *s, size_t len, pk_obj **out) {
    int st = pk_new_obj(P, kind, out);
    if (st) return st;
    (*out)->s = pk_arena_copy(P, s, len);
    if (!(*out)->s) return pk_nomem(P);
    (*out)->len = len;
    return SCK_OK;
}

int pk_push(pk_parser *P, pk_obj *o) {
    if (P->sp == P->stack_cap) {
        size_t cap = P->stack_cap ? P->stack_cap * 2 : 64;
        if (cap > SIZE_MAX / sizeof *P->stack) return pk_nomem(P);
        pk_obj **s = realloc(P->stack, cap * sizeof *s);
        if (!s) return pk_nomem(P);
        P->stack = s;
        P->stack_cap = cap;
    }
    P->stack[P->sp++] = o;
    return SCK_OK;
}

/* Items above the innermost MARK are the only ones an opcode may consume (as in Python). */
size_t pk_frame_base(const pk_parser *P) { return P->nmarks ? P->marks[P->nmarks - 1] : 0; }

int pk_peek(pk_parser *P, pk_obj **o) {
    *o = NULL;
    if (P->sp <= pk_frame_base(P)) return pk_fail(P, SCK_ERR_FORMAT, "stack underflow");
    *o = P->stack[P->sp - 1];
    return SCK_OK;
}

int pk_pop(pk_parser *P, pk_obj **o) {
    int st = pk_peek(P, o);
    if (!st) P->sp--;
    return st;
}

/* Closes the innermost MARK; the items it delimited are stack[*base .. P->sp). */
int pk_pop_mark(pk_parser *P, size_t *base) {
    *base = P->sp;
    if (!P->nmarks) return pk_fail(P, SCK_ERR_FORMAT, "no MARK on the stack");
    *base = P->marks[--P->nmarks];
    return SCK_OK;
}

/* Records that `child` now lives inside `parent`, keeping the parent's height current for the depth limit. */
int pk_adopt(pk_parser *P, pk_obj *parent, pk_obj *child) {
    if (child == parent)
        return pk_fail(P, SCK_ERR_UNSUPPORTED, "a %s that contains itself (recursive objects are not supported)",
                    pk_kind_name(parent->kind));
    child->parser_bits |= PK_CONTAINED;
    uint32_t h = pk_height_of(child) + 1; /* <= max_depth + 1 < 2^31 */
    if (h > pk_height_of(parent)) parent->parser_bits = (parent->parser_bits & PK_CONTAINED) | h;
    if (pk_height_of(parent) > P->lim.max_depth)
        return pk_fail(P, SCK_ERR_FORMAT, "objects nested deeper than %zu levels", P->lim.max_depth);
    return SCK_OK;
}

/* Modifying a node that is already inside another could close a cycle or make the parent's height
 * stale, so only "free-standing" nodes (the normal case in Python's output) may be modified. */
int pk_check_modifiable(pk_parser *P, const pk_obj *target) {
    if (target->parser_bits & PK_CONTAINED)
        return pk_fail(P, SCK_ERR_UNSUPPORTED,
                    "modifies a %s already stored inside another object (recursive objects are not supported)",
                    pk_kind_name(target->kind));
    return SCK_OK;
}

/* Appends k entries to c->items (k counts pointers: a dict pair is two). */
int pk_add_entries(pk_parser *P, pk_obj *c, pk_obj *const *src, size_t k, int pairs) {
    size_t used = pairs ? 2 * c->n : c->n;
    if (used + k > c->cap) {
        size_t cap = c->cap ? c->cap : 4;
        while (cap < used + k) cap *= 2;   /* bounded by the input size, cannot overflow */
        pk_obj **items = pk_arena_grow(P->arena, c->items, c->cap * sizeof *items, used * sizeof *items,
                                       cap * sizeof *items);
        if (!items) return pk_nomem(P);
        c->items = items;
        c->cap = cap;
    }
    for (size_t i = 0; i < k; i++) {
        int st = pk_adopt(P, c, src[i]);
        if (st) return st;
        c->items[used + i] = src[i];
    }
    c->n += pairs ? k / 2 : k;
    return SCK_OK;
}

/* Builds a new container from stack[base .. sp) and replaces those items with it. */
int pk_collect(pk_parser *P, pk_kind kind, size_t base) {
    size_t k = P->sp - base;
    int pairs = kind == PK_DICT;
    if (pairs && k % 2) return pk_fail(P, SCK_ERR_FORMAT, "odd number of items (%zu) for a dict", k);
    pk_obj *c;
    int st = pk_new_obj(P, kind, &c);
    if (!st && k) st = pk_add_entries(P, c, P->stack + base, k, pairs);
    if (st) return st;
    P->sp = base;
    return pk_push(P, c);
}

/* ---- memo ---- */

static size_t memo_slot(const pk_parser *P, int64_t key) {
    uint64_t x = (uint64_t)key + 0x9E3779B97F4A7C15ull;   /* splitmix64 finalizer */
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    size_t i = (size_t)x & (P->memo_cap - 1);
    while (P->memo_vals[i] && P->memo_keys[i] != key) i = (i + 1) & (P->memo_cap - 1);
    return i;
}

/* Python numbers memo entries 0, 1, 2, ... so they go in an array; the array only grows to indices
 * near the entry count, so a hostile huge index cannot make it big.  Other indices (text PUT takes
 * any integer) go in the hash table.  A key lives in exactly one of the two. */
static pk_obj **memo_hash_find(const pk_parser *P, int64_t key) {
    if (!P->memo_hash_n) return NULL;
    size_t i = memo_slot(P, key);
    return P->memo_vals[i] ? &P->memo_vals[i] : NULL;
}

static pk_obj *memo_get(const pk_parser *P, int64_t key) {
    if (key >= 0 && (uint64_t)key < P->memo_dense_cap && P->memo_dense[key]) return P->memo_dense[key];
    pk_obj **h = memo_hash_find(P, key);
    return h ? *h : NULL;
}

static int memo_grow_dense(pk_parser *P, size_t key) {
    size_t cap = key + 1 + key / 2;   /* key <= 2 * entries + 64, so this stays proportional to entries */
    if (cap > SIZE_MAX / sizeof(pk_obj *)) return pk_nomem(P);
    pk_obj **d = realloc(P->memo_dense, cap * sizeof *d);
    if (!d) return pk_nomem(P);
    memset(d + P->memo_dense_cap, 0, (cap - P->memo_dense_cap) * sizeof *d);
    P->memo_dense = d;
    P->memo_dense_cap = cap;
    return SCK_OK;
}

static int memo_grow_hash(pk_parser *P) {
    size_t cap = P->memo_cap ? P->memo_cap * 2 : 64;
    if (cap > SIZE_MAX / sizeof(pk_obj *)) return pk_nomem(P);
    int64_t *keys = malloc(cap * sizeof *keys);
    pk_obj **vals = calloc(cap, sizeof *vals);
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return pk_nomem(P);
    }
    int64_t *old_keys = P->memo_keys;
    pk_obj **old_vals = P->memo_vals;
    size_t old_cap = P->memo_cap;
    P->memo_keys = keys;
    P->memo_vals = vals;
    P->memo_cap = cap;
    for (size_t i = 0; i < old_cap; i++) {
        if (!old_vals[i]) continue;
        size_t j = memo_slot(P, old_keys[i]);
        keys[j] = old_keys[i];
        vals[j] = old_vals[i];
    }
    free(old_keys);
    free(old_vals);
    return SCK_OK;
}

/* Stores the top of the stack under `key` (PUT / BINPUT / LONG_BINPUT / MEMOIZE). */
int pk_memo_put(pk_parser *P, int64_t key) {
    pk_obj *o;
    int st = pk_peek(P, &o);
    if (st) return st;
    pk_obj **slot = memo_hash_find(P, key);
    if (!slot && key >= 0 && (uint64_t)key < P->memo_dense_cap) {
        slot = &P->memo_dense[key];
    } else if (!slot && key >= 0 && (uint64_t)key <= 2 * (uint64_t)P->memo_count + 64) {
        if ((st = memo_grow_dense(P, (size_t)key))) return st;
        slot = &P->memo_dense[key];
    }
    if (!slot || !*slot) {   /* a new entry */
        if (P->memo_count >= P->lim.max_memo)
            return pk_fail(P, SCK_ERR_FORMAT, "more than %zu memo entries", P->lim.max_memo);
        if (!slot) {
            if ((P->memo_hash_n + 1) * 2 > P->memo_cap && (st = memo_grow_hash(P))) return st;
            size_t i = memo_slot(P, key);
            P->memo_keys[i] = key;
            slot = &P->memo_vals[i];
            P->memo_hash_n++;
        }
        P->memo_count++;
    }
    *slot = o;
    return SCK_OK;
}

int pk_memo_push(pk_parser *P, int64_t key) {
    pk_obj *o = memo_get(P, key);
    if (!o) return pk_fail(P, SCK_ERR_FORMAT, "memo index %lld not found", (long long)key);
    return pk_push(P, o);
}
