/* test_pickle_read.c - the pickle reader against pickles made by CPython 3.11 (tests/pickle_golden.h),
 * hand-built opcodes, its allow-list, and hostile input (misuse, limits, truncations, mutations). */
#include "harness.h"
#include "format/pickle.h"
#include "pickle_golden.h"
#include "pickle_helpers.h"

#include <math.h>
#include <stdlib.h>

/* ---- golden pickles from CPython ---- */

static void check_common(const pk_obj *r) {
    static const char *keys[] = {"a", "b", "t", "f", "fl", "neg", "big", "nbig", "max", "min",
                                 "s", "esc", "p", "q", "d", "e", "t5", "ints"};
    REQUIRE(is_seq(r, PK_DICT, 18));
    for (size_t i = 0; i < 18; i++) CHECK(is_str(r->items[2 * i], keys[i]));
    const pk_obj *a = pk_dict_get(r, "a");
    REQUIRE(is_seq(a, PK_LIST, 3));
    CHECK(is_int(at(a, 0), 1) && is_int(at(a, 1), 2));
    CHECK(is_seq(at(a, 2), PK_TUPLE, 2) && is_int(at(at(a, 2), 0), 3) && is_str(at(at(a, 2), 1), "x"));
    CHECK(is_none(pk_dict_get(r, "b")));
    CHECK(is_bool(pk_dict_get(r, "t"), 1));
    CHECK(is_bool(pk_dict_get(r, "f"), 0));
    CHECK(is_float(pk_dict_get(r, "fl"), 1.5));
    CHECK(is_int(pk_dict_get(r, "neg"), -7));
    CHECK(is_int(pk_dict_get(r, "big"), (int64_t)1 << 40));
    CHECK(is_int(pk_dict_get(r, "nbig"), -((int64_t)1 << 40)));
    CHECK(is_int(pk_dict_get(r, "max"), INT64_MAX));
    CHECK(is_int(pk_dict_get(r, "min"), INT64_MIN));
    CHECK(is_str(pk_dict_get(r, "s"), "h\xc3\xa9llo \xe2\x82\xac\xf0\x9f\x98\x80"));
    CHECK(is_str(pk_dict_get(r, "esc"), "a\\b\nc"));
    const pk_obj *p = pk_dict_get(r, "p");
    CHECK(p == pk_dict_get(r, "q"));   /* the memo shares one node */
    CHECK(is_ints(p, PK_LIST, 2, (const int64_t[]){1, 2}));
    const pk_obj *z = pk_dict_get(pk_dict_get(pk_dict_get(r, "d"), "k"), "z");
    CHECK(is_seq(z, PK_LIST, 0));
    CHECK(is_seq(pk_dict_get(r, "e"), PK_TUPLE, 0));
    CHECK(is_ints(pk_dict_get(r, "t5"), PK_TUPLE, 5, (const int64_t[]){1, 2, 3, 4, 5}));
    CHECK(is_ints(pk_dict_get(r, "ints"), PK_LIST, 7,
                  (const int64_t[]){255, 256, 65535, 65536, -1, (int64_t)1 << 31, -((int64_t)1 << 31) - 1}));
}

TEST(golden_common_all_protocols) {
    const uint8_t *bufs[] = {g_common_p0, g_common_p1, g_common_p2, g_common_p3, g_common_p4, g_common_p5};
    size_t lens[] = {sizeof g_common_p0, sizeof g_common_p1, sizeof g_common_p2,
                     sizeof g_common_p3, sizeof g_common_p4, sizeof g_common_p5};
    for (int p = 0; p < 6; p++) {
        pk_arena *a;
        pk_obj *r;
        REQUIRE_OK(parse(bufs[p], lens[p], &a, &r));
        check_common(r);
        pk_arena_free(a);
    }
}

static void check_misc(const pk_obj *r, int proto) {
    REQUIRE(is_seq(r, PK_DICT, 6));
    const pk_obj *by = pk_dict_get(r, "by");
    if (proto < 3) {   /* bytes pickle as _codecs.encode(latin-1 text, 'latin1') */
        REQUIRE(by && by->kind == PK_REDUCE);
        CHECK(pk_is_global(by->a, "_codecs", "encode"));
        CHECK(is_seq(by->b, PK_TUPLE, 2) && is_blob(at(by->b, 0), PK_STR, "\0\xc3\xbf" "ab", 5) &&
              is_str(at(by->b, 1), "latin1"));
    } else {
        CHECK(is_blob(by, PK_BYTES, "\0\xff" "ab", 4));
    }
    const pk_obj *st = pk_dict_get(r, "st"), *fs = pk_dict_get(r, "fs");
    if (proto < 4) {   /* sets pickle as set([...]) */
        const char *bmod = proto < 3 ? "__builtin__" : "builtins";
        REQUIRE(st && st->kind == PK_REDUCE && fs && fs->kind == PK_REDUCE);
        CHECK(pk_is_global(st->a, bmod, "set") && pk_is_global(fs->a, bmod, "frozenset"));
        CHECK(is_seq(st->b, PK_TUPLE, 1) && is_ints(at(st->b, 0), PK_LIST, 3, (const int64_t[]){1, 2, 3}));
        CHECK(is_seq(fs->b, PK_TUPLE, 1) && is_ints(at(fs->b, 0), PK_LIST, 1, (const int64_t[]){4}));
    } else {
        CHECK(is_ints(st, PK_SET, 3, (const int64_t[]){1, 2, 3}));
        CHECK(is_ints(fs, PK_SET, 1, (const int64_t[]){4}));
    }
    const pk_obj *od = pk_dict_get(r, "od");   /* OrderedDict: REDUCE, then SETITEM(S) onto it */
    REQUIRE(od && od->kind == PK_REDUCE);
    CHECK(pk_is_global(od->a, "collections", "OrderedDict") && is_seq(od->b, PK_TUPLE, 0));
    CHECK(od->n == 2 && is_str(od->items[0], "a") && is_str(od->items[2], "b"));
    CHECK(is_int(pk_dict_get(od, "a"), 1));
    CHECK(is_ints(pk_dict_get(od, "b"), PK_LIST, 1, (const int64_t[]){2}));
    CHECK(od->state == NULL);
    const pk_obj *pt = pk_dict_get(r, "pt");   /* custom __reduce__ */
    REQUIRE(pt && pt->kind == PK_REDUCE);
    CHECK(pk_is_global(pt->a, "fakemod", "make_point"));
    CHECK(is_seq(pt->b, PK_TUPLE, 3) && is_int(at(pt->b, 0), 1) && is_float(at(pt->b, 1), 2.5) &&
          is_str(at(pt->b, 2), "p"));
    const pk_obj *rec = pk_dict_get(r, "rec");   /* default reduce: NEWOBJ (copyreg reconstructor < 2) */
    REQUIRE(rec);
    if (proto < 2) {
        REQUIRE(rec->kind == PK_REDUCE);
        CHECK(pk_is_global(rec->a, "copy_reg", "_reconstructor"));
        CHECK(is_seq(rec->b, PK_TUPLE, 3) && pk_is_global(at(rec->b, 0), "fakemod", "Rec") &&
              pk_is_global(at(rec->b, 1), "__builtin__", "object") && is_none(at(rec->b, 2)));
    } else {
        REQUIRE(rec->kind == PK_NEWOBJ);
        CHECK(pk_is_global(rec->a, "fakemod", "Rec") && is_seq(rec->b, PK_TUPLE, 0));
    }
    CHECK(is_seq(rec->state, PK_DICT, 2) && is_int(pk_dict_get(rec->state, "x"), 1) &&
          is_str(pk_dict_get(rec->state, "name"), "r"));
}

TEST(golden_misc_reduce_newobj_sets_bytes) {
    const uint8_t *bufs[] = {g_misc_p0, g_misc_p2, g_misc_p3, g_misc_p4};
    size_t lens[] = {sizeof g_misc_p0, sizeof g_misc_p2, sizeof g_misc_p3, sizeof g_misc_p4};
    int protos[] = {0, 2, 3, 4};
    for (int i = 0; i < 4; i++) {
        pk_arena *a;
        pk_obj *r;
        REQUIRE_OK(parse(bufs[i], lens[i], &a, &r));
        check_misc(r, protos[i]);
        pk_arena_free(a);
    }
}

TEST(golden_proto5_bytearray_and_binbytes) {
    pk_arena *a;
    pk_obj *r;
    REQUIRE_OK(parse(g_misc5, sizeof g_misc5, &a, &r));
    REQUIRE(is_seq(r, PK_LIST, 2));
    CHECK(is_blob(at(r, 0), PK_BYTES, "xyz", 3));
    const pk_obj *q = at(r, 1);
    CHECK(q && q->kind == PK_BYTES && q->len == 256 && q->s[0] == 'q' && q->s[255] == 'q' && q->s[256] == 0);
    pk_arena_free(a);
}

TEST(golden_persistent_ids) {
    pk_arena *a;
    pk_obj *r;
    REQUIRE_OK(parse(g_pid_p2, sizeof g_pid_p2, &a, &r));   /* BINPERSID, pid tuple shared by BINGET */
    REQUIRE(is_seq(r, PK_LIST, 3));
    const pk_obj *p0 = at(r, 0), *p1 = at(r, 1);
    REQUIRE(p0 && p0->kind == PK_PERSID && p1 && p1->kind == PK_PERSID);
    CHECK(is_seq(p0->a, PK_TUPLE, 3) && is_str(at(p0->a, 0), "storage") && is_str(at(p0->a, 1), "k0") &&
          is_int(at(p0->a, 2), 3));
    CHECK(p0->a == p1->a);
    CHECK(is_int(at(r, 2), 7));
    pk_arena_free(a);

    REQUIRE_OK(parse(g_pid_p0, sizeof g_pid_p0, &a, &r));   /* text PERSID */
    REQUIRE(is_seq(r, PK_LIST, 3));
    CHECK(at(r, 0)->kind == PK_PERSID && is_str(at(r, 0)->a, "abc"));
    CHECK(at(r, 1)->kind == PK_PERSID && is_str(at(r, 1)->a, "abc"));
    pk_arena_free(a);
}

TEST(golden_unsupported_kwargs_bigint_recursion) {
    CHECK_ERR(parse_only(g_kw_p4, sizeof g_kw_p4), SCK_ERR_UNSUPPORTED, "NEWOBJ_EX at offset 41: keyword arguments");
    /* ints beyond int64 (Python writes 2**64 as a 9-byte LONG1 or, protocol 0, as text) are PK_BIGINT */
    pk_arena *a;
    pk_obj *r;
    static const uint8_t two64[9] = {0, 0, 0, 0, 0, 0, 0, 0, 1};
    const uint8_t *gold[2] = {g_big_p2, g_big_p0};
    size_t golden_n[2] = {sizeof g_big_p2, sizeof g_big_p0};
    for (int k = 0; k < 2; k++) {
        REQUIRE_OK(parse(gold[k], golden_n[k], &a, &r));
        const pk_obj *big = r->kind == PK_BIGINT ? r : r->kind == PK_LIST && r->n ? at(r, 0) : NULL;
        CHECK(big && big->kind == PK_BIGINT && big->len == 9 && !memcmp(big->s, two64, 9));
        pk_arena_free(a);
    }
    CHECK_ERR(parse_only(g_recursive_p2, sizeof g_recursive_p2), SCK_ERR_UNSUPPORTED, "recursive");
    /* a list stored in a tuple, then appended to: refused rather than risk a cycle */
    CHECK_ERR(parse_only(LIT("]\x94\x85h\x00Na.")), SCK_ERR_UNSUPPORTED, "APPEND at offset 6: modifies a list already");
}

/* ---- protocol-0 text opcodes and rarer binary ones, hand-built ---- */

TEST(text_opcodes) {
    pk_arena *a;
    pk_obj *r;
#define ONE(lit, cond) do { REQUIRE_OK(parse(LIT(lit), &a, &r)); CHECK(cond); pk_arena_free(a); } while (0)
    ONE("I01\n.", is_bool(r, 1));
    ONE("I00\n.", is_bool(r, 0));
    ONE("I-12\n.", is_int(r, -12));
    ONE("I+7\n.", is_int(r, 7));
    ONE("L123L\n.", is_int(r, 123));
    ONE("L-9223372036854775808L\n.", is_int(r, INT64_MIN));
    ONE("F-2.5\n.", is_float(r, -2.5));
    ONE("S'a\\'b\\n\\x41\\101\\q'\n.", is_str(r, "a'b\nAA\\q"));
    ONE("S\"q\"\n.", is_str(r, "q"));
    ONE("Vcaf\xe9 \\u20ac\\U0001F600\\x\n.", is_str(r, "caf\xc3\xa9 \xe2\x82\xac\xf0\x9f\x98\x80\\x"));
    ONE("Pabc\n.", r->kind == PK_PERSID && is_str(r->a, "abc"));
    ONE("(I1\nI2\nl.", is_ints(r, PK_LIST, 2, (const int64_t[]){1, 2}));
    ONE("(S'k'\nI1\nd.", is_seq(r, PK_DICT, 1) && is_int(pk_dict_get(r, "k"), 1));
    ONE("cmod\nname\n.", pk_is_global(r, "mod", "name") && is_blob(r, PK_GLOBAL, "mod", 3));
#undef ONE
    CHECK_ERR(parse_only(LIT("I1x\n.")), SCK_ERR_FORMAT, "INT at offset 0: malformed integer \"1x\"");
    REQUIRE_OK(parse(LIT("I-99999999999999999999\n."), &a, &r));   /* -(10**20 - 1), as Python encodes it */
    CHECK(r->kind == PK_BIGINT && r->len == 9 && !memcmp(r->s, "\x01\x00\xf0\x9c\xd2\xa1\x38\x94\xfa", 9));
    pk_arena_free(a);
    char huge[PK_BIGINT_DIGITS + 8];
    huge[0] = 'I';
    memset(huge + 1, '9', PK_BIGINT_DIGITS + 2);
    memcpy(huge + PK_BIGINT_DIGITS + 3, "\n.", 2);
    CHECK_ERR(parse_only((const uint8_t *)huge, PK_BIGINT_DIGITS + 5), SCK_ERR_UNSUPPORTED, "digits");
    CHECK_ERR(parse_only(LIT("F1.5x\n.")), SCK_ERR_FORMAT, "malformed float");
    CHECK_ERR(parse_only(LIT("Sabc\n.")), SCK_ERR_FORMAT, "STRING at offset 0: argument is not quoted");
    CHECK_ERR(parse_only(LIT("S'a\\x4'\n.")), SCK_ERR_FORMAT, "bad \\x escape");
    CHECK_ERR(parse_only(LIT("V\\u12\n.")), SCK_ERR_FORMAT, "truncated \\u escape");
    CHECK_ERR(parse_only(LIT("V\\U00110000\n.")), SCK_ERR_FORMAT, "out of range");
    CHECK_ERR(parse_only(LIT("P\xff\n.")), SCK_ERR_FORMAT, "not ASCII");
}

TEST(binary_opcodes) {
    pk_arena *a;
    pk_obj *r;
#define ONE(lit, cond) do { REQUIRE_OK(parse(LIT(lit), &a, &r)); CHECK(cond); pk_arena_free(a); } while (0)
    ONE("U\x03" "abc.", is_str(r, "abc"));                        /* SHORT_BINSTRING */
    ONE("T\x03\0\0\0abc.", is_str(r, "abc"));                    /* BINSTRING */
    ONE("J\xfe\xff\xff\xff.", is_int(r, -2));                    /* BININT */
    ONE("M\x01\x02.", is_int(r, 0x0201));                        /* BININT2 */
    ONE("\x8a\x00.", is_int(r, 0));                              /* LONG1, no bytes */
    ONE("\x8a\x01\xff.", is_int(r, -1));
    ONE("\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\xff.", is_int(r, -1));   /* redundant sign byte */
    ONE("\x8b\x02\0\0\0\0\x01.", is_int(r, 256));               /* LONG4 */
    ONE("G\xc0\x04\0\0\0\0\0\0.", is_float(r, -2.5));            /* BINFLOAT, big-endian */
    ONE("\x8d\x02\0\0\0\0\0\0\0hi.", is_str(r, "hi"));           /* BINUNICODE8 */
    ONE("\x8e\x02\0\0\0\0\0\0\0h\0.", is_blob(r, PK_BYTES, "h\0", 2));   /* BINBYTES8 */
    ONE("\x96\x01\0\0\0\0\0\0\0z.", is_blob(r, PK_BYTES, "z", 1));       /* BYTEARRAY8 */
    ONE("B\x02\0\0\0ab.", is_blob(r, PK_BYTES, "ab", 2));        /* BINBYTES */
    ONE("(K\x01K\x02" "1K\x03" "2\x86.", is_ints(r, PK_TUPLE, 2, (const int64_t[]){3, 3}) && at(r, 0) == at(r, 1));
    ONE("(0K\x05.", is_int(r, 5));                               /* POP on an empty frame drops the MARK */
    ONE("]p7\n0g7\n.", is_seq(r, PK_LIST, 0));                   /* PUT / GET */
    ONE("]r\xff\xff\xff\xff" "0j\xff\xff\xff\xff.", is_seq(r, PK_LIST, 0));   /* LONG_BINPUT / LONG_BINGET */
    ONE("]q\x09" "0h\x09.", is_seq(r, PK_LIST, 0));              /* BINPUT / BINGET */
    ONE("\x80\x04\x95\x01\0\0\0\0\0\0\0N.", is_none(r));         /* FRAME header skipped */
    ONE("\x8c\x01m\x8c\x01" "C\x93K\x01\x85}\x92.",              /* NEWOBJ_EX, empty kwargs */
        r->kind == PK_NEWOBJ && pk_is_global(r->a, "m", "C") && is_ints(r->b, PK_TUPLE, 1, (const int64_t[]){1}));
    ONE("cm\nC\n)\x81}(U\x01xK\x01ub.",                          /* BUILD records the state */
        r->kind == PK_NEWOBJ && is_int(pk_dict_get(r->state, "x"), 1));
    ONE("cm\nC\n)R\x8c\x01kK\x02s.",                             /* SETITEM onto a REDUCE (OrderedDict) */
        r->kind == PK_REDUCE && is_int(pk_dict_get(r, "k"), 2));
    ONE("}(\x8c\x01" "aK\x01\x8c\x01" "aK\x02u.",                /* duplicate keys: last wins */
        r->n == 2 && is_int(pk_dict_get(r, "a"), 2));
    ONE("\x8f(K\x01K\x02\x90.", is_ints(r, PK_SET, 2, (const int64_t[]){1, 2}));
    ONE("(K\x01\x91.", is_ints(r, PK_SET, 1, (const int64_t[]){1}));
    ONE("N\x85\x85\x85.", is_seq(r, PK_TUPLE, 1) && is_seq(at(at(r, 0), 0), PK_TUPLE, 1));
#undef ONE
    CHECK_ERR(parse_only(LIT("\x80\x06N.")), SCK_ERR_UNSUPPORTED, "PROTO at offset 0: protocol 6");
    CHECK_ERR(parse_only(LIT("(imod\nC\n.")), SCK_ERR_UNSUPPORTED, "INST at offset 1: opcode not supported");
    CHECK_ERR(parse_only(LIT("\x97.")), SCK_ERR_UNSUPPORTED, "NEXT_BUFFER");
    CHECK_ERR(parse_only(LIT("X\x01\0\0\0\xff.")), SCK_ERR_FORMAT, "BINUNICODE at offset 0: string of 1 bytes is not valid UTF-8");
    CHECK_ERR(parse_only(LIT("\x8c\x02\xc0\x80.")), SCK_ERR_FORMAT, "not valid UTF-8");   /* overlong */
    CHECK_ERR(parse_only(LIT("T\xff\xff\xff\xff" "abc.")), SCK_ERR_FORMAT, "BINSTRING at offset 0: negative length");
    {
        REQUIRE_OK(parse(LIT("\x8a\x09\0\0\0\0\0\0\0\x80\0."), &a, &r));   /* 2**63 */
        CHECK(r->kind == PK_BIGINT && r->len == 9);
        char dec[40];
        CHECK(pk_long_to_decimal((const uint8_t *)r->s, r->len, dec) == 19 && !strcmp(dec, "9223372036854775808"));
        pk_arena_free(a);
        REQUIRE_OK(parse(LIT("\x8a\x09\0\0\0\0\0\0\0\0\xff."), &a, &r));   /* -(2**64) */
        CHECK(r->kind == PK_BIGINT && pk_long_to_decimal((const uint8_t *)r->s, r->len, dec) &&
              !strcmp(dec, "-18446744073709551616"));
        uint8_t le[32];
        CHECK(pk_decimal_to_long(dec, strlen(dec), le) == 9 && !memcmp(le, r->s, 9));
        pk_arena_free(a);
    }
    CHECK_ERR(parse_only(LIT("\x8c\x01m\x8c\x01" "C\x93K\x01\x85N\x92.")), SCK_ERR_FORMAT,
              "NEWOBJ_EX at offset 11: keyword arguments are a none, not a dict");
}

TEST(lookups) {
    pk_arena *a;
    pk_obj *r;
    REQUIRE_OK(parse(g_misc_p4, sizeof g_misc_p4, &a, &r));
    const pk_obj *rec = pk_dict_get(r, "rec");
    CHECK(pk_is_global(rec->a, NULL, "Rec"));
    CHECK(pk_is_global(rec->a, "fakemod", "Rec"));
    CHECK(!pk_is_global(rec->a, "fakemodx", "Rec"));
    CHECK(!pk_is_global(rec->a, NULL, "Re"));
    CHECK(!pk_is_global(rec, NULL, "Rec"));           /* wrong kind */
    CHECK(!pk_is_global(NULL, NULL, "Rec"));
    CHECK(pk_dict_get(r, "missing") == NULL);
    CHECK(pk_dict_get(r, "re") == NULL);               /* no prefix matches */
    CHECK(pk_dict_get(pk_dict_get(r, "st"), "x") == NULL);   /* a set is not a dict */
    CHECK(pk_dict_get(NULL, "x") == NULL);
    CHECK(strcmp(pk_kind_name(PK_PERSID), "persistent id") == 0 && strcmp(pk_kind_name(PK_DICT), "dict") == 0);
    pk_arena_free(a);
    pk_arena_free(NULL);
}

/* ---- allow-list ---- */

typedef struct {
    char seen[8][64];
    int n;
} seen_globals;

static int record_reject(void *ctx, const char *module, const char *name) {
    seen_globals *s = ctx;
    if (s->n < 8) snprintf(s->seen[s->n++], 64, "%s|%s", module, name);
    return 0;
}

TEST(allow_list_rejects_dangerous_globals) {
    static const char *const safe[] = {"collections.OrderedDict", "fakemod.make_point", "fakemod.Rec",
                                       "builtins.set", "builtins.frozenset", NULL};
    pk_arena *a;
    pk_obj *r;
    CHECK_ERR(pk_parse(g_os_system_p0, sizeof g_os_system_p0, "m.pkl", allow_listed, (void *)safe, NULL, &a, &r),
              SCK_ERR_UNSUPPORTED, "m.pkl: GLOBAL at offset 0: global posix.system is not allowed");
    CHECK(a == NULL && r == NULL);
    CHECK_ERR(pk_parse(g_os_system_p4, sizeof g_os_system_p4, "m.pkl", allow_listed, (void *)safe, NULL, &a, &r),
              SCK_ERR_UNSUPPORTED, "STACK_GLOBAL at offset 28: global posix.system is not allowed");
    CHECK_ERR(pk_parse(g_eval_p4, sizeof g_eval_p4, "m.pkl", allow_listed, (void *)safe, NULL, &a, &r),
              SCK_ERR_UNSUPPORTED, "global builtins.eval is not allowed");
    /* hand-written os.system, both forms */
    CHECK_ERR(pk_parse(LIT("cos\nsystem\n(S'id'\ntR."), "m.pkl", allow_listed, (void *)safe, NULL, &a, &r),
              SCK_ERR_UNSUPPORTED, "GLOBAL at offset 0: global os.system is not allowed");
    CHECK_ERR(pk_parse(LIT("\x80\x04\x8c\x02os\x8c\x06system\x93\x8c\x02id\x85R."), "m.pkl", allow_listed,
                       (void *)safe, NULL, &a, &r),
              SCK_ERR_UNSUPPORTED, "STACK_GLOBAL at offset 14: global os.system is not allowed");
    /* the allow-listed names are enough for a real pickle, and the callback sees exact names */
    REQUIRE_OK(pk_parse(g_misc_p4, sizeof g_misc_p4, "m.pkl", allow_listed, (void *)safe, NULL, &a, &r));
    pk_arena_free(a);
    seen_globals seen = {.n = 0};
    CHECK_ERR(pk_parse(g_misc_p4, sizeof g_misc_p4, "m.pkl", record_reject, &seen, NULL, &a, &r),
              SCK_ERR_UNSUPPORTED, "global collections.OrderedDict is not allowed");
    CHECK(seen.n == 1 && strcmp(seen.seen[0], "collections|OrderedDict") == 0);
    /* a NULL callback rejects every global */
    CHECK_ERR(pk_parse(g_misc_p4, sizeof g_misc_p4, "m.pkl", NULL, NULL, NULL, &a, &r), SCK_ERR_UNSUPPORTED,
              "collections.OrderedDict");
    /* names must be non-empty, NUL-free and UTF-8 */
    CHECK_ERR(parse_only(LIT("c\nx\n.")), SCK_ERR_FORMAT, "malformed module or attribute name");
    CHECK_ERR(parse_only(LIT("\x8c\x02o\0\x8c\x01x\x93.")), SCK_ERR_FORMAT, "malformed module");
    CHECK_ERR(parse_only(LIT("K\x01K\x02\x93.")), SCK_ERR_FORMAT, "module and name must be str");
}

/* ---- hostile input ---- */

TEST(stack_and_mark_misuse) {
    CHECK_ERR(parse_only(LIT("a.")), SCK_ERR_FORMAT, "t.pkl: APPEND at offset 0: stack underflow");
    CHECK_ERR(parse_only(LIT("K\x01(\x85.")), SCK_ERR_FORMAT, "TUPLE1 at offset 3: stack underflow");
    CHECK_ERR(parse_only(LIT("]K\x01(a.")), SCK_ERR_FORMAT, "APPEND at offset 4: stack underflow");
    CHECK_ERR(parse_only(LIT("NK\x01" "a.")), SCK_ERR_FORMAT, "APPEND at offset 3: target is a none, not a list");
    CHECK_ERR(parse_only(LIT("N(K\x01" "e.")), SCK_ERR_FORMAT, "target is a none, not a list");
    CHECK_ERR(parse_only(LIT("cm\nC\n)R(K\x01" "e.")), SCK_ERR_UNSUPPORTED, "list subclasses");
    CHECK_ERR(parse_only(LIT("]K\x01K\x02s.")), SCK_ERR_FORMAT, "SETITEM at offset 5: target is a list, not a dict");
    CHECK_ERR(parse_only(LIT("}(K\x01u.")), SCK_ERR_FORMAT, "SETITEMS at offset 4: odd number of items (1)");
    CHECK_ERR(parse_only(LIT("(K\x01K\x02K\x03" "d.")), SCK_ERR_FORMAT, "DICT at offset 7: odd number of items (3)");
    CHECK_ERR(parse_only(LIT("](K\x01\x90.")), SCK_ERR_FORMAT, "ADDITEMS at offset 4: target is a list, not a set");
    CHECK_ERR(parse_only(LIT("b.")), SCK_ERR_FORMAT, "BUILD at offset 0: stack underflow");
    CHECK_ERR(parse_only(LIT("}b.")), SCK_ERR_FORMAT, "BUILD at offset 1: stack underflow");
    CHECK_ERR(parse_only(LIT("K\x01}b.")), SCK_ERR_FORMAT, "BUILD at offset 3: cannot set the state of a int");
    CHECK_ERR(parse_only(LIT("t.")), SCK_ERR_FORMAT, "TUPLE at offset 0: no MARK on the stack");
    CHECK_ERR(parse_only(LIT("1.")), SCK_ERR_FORMAT, "POP_MARK at offset 0: no MARK");
    CHECK_ERR(parse_only(LIT("0.")), SCK_ERR_FORMAT, "POP at offset 0: no MARK");
    CHECK_ERR(parse_only(LIT("2.")), SCK_ERR_FORMAT, "DUP at offset 0: stack underflow");
    CHECK_ERR(parse_only(LIT("(N.")), SCK_ERR_FORMAT, "STOP at offset 2: 1 MARKs still open");
    CHECK_ERR(parse_only(LIT(".")), SCK_ERR_FORMAT, "STOP at offset 0: empty stack");
    CHECK_ERR(parse_only(LIT("NN.")), SCK_ERR_FORMAT, "STOP at offset 2: 1 extra items left on the stack");
    CHECK_ERR(parse_only(LIT("N.N")), SCK_ERR_FORMAT, "STOP at offset 1: 1 bytes of trailing data");
    CHECK_ERR(parse_only(LIT("N")), SCK_ERR_FORMAT, "t.pkl: end of data at offset 1: truncated: no STOP opcode");
    CHECK_ERR(parse_only(LIT("")), SCK_ERR_FORMAT, "end of data at offset 0");
    CHECK_ERR(parse_only(LIT("NN\x81.")), SCK_ERR_FORMAT, "NEWOBJ at offset 2: arguments are a none, not a tuple");
    CHECK_ERR(parse_only(LIT("\xff")), SCK_ERR_FORMAT, "t.pkl: opcode 0xff at offset 0: unknown opcode");
    CHECK_ERR(parse_only(LIT("\x80\x02N\x00.")), SCK_ERR_FORMAT, "opcode 0x00 at offset 3: unknown opcode");
}

TEST(memo_misuse) {
    CHECK_ERR(parse_only(LIT("h\x05.")), SCK_ERR_FORMAT, "BINGET at offset 0: memo index 5 not found");
    CHECK_ERR(parse_only(LIT("N\x94j\xff\xff\xff\xff.")), SCK_ERR_FORMAT, "LONG_BINGET at offset 2: memo index 4294967295 not found");
    CHECK_ERR(parse_only(LIT("g-3\n.")), SCK_ERR_FORMAT, "GET at offset 0: memo index -3 not found");
    CHECK_ERR(parse_only(LIT("g99999999999999999999\n.")), SCK_ERR_FORMAT, "GET at offset 0: memo index beyond 64 bits");
    CHECK_ERR(parse_only(LIT("p0\n.")), SCK_ERR_FORMAT, "PUT at offset 0: stack underflow");
    CHECK_ERR(parse_only(LIT("\x94.")), SCK_ERR_FORMAT, "MEMOIZE at offset 0: stack underflow");
    pk_limits lim = {.max_memo = 2};
    CHECK_ERR(parse_lim(LIT("N\x94\x94\x94."), &lim), SCK_ERR_FORMAT, "MEMOIZE at offset 3: more than 2 memo entries");
    CHECK_OK(parse_lim(LIT("N\x94\x94q\x01."), &lim));   /* overwriting an index is not a new entry */
    /* MEMOIZE numbers entries like len(memo); re-PUTting an index is not a new entry */
    {
        uint8_t b[128];
        size_t n = 0;
        memcpy(b + n, "Np100\n", 6), n += 6;        /* far index: kept in the hash table */
        memset(b + n, 0x94, 70), n += 70;            /* MEMOIZE as 1..70 */
        memcpy(b + n, "p100\n\x94", 6), n += 6;     /* index 100 again, then MEMOIZE as 71 */
        memcpy(b + n, "g100\n0h\x47" "0.", 10), n += 10;
        lim.max_memo = 72;
        CHECK_OK(parse_lim(b, n, &lim));
        memcpy(b + n - 1, "q\xc8.", 3);             /* a 73rd index */
        CHECK_ERR(parse_lim(b, n + 2, &lim), SCK_ERR_FORMAT, "BINPUT at offset 91: more than 72 memo entries");
    }
    /* sparse indices do not allocate up to the index */
    CHECK_OK(parse_only(LIT("Nr\xff\xff\xff\x7fr\0\0\0\x80j\xff\xff\xff\x7f" "0.")));
}

TEST(limits_objects_and_nesting) {
    pk_limits lim = {.max_objects = 3};
    CHECK_ERR(parse_lim(LIT("](K\x01K\x02K\x03" "e."), &lim), SCK_ERR_FORMAT, "BININT1 at offset 6: more than 3 objects");
    CHECK_OK(parse_lim(LIT("](K\x01K\x02" "e."), &lim));

    lim = (pk_limits){.max_depth = 4};
    CHECK_OK(parse_lim(LIT("N\x85\x85\x85\x85."), &lim));
    CHECK_ERR(parse_lim(LIT("N\x85\x85\x85\x85\x85."), &lim), SCK_ERR_FORMAT, "TUPLE1 at offset 5: objects nested deeper than 4 levels");
    CHECK_OK(parse_lim(LIT("((((NNNN1111N."), &lim));
    CHECK_ERR(parse_lim(LIT("(((((."), &lim), SCK_ERR_FORMAT, "MARK at offset 4: MARKs nested deeper than 4 levels");

    /* bombs with the default limit of 256 */
    size_t n = 100000;
    uint8_t *b = malloc(2 * n + 2);
    REQUIRE(b);
    memset(b, '(', n);
    CHECK_ERR(parse_only(b, n), SCK_ERR_FORMAT, "MARK at offset 256: MARKs nested deeper than 256 levels");
    b[0] = 'N';
    memset(b + 1, 0x85, n);   /* N, then TUPLE1 over and over */
    b[n + 1] = '.';
    CHECK_ERR(parse_only(b, n + 2), SCK_ERR_FORMAT, "TUPLE1 at offset 257: objects nested deeper than 256 levels");
    memset(b, ']', n);        /* n empty lists, then APPEND each into the one below */
    memset(b + n, 'a', n - 1);
    b[2 * n - 1] = '.';
    CHECK_ERR(parse_only(b, 2 * n), SCK_ERR_FORMAT, "objects nested deeper than 256 levels");
    memset(b, '}', n);        /* the same with dicts */
    for (size_t i = 0; i + 1 < n; i++) b[n + i] = i % 2 ? 's' : 'N';
    CHECK_ERR(parse_only(b, 2 * n), SCK_ERR_FORMAT, "SETITEM at offset");
    free(b);
}

TEST(huge_declared_lengths_rejected_before_allocating) {
    /* Under ASan an attempt to allocate these sizes would abort the test (allocation-size-too-big). */
    CHECK_ERR(parse_only(LIT("X\xf0\xff\xff\xff" "ab")), SCK_ERR_FORMAT, "BINUNICODE at offset 0: truncated: needs 4294967280 bytes, 2 left");
    CHECK_ERR(parse_only(LIT("\x8d\xff\xff\xff\xff\xff\xff\xff\x7f" "ab")), SCK_ERR_FORMAT, "needs 9223372036854775807 bytes");
    CHECK_ERR(parse_only(LIT("\x8e\xff\xff\xff\xff\xff\xff\xff\xff" "ab")), SCK_ERR_FORMAT, "needs 18446744073709551615 bytes");
    CHECK_ERR(parse_only(LIT("\x96\0\0\0\0\0\0\0\x01")), SCK_ERR_FORMAT, "BYTEARRAY8 at offset 0: truncated");
    CHECK_ERR(parse_only(LIT("B\xff\xff\xff\xff")), SCK_ERR_FORMAT, "BINBYTES at offset 0: truncated");
    CHECK_ERR(parse_only(LIT("T\xff\xff\xff\x7f")), SCK_ERR_FORMAT, "BINSTRING at offset 0: truncated");
    CHECK_ERR(parse_only(LIT("\x8b\xff\xff\xff\x7f")), SCK_ERR_FORMAT, "LONG4 at offset 0: truncated");
    CHECK_ERR(parse_only(LIT("\x8b\xff\xff\xff\xff")), SCK_ERR_FORMAT, "LONG4 at offset 0: negative length");
    CHECK_ERR(parse_only(LIT("\x8a\xc8\x01\x02")), SCK_ERR_FORMAT, "LONG1 at offset 0: truncated: needs 200 bytes, 2 left");
    CHECK_ERR(parse_only(LIT("\x95\xff\xff\xff\xff\xff\xff\xff\xffN.")), SCK_ERR_FORMAT, "FRAME at offset 0: truncated");
}

static const struct { const uint8_t *p; size_t n; } g_corpus[] = {
#define C(x) {x, sizeof x}
    C(g_common_p0), C(g_common_p1), C(g_common_p2), C(g_common_p3), C(g_common_p4), C(g_common_p5),
    C(g_misc_p0), C(g_misc_p2), C(g_misc_p3), C(g_misc_p4), C(g_misc5), C(g_pid_p0), C(g_pid_p2),
    C(w_dcp_p4), C(w_globals_p2), C(w_dicts_p4),
#undef C
};
#define CORPUS_N (sizeof g_corpus / sizeof g_corpus[0])

TEST(every_truncation_is_format_error) {
    for (size_t c = 0; c < CORPUS_N; c++) {
        CHECK_OK(parse_only(g_corpus[c].p, g_corpus[c].n));
        for (size_t k = 0; k < g_corpus[c].n; k++) {
            uint8_t *copy = malloc(k ? k : 1);   /* exact-size copy so ASan catches reads past the end */
            REQUIRE(copy);
            memcpy(copy, g_corpus[c].p, k);
            int st = parse_only(copy, k);
            if (st != SCK_ERR_FORMAT) {
                fprintf(stderr, "  corpus %zu prefix %zu: %d %s\n", c, k, st, sck_last_error());
                CHECK(st == SCK_ERR_FORMAT);
            }
            free(copy);
        }
    }
}

static uint64_t rng_next(uint64_t *s) {
    uint64_t x = (*s += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

TEST(random_mutations_never_crash) {
    uint64_t seed = 12345;
    int ok = 0, format = 0, unsupported = 0;
    for (int iter = 0; iter < 20000; iter++) {
        size_t c = rng_next(&seed) % CORPUS_N;
        size_t n = g_corpus[c].n;
        uint8_t *b = malloc(n + 1);
        REQUIRE(b);
        memcpy(b, g_corpus[c].p, n);
        int edits = 1 + (int)(rng_next(&seed) % 4);
        for (int e = 0; e < edits && n > 0; e++) {
            size_t at_ = rng_next(&seed) % n;
            switch (rng_next(&seed) % 4) {
            case 0: b[at_] = (uint8_t)rng_next(&seed); break;                    /* random byte */
            case 1: b[at_] ^= (uint8_t)(1u << (rng_next(&seed) % 8)); break;     /* bit flip */
            case 2: memmove(b + at_, b + at_ + 1, n - at_ - 1); n--; break;      /* delete */
            default: b[at_] = (uint8_t)"(0.]}Nh\x94\x85" "ea"[rng_next(&seed) % 11]; /* structural opcode */
            }
        }
        pk_arena *a = NULL;
        pk_obj *r = NULL;
        int st = pk_parse(b, n, "fuzz", allow_all, NULL, NULL, &a, &r);
        if (st == SCK_OK) {
            ok++;
            size_t budget = 100000;
            walk(r, 0, &budget);
            pk_arena_free(a);
        } else {
            CHECK(a == NULL && r == NULL);
            if (st == SCK_ERR_FORMAT) format++;
            else if (st == SCK_ERR_UNSUPPORTED) unsupported++;
            else CHECK(!"unexpected status");
            CHECK(strstr(sck_last_error(), "fuzz: ") == sck_last_error() && strstr(sck_last_error(), " at offset "));
        }
        free(b);
    }
    printf("  mutations: %d parsed, %d SCK_ERR_FORMAT, %d SCK_ERR_UNSUPPORTED\n", ok, format, unsupported);
    CHECK(ok + format + unsupported == 20000);
    CHECK(ok > 100 && format > 1000);   /* the mutations exercise both paths */
}

