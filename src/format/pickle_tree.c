/* pickle_tree.c - the reader's node tree: the arena its nodes are carved from, node kinds, opcode names, and
 * look-ups in a finished tree. */
#include "format/pickle_parse.h"

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

void *pk_arena_alloc(pk_arena *a, size_t size) {
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

/* Grows p (old bytes from pk_arena_alloc, the first `keep` of them in use) to `size` bytes: in place
 * when p ends the current block and the block has room, else as a copy, releasing p's block when p
 * had one of its own.  A list grown by doubling to millions of items then holds one array, not every
 * smaller one as well. */
void *pk_arena_grow(pk_arena *a, void *p, size_t old, size_t keep, size_t size) {
    old = (old + PK_ALIGN - 1) & ~(PK_ALIGN - 1);
    pk_block *h = a->head;
    if (p && h && (unsigned char *)p + old == h->data + h->used && size <= SIZE_MAX - PK_ALIGN) {
        size_t need = (size + PK_ALIGN - 1) & ~(PK_ALIGN - 1);
        if (need >= old && h->cap - (h->used - old) >= need) {
            h->used += need - old;
            return p;
        }
    }
    void *q = pk_arena_alloc(a, size);
    if (!q) return NULL;
    if (keep) memcpy(q, p, keep);
    /* a big allocation's block goes right behind the head, so p's is among the first few */
    pk_block **pp = &a->head;
    for (int k = 0; p && *pp && k < 4; k++, pp = &(*pp)->next) {
        pk_block *b = *pp;
        if (b->data == p && b->used == old) {
            *pp = b->next;
            a->total -= b->cap;
            block_free(b);
            break;
        }
    }
    return q;
}

/* Memory for a node: zeroed, by the kernel when the block is fresh from mmap. */
void *pk_arena_alloc_zero(pk_arena *a, size_t size) {
    void *p = pk_arena_alloc(a, size);
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


uint32_t pk_height_of(const pk_obj *o) { return o->parser_bits & PK_HEIGHT; }

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

const char *pk_op_name(int op) {
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
