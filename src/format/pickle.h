/* pickle.h - a safe subset pickle reader (never imports or calls anything) and a pickle writer.
 *
 * The reader turns a pickle stream into a tree of pk_obj nodes allocated from an arena.  Globals are
 * not resolved: a GLOBAL / STACK_GLOBAL becomes a PK_GLOBAL node after the caller's allow-list accepts
 * (module, name); REDUCE / NEWOBJ become nodes that merely record the callable and its arguments; BUILD
 * records the state on the object.  Interpreting those nodes (e.g. as DCP metadata) is the caller's job.
 *
 * The result is a DAG: memo references (GET) share nodes, so one node may appear in several places.
 * Recursive objects (a container that ends up inside itself) are rejected with SCK_ERR_UNSUPPORTED:
 * to guarantee that cheaply, APPEND(S)/SETITEM(S)/ADDITEMS/BUILD may only modify an object that is
 * not yet stored inside another object, which is always the case for pickles of non-recursive data.
 */
#ifndef SCK_PICKLE_H
#define SCK_PICKLE_H

#include <stddef.h>
#include <stdint.h>

#include "base/util.h"

typedef enum pk_kind {
    PK_NONE, PK_BOOL, PK_INT, PK_FLOAT, PK_STR, PK_BYTES,
    PK_BIGINT,   /* an int beyond int64: s/len = little-endian two's complement bytes, as LONG1/LONG4 */
    PK_TUPLE, PK_LIST, PK_DICT, PK_SET,
    PK_GLOBAL,   /* module, name */
    PK_REDUCE,   /* callable = a, args = b (a tuple), state (BUILD) = state; items/n: see below */
    PK_NEWOBJ,   /* cls = a, args = b (a tuple), state (BUILD) = state; items/n: see below */
    PK_PERSID    /* persistent id: a = the pid object (BINPERSID) */
} pk_kind;

typedef struct pk_obj pk_obj;
/* One node.  The kind-specific fields share memory (a big `.metadata` makes millions of nodes), so
 * read a field only after checking `kind`: e.g. `s` of a PK_LIST is its items pointer. */
struct pk_obj {
    pk_kind kind;
    uint32_t parser_bits;       /* the parser's own bookkeeping: not for callers */
    union {
        int64_t i;              /* PK_BOOL (0/1), PK_INT */
        double f;               /* PK_FLOAT */
        struct {
            char *s;            /* PK_STR / PK_BYTES / PK_BIGINT data (NUL-terminated), PK_GLOBAL module */
            size_t len;         /* PK_STR / PK_BYTES / PK_BIGINT length */
            char *name;         /* PK_GLOBAL name */
        };
        struct {
            pk_obj **items;     /* PK_TUPLE / PK_LIST / PK_SET: n items; PK_DICT: 2n entries k0,v0,k1,v1,...
                                 * PK_REDUCE / PK_NEWOBJ: dict items added by SETITEM(S) (e.g. collections.
                                 * OrderedDict), laid out like PK_DICT.  Duplicate keys are all kept, in order. */
            size_t n;
            size_t cap;
            pk_obj *a, *b;      /* PK_REDUCE / PK_NEWOBJ / PK_PERSID: see kinds */
            pk_obj *state;      /* set by BUILD on a PK_REDUCE / PK_NEWOBJ / PK_PERSID (NULL if none); BUILD
                                 * on builtin kinds fails, as it does in Python */
        };
    };
};

/* Limits guarding against hostile input. */
typedef struct pk_limits {
    size_t max_depth;      /* nesting of objects and of MARKs (default 256); 0 fields mean default */
    size_t max_objects;    /* total nodes (default 16M or input-size based) */
    size_t max_memo;       /* memo entries (default 16M) */
} pk_limits;

typedef struct pk_arena pk_arena;

/* Returns 1 if (module, name) may appear as a global, 0 to reject it.  A NULL callback rejects all. */
typedef int (*pk_allow_fn)(void *ctx, const char *module, const char *name);

/* Parses `n` bytes of pickle data.  On success *root is the unpickled object, owned by *arena
 * (free with pk_arena_free, also on failure when *arena is non-NULL; this implementation frees it
 * itself on failure and sets *arena and *root to NULL).  `what` names the source in
 * error messages (e.g. the file path).  limits may be NULL for defaults.
 * Errors: SCK_ERR_FORMAT (truncated, bad opcode, stack underflow, memo miss, limits exceeded; the
 * message gives the byte offset and opcode), SCK_ERR_UNSUPPORTED (a global rejected by `allow`,
 * text integers of more than PK_BIGINT_DIGITS digits, recursive objects, NEWOBJ_EX with keyword arguments, protocol > 5,
 * INST/OBJ/EXTn/out-of-band buffers), SCK_ERR_NOMEM.  Data after STOP is an error. */
int pk_parse(const void *data, size_t n, const char *what, pk_allow_fn allow, void *allow_ctx,
             const pk_limits *limits, pk_arena **arena, pk_obj **root);
void pk_arena_free(pk_arena *a);

/* Convenience lookups (NULL if absent / wrong kind). */
/* PK_DICT (or the dict items of a PK_REDUCE / PK_NEWOBJ): value of PK_STR key `key`; the last
 * duplicate wins, as in Python. */
pk_obj *pk_dict_get(const pk_obj *dict, const char *key);
int pk_is_global(const pk_obj *o, const char *module, const char *name); /* module NULL = any */
/* "none", "int", "dict", ... for error messages. */
const char *pk_kind_name(pk_kind k);

/* ---- writer ---- */
#define PK_HOT 8
#define PK_PTRS 64
typedef struct pk_writer {
    sck_buf *out;
    int proto;          /* 2 or 4 */
    /* memo of globals already emitted: "module\nname" -> memo index */
    char **memo_keys;
    uint32_t *memo_idx;
    size_t memo_n, memo_cap;
    /* the last few (module, name) pointers looked up and their memo index: callers pass the same
     * literals hundreds of thousands of times for a large .metadata */
    const char *hot_mod[PK_HOT], *hot_name[PK_HOT];
    uint32_t hot_idx[PK_HOT];
    unsigned hot_next;
    uint32_t next_memo;
    /* memo of strings emitted by pk_cstr_memo: open addressing on their content, pointers to the
     * callers' strings */
    const char **smemo_key;
    uint32_t *smemo_idx;
    size_t smemo_n, smemo_cap;
    /* the same by the strings' addresses, direct-mapped: a large .metadata names each attribute, key
     * and file again for every chunk, through the same pointers (no strlen, hash or compare then) */
    const char *sptr[PK_PTRS];
    uint32_t sptr_idx[PK_PTRS];
    int err;            /* sticky: first error (SCK_ERR_NOMEM) */
} pk_writer;

/* Starts a pickle with PROTO `proto` (2 or 4). All emitters are sticky on error: check pk_finish. */
void pk_begin(pk_writer *w, sck_buf *out, int proto);
/* Emits STOP, frees the writer's memo, returns SCK_OK or the first error. */
int pk_finish(pk_writer *w);
void pk_none(pk_writer *w);
void pk_bool(pk_writer *w, int v);
void pk_int(pk_writer *w, int64_t v);          /* BININT1/BININT2/BININT/LONG1 as Python would */
/* The bytes pk_int emits for v (at most PK_INT_MAX), into dst; returns how many. */
#define PK_INT_MAX 10
size_t pk_int_bytes(uint8_t *dst, int64_t v);
/* LONG1 / LONG4 of n little-endian two's complement bytes (an int of any size). */
void pk_long(pk_writer *w, const uint8_t *le, size_t n);
/* Integers of any size.  Python itself refuses to print an int of more than 4300 digits. */
#define PK_BIGINT_DIGITS 4300
/* [+-]?[0-9]+ (len characters, already checked) to the shortest two's complement little-endian bytes
 * in out (room for len / 2 + 8 bytes); returns how many. */
size_t pk_decimal_to_long(const char *s, size_t len, uint8_t *out);
/* Little-endian two's complement bytes to NUL-terminated decimal text in out (room for 2.5 * n + 3
 * characters); returns its length, 0 when out of memory. */
size_t pk_long_to_decimal(const uint8_t *le, size_t n, char *out);
void pk_float(pk_writer *w, double v);         /* BINFLOAT */
/* SHORT_BINUNICODE (proto 4, <256) / BINUNICODE; s must be valid UTF-8 (else SCK_ERR_INVALID_ARG) */
void pk_str(pk_writer *w, const char *s, size_t n);
void pk_cstr(pk_writer *w, const char *s);
/* pk_cstr, memoized as CPython memoizes every str it pickles: a string emitted before becomes a memo
 * reference (2 or 5 bytes).  s must stay valid and unchanged until pk_finish (model keys, file names,
 * literals). */
void pk_cstr_memo(pk_writer *w, const char *s);
void pk_bytes(pk_writer *w, const void *p, size_t n); /* SHORT_BINBYTES / BINBYTES / BINBYTES8 (needs proto >= 3 semantics; emitted regardless of PROTO) */
void pk_mark(pk_writer *w);
void pk_tuple(pk_writer *w, size_t n);   /* n==0: EMPTY_TUPLE; 1..3: TUPLEn (no mark); else TUPLE (after pk_mark) */
void pk_empty_list(pk_writer *w);
void pk_appends(pk_writer *w);           /* after pk_mark + items */
void pk_append(pk_writer *w);            /* after one item (Python's form for a 1-item list) */
void pk_empty_dict(pk_writer *w);
void pk_setitems(pk_writer *w);          /* after pk_mark + k,v pairs */
void pk_setitem(pk_writer *w);           /* after one k,v pair (Python's form for a 1-item dict) */
void pk_global(pk_writer *w, const char *module, const char *name); /* GLOBAL (proto 2) or STACK_GLOBAL (proto 4), memoized */
/* pk_global for names in storage that never changes (string literals): the last PK_HOT pairs are
 * found again by address, without comparing strings. */
void pk_global_static(pk_writer *w, const char *module, const char *name);
void pk_reduce(pk_writer *w);
void pk_newobj(pk_writer *w);
void pk_build(pk_writer *w);
void pk_binpersid(pk_writer *w);

#endif
