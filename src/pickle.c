/* pickle.c - a pickle reader that builds inert nodes instead of calling anything, and a writer that
 * emits the opcodes CPython's pickler would (without FRAME, memoizing only globals). */
#include "pickle.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* ---- arena ---- */

/* Blocks grow with the arena.  Small ones come from malloc (a tensor's data.pkl needs one); from
 * PK_MAP_MIN on they are mapped with MADV_HUGEPAGE: a big `.metadata` makes hundreds of MiB of
 * nodes, and first touches of 4 KiB pages cost far more than of 2 MiB ones.  Mapped memory starts
 * zeroed, so nodes carved from it need no memset. */
#define PK_BLOCK_SIZE ((size_t)64 * 1024)
#define PK_MAP_MIN ((size_t)2 << 20)
#define PK_BLOCK_MAX ((size_t)64 << 20)
#define PK_ALIGN ((size_t)8)   /* nothing in the tree needs more: pointers, int64, double */

typedef struct pk_block {
    struct pk_block *next;
    size_t used, cap;
    size_t mapped;    /* length of the mapping, or 0 if malloc'ed */
    int zeroed;       /* bytes past `used` are still zero */
    _Alignas(16) unsigned char data[];
} pk_block;

struct pk_arena {
    pk_block *head;   /* the block being filled; big allocations get their own block behind it */
    size_t total;     /* bytes in all blocks: blocks grow with it, so big pickles need few blocks */
};

static pk_block *block_new(size_t cap) {
    size_t bytes = sizeof(pk_block) + cap;
    pk_block *b = NULL;
    size_t mapped = 0;
    if (bytes >= PK_MAP_MIN) {
        mapped = (bytes + PK_MAP_MIN - 1) & ~(PK_MAP_MIN - 1);
        void *m = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m != MAP_FAILED) {
            madvise(m, mapped, MADV_HUGEPAGE); /* advice only */
            b = m;
            cap = mapped - sizeof(pk_block);
        } else {
            mapped = 0;
        }
    }
    if (!b && !(b = malloc(bytes))) return NULL;
    b->next = NULL;
    b->used = 0;
    b->cap = cap;
    b->mapped = mapped;
    b->zeroed = mapped != 0;
    return b;
}

static void block_free(pk_block *b) {
    if (b->mapped) munmap(b, b->mapped);
    else free(b);
}

static void *arena_alloc(pk_arena *a, size_t size) {
    if (size > SIZE_MAX - PK_MAP_MIN - sizeof(pk_block)) return NULL;
    size = (size + PK_ALIGN - 1) & ~(PK_ALIGN - 1);
    pk_block *b = a->head;
    if (b && b->cap - b->used >= size) {
        void *p = b->data + b->used;
        b->used += size;
        return p;
    }
    size_t block = a->total / 2;
    if (block < PK_BLOCK_SIZE) block = PK_BLOCK_SIZE;
    if (block > PK_BLOCK_MAX) block = PK_BLOCK_MAX;
    pk_block *nb = block_new(size > block / 4 ? size : block);
    if (!nb) return NULL;
    a->total += nb->cap;
    nb->used = size;
    if (size > block / 4 && b) {   /* a big allocation: keep filling the current small-object block */
        nb->next = b->next;
        b->next = nb;
    } else {
        nb->next = b;
        a->head = nb;
    }
    return nb->data;
}

/* Memory for a node: zeroed, by the kernel when the block is fresh from mmap. */
static void *arena_alloc_zero(pk_arena *a, size_t size) {
    void *p = arena_alloc(a, size);
    if (p && !(a->head && a->head->zeroed && (unsigned char *)p >= a->head->data &&
               (unsigned char *)p < a->head->data + a->head->cap))
        memset(p, 0, size);
    return p;
}

void pk_arena_free(pk_arena *a) {
    if (!a) return;
    pk_block *b = a->head;
    while (b) {
        pk_block *next = b->next;
        block_free(b);
        b = next;
    }
    free(a);
}

/* ---- nodes ---- */

/* The parser's bookkeeping lives in pk_obj.parser_bits: the nesting height below the node (0 for
 * leaves, else 1 + the tallest child; bounded by max_depth, which pk_parse keeps below 2^31) and
 * whether the node is already stored inside another (modifying it then could create a cycle). */
#define PK_CONTAINED 0x80000000u
#define PK_HEIGHT 0x7fffffffu

static uint32_t height_of(const pk_obj *o) { return o->parser_bits & PK_HEIGHT; }

const char *pk_kind_name(pk_kind k) {
    switch (k) {
    case PK_NONE: return "none";
    case PK_BOOL: return "bool";
    case PK_INT: return "int";
    case PK_BIGINT: return "int";
    case PK_FLOAT: return "float";
    case PK_STR: return "str";
    case PK_BYTES: return "bytes";
    case PK_TUPLE: return "tuple";
    case PK_LIST: return "list";
    case PK_DICT: return "dict";
    case PK_SET: return "set";
    case PK_GLOBAL: return "global";
    case PK_REDUCE: return "reduce";
    case PK_NEWOBJ: return "newobj";
    case PK_PERSID: return "persistent id";
    }
    return "?";
}

/* ---- opcodes ---- */

enum {
    OP_MARK = '(', OP_STOP = '.', OP_POP = '0', OP_POP_MARK = '1', OP_DUP = '2', OP_FLOAT = 'F',
    OP_INT = 'I', OP_BININT = 'J', OP_BININT1 = 'K', OP_LONG = 'L', OP_BININT2 = 'M', OP_NONE = 'N',
    OP_PERSID = 'P', OP_BINPERSID = 'Q', OP_REDUCE = 'R', OP_STRING = 'S', OP_BINSTRING = 'T',
    OP_SHORT_BINSTRING = 'U', OP_UNICODE = 'V', OP_BINUNICODE = 'X', OP_APPEND = 'a', OP_BUILD = 'b',
    OP_GLOBAL = 'c', OP_DICT = 'd', OP_EMPTY_DICT = '}', OP_APPENDS = 'e', OP_GET = 'g',
    OP_BINGET = 'h', OP_INST = 'i', OP_LONG_BINGET = 'j', OP_LIST = 'l', OP_EMPTY_LIST = ']',
    OP_OBJ = 'o', OP_PUT = 'p', OP_BINPUT = 'q', OP_LONG_BINPUT = 'r', OP_SETITEM = 's',
    OP_TUPLE = 't', OP_EMPTY_TUPLE = ')', OP_SETITEMS = 'u', OP_BINFLOAT = 'G', OP_BINBYTES = 'B',
    OP_SHORT_BINBYTES = 'C', OP_PROTO = 0x80, OP_NEWOBJ = 0x81, OP_EXT1 = 0x82, OP_EXT2 = 0x83,
    OP_EXT4 = 0x84, OP_TUPLE1 = 0x85, OP_TUPLE2 = 0x86, OP_TUPLE3 = 0x87, OP_NEWTRUE = 0x88,
    OP_NEWFALSE = 0x89, OP_LONG1 = 0x8a, OP_LONG4 = 0x8b, OP_SHORT_BINUNICODE = 0x8c,
    OP_BINUNICODE8 = 0x8d, OP_BINBYTES8 = 0x8e, OP_EMPTY_SET = 0x8f, OP_ADDITEMS = 0x90,
    OP_FROZENSET = 0x91, OP_NEWOBJ_EX = 0x92, OP_STACK_GLOBAL = 0x93, OP_MEMOIZE = 0x94,
    OP_FRAME = 0x95, OP_BYTEARRAY8 = 0x96, OP_NEXT_BUFFER = 0x97, OP_READONLY_BUFFER = 0x98
};

static const char *op_name(int op) {
    switch (op) {
    case OP_MARK: return "MARK";
    case OP_STOP: return "STOP";
    case OP_POP: return "POP";
    case OP_POP_MARK: return "POP_MARK";
    case OP_DUP: return "DUP";
    case OP_FLOAT: return "FLOAT";
    case OP_INT: return "INT";
    case OP_BININT: return "BININT";
    case OP_BININT1: return "BININT1";
    case OP_LONG: return "LONG";
    case OP_BININT2: return "BININT2";
    case OP_NONE: return "NONE";
    case OP_PERSID: return "PERSID";
    case OP_BINPERSID: return "BINPERSID";
    case OP_REDUCE: return "REDUCE";
    case OP_STRING: return "STRING";
    case OP_BINSTRING: return "BINSTRING";
    case OP_SHORT_BINSTRING: return "SHORT_BINSTRING";
    case OP_UNICODE: return "UNICODE";
    case OP_BINUNICODE: return "BINUNICODE";
    case OP_APPEND: return "APPEND";
    case OP_BUILD: return "BUILD";
    case OP_GLOBAL: return "GLOBAL";
    case OP_DICT: return "DICT";
    case OP_EMPTY_DICT: return "EMPTY_DICT";
    case OP_APPENDS: return "APPENDS";
    case OP_GET: return "GET";
    case OP_BINGET: return "BINGET";
    case OP_INST: return "INST";
    case OP_LONG_BINGET: return "LONG_BINGET";
    case OP_LIST: return "LIST";
    case OP_EMPTY_LIST: return "EMPTY_LIST";
    case OP_OBJ: return "OBJ";
    case OP_PUT: return "PUT";
    case OP_BINPUT: return "BINPUT";
    case OP_LONG_BINPUT: return "LONG_BINPUT";
    case OP_SETITEM: return "SETITEM";
    case OP_TUPLE: return "TUPLE";
    case OP_EMPTY_TUPLE: return "EMPTY_TUPLE";
    case OP_SETITEMS: return "SETITEMS";
    case OP_BINFLOAT: return "BINFLOAT";
    case OP_BINBYTES: return "BINBYTES";
    case OP_SHORT_BINBYTES: return "SHORT_BINBYTES";
    case OP_PROTO: return "PROTO";
    case OP_NEWOBJ: return "NEWOBJ";
    case OP_EXT1: return "EXT1";
    case OP_EXT2: return "EXT2";
    case OP_EXT4: return "EXT4";
    case OP_TUPLE1: return "TUPLE1";
    case OP_TUPLE2: return "TUPLE2";
    case OP_TUPLE3: return "TUPLE3";
    case OP_NEWTRUE: return "NEWTRUE";
    case OP_NEWFALSE: return "NEWFALSE";
    case OP_LONG1: return "LONG1";
    case OP_LONG4: return "LONG4";
    case OP_SHORT_BINUNICODE: return "SHORT_BINUNICODE";
    case OP_BINUNICODE8: return "BINUNICODE8";
    case OP_BINBYTES8: return "BINBYTES8";
    case OP_EMPTY_SET: return "EMPTY_SET";
    case OP_ADDITEMS: return "ADDITEMS";
    case OP_FROZENSET: return "FROZENSET";
    case OP_NEWOBJ_EX: return "NEWOBJ_EX";
    case OP_STACK_GLOBAL: return "STACK_GLOBAL";
    case OP_MEMOIZE: return "MEMOIZE";
    case OP_FRAME: return "FRAME";
    case OP_BYTEARRAY8: return "BYTEARRAY8";
    case OP_NEXT_BUFFER: return "NEXT_BUFFER";
    case OP_READONLY_BUFFER: return "READONLY_BUFFER";
    default: return NULL;
    }
}

/* ---- parser state ---- */

typedef struct pk_parser {
    const uint8_t *p;
    size_t n, pos;
    size_t op_off;      /* offset of the opcode being executed, for messages */
    int op;             /* -1 at end of data */
    const char *what;
    pk_arena *arena;
    pk_allow_fn allow;
    void *allow_ctx;
    pk_limits lim;
    size_t nobjects;
    pk_obj **stack;
    size_t sp, stack_cap;
    size_t *marks;      /* stack heights at each open MARK */
    size_t nmarks, marks_cap;
    pk_obj **memo_dense;   /* memo indices below the input size (all that MEMOIZE/BINPUT make) */
    size_t memo_dense_cap;
    int64_t *memo_keys;    /* any other index (text PUT takes any integer): open addressing, */
    pk_obj **memo_vals;    /* memo_vals[i] == NULL marks a free slot */
    size_t memo_hash_n, memo_cap;
    size_t memo_count;     /* distinct indices; MEMOIZE stores at this index, as Python does */
    pk_obj *none, *true_, *false_;   /* immutable leaves, shared */
} pk_parser;

static int fail(pk_parser *P, int status, const char *fmt, ...) SCK_PRINTF(3, 4);

static int fail(pk_parser *P, int status, const char *fmt, ...) {
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    unsigned long long off = P->op_off;
    if (P->op < 0) return sck_err(status, "%s: end of data at offset %llu: %s", P->what, off, detail);
    const char *name = op_name(P->op);
    if (name) return sck_err(status, "%s: %s at offset %llu: %s", P->what, name, off, detail);
    return sck_err(status, "%s: opcode 0x%02x at offset %llu: %s", P->what, (unsigned)P->op, off, detail);
}

static int nomem(pk_parser *P) { return fail(P, SCK_ERR_NOMEM, "out of memory"); }

/* Checks that `k` more bytes are there before anything is read or allocated for them. */
static int need(pk_parser *P, uint64_t k) {
    size_t left = P->n - P->pos;
    if (k > left)
        return fail(P, SCK_ERR_FORMAT, "truncated: needs %llu bytes, %zu left", (unsigned long long)k, left);
    return SCK_OK;
}

/* Reads the text argument of a protocol-0 opcode, up to (not including) the newline. */
static int read_line(pk_parser *P, const uint8_t **s, size_t *len) {
    const uint8_t *start = P->p + P->pos;
    const uint8_t *nl = memchr(start, '\n', P->n - P->pos);
    if (!nl) return fail(P, SCK_ERR_FORMAT, "truncated: no newline ending the argument");
    *s = start;
    *len = (size_t)(nl - start);
    P->pos += *len + 1;
    return SCK_OK;
}

static int new_obj(pk_parser *P, pk_kind kind, pk_obj **out) {
    *out = NULL;   /* out-parameters are always written, which also keeps gcc -O3 quiet */
    if (P->nobjects >= P->lim.max_objects)
        return fail(P, SCK_ERR_FORMAT, "more than %zu objects", P->lim.max_objects);
    pk_obj *o = arena_alloc_zero(P->arena, sizeof *o);
    if (!o) return nomem(P);
    o->kind = kind;
    P->nobjects++;
    *out = o;
    return SCK_OK;
}

static char *arena_copy(pk_parser *P, const void *s, size_t len) {
    char *d = arena_alloc(P->arena, len + 1);   /* len is bounded by the input size */
    if (!d) return NULL;
    if (len) memcpy(d, s, len);
    d[len] = 0;
    return d;
}

static int new_blob(pk_parser *P, pk_kind kind, const void *s, size_t len, pk_obj **out) {
    int st = new_obj(P, kind, out);
    if (st) return st;
    (*out)->s = arena_copy(P, s, len);
    if (!(*out)->s) return nomem(P);
    (*out)->len = len;
    return SCK_OK;
}

static int push(pk_parser *P, pk_obj *o) {
    if (P->sp == P->stack_cap) {
        size_t cap = P->stack_cap ? P->stack_cap * 2 : 64;
        if (cap > SIZE_MAX / sizeof *P->stack) return nomem(P);
        pk_obj **s = realloc(P->stack, cap * sizeof *s);
        if (!s) return nomem(P);
        P->stack = s;
        P->stack_cap = cap;
    }
    P->stack[P->sp++] = o;
    return SCK_OK;
}

/* Items above the innermost MARK are the only ones an opcode may consume (as in Python). */
static size_t frame_base(const pk_parser *P) { return P->nmarks ? P->marks[P->nmarks - 1] : 0; }

static int peek(pk_parser *P, pk_obj **o) {
    *o = NULL;
    if (P->sp <= frame_base(P)) return fail(P, SCK_ERR_FORMAT, "stack underflow");
    *o = P->stack[P->sp - 1];
    return SCK_OK;
}

static int pop(pk_parser *P, pk_obj **o) {
    int st = peek(P, o);
    if (!st) P->sp--;
    return st;
}

/* Closes the innermost MARK; the items it delimited are stack[*base .. P->sp). */
static int pop_mark(pk_parser *P, size_t *base) {
    *base = P->sp;
    if (!P->nmarks) return fail(P, SCK_ERR_FORMAT, "no MARK on the stack");
    *base = P->marks[--P->nmarks];
    return SCK_OK;
}

/* Records that `child` now lives inside `parent`, keeping the parent's height current for the depth limit. */
static int adopt(pk_parser *P, pk_obj *parent, pk_obj *child) {
    if (child == parent)
        return fail(P, SCK_ERR_UNSUPPORTED, "a %s that contains itself (recursive objects are not supported)",
                    pk_kind_name(parent->kind));
    child->parser_bits |= PK_CONTAINED;
    uint32_t h = height_of(child) + 1; /* <= max_depth + 1 < 2^31 */
    if (h > height_of(parent)) parent->parser_bits = (parent->parser_bits & PK_CONTAINED) | h;
    if (height_of(parent) > P->lim.max_depth)
        return fail(P, SCK_ERR_FORMAT, "objects nested deeper than %zu levels", P->lim.max_depth);
    return SCK_OK;
}

/* Modifying a node that is already inside another could close a cycle or make the parent's height
 * stale, so only "free-standing" nodes (the normal case in Python's output) may be modified. */
static int check_modifiable(pk_parser *P, const pk_obj *target) {
    if (target->parser_bits & PK_CONTAINED)
        return fail(P, SCK_ERR_UNSUPPORTED,
                    "modifies a %s already stored inside another object (recursive objects are not supported)",
                    pk_kind_name(target->kind));
    return SCK_OK;
}

/* Appends k entries to c->items (k counts pointers: a dict pair is two). */
static int add_entries(pk_parser *P, pk_obj *c, pk_obj *const *src, size_t k, int pairs) {
    size_t used = pairs ? 2 * c->n : c->n;
    if (used + k > c->cap) {
        size_t cap = c->cap ? c->cap : 4;
        while (cap < used + k) cap *= 2;   /* bounded by the input size, cannot overflow */
        pk_obj **items = arena_alloc(P->arena, cap * sizeof *items);
        if (!items) return nomem(P);
        if (used) memcpy(items, c->items, used * sizeof *items);
        c->items = items;   /* the old array stays in the arena until it is freed */
        c->cap = cap;
    }
    for (size_t i = 0; i < k; i++) {
        int st = adopt(P, c, src[i]);
        if (st) return st;
        c->items[used + i] = src[i];
    }
    c->n += pairs ? k / 2 : k;
    return SCK_OK;
}

/* Builds a new container from stack[base .. sp) and replaces those items with it. */
static int collect(pk_parser *P, pk_kind kind, size_t base) {
    size_t k = P->sp - base;
    int pairs = kind == PK_DICT;
    if (pairs && k % 2) return fail(P, SCK_ERR_FORMAT, "odd number of items (%zu) for a dict", k);
    pk_obj *c;
    int st = new_obj(P, kind, &c);
    if (!st && k) st = add_entries(P, c, P->stack + base, k, pairs);
    if (st) return st;
    P->sp = base;
    return push(P, c);
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
    if (cap > SIZE_MAX / sizeof(pk_obj *)) return nomem(P);
    pk_obj **d = realloc(P->memo_dense, cap * sizeof *d);
    if (!d) return nomem(P);
    memset(d + P->memo_dense_cap, 0, (cap - P->memo_dense_cap) * sizeof *d);
    P->memo_dense = d;
    P->memo_dense_cap = cap;
    return SCK_OK;
}

static int memo_grow_hash(pk_parser *P) {
    size_t cap = P->memo_cap ? P->memo_cap * 2 : 64;
    if (cap > SIZE_MAX / sizeof(pk_obj *)) return nomem(P);
    int64_t *keys = malloc(cap * sizeof *keys);
    pk_obj **vals = calloc(cap, sizeof *vals);
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return nomem(P);
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
static int memo_put(pk_parser *P, int64_t key) {
    pk_obj *o;
    int st = peek(P, &o);
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
            return fail(P, SCK_ERR_FORMAT, "more than %zu memo entries", P->lim.max_memo);
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

static int memo_push(pk_parser *P, int64_t key) {
    pk_obj *o = memo_get(P, key);
    if (!o) return fail(P, SCK_ERR_FORMAT, "memo index %lld not found", (long long)key);
    return push(P, o);
}

/* ---- scalar decoding ---- */

static int64_t s64_from_u64(uint64_t v) { return v <= INT64_MAX ? (int64_t)v : -(int64_t)(~v) - 1; }

/* Parses the whole span as [+-]?[0-9]+.  Returns 0, 1 if malformed, 2 if beyond int64. */
static int parse_dec(const uint8_t *s, size_t len, int64_t *out) {
    size_t i = 0;
    int neg = 0;
    if (i < len && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    if (i == len) return 1;
    uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    int big = 0;
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return 1;
        unsigned d = s[i] - '0';
        if (v > (limit - d) / 10) big = 1;   /* keep scanning: a bad digit later is still malformed */
        else v = v * 10 + d;
    }
    if (big) return 2;
    *out = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
    return 0;
}

/* Returns SCK_OK, or 2 (not an error) when the integer is beyond int64 and the caller should push it
 * as a PK_BIGINT. */
static int text_int(pk_parser *P, const uint8_t *s, size_t len, int64_t *out) {
    int r = parse_dec(s, len, out);
    int shown = (int)(len > 40 ? 40 : len);
    if (r == 1) return fail(P, SCK_ERR_FORMAT, "malformed integer \"%.*s\"", shown, (const char *)s);
    return r == 2 ? 2 : SCK_OK;
}

/* A text PUT / GET index: any int64. */
static int memo_index(pk_parser *P, const uint8_t *s, size_t len, int64_t *out) {
    int st = text_int(P, s, len, out);
    return st == 2 ? fail(P, SCK_ERR_FORMAT, "memo index beyond 64 bits") : st;
}

/* LONG1 / LONG4 payload: little-endian two's complement, any length (0 bytes = 0).  Returns 2 when it
 * does not fit in int64 (the caller keeps it as a PK_BIGINT). */
static int decode_long(const uint8_t *b, size_t k, int64_t *out) {
    if (k == 0) {
        *out = 0;
        return SCK_OK;
    }
    uint8_t sign = (b[k - 1] & 0x80) ? 0xff : 0;
    if (k > 8) {   /* longer encodings fit only if the extra bytes merely repeat the sign */
        int fits = ((b[7] & 0x80) ? 0xff : 0) == sign;
        for (size_t i = 8; i < k && fits; i++) fits = b[i] == sign;
        if (!fits) return 2;
        k = 8;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < k; i++) v |= (uint64_t)b[i] << (8 * i);
    if (k < 8 && sign) v |= ~(uint64_t)0 << (8 * k);
    *out = s64_from_u64(v);
    return SCK_OK;
}

static int push_int(pk_parser *P, pk_kind kind, int64_t v) {
    pk_obj *o;
    int st = new_obj(P, kind, &o);
    if (st) return st;
    o->i = v;
    return push(P, o);
}

/* A decimal integer beyond int64 (text INT / LONG, protocols 0 and 1) as a PK_BIGINT. */
static int push_text_bigint(pk_parser *P, const uint8_t *s, size_t len) {
    if (len > PK_BIGINT_DIGITS + 1)
        return fail(P, SCK_ERR_UNSUPPORTED, "integer of %zu digits (more than %d)", len, PK_BIGINT_DIGITS);
    uint8_t buf[PK_BIGINT_DIGITS / 2 + 8];
    size_t n = pk_decimal_to_long((const char *)s, len, buf);
    pk_obj *o;
    int st = new_blob(P, PK_BIGINT, buf, n, &o);
    return st ? st : push(P, o);
}

static int push_float(pk_parser *P, double v) {
    pk_obj *o;
    int st = new_obj(P, PK_FLOAT, &o);
    if (st) return st;
    o->f = v;
    return push(P, o);
}

/* None / True / False are immutable, so one node each serves every occurrence. */
static int push_shared(pk_parser *P, pk_obj **slot, pk_kind kind, int64_t v) {
    if (!*slot) {
        int st = new_obj(P, kind, slot);
        if (st) return st;
        (*slot)->i = v;
    }
    return push(P, *slot);
}

static int text_float(pk_parser *P, const uint8_t *s, size_t len) {
    char buf[64];
    if (len == 0 || len >= sizeof buf) return fail(P, SCK_ERR_FORMAT, "malformed float argument");
    memcpy(buf, s, len);
    buf[len] = 0;
    char *end;
    double v = strtod(buf, &end);
    if (end != buf + len) return fail(P, SCK_ERR_FORMAT, "malformed float \"%s\"", buf);
    return push_float(P, v);
}

/* Accepts UTF-8 including encoded surrogates (Python decodes pickled str with "surrogatepass"). */
static int utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        uint32_t cp, min;
        if ((c & 0xE0) == 0xC0) { k = 1; cp = c & 0x1Fu; min = 0x80; }
        else if ((c & 0xF0) == 0xE0) { k = 2; cp = c & 0x0Fu; min = 0x800; }
        else if ((c & 0xF8) == 0xF0) { k = 3; cp = c & 0x07u; min = 0x10000; }
        else return 0;
        if (n - i - 1 < k) return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + j] & 0x3Fu);
        }
        if (cp < min || cp > 0x10FFFF) return 0;
        i += k + 1;
    }
    return 1;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static int hex_val(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int push_utf8(pk_parser *P, const uint8_t *s, size_t len) {
    if (!utf8_valid(s, len)) return fail(P, SCK_ERR_FORMAT, "string of %zu bytes is not valid UTF-8", len);
    pk_obj *o;
    int st = new_blob(P, PK_STR, s, len, &o);
    return st ? st : push(P, o);
}

/* UNICODE: raw-unicode-escape (bytes are Latin-1 code points, plus \uXXXX and \UXXXXXXXX). */
static int push_raw_unicode(pk_parser *P, const uint8_t *s, size_t len) {
    char *buf = arena_alloc(P->arena, 2 * len + 1);   /* each input byte yields at most 2 output bytes */
    if (!buf) return nomem(P);
    size_t o = 0, i = 0;
    while (i < len) {
        if (s[i] == '\\' && i + 1 < len && (s[i + 1] == 'u' || s[i + 1] == 'U')) {
            size_t digits = s[i + 1] == 'u' ? 4 : 8;
            if (len - i - 2 < digits) return fail(P, SCK_ERR_FORMAT, "truncated \\%c escape", s[i + 1]);
            uint32_t cp = 0;
            for (size_t j = 0; j < digits; j++) {
                int h = hex_val(s[i + 2 + j]);
                if (h < 0) return fail(P, SCK_ERR_FORMAT, "bad \\%c escape", s[i + 1]);
                cp = (cp << 4) | (uint32_t)h;
            }
            if (cp > 0x10FFFF) return fail(P, SCK_ERR_FORMAT, "code point 0x%x out of range", (unsigned)cp);
            o += put_utf8(buf + o, cp);
            i += 2 + digits;
        } else {
            o += put_utf8(buf + o, s[i++]);
        }
    }
    buf[o] = 0;
    pk_obj *str;
    int st = new_obj(P, PK_STR, &str);
    if (st) return st;
    str->s = buf;
    str->len = o;
    return push(P, str);
}

/* STRING: a Python 2 str repr, 'quoted' or "quoted", with backslash escapes (codecs.escape_decode). */
static int push_quoted(pk_parser *P, const uint8_t *s, size_t len) {
    if (len < 2 || s[0] != s[len - 1] || (s[0] != '\'' && s[0] != '"'))
        return fail(P, SCK_ERR_FORMAT, "argument is not quoted");
    s++;
    len -= 2;
    char *buf = arena_alloc(P->arena, len + 1);   /* escapes only shrink */
    if (!buf) return nomem(P);
    size_t o = 0, i = 0;
    while (i < len) {
        if (s[i] != '\\') {
            buf[o++] = (char)s[i++];
            continue;
        }
        if (i + 1 >= len) return fail(P, SCK_ERR_FORMAT, "trailing backslash in string");
        uint8_t e = s[i + 1];
        i += 2;
        switch (e) {
        case '\n': break;
        case '\\': case '\'': case '"': buf[o++] = (char)e; break;
        case 'a': buf[o++] = '\a'; break;
        case 'b': buf[o++] = '\b'; break;
        case 'f': buf[o++] = '\f'; break;
        case 'n': buf[o++] = '\n'; break;
        case 'r': buf[o++] = '\r'; break;
        case 't': buf[o++] = '\t'; break;
        case 'v': buf[o++] = '\v'; break;
        case 'x': {
            int h1 = i < len ? hex_val(s[i]) : -1, h2 = i + 1 < len ? hex_val(s[i + 1]) : -1;
            if (h1 < 0 || h2 < 0) return fail(P, SCK_ERR_FORMAT, "bad \\x escape");
            buf[o++] = (char)(h1 * 16 + h2);
            i += 2;
            break;
        }
        default:
            if (e >= '0' && e <= '7') {
                unsigned v = (unsigned)(e - '0');
                for (int j = 0; j < 2 && i < len && s[i] >= '0' && s[i] <= '7'; j++) v = v * 8 + (s[i++] - '0');
                buf[o++] = (char)(v & 0xFF);
            } else {   /* unknown escapes stay as written */
                buf[o++] = '\\';
                buf[o++] = (char)e;
            }
        }
    }
    buf[o] = 0;
    pk_obj *str;
    int st = new_obj(P, PK_STR, &str);
    if (st) return st;
    str->s = buf;
    str->len = o;
    return push(P, str);
}

/* Pushes a blob whose u8/u32/u64 length prefix has already been read. */
static int push_counted(pk_parser *P, pk_kind kind, uint64_t len, int utf8) {
    int st = need(P, len);   /* before any allocation: hostile lengths never reach malloc */
    if (st) return st;
    const uint8_t *s = P->p + P->pos;
    P->pos += (size_t)len;
    if (utf8) return push_utf8(P, s, (size_t)len);
    pk_obj *o;
    st = new_blob(P, kind, s, (size_t)len, &o);
    return st ? st : push(P, o);
}

static uint64_t read_le(pk_parser *P, size_t k) {
    uint64_t v = 0;
    for (size_t i = 0; i < k; i++) v |= (uint64_t)P->p[P->pos + i] << (8 * i);
    P->pos += k;
    return v;
}

/* ---- globals ---- */

static int push_global(pk_parser *P, const uint8_t *mod, size_t mlen, const uint8_t *name, size_t nlen) {
    if (!mlen || !nlen || memchr(mod, 0, mlen) || memchr(name, 0, nlen) || !utf8_valid(mod, mlen) ||
        !utf8_valid(name, nlen))
        return fail(P, SCK_ERR_FORMAT, "malformed module or attribute name");
    pk_obj *g;
    int st = new_blob(P, PK_GLOBAL, mod, mlen, &g);
    if (st) return st;
    g->name = arena_copy(P, name, nlen);
    if (!g->name) return nomem(P);
    if (!P->allow || !P->allow(P->allow_ctx, g->s, g->name))
        return fail(P, SCK_ERR_UNSUPPORTED, "global %s.%s is not allowed", g->s, g->name);
    return push(P, g);
}

/* ---- object-building opcodes ---- */

/* REDUCE / NEWOBJ / NEWOBJ_EX: record the callable and its argument tuple. */
static int push_call(pk_parser *P, pk_kind kind, pk_obj *callable, pk_obj *args) {
    if (args->kind != PK_TUPLE)
        return fail(P, SCK_ERR_FORMAT, "arguments are a %s, not a tuple", pk_kind_name(args->kind));
    pk_obj *o;
    int st = new_obj(P, kind, &o);
    if (!st) st = adopt(P, o, callable);
    if (!st) st = adopt(P, o, args);
    if (st) return st;
    o->a = callable;
    o->b = args;
    return push(P, o);
}

static int op_list_items(pk_parser *P, pk_obj *target, pk_obj *const *items, size_t k) {
    if (target->kind == PK_REDUCE || target->kind == PK_NEWOBJ)
        return fail(P, SCK_ERR_UNSUPPORTED, "list items for a %s object (list subclasses are not supported)",
                    pk_kind_name(target->kind));
    if (target->kind != PK_LIST)
        return fail(P, SCK_ERR_FORMAT, "target is a %s, not a list", pk_kind_name(target->kind));
    int st = check_modifiable(P, target);
    return st ? st : add_entries(P, target, items, k, 0);
}

static int op_dict_items(pk_parser *P, pk_obj *target, pk_obj *const *items, size_t k) {
    if (k % 2) return fail(P, SCK_ERR_FORMAT, "odd number of items (%zu) for a dict", k);
    if (target->kind != PK_DICT && target->kind != PK_REDUCE && target->kind != PK_NEWOBJ)
        return fail(P, SCK_ERR_FORMAT, "target is a %s, not a dict", pk_kind_name(target->kind));
    int st = check_modifiable(P, target);
    return st ? st : add_entries(P, target, items, k, 1);
}

/* APPENDS / SETITEMS / ADDITEMS: items above the mark go into the object just below it. */
static int op_mark_items(pk_parser *P) {
    size_t base = 0;
    int st = pop_mark(P, &base);
    if (st) return st;
    size_t k = P->sp - base;
    P->sp = base;   /* the items stay readable at stack[base ..] until the next push */
    pk_obj *target;
    if ((st = peek(P, &target))) return st;
    pk_obj *const *items = P->stack + base;
    if (P->op == OP_APPENDS) return op_list_items(P, target, items, k);
    if (P->op == OP_SETITEMS) return op_dict_items(P, target, items, k);
    if (target->kind != PK_SET)
        return fail(P, SCK_ERR_FORMAT, "target is a %s, not a set", pk_kind_name(target->kind));
    if ((st = check_modifiable(P, target))) return st;
    return add_entries(P, target, items, k, 0);
}

static int op_build(pk_parser *P) {
    pk_obj *state, *target;
    int st = pop(P, &state);
    if (!st) st = peek(P, &target);
    if (st) return st;
    if (target->kind != PK_REDUCE && target->kind != PK_NEWOBJ && target->kind != PK_PERSID)
        return fail(P, SCK_ERR_FORMAT, "cannot set the state of a %s", pk_kind_name(target->kind));
    if ((st = check_modifiable(P, target)) || (st = adopt(P, target, state))) return st;
    target->state = state;
    return SCK_OK;
}

static int op_stack_global(pk_parser *P) {
    pk_obj *mod, *name;
    int st = pop(P, &name);
    if (!st) st = pop(P, &mod);
    if (st) return st;
    if (mod->kind != PK_STR || name->kind != PK_STR) return fail(P, SCK_ERR_FORMAT, "module and name must be str");
    return push_global(P, (const uint8_t *)mod->s, mod->len, (const uint8_t *)name->s, name->len);
}

static int op_newobj_ex(pk_parser *P) {
    pk_obj *cls, *args, *kwargs;
    int st = pop(P, &kwargs);
    if (!st) st = pop(P, &args);
    if (!st) st = pop(P, &cls);
    if (st) return st;
    if (kwargs->kind != PK_DICT) return fail(P, SCK_ERR_FORMAT, "keyword arguments are a %s, not a dict",
                                             pk_kind_name(kwargs->kind));
    if (kwargs->n) return fail(P, SCK_ERR_UNSUPPORTED, "keyword arguments are not supported");
    return push_call(P, PK_NEWOBJ, cls, args);
}

static int op_tuple_n(pk_parser *P, size_t k) {
    if (P->sp - frame_base(P) < k) return fail(P, SCK_ERR_FORMAT, "stack underflow");
    return collect(P, PK_TUPLE, P->sp - k);
}

static int op_stop(pk_parser *P, pk_obj **root) {
    if (P->nmarks) return fail(P, SCK_ERR_FORMAT, "%zu MARKs still open", P->nmarks);
    if (P->sp == 0) return fail(P, SCK_ERR_FORMAT, "empty stack");
    if (P->sp > 1) return fail(P, SCK_ERR_FORMAT, "%zu extra items left on the stack", P->sp - 1);
    if (P->pos != P->n) return fail(P, SCK_ERR_FORMAT, "%zu bytes of trailing data", P->n - P->pos);
    *root = P->stack[0];
    return SCK_OK;
}

/* Executes one opcode (already consumed into P->op); sets *done at STOP. */
static int step(pk_parser *P, pk_obj **root, int *done) {
    const uint8_t *s = NULL, *s2 = NULL;
    size_t len = 0, len2 = 0, base = 0;   /* initialized only to quiet gcc -O2 */
    int64_t v = 0;
    pk_obj *o = NULL, *o2 = NULL;
    int st;
    switch (P->op) {
    case OP_PROTO:
        if ((st = need(P, 1))) return st;
        if (P->p[P->pos] > 5) return fail(P, SCK_ERR_UNSUPPORTED, "protocol %u", (unsigned)P->p[P->pos]);
        P->pos++;
        return SCK_OK;
    case OP_FRAME: {
        if ((st = need(P, 8))) return st;
        uint64_t flen = read_le(P, 8);
        if (flen > P->n - P->pos)
            return fail(P, SCK_ERR_FORMAT, "truncated: frame of %llu bytes, %zu left", (unsigned long long)flen,
                        P->n - P->pos);
        return SCK_OK;   /* frames only group opcodes; nothing to do */
    }
    case OP_STOP:
        *done = 1;
        return op_stop(P, root);
    case OP_MARK:
        if (P->nmarks >= P->lim.max_depth)
            return fail(P, SCK_ERR_FORMAT, "MARKs nested deeper than %zu levels", P->lim.max_depth);
        if (P->nmarks == P->marks_cap) {
            size_t cap = P->marks_cap ? P->marks_cap * 2 : 16;
            size_t *m = realloc(P->marks, cap * sizeof *m);
            if (!m) return nomem(P);
            P->marks = m;
            P->marks_cap = cap;
        }
        P->marks[P->nmarks++] = P->sp;
        return SCK_OK;
    case OP_POP:
        if (P->sp > frame_base(P)) {
            P->sp--;
            return SCK_OK;
        }
        /* like Python, POP on an empty frame discards the MARK */
        if ((st = pop_mark(P, &base))) return st;
        P->sp = base;
        return SCK_OK;
    case OP_POP_MARK:
        if ((st = pop_mark(P, &base))) return st;
        P->sp = base;
        return SCK_OK;
    case OP_DUP:
        if ((st = peek(P, &o))) return st;
        return push(P, o);
    case OP_NONE: return push_shared(P, &P->none, PK_NONE, 0);
    case OP_NEWTRUE: return push_shared(P, &P->true_, PK_BOOL, 1);
    case OP_NEWFALSE: return push_shared(P, &P->false_, PK_BOOL, 0);
    case OP_INT:
        if ((st = read_line(P, &s, &len))) return st;
        if (len == 2 && s[0] == '0' && (s[1] == '0' || s[1] == '1'))   /* protocol 0 bools */
            return push_shared(P, s[1] == '1' ? &P->true_ : &P->false_, PK_BOOL, s[1] == '1');
        if ((st = text_int(P, s, len, &v)) == 2) return push_text_bigint(P, s, len);
        if (st) return st;
        return push_int(P, PK_INT, v);
    case OP_LONG:
        if ((st = read_line(P, &s, &len))) return st;
        if (len && s[len - 1] == 'L') len--;
        if ((st = text_int(P, s, len, &v)) == 2) return push_text_bigint(P, s, len);
        if (st) return st;
        return push_int(P, PK_INT, v);
    case OP_BININT:
        if ((st = need(P, 4))) return st;
        {
            uint64_t u = read_le(P, 4);   /* signed 32-bit */
            return push_int(P, PK_INT, u >= 0x80000000u ? (int64_t)u - ((int64_t)1 << 32) : (int64_t)u);
        }
    case OP_BININT1:
        if ((st = need(P, 1))) return st;
        return push_int(P, PK_INT, (int64_t)read_le(P, 1));
    case OP_BININT2:
        if ((st = need(P, 2))) return st;
        return push_int(P, PK_INT, (int64_t)read_le(P, 2));
    case OP_LONG1:
    case OP_LONG4: {
        size_t lk = P->op == OP_LONG1 ? 1 : 4;
        if ((st = need(P, lk))) return st;
        uint64_t nb = read_le(P, lk);
        if (lk == 4 && nb >= 0x80000000u) return fail(P, SCK_ERR_FORMAT, "negative length");
        if ((st = need(P, nb))) return st;
        s = P->p + P->pos;
        P->pos += (size_t)nb;
        if (decode_long(s, (size_t)nb, &v) == 2) {
            pk_obj *big;
            st = new_blob(P, PK_BIGINT, s, (size_t)nb, &big);
            return st ? st : push(P, big);
        }
        return push_int(P, PK_INT, v);
    }
    case OP_BINFLOAT: {
        if ((st = need(P, 8))) return st;
        uint64_t bits = 0;
        for (int i = 0; i < 8; i++) bits = (bits << 8) | P->p[P->pos + (size_t)i];   /* big-endian */
        P->pos += 8;
        double d;
        memcpy(&d, &bits, sizeof d);
        return push_float(P, d);
    }
    case OP_FLOAT:
        if ((st = read_line(P, &s, &len))) return st;
        return text_float(P, s, len);
    case OP_STRING:
        if ((st = read_line(P, &s, &len))) return st;
        return push_quoted(P, s, len);
    case OP_BINSTRING: {
        if ((st = need(P, 4))) return st;
        uint64_t n4 = read_le(P, 4);
        if (n4 >= 0x80000000u) return fail(P, SCK_ERR_FORMAT, "negative length");
        return push_counted(P, PK_STR, n4, 0);
    }
    case OP_SHORT_BINSTRING:
    case OP_SHORT_BINBYTES:
    case OP_SHORT_BINUNICODE:
        if ((st = need(P, 1))) return st;
        return push_counted(P, P->op == OP_SHORT_BINBYTES ? PK_BYTES : PK_STR, read_le(P, 1),
                            P->op == OP_SHORT_BINUNICODE);
    case OP_BINUNICODE:
    case OP_BINBYTES:
        if ((st = need(P, 4))) return st;
        return push_counted(P, P->op == OP_BINBYTES ? PK_BYTES : PK_STR, read_le(P, 4), P->op == OP_BINUNICODE);
    case OP_BINUNICODE8:
    case OP_BINBYTES8:
    case OP_BYTEARRAY8:
        if ((st = need(P, 8))) return st;
        return push_counted(P, P->op == OP_BINUNICODE8 ? PK_STR : PK_BYTES, read_le(P, 8),
                            P->op == OP_BINUNICODE8);
    case OP_UNICODE:
        if ((st = read_line(P, &s, &len))) return st;
        return push_raw_unicode(P, s, len);
    case OP_EMPTY_TUPLE: return op_tuple_n(P, 0);
    case OP_TUPLE1: return op_tuple_n(P, 1);
    case OP_TUPLE2: return op_tuple_n(P, 2);
    case OP_TUPLE3: return op_tuple_n(P, 3);
    case OP_TUPLE:
        if ((st = pop_mark(P, &base))) return st;
        return collect(P, PK_TUPLE, base);
    case OP_EMPTY_LIST: return collect(P, PK_LIST, P->sp);
    case OP_LIST:
        if ((st = pop_mark(P, &base))) return st;
        return collect(P, PK_LIST, base);
    case OP_EMPTY_DICT: return collect(P, PK_DICT, P->sp);
    case OP_DICT:
        if ((st = pop_mark(P, &base))) return st;
        return collect(P, PK_DICT, base);
    case OP_EMPTY_SET: return collect(P, PK_SET, P->sp);
    case OP_FROZENSET:
        if ((st = pop_mark(P, &base))) return st;
        return collect(P, PK_SET, base);
    case OP_APPEND:
        if ((st = pop(P, &o)) || (st = peek(P, &o2))) return st;
        return op_list_items(P, o2, &o, 1);
    case OP_SETITEM: {
        pk_obj *kv[2];
        if ((st = pop(P, &kv[1])) || (st = pop(P, &kv[0])) || (st = peek(P, &o2))) return st;
        return op_dict_items(P, o2, kv, 2);
    }
    case OP_APPENDS:
    case OP_SETITEMS:
    case OP_ADDITEMS:
        return op_mark_items(P);
    case OP_GLOBAL:
        if ((st = read_line(P, &s, &len)) || (st = read_line(P, &s2, &len2))) return st;
        return push_global(P, s, len, s2, len2);
    case OP_STACK_GLOBAL: return op_stack_global(P);
    case OP_REDUCE:
    case OP_NEWOBJ:
        if ((st = pop(P, &o2)) || (st = pop(P, &o))) return st;
        return push_call(P, P->op == OP_REDUCE ? PK_REDUCE : PK_NEWOBJ, o, o2);
    case OP_NEWOBJ_EX: return op_newobj_ex(P);
    case OP_BUILD: return op_build(P);
    case OP_BINPERSID:
        if ((st = pop(P, &o2)) || (st = new_obj(P, PK_PERSID, &o)) || (st = adopt(P, o, o2))) return st;
        o->a = o2;
        return push(P, o);
    case OP_PERSID:
        if ((st = read_line(P, &s, &len))) return st;
        for (size_t i = 0; i < len; i++)
            if (s[i] >= 0x80) return fail(P, SCK_ERR_FORMAT, "persistent id is not ASCII");
        if ((st = new_blob(P, PK_STR, s, len, &o2)) || (st = new_obj(P, PK_PERSID, &o)) || (st = adopt(P, o, o2)))
            return st;
        o->a = o2;
        return push(P, o);
    case OP_PUT:
        if ((st = read_line(P, &s, &len)) || (st = memo_index(P, s, len, &v))) return st;
        return memo_put(P, v);
    case OP_BINPUT:
        if ((st = need(P, 1))) return st;
        return memo_put(P, (int64_t)read_le(P, 1));
    case OP_LONG_BINPUT:
        if ((st = need(P, 4))) return st;
        return memo_put(P, (int64_t)read_le(P, 4));
    case OP_MEMOIZE: return memo_put(P, (int64_t)P->memo_count);
    case OP_GET:
        if ((st = read_line(P, &s, &len)) || (st = memo_index(P, s, len, &v))) return st;
        return memo_push(P, v);
    case OP_BINGET:
        if ((st = need(P, 1))) return st;
        return memo_push(P, (int64_t)read_le(P, 1));
    case OP_LONG_BINGET:
        if ((st = need(P, 4))) return st;
        return memo_push(P, (int64_t)read_le(P, 4));
    case OP_INST:
    case OP_OBJ:
    case OP_EXT1:
    case OP_EXT2:
    case OP_EXT4:
    case OP_NEXT_BUFFER:
    case OP_READONLY_BUFFER:
        return fail(P, SCK_ERR_UNSUPPORTED, "opcode not supported");
    default:
        return fail(P, SCK_ERR_FORMAT, "unknown opcode");
    }
}

int pk_parse(const void *data, size_t n, const char *what, pk_allow_fn allow, void *allow_ctx,
             const pk_limits *limits, pk_arena **arena, pk_obj **root) {
    if (!what) what = "pickle";
    if (!arena || !root || (!data && n)) return sck_err(SCK_ERR_INVALID_ARG, "%s: pk_parse: NULL argument", what);
    *arena = NULL;
    *root = NULL;
    pk_parser P;
    memset(&P, 0, sizeof P);
    P.p = data;
    P.n = n;
    P.what = what;
    P.allow = allow;
    P.allow_ctx = allow_ctx;
    P.lim.max_depth = limits && limits->max_depth ? limits->max_depth : 256;
    if (P.lim.max_depth > PK_HEIGHT - 1) P.lim.max_depth = PK_HEIGHT - 1; /* heights fit in parser_bits */
    P.lim.max_objects = limits && limits->max_objects ? limits->max_objects : (size_t)16 << 20;
    P.lim.max_memo = limits && limits->max_memo ? limits->max_memo : (size_t)16 << 20;
    P.arena = calloc(1, sizeof *P.arena);
    if (!P.arena) return sck_err(SCK_ERR_NOMEM, "%s: out of memory", what);

    int st = SCK_OK, done = 0;
    while (!st && !done) {
        if (P.pos >= P.n) {
            P.op = -1;
            P.op_off = P.n;
            st = fail(&P, SCK_ERR_FORMAT, "truncated: no STOP opcode");
            break;
        }
        P.op_off = P.pos;
        P.op = P.p[P.pos++];
        st = step(&P, root, &done);
    }
    free(P.stack);
    free(P.marks);
    free(P.memo_dense);
    free(P.memo_keys);
    free(P.memo_vals);
    if (st) {
        pk_arena_free(P.arena);
        *root = NULL;
        return st;
    }
    *arena = P.arena;
    return SCK_OK;
}

/* ---- lookups ---- */

pk_obj *pk_dict_get(const pk_obj *dict, const char *key) {
    if (!dict || !key) return NULL;
    if (dict->kind != PK_DICT && dict->kind != PK_REDUCE && dict->kind != PK_NEWOBJ) return NULL;
    size_t klen = strlen(key);
    for (size_t i = dict->n; i-- > 0;) {   /* backwards: the last duplicate wins, as in Python */
        const pk_obj *k = dict->items[2 * i];
        if (k->kind == PK_STR && k->len == klen && memcmp(k->s, key, klen) == 0) return dict->items[2 * i + 1];
    }
    return NULL;
}

int pk_is_global(const pk_obj *o, const char *module, const char *name) {
    if (!o || o->kind != PK_GLOBAL || !name) return 0;
    if (module && strcmp(o->s, module) != 0) return 0;
    return strcmp(o->name, name) == 0;
}

/* ---- writer ---- */

static void w_put(pk_writer *w, const void *p, size_t n) {
    if (w->err) return;
    if (sck_buf_append(w->out, p, n))
        w->err = sck_err(SCK_ERR_NOMEM, "pickle writer: out of memory after %zu bytes", w->out->len);
}

static void w_op(pk_writer *w, uint8_t op) { w_put(w, &op, 1); }

/* Opcode followed by a k-byte little-endian argument. */
static void w_op_le(pk_writer *w, uint8_t op, uint64_t v, size_t k) {
    uint8_t b[9];
    b[0] = op;
    for (size_t i = 0; i < k; i++) b[1 + i] = (uint8_t)(v >> (8 * i));
    w_put(w, b, 1 + k);
}

static void w_invalid(pk_writer *w, const char *what) {
    if (!w->err) w->err = sck_err(SCK_ERR_INVALID_ARG, "pickle writer: %s", what);
}

void pk_begin(pk_writer *w, sck_buf *out, int proto) {
    memset(w, 0, sizeof *w);
    w->out = out;
    w->proto = proto;
    if (!out) w_invalid(w, "no output buffer");
    else if (proto < 2 || proto > 5) w_invalid(w, "protocol must be 2..5");
    w_op_le(w, OP_PROTO, (uint64_t)proto, 1);
}

static void w_memo_free(pk_writer *w) {
    for (size_t i = 0; i < w->memo_n; i++) free(w->memo_keys[i]);
    free(w->memo_keys);
    free(w->memo_idx);
    w->memo_keys = NULL;
    w->memo_idx = NULL;
    w->memo_n = w->memo_cap = 0;
    free(w->smemo_key);
    free(w->smemo_idx);
    w->smemo_key = NULL;
    w->smemo_idx = NULL;
    w->smemo_n = w->smemo_cap = 0;
}

int pk_finish(pk_writer *w) {
    w_op(w, OP_STOP);
    w_memo_free(w);
    return w->err;
}

void pk_none(pk_writer *w) { w_op(w, OP_NONE); }
void pk_bool(pk_writer *w, int v) { w_op(w, v ? OP_NEWTRUE : OP_NEWFALSE); }

size_t pk_int_bytes(uint8_t *b, int64_t v) {
    uint64_t u = (uint64_t)v;
    size_t k;
    if (v >= 0 && v <= 0xFF) {
        b[0] = OP_BININT1, k = 1;
    } else if (v >= 0 && v <= 0xFFFF) {
        b[0] = OP_BININT2, k = 2;
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
        b[0] = OP_BININT, k = 4; /* two's complement low 32 bits */
    } else {
        /* LONG1 with the shortest two's complement encoding, as pickle.encode_long produces */
        k = 8;
        for (size_t i = 0; i < 8; i++) b[2 + i] = (uint8_t)(u >> (8 * i));
        while (k > 1 && ((b[1 + k] == 0x00 && !(b[k] & 0x80)) || (b[1 + k] == 0xFF && (b[k] & 0x80)))) k--;
        b[0] = OP_LONG1;
        b[1] = (uint8_t)k;
        return 2 + k;
    }
    for (size_t i = 0; i < k; i++) b[1 + i] = (uint8_t)(u >> (8 * i));
    return 1 + k;
}

void pk_int(pk_writer *w, int64_t v) {
    uint8_t b[PK_INT_MAX];
    w_put(w, b, pk_int_bytes(b, v));
}

void pk_long(pk_writer *w, const uint8_t *le, size_t n) {
    uint8_t head[5];
    if (n < 256) {
        head[0] = OP_LONG1, head[1] = (uint8_t)n;
        w_put(w, head, 2);
    } else {
        head[0] = OP_LONG4;
        for (int i = 0; i < 4; i++) head[1 + i] = (uint8_t)((uint64_t)n >> (8 * i));
        w_put(w, head, 5);
    }
    w_put(w, le, n);
}

/* ---- integers of any size: decimal text <-> little-endian two's complement ---- */

size_t pk_decimal_to_long(const char *s, size_t len, uint8_t *out) {
    size_t i = 0, n = 0;
    int neg = 0;
    if (i < len && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    /* magnitude *= 10, += digit, on a little-endian byte array */
    for (; i < len; i++) {
        unsigned carry = (unsigned)(s[i] - '0');
        for (size_t k = 0; k < n; k++) {
            unsigned x = out[k] * 10u + carry;
            out[k] = (uint8_t)x;
            carry = x >> 8;
        }
        while (carry) out[n++] = (uint8_t)carry, carry >>= 8;
    }
    out[n++] = 0;   /* room for the sign bit */
    if (neg) {      /* two's complement: invert and add one */
        unsigned carry = 1;
        for (size_t k = 0; k < n; k++) {
            unsigned x = (uint8_t)~out[k] + carry;
            out[k] = (uint8_t)x;
            carry = x >> 8;
        }
    }
    /* shortest form, as Python's encode_long */
    while (n > 1 && ((out[n - 1] == 0x00 && !(out[n - 2] & 0x80)) || (out[n - 1] == 0xFF && (out[n - 2] & 0x80)))) n--;
    return n;
}

size_t pk_long_to_decimal(const uint8_t *le, size_t n, char *out) {
    size_t k = 0;
    if (n == 0) {
        out[0] = '0', out[1] = 0;
        return 1;
    }
    uint8_t *mag = malloc(n);
    if (!mag) return 0;
    int neg = (le[n - 1] & 0x80) != 0;
    unsigned carry = 1;
    for (size_t i = 0; i < n; i++) {
        if (!neg) {
            mag[i] = le[i];
        } else {
            unsigned x = (uint8_t)~le[i] + carry;
            mag[i] = (uint8_t)x;
            carry = x >> 8;
        }
    }
    size_t top = n;   /* digits come out least significant first: repeated division by 10 */
    while (top && !mag[top - 1]) top--;
    do {
        unsigned rem = 0;
        for (size_t i = top; i-- > 0;) {
            unsigned x = (rem << 8) | mag[i];
            mag[i] = (uint8_t)(x / 10);
            rem = x % 10;
        }
        out[k++] = (char)('0' + rem);
        while (top && !mag[top - 1]) top--;
    } while (top);
    free(mag);
    if (neg) out[k++] = '-';
    for (size_t i = 0; i < k / 2; i++) {
        char c = out[i];
        out[i] = out[k - 1 - i];
        out[k - 1 - i] = c;
    }
    out[k] = 0;
    return k;
}

void pk_float(pk_writer *w, double v) {
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    uint8_t b[9];
    b[0] = OP_BINFLOAT;
    for (int i = 0; i < 8; i++) b[1 + i] = (uint8_t)(bits >> (56 - 8 * i));   /* big-endian */
    w_put(w, b, 9);
}

void pk_str(pk_writer *w, const char *s, size_t n) {
    if (w->err) return;
    if (!s && n) { w_invalid(w, "NULL string"); return; }
    if (n && !utf8_valid((const uint8_t *)s, n)) { w_invalid(w, "string is not valid UTF-8"); return; }
    if (w->proto >= 4 && n < 256) {
        w_op_le(w, OP_SHORT_BINUNICODE, n, 1);
    } else if ((uint64_t)n > 0xFFFFFFFFu) {
        if (w->proto < 4) { w_invalid(w, "string longer than 4 GiB needs protocol 4"); return; }
        w_op_le(w, OP_BINUNICODE8, n, 8);
    } else {
        w_op_le(w, OP_BINUNICODE, n, 4);
    }
    w_put(w, s, n);
}

void pk_cstr(pk_writer *w, const char *s) {
    if (!s) { w_invalid(w, "NULL string"); return; }
    pk_str(w, s, strlen(s));
}

static uint64_t str_hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

/* Doubles the string memo table (rehashing). 0 out of memory. */
static int smemo_grow(pk_writer *w) {
    size_t cap = w->smemo_cap ? 2 * w->smemo_cap : 1024;
    const char **keys = calloc(cap, sizeof *keys);
    uint32_t *idx = malloc(cap * sizeof *idx);
    if (!keys || !idx) {
        free(keys);
        free(idx);
        return 0;
    }
    for (size_t i = 0; i < w->smemo_cap; i++) {
        if (!w->smemo_key[i]) continue;
        size_t j = (size_t)str_hash(w->smemo_key[i], strlen(w->smemo_key[i])) & (cap - 1);
        while (keys[j]) j = (j + 1) & (cap - 1);
        keys[j] = w->smemo_key[i];
        idx[j] = w->smemo_idx[i];
    }
    free(w->smemo_key);
    free(w->smemo_idx);
    w->smemo_key = keys;
    w->smemo_idx = idx;
    w->smemo_cap = cap;
    return 1;
}

static void w_get(pk_writer *w, uint32_t idx);

void pk_cstr_memo(pk_writer *w, const char *s) {
    if (w->err) return;
    if (!s) { w_invalid(w, "NULL string"); return; }
    size_t slot = (size_t)((((uint64_t)(uintptr_t)s * 0x9E3779B97F4A7C15ull) >> 32) % PK_PTRS);
    if (w->sptr[slot] == s) {
        w_get(w, w->sptr_idx[slot]);
        return;
    }
    size_t n = strlen(s);
    if (2 * (w->smemo_n + 1) > w->smemo_cap && !smemo_grow(w)) {
        w->err = sck_err(SCK_ERR_NOMEM, "pickle writer: out of memory");
        return;
    }
    size_t j = (size_t)str_hash(s, n) & (w->smemo_cap - 1);
    for (; w->smemo_key[j]; j = (j + 1) & (w->smemo_cap - 1))
        if (!strcmp(w->smemo_key[j], s)) {
            w->sptr[slot] = s;
            w->sptr_idx[slot] = w->smemo_idx[j];
            w_get(w, w->smemo_idx[j]);
            return;
        }
    pk_str(w, s, n);
    if (w->err) return;
    uint32_t idx = w->next_memo++;
    w->smemo_key[j] = s;
    w->smemo_idx[j] = idx;
    w->sptr[slot] = s;
    w->sptr_idx[slot] = idx;
    w->smemo_n++;
    if (w->proto >= 4) w_op(w, OP_MEMOIZE);
    else if (idx < 256) w_op_le(w, OP_BINPUT, idx, 1);
    else w_op_le(w, OP_LONG_BINPUT, idx, 4);
}

void pk_bytes(pk_writer *w, const void *p, size_t n) {
    if (w->err) return;
    if (!p && n) { w_invalid(w, "NULL bytes"); return; }
    if (n < 256) w_op_le(w, OP_SHORT_BINBYTES, n, 1);
    else if ((uint64_t)n <= 0xFFFFFFFFu) w_op_le(w, OP_BINBYTES, n, 4);
    else w_op_le(w, OP_BINBYTES8, n, 8);
    w_put(w, p, n);
}

void pk_mark(pk_writer *w) { w_op(w, OP_MARK); }

void pk_tuple(pk_writer *w, size_t n) {
    static const uint8_t small[4] = {OP_EMPTY_TUPLE, OP_TUPLE1, OP_TUPLE2, OP_TUPLE3};
    w_op(w, n < 4 ? small[n] : OP_TUPLE);
}

void pk_empty_list(pk_writer *w) { w_op(w, OP_EMPTY_LIST); }
void pk_appends(pk_writer *w) { w_op(w, OP_APPENDS); }
void pk_append(pk_writer *w) { w_op(w, OP_APPEND); }
void pk_empty_dict(pk_writer *w) { w_op(w, OP_EMPTY_DICT); }
void pk_setitems(pk_writer *w) { w_op(w, OP_SETITEMS); }
void pk_setitem(pk_writer *w) { w_op(w, OP_SETITEM); }
void pk_reduce(pk_writer *w) { w_op(w, OP_REDUCE); }
void pk_newobj(pk_writer *w) { w_op(w, OP_NEWOBJ); }
void pk_build(pk_writer *w) { w_op(w, OP_BUILD); }
void pk_binpersid(pk_writer *w) { w_op(w, OP_BINPERSID); }

/* Memo references use BINGET below 256 and LONG_BINGET above, as Python's Pickler.get does. */
static void w_get(pk_writer *w, uint32_t idx) {
    if (idx < 256) w_op_le(w, OP_BINGET, idx, 1);
    else w_op_le(w, OP_LONG_BINGET, idx, 4);
}

/* Emits global module.name, memoized: a reference to its memo entry when it was emitted before.
 * Returns the memo index, or UINT32_MAX after an error. */
static uint32_t global_memo(pk_writer *w, const char *module, const char *name) {
    if (!module || !name || !*module || !*name) { w_invalid(w, "empty global name"); return UINT32_MAX; }
    if (strchr(module, '\n') || strchr(name, '\n')) { w_invalid(w, "newline in a global name"); return UINT32_MAX; }
    size_t ml = strlen(module), nl = strlen(name);
    for (size_t i = 0; i < w->memo_n; i++) {   /* few distinct globals per pickle: a scan is enough */
        const char *k = w->memo_keys[i];
        if (strncmp(k, module, ml) == 0 && k[ml] == '\n' && strcmp(k + ml + 1, name) == 0)
            { w_get(w, w->memo_idx[i]); return w->memo_idx[i]; }
    }
    if (w->memo_n == w->memo_cap) {
        size_t cap = w->memo_cap ? w->memo_cap * 2 : 16;
        char **keys = realloc(w->memo_keys, cap * sizeof *keys);
        if (keys) w->memo_keys = keys;
        uint32_t *idx = keys ? realloc(w->memo_idx, cap * sizeof *idx) : NULL;
        if (idx) w->memo_idx = idx;
        if (!keys || !idx) {
            w->err = sck_err(SCK_ERR_NOMEM, "pickle writer: out of memory");
            return UINT32_MAX;
        }
        w->memo_cap = cap;
    }
    char *key = malloc(ml + nl + 2);
    if (!key) {
        w->err = sck_err(SCK_ERR_NOMEM, "pickle writer: out of memory");
        return UINT32_MAX;
    }
    memcpy(key, module, ml);
    key[ml] = '\n';
    memcpy(key + ml + 1, name, nl + 1);
    uint32_t idx = w->next_memo++;
    w->memo_keys[w->memo_n] = key;
    w->memo_idx[w->memo_n++] = idx;
    if (w->proto >= 4) {
        pk_str(w, module, ml);
        pk_str(w, name, nl);
        w_op(w, OP_STACK_GLOBAL);
        w_op(w, OP_MEMOIZE);
    } else {
        w_op(w, OP_GLOBAL);
        w_put(w, module, ml);
        w_op(w, '\n');
        w_put(w, name, nl);
        w_op(w, '\n');
        if (idx < 256) w_op_le(w, OP_BINPUT, idx, 1);
        else w_op_le(w, OP_LONG_BINPUT, idx, 4);
    }
    return idx;
}

void pk_global(pk_writer *w, const char *module, const char *name) {
    if (!w->err) global_memo(w, module, name);
}

void pk_global_static(pk_writer *w, const char *module, const char *name) {
    if (w->err) return;
    for (unsigned i = 0; i < PK_HOT && module; i++)
        if (w->hot_mod[i] == module && w->hot_name[i] == name) {
            w_get(w, w->hot_idx[i]);
            return;
        }
    uint32_t idx = global_memo(w, module, name);
    if (idx == UINT32_MAX) return;
    unsigned h = w->hot_next++ % PK_HOT;
    w->hot_mod[h] = module, w->hot_name[h] = name, w->hot_idx[h] = idx;
}
