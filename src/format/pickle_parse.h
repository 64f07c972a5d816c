/* pickle_parse.h - private to the pickle reader's files (src/format/pickle_*.c): the parser's state and
 * the steps they share.  pickle_text.c, pickle_tree.c -> pickle_stack.c -> pickle_scalar.c -> pickle_read.c, each
 * calling only the ones before it; each function is described where it is defined. */
#ifndef SCK_PICKLE_PARSE_H
#define SCK_PICKLE_PARSE_H

#include "format/pickle.h"

/* The parser's bookkeeping lives in pk_obj.parser_bits: the nesting height below the node (0 for
 * leaves, else 1 + the tallest child; bounded by max_depth, which pk_parse keeps below 2^31) and
 * whether the node is already stored inside another (modifying it then could create a cycle). */
#define PK_CONTAINED 0x80000000u
#define PK_HEIGHT 0x7fffffffu

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

typedef struct pk_block pk_block; /* pickle_text.c */
int pk_utf8_valid(const uint8_t *s, size_t n);

/* pickle_tree.c */
struct pk_arena {
    pk_block *head;   /* the block being filled; big allocations get their own block behind it */
    size_t total;     /* bytes in all blocks: blocks grow with it, so big pickles need few blocks */
};

/* pickle_tree.c */
void *pk_arena_alloc(pk_arena *a, size_t size);
void *pk_arena_alloc_zero(pk_arena *a, size_t size);
void *pk_arena_grow(pk_arena *a, void *p, size_t old, size_t keep, size_t size);
uint32_t pk_height_of(const pk_obj *o);
const char *pk_op_name(int op);

/* pickle_stack.c */
int pk_fail(pk_parser *P, int status, const char *fmt, ...);
int pk_nomem(pk_parser *P);
int pk_need(pk_parser *P, uint64_t k);
int pk_read_line(pk_parser *P, const uint8_t **s, size_t *len);
int pk_new_obj(pk_parser *P, pk_kind kind, pk_obj **out);
char *pk_arena_copy(pk_parser *P, const void *s, size_t len);
int pk_new_blob(pk_parser *P, pk_kind kind, const void *s, size_t len, pk_obj **out);
int pk_push(pk_parser *P, pk_obj *o);
size_t pk_frame_base(const pk_parser *P);
int pk_peek(pk_parser *P, pk_obj **o);
int pk_pop(pk_parser *P, pk_obj **o);
int pk_pop_mark(pk_parser *P, size_t *base);
int pk_adopt(pk_parser *P, pk_obj *parent, pk_obj *child);
int pk_check_modifiable(pk_parser *P, const pk_obj *target);
int pk_add_entries(pk_parser *P, pk_obj *c, pk_obj *const *src, size_t k, int pairs);
int pk_collect(pk_parser *P, pk_kind kind, size_t base);
int pk_memo_put(pk_parser *P, int64_t key);
int pk_memo_push(pk_parser *P, int64_t key);

/* pickle_scalar.c */
int pk_text_int(pk_parser *P, const uint8_t *s, size_t len, int64_t *out);
int pk_memo_index(pk_parser *P, const uint8_t *s, size_t len, int64_t *out);
int pk_decode_long(const uint8_t *b, size_t k, int64_t *out);
int pk_push_int(pk_parser *P, pk_kind kind, int64_t v);
int pk_push_text_bigint(pk_parser *P, const uint8_t *s, size_t len);
int pk_push_float(pk_parser *P, double v);
int pk_push_shared(pk_parser *P, pk_obj **slot, pk_kind kind, int64_t v);
int pk_text_float(pk_parser *P, const uint8_t *s, size_t len);
int pk_push_raw_unicode(pk_parser *P, const uint8_t *s, size_t len);
int pk_push_quoted(pk_parser *P, const uint8_t *s, size_t len);
int pk_push_counted(pk_parser *P, pk_kind kind, uint64_t len, int utf8);
uint64_t pk_read_le(pk_parser *P, size_t k);
int pk_push_global(pk_parser *P, const uint8_t *mod, size_t mlen, const uint8_t *name, size_t nlen);

#endif
