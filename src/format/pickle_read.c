/* pickle_read.c - the reader's object-building opcodes (lists, dicts, REDUCE, NEWOBJ, BUILD ...) and the loop that
 * runs a pickle through them: pk_parse. */
#include "format/pickle_parse.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* ---- object-building opcodes ---- */

/* REDUCE / NEWOBJ / NEWOBJ_EX: record the callable and its argument tuple. */
static int push_call(pk_parser *P, pk_kind kind, pk_obj *callable, pk_obj *args) {
    if (args->kind != PK_TUPLE)
        return pk_fail(P, SCK_ERR_FORMAT, "arguments are a %s, not a tuple", pk_kind_name(args->kind));
    pk_obj *o;
    int st = pk_new_obj(P, kind, &o);
    if (!st) st = pk_adopt(P, o, callable);
    if (!st) st = pk_adopt(P, o, args);
    if (st) return st;
    o->a = callable;
    o->b = args;
    return pk_push(P, o);
}

static int op_list_items(pk_parser *P, pk_obj *target, pk_obj *const *items, size_t k) {
    if (target->kind == PK_REDUCE || target->kind == PK_NEWOBJ)
        return pk_fail(P, SCK_ERR_UNSUPPORTED, "list items for a %s object (list subclasses are not supported)",
                    pk_kind_name(target->kind));
    if (target->kind != PK_LIST)
        return pk_fail(P, SCK_ERR_FORMAT, "target is a %s, not a list", pk_kind_name(target->kind));
    int st = pk_check_modifiable(P, target);
    return st ? st : pk_add_entries(P, target, items, k, 0);
}

static int op_dict_items(pk_parser *P, pk_obj *target, pk_obj *const *items, size_t k) {
    if (k % 2) return pk_fail(P, SCK_ERR_FORMAT, "odd number of items (%zu) for a dict", k);
    if (target->kind != PK_DICT && target->kind != PK_REDUCE && target->kind != PK_NEWOBJ)
        return pk_fail(P, SCK_ERR_FORMAT, "target is a %s, not a dict", pk_kind_name(target->kind));
    int st = pk_check_modifiable(P, target);
    return st ? st : pk_add_entries(P, target, items, k, 1);
}

/* APPENDS / SETITEMS / ADDITEMS: items above the mark go into the object just below it. */
static int op_mark_items(pk_parser *P) {
    size_t base = 0;
    int st = pk_pop_mark(P, &base);
    if (st) return st;
    size_t k = P->sp - base;
    P->sp = base;   /* the items stay readable at stack[base ..] until the next push */
    pk_obj *target;
    if ((st = pk_peek(P, &target))) return st;
    pk_obj *const *items = P->stack + base;
    if (P->op == OP_APPENDS) return op_list_items(P, target, items, k);
    if (P->op == OP_SETITEMS) return op_dict_items(P, target, items, k);
    if (target->kind != PK_SET)
        return pk_fail(P, SCK_ERR_FORMAT, "target is a %s, not a set", pk_kind_name(target->kind));
    if ((st = pk_check_modifiable(P, target))) return st;
    return pk_add_entries(P, target, items, k, 0);
}

static int op_build(pk_parser *P) {
    pk_obj *state, *target;
    int st = pk_pop(P, &state);
    if (!st) st = pk_peek(P, &target);
    if (st) return st;
    if (target->kind != PK_REDUCE && target->kind != PK_NEWOBJ && target->kind != PK_PERSID)
        return pk_fail(P, SCK_ERR_FORMAT, "cannot set the state of a %s", pk_kind_name(target->kind));
    if ((st = pk_check_modifiable(P, target)) || (st = pk_adopt(P, target, state))) return st;
    target->state = state;
    return SCK_OK;
}

static int op_stack_global(pk_parser *P) {
    pk_obj *mod, *name;
    int st = pk_pop(P, &name);
    if (!st) st = pk_pop(P, &mod);
    if (st) return st;
    if (mod->kind != PK_STR || name->kind != PK_STR) return pk_fail(P, SCK_ERR_FORMAT, "module and name must be str");
    return pk_push_global(P, (const uint8_t *)mod->s, mod->len, (const uint8_t *)name->s, name->len);
}

static int op_newobj_ex(pk_parser *P) {
    pk_obj *cls, *args, *kwargs;
    int st = pk_pop(P, &kwargs);
    if (!st) st = pk_pop(P, &args);
    if (!st) st = pk_pop(P, &cls);
    if (st) return st;
    if (kwargs->kind != PK_DICT) return pk_fail(P, SCK_ERR_FORMAT, "keyword arguments are a %s, not a dict",
                                             pk_kind_name(kwargs->kind));
    if (kwargs->n) return pk_fail(P, SCK_ERR_UNSUPPORTED, "keyword arguments are not supported");
    return push_call(P, PK_NEWOBJ, cls, args);
}

static int op_tuple_n(pk_parser *P, size_t k) {
    if (P->sp - pk_frame_base(P) < k) return pk_fail(P, SCK_ERR_FORMAT, "stack underflow");
    return pk_collect(P, PK_TUPLE, P->sp - k);
}

static int op_stop(pk_parser *P, pk_obj **root) {
    if (P->nmarks) return pk_fail(P, SCK_ERR_FORMAT, "%zu MARKs still open", P->nmarks);
    if (P->sp == 0) return pk_fail(P, SCK_ERR_FORMAT, "empty stack");
    if (P->sp > 1) return pk_fail(P, SCK_ERR_FORMAT, "%zu extra items left on the stack", P->sp - 1);
    if (P->pos != P->n) return pk_fail(P, SCK_ERR_FORMAT, "%zu bytes of trailing data", P->n - P->pos);
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
        if ((st = pk_need(P, 1))) return st;
        if (P->p[P->pos] > 5) return pk_fail(P, SCK_ERR_UNSUPPORTED, "protocol %u", (unsigned)P->p[P->pos]);
        P->pos++;
        return SCK_OK;
    case OP_FRAME: {
        if ((st = pk_need(P, 8))) return st;
        uint64_t flen = pk_read_le(P, 8);
        if (flen > P->n - P->pos)
            return pk_fail(P, SCK_ERR_FORMAT, "truncated: frame of %llu bytes, %zu left", (unsigned long long)flen,
                        P->n - P->pos);
        return SCK_OK;   /* frames only group opcodes; nothing to do */
    }
    case OP_STOP:
        *done = 1;
        return op_stop(P, root);
    case OP_MARK:
        if (P->nmarks >= P->lim.max_depth)
            return pk_fail(P, SCK_ERR_FORMAT, "MARKs nested deeper than %zu levels", P->lim.max_depth);
        if (P->nmarks == P->marks_cap) {
            size_t cap = P->marks_cap ? P->marks_cap * 2 : 16;
            size_t *m = realloc(P->marks, cap * sizeof *m);
            if (!m) return pk_nomem(P);
            P->marks = m;
            P->marks_cap = cap;
        }
        P->marks[P->nmarks++] = P->sp;
        return SCK_OK;
    case OP_POP:
        if (P->sp > pk_frame_base(P)) {
            P->sp--;
            return SCK_OK;
        }
        /* like Python, POP on an empty frame discards the MARK */
        if ((st = pk_pop_mark(P, &base))) return st;
        P->sp = base;
        return SCK_OK;
    case OP_POP_MARK:
        if ((st = pk_pop_mark(P, &base))) return st;
        P->sp = base;
        return SCK_OK;
    case OP_DUP:
        if ((st = pk_peek(P, &o))) return st;
        return pk_push(P, o);
    case OP_NONE: return pk_push_shared(P, &P->none, PK_NONE, 0);
    case OP_NEWTRUE: return pk_push_shared(P, &P->true_, PK_BOOL, 1);
    case OP_NEWFALSE: return pk_push_shared(P, &P->false_, PK_BOOL, 0);
    case OP_INT:
        if ((st = pk_read_line(P, &s, &len))) return st;
        if (len == 2 && s[0] == '0' && (s[1] == '0' || s[1] == '1'))   /* protocol 0 bools */
            return pk_push_shared(P, s[1] == '1' ? &P->true_ : &P->false_, PK_BOOL, s[1] == '1');
        if ((st = pk_text_int(P, s, len, &v)) == 2) return pk_push_text_bigint(P, s, len);
        if (st) return st;
        return pk_push_int(P, PK_INT, v);
    case OP_LONG:
        if ((st = pk_read_line(P, &s, &len))) return st;
        if (len && s[len - 1] == 'L') len--;
        if ((st = pk_text_int(P, s, len, &v)) == 2) return pk_push_text_bigint(P, s, len);
        if (st) return st;
        return pk_push_int(P, PK_INT, v);
    case OP_BININT:
        if ((st = pk_need(P, 4))) return st;
        {
            uint64_t u = pk_read_le(P, 4);   /* signed 32-bit */
            return pk_push_int(P, PK_INT, u >= 0x80000000u ? (int64_t)u - ((int64_t)1 << 32) : (int64_t)u);
        }
    case OP_BININT1:
        if ((st = pk_need(P, 1))) return st;
        return pk_push_int(P, PK_INT, (int64_t)pk_read_le(P, 1));
    case OP_BININT2:
        if ((st = pk_need(P, 2))) return st;
        return pk_push_int(P, PK_INT, (int64_t)pk_read_le(P, 2));
    case OP_LONG1:
    case OP_LONG4: {
        size_t lk = P->op == OP_LONG1 ? 1 : 4;
        if ((st = pk_need(P, lk))) return st;
        uint64_t nb = pk_read_le(P, lk);
        if (lk == 4 && nb >= 0x80000000u) return pk_fail(P, SCK_ERR_FORMAT, "negative length");
        if ((st = pk_need(P, nb))) return st;
        s = P->p + P->pos;
        P->pos += (size_t)nb;
        if (pk_decode_long(s, (size_t)nb, &v) == 2) {
            pk_obj *big;
            st = pk_new_blob(P, PK_BIGINT, s, (size_t)nb, &big);
            return st ? st : pk_push(P, big);
        }
        return pk_push_int(P, PK_INT, v);
    }
    case OP_BINFLOAT: {
        if ((st = pk_need(P, 8))) return st;
        uint64_t bits = 0;
        for (int i = 0; i < 8; i++) bits = (bits << 8) | P->p[P->pos + (size_t)i];   /* big-endian */
        P->pos += 8;
        double d;
        memcpy(&d, &bits, sizeof d);
        return pk_push_float(P, d);
    }
    case OP_FLOAT:
        if ((st = pk_read_line(P, &s, &len))) return st;
        return pk_text_float(P, s, len);
    case OP_STRING:
        if ((st = pk_read_line(P, &s, &len))) return st;
        return pk_push_quoted(P, s, len);
    case OP_BINSTRING: {
        if ((st = pk_need(P, 4))) return st;
        uint64_t n4 = pk_read_le(P, 4);
        if (n4 >= 0x80000000u) return pk_fail(P, SCK_ERR_FORMAT, "negative length");
        return pk_push_counted(P, PK_STR, n4, 0);
    }
    case OP_SHORT_BINSTRING:
    case OP_SHORT_BINBYTES:
    case OP_SHORT_BINUNICODE:
        if ((st = pk_need(P, 1))) return st;
        return pk_push_counted(P, P->op == OP_SHORT_BINBYTES ? PK_BYTES : PK_STR, pk_read_le(P, 1),
                            P->op == OP_SHORT_BINUNICODE);
    case OP_BINUNICODE:
    case OP_BINBYTES:
        if ((st = pk_need(P, 4))) return st;
        return pk_push_counted(P, P->op == OP_BINBYTES ? PK_BYTES : PK_STR, pk_read_le(P, 4), P->op == OP_BINUNICODE);
    case OP_BINUNICODE8:
    case OP_BINBYTES8:
    case OP_BYTEARRAY8:
        if ((st = pk_need(P, 8))) return st;
        return pk_push_counted(P, P->op == OP_BINUNICODE8 ? PK_STR : PK_BYTES, pk_read_le(P, 8),
                            P->op == OP_BINUNICODE8);
    case OP_UNICODE:
        if ((st = pk_read_line(P, &s, &len))) return st;
        return pk_push_raw_unicode(P, s, len);
    case OP_EMPTY_TUPLE: return op_tuple_n(P, 0);
    case OP_TUPLE1: return op_tuple_n(P, 1);
    case OP_TUPLE2: return op_tuple_n(P, 2);
    case OP_TUPLE3: return op_tuple_n(P, 3);
    case OP_TUPLE:
        if ((st = pk_pop_mark(P, &base))) return st;
        return pk_collect(P, PK_TUPLE, base);
    case OP_EMPTY_LIST: return pk_collect(P, PK_LIST, P->sp);
    case OP_LIST:
        if ((st = pk_pop_mark(P, &base))) return st;
        return pk_collect(P, PK_LIST, base);
    case OP_EMPTY_DICT: return pk_collect(P, PK_DICT, P->sp);
    case OP_DICT:
        if ((st = pk_pop_mark(P, &base))) return st;
        return pk_collect(P, PK_DICT, base);
    case OP_EMPTY_SET: return pk_collect(P, PK_SET, P->sp);
    case OP_FROZENSET:
        if ((st = pk_pop_mark(P, &base))) return st;
        return pk_collect(P, PK_SET, base);
    case OP_APPEND:
        if ((st = pk_pop(P, &o)) || (st = pk_peek(P, &o2))) return st;
        return op_list_items(P, o2, &o, 1);
    case OP_SETITEM: {
        pk_obj *kv[2];
        if ((st = pk_pop(P, &kv[1])) || (st = pk_pop(P, &kv[0])) || (st = pk_peek(P, &o2))) return st;
        return op_dict_items(P, o2, kv, 2);
    }
    case OP_APPENDS:
    case OP_SETITEMS:
    case OP_ADDITEMS:
        return op_mark_items(P);
    case OP_GLOBAL:
        if ((st = pk_read_line(P, &s, &len)) || (st = pk_read_line(P, &s2, &len2))) return st;
        return pk_push_global(P, s, len, s2, len2);
    case OP_STACK_GLOBAL: return op_stack_global(P);
    case OP_REDUCE:
    case OP_NEWOBJ:
        if ((st = pk_pop(P, &o2)) || (st = pk_pop(P, &o))) return st;
        return push_call(P, P->op == OP_REDUCE ? PK_REDUCE : PK_NEWOBJ, o, o2);
    case OP_NEWOBJ_EX: return op_newobj_ex(P);
    case OP_BUILD: return op_build(P);
    case OP_BINPERSID:
        if ((st = pk_pop(P, &o2)) || (st = pk_new_obj(P, PK_PERSID, &o)) || (st = pk_adopt(P, o, o2))) return st;
        o->a = o2;
        return pk_push(P, o);
    case OP_PERSID:
        if ((st = pk_read_line(P, &s, &len))) return st;
        for (size_t i = 0; i < len; i++)
            if (s[i] >= 0x80) return pk_fail(P, SCK_ERR_FORMAT, "persistent id is not ASCII");
        if ((st = pk_new_blob(P, PK_STR, s, len, &o2)) || (st = pk_new_obj(P, PK_PERSID, &o)) || (st = pk_adopt(P, o, o2)))
            return st;
        o->a = o2;
        return pk_push(P, o);
    case OP_PUT:
        if ((st = pk_read_line(P, &s, &len)) || (st = pk_memo_index(P, s, len, &v))) return st;
        return pk_memo_put(P, v);
    case OP_BINPUT:
        if ((st = pk_need(P, 1))) return st;
        return pk_memo_put(P, (int64_t)pk_read_le(P, 1));
    case OP_LONG_BINPUT:
        if ((st = pk_need(P, 4))) return st;
        return pk_memo_put(P, (int64_t)pk_read_le(P, 4));
    case OP_MEMOIZE: return pk_memo_put(P, (int64_t)P->memo_count);
    case OP_GET:
        if ((st = pk_read_line(P, &s, &len)) || (st = pk_memo_index(P, s, len, &v))) return st;
        return pk_memo_push(P, v);
    case OP_BINGET:
        if ((st = pk_need(P, 1))) return st;
        return pk_memo_push(P, (int64_t)pk_read_le(P, 1));
    case OP_LONG_BINGET:
        if ((st = pk_need(P, 4))) return st;
        return pk_memo_push(P, (int64_t)pk_read_le(P, 4));
    case OP_INST:
    case OP_OBJ:
    case OP_EXT1:
    case OP_EXT2:
    case OP_EXT4:
    case OP_NEXT_BUFFER:
    case OP_READONLY_BUFFER:
        return pk_fail(P, SCK_ERR_UNSUPPORTED, "opcode not supported");
    default:
        return pk_fail(P, SCK_ERR_FORMAT, "unknown opcode");
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
            st = pk_fail(&P, SCK_ERR_FORMAT, "truncated: no STOP opcode");
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
