/* test_pickle_write.c - the pickle writer against CPython's bytes (tests/pickle_golden.h's w_* arrays),
 * and round trips through the reader. */
#include "harness.h"
#include "format/pickle.h"
#include "pickle_golden.h"
#include "pickle_helpers.h"

#include <math.h>
#include <stdlib.h>

/* ---- writer ---- */

static void check_bytes(const sck_buf *b, const uint8_t *want, size_t n) {
    CHECK(b->len == n);
    if (b->len == n && memcmp(b->data, want, n) != 0) {
        for (size_t i = 0; i < n; i++)
            if (b->data[i] != want[i]) {
                fprintf(stderr, "  first difference at byte %zu: got 0x%02x want 0x%02x\n", i, b->data[i], want[i]);
                break;
            }
        CHECK(!"bytes differ");
    }
}

static const int64_t k_ints[] = {0, 255, 256, 65535, 65536, -1, -256, INT32_MAX, INT32_MIN, (int64_t)1 << 31,
                                 -((int64_t)1 << 31) - 1, (int64_t)1 << 40, -((int64_t)1 << 40), (int64_t)1 << 39,
                                 -((int64_t)1 << 39), INT64_MAX, INT64_MIN};
#define N_INTS (sizeof k_ints / sizeof k_ints[0])

TEST(writer_ints_floats_golden_and_roundtrip) {
    static const double fl[] = {1.5, -0.0, 1e300, INFINITY, -2.25e-310};
    for (int proto = 2; proto <= 4; proto += 2) {
        sck_buf b;
        sck_buf_init(&b);
        pk_writer w;
        pk_begin(&w, &b, proto);
        pk_empty_list(&w);
        pk_mark(&w);
        for (size_t i = 0; i < N_INTS; i++) pk_int(&w, k_ints[i]);
        pk_appends(&w);
        REQUIRE_OK(pk_finish(&w));
        if (proto == 2) check_bytes(&b, w_ints_p2, sizeof w_ints_p2);
        else check_bytes(&b, w_ints_p4, sizeof w_ints_p4);
        pk_arena *a;
        pk_obj *r;
        REQUIRE_OK(parse(b.data, b.len, &a, &r));
        CHECK(is_ints(r, PK_LIST, N_INTS, k_ints));
        pk_arena_free(a);

        b.len = 0;
        pk_begin(&w, &b, proto);
        pk_empty_list(&w);
        pk_mark(&w);
        for (size_t i = 0; i < 5; i++) pk_float(&w, fl[i]);
        pk_appends(&w);
        REQUIRE_OK(pk_finish(&w));
        if (proto == 2) check_bytes(&b, w_floats_p2, sizeof w_floats_p2);
        else check_bytes(&b, w_floats_p4, sizeof w_floats_p4);
        REQUIRE_OK(parse(b.data, b.len, &a, &r));
        REQUIRE(is_seq(r, PK_LIST, 5));
        for (size_t i = 0; i < 5; i++) CHECK(is_float(at(r, i), fl[i]));
        CHECK(signbit(at(r, 1)->f));
        pk_arena_free(a);
        sck_buf_free(&b);
    }
}

TEST(writer_strings_bytes_golden_and_roundtrip) {
    char x255[256], y256[257], r256[257];
    memset(x255, 'x', 255);
    x255[255] = 0;
    memset(y256, 'y', 256);
    y256[256] = 0;
    memset(r256, 'r', 256);
    r256[256] = 0;
    const char *strs[] = {"", "abc", "h\xc3\xa9\xe2\x82\xac", x255, y256};
    for (int proto = 2; proto <= 4; proto += 2) {
        sck_buf b;
        sck_buf_init(&b);
        pk_writer w;
        pk_begin(&w, &b, proto);
        pk_empty_list(&w);
        pk_mark(&w);
        for (size_t i = 0; i < 5; i++) pk_cstr(&w, strs[i]);
        pk_appends(&w);
        REQUIRE_OK(pk_finish(&w));
        if (proto == 2) check_bytes(&b, w_strs_p2, sizeof w_strs_p2);
        else check_bytes(&b, w_strs_p4, sizeof w_strs_p4);
        pk_arena *a;
        pk_obj *r;
        REQUIRE_OK(parse(b.data, b.len, &a, &r));
        REQUIRE(is_seq(r, PK_LIST, 5));
        for (size_t i = 0; i < 5; i++) CHECK(is_str(at(r, i), strs[i]));
        pk_arena_free(a);
        sck_buf_free(&b);
    }
    sck_buf b;
    sck_buf_init(&b);
    pk_writer w;
    pk_begin(&w, &b, 4);
    pk_empty_list(&w);
    pk_mark(&w);
    pk_bytes(&w, "", 0);
    pk_bytes(&w, "ab", 2);
    pk_bytes(&w, r256, 256);
    pk_appends(&w);
    REQUIRE_OK(pk_finish(&w));
    check_bytes(&b, w_bytes_p4, sizeof w_bytes_p4);
    pk_arena *a;
    pk_obj *r;
    REQUIRE_OK(parse(b.data, b.len, &a, &r));
    CHECK(is_seq(r, PK_LIST, 3) && is_blob(at(r, 0), PK_BYTES, "", 0) && is_blob(at(r, 1), PK_BYTES, "ab", 2) &&
          is_blob(at(r, 2), PK_BYTES, r256, 256));
    pk_arena_free(a);
    sck_buf_free(&b);
}

TEST(writer_tuples_dicts_golden_and_roundtrip) {
    for (int proto = 2; proto <= 4; proto += 2) {
        sck_buf b;
        sck_buf_init(&b);
        pk_writer w;
        /* [(), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4), (None, True, False)] */
        pk_begin(&w, &b, proto);
        pk_empty_list(&w);
        pk_mark(&w);
        for (size_t n = 0; n <= 4; n++) {
            if (n > 3) pk_mark(&w);
            for (size_t i = 1; i <= n; i++) pk_int(&w, (int64_t)i);
            pk_tuple(&w, n);
        }
        pk_none(&w);
        pk_bool(&w, 1);
        pk_bool(&w, 0);
        pk_tuple(&w, 3);
        pk_appends(&w);
        REQUIRE_OK(pk_finish(&w));
        if (proto == 2) check_bytes(&b, w_tups_p2, sizeof w_tups_p2);
        else check_bytes(&b, w_tups_p4, sizeof w_tups_p4);
        pk_arena *a;
        pk_obj *r;
        REQUIRE_OK(parse(b.data, b.len, &a, &r));
        REQUIRE(is_seq(r, PK_LIST, 6));
        CHECK(is_seq(at(r, 0), PK_TUPLE, 0));
        CHECK(is_ints(at(r, 4), PK_TUPLE, 4, (const int64_t[]){1, 2, 3, 4}));
        CHECK(is_none(at(at(r, 5), 0)) && is_bool(at(at(r, 5), 1), 1) && is_bool(at(at(r, 5), 2), 0));
        pk_arena_free(a);

        /* [{'a': 1}, {'a': 1, 'b': [1], 'c': {'d': ()}, 'e': {}}] */
        b.len = 0;
        pk_begin(&w, &b, proto);
        pk_empty_list(&w);
        pk_mark(&w);
        pk_empty_dict(&w);
        pk_cstr(&w, "a");
        pk_int(&w, 1);
        pk_setitem(&w);
        pk_empty_dict(&w);
        pk_mark(&w);
        pk_cstr(&w, "a");
        pk_int(&w, 1);
        pk_cstr(&w, "b");
        pk_empty_list(&w);
        pk_int(&w, 1);
        pk_append(&w);
        pk_cstr(&w, "c");
        pk_empty_dict(&w);
        pk_cstr(&w, "d");
        pk_tuple(&w, 0);
        pk_setitem(&w);
        pk_cstr(&w, "e");
        pk_empty_dict(&w);
        pk_setitems(&w);
        pk_appends(&w);
        REQUIRE_OK(pk_finish(&w));
        if (proto == 2) check_bytes(&b, w_dicts_p2, sizeof w_dicts_p2);
        else check_bytes(&b, w_dicts_p4, sizeof w_dicts_p4);
        REQUIRE_OK(parse(b.data, b.len, &a, &r));
        REQUIRE(is_seq(r, PK_LIST, 2));
        CHECK(is_seq(at(r, 0), PK_DICT, 1) && is_int(pk_dict_get(at(r, 0), "a"), 1));
        CHECK(is_seq(at(r, 1), PK_DICT, 4) && is_ints(pk_dict_get(at(r, 1), "b"), PK_LIST, 1, (const int64_t[]){1}));
        CHECK(is_seq(pk_dict_get(pk_dict_get(at(r, 1), "c"), "d"), PK_TUPLE, 0));
        CHECK(is_seq(pk_dict_get(at(r, 1), "e"), PK_DICT, 0));
        pk_arena_free(a);
        sck_buf_free(&b);
    }
}

TEST(writer_globals_memoized_golden_and_roundtrip) {
    for (int proto = 2; proto <= 4; proto += 2) {
        sck_buf b;
        sck_buf_init(&b);
        pk_writer w;
        pk_begin(&w, &b, proto);
        pk_empty_list(&w);
        pk_mark(&w);
        pk_global(&w, "collections", "OrderedDict");
        pk_global(&w, "collections", "OrderedDict");
        pk_global(&w, "collections", "Counter");
        pk_appends(&w);
        CHECK(w.next_memo == 2);
        REQUIRE_OK(pk_finish(&w));
        CHECK(w.memo_keys == NULL && w.memo_n == 0);
        if (proto == 2) check_bytes(&b, w_globals_p2, sizeof w_globals_p2);
        else check_bytes(&b, w_globals_p4, sizeof w_globals_p4);
        pk_arena *a;
        pk_obj *r;
        REQUIRE_OK(parse(b.data, b.len, &a, &r));
        REQUIRE(is_seq(r, PK_LIST, 3));
        CHECK(pk_is_global(at(r, 0), "collections", "OrderedDict") && at(r, 0) == at(r, 1));
        CHECK(pk_is_global(at(r, 2), "collections", "Counter"));
        pk_arena_free(a);
        sck_buf_free(&b);
    }
}

TEST(writer_dcp_like_object_golden_and_roundtrip) {
    sck_buf b;
    sck_buf_init(&b);
    pk_writer w;
    pk_begin(&w, &b, 4);
    pk_empty_list(&w);
    pk_mark(&w);
    pk_global(&w, "fakemod", "Rec");   /* Rec(x=1, name='r'): NEWOBJ + BUILD */
    pk_tuple(&w, 0);
    pk_newobj(&w);
    pk_empty_dict(&w);
    pk_mark(&w);
    pk_cstr(&w, "x");
    pk_int(&w, 1);
    pk_cstr(&w, "name");
    pk_cstr(&w, "r");
    pk_setitems(&w);
    pk_build(&w);
    pk_global(&w, "fakemod", "make_point");   /* make_point(1, 2.5, 'p'): REDUCE */
    pk_int(&w, 1);
    pk_float(&w, 2.5);
    pk_cstr(&w, "p");
    pk_tuple(&w, 3);
    pk_reduce(&w);
    pk_global(&w, "fakemod", "Rec");   /* memoized: BINGET 0 */
    pk_tuple(&w, 0);
    pk_newobj(&w);
    pk_cstr(&w, "storage");   /* persistent id ('storage', 3) */
    pk_int(&w, 3);
    pk_tuple(&w, 2);
    pk_binpersid(&w);
    pk_appends(&w);
    REQUIRE_OK(pk_finish(&w));
    check_bytes(&b, w_dcp_p4, sizeof w_dcp_p4);
    pk_arena *a;
    pk_obj *r;
    REQUIRE_OK(parse(b.data, b.len, &a, &r));
    REQUIRE(is_seq(r, PK_LIST, 4));
    const pk_obj *rec = at(r, 0), *pt = at(r, 1), *rec2 = at(r, 2), *pid = at(r, 3);
    CHECK(rec->kind == PK_NEWOBJ && pk_is_global(rec->a, "fakemod", "Rec") && is_seq(rec->b, PK_TUPLE, 0));
    CHECK(is_int(pk_dict_get(rec->state, "x"), 1) && is_str(pk_dict_get(rec->state, "name"), "r"));
    CHECK(pt->kind == PK_REDUCE && pk_is_global(pt->a, "fakemod", "make_point") && is_float(at(pt->b, 1), 2.5));
    CHECK(rec2->kind == PK_NEWOBJ && rec2->a == rec->a && rec2->state == NULL);
    CHECK(pid->kind == PK_PERSID && is_str(at(pid->a, 0), "storage") && is_int(at(pid->a, 1), 3));
    pk_arena_free(a);
    sck_buf_free(&b);
}

TEST(writer_memo_indices_past_255) {
    for (int proto = 2; proto <= 4; proto += 2) {
        sck_buf b;
        sck_buf_init(&b);
        pk_writer w;
        pk_begin(&w, &b, proto);
        pk_empty_list(&w);
        pk_mark(&w);
        char name[16];
        for (int i = 0; i < 300; i++) {
            snprintf(name, sizeof name, "g%d", i);
            pk_global(&w, "m", name);
            if (i == 255) {   /* index 255 is the last one-byte BINPUT */
                static const uint8_t tail2[] = {'c', 'm', '\n', 'g', '2', '5', '5', '\n', 'q', 0xff};
                if (proto == 2) CHECK(b.len > 10 && memcmp(b.data + b.len - 10, tail2, 10) == 0);
            }
            if (i == 256) {
                static const uint8_t tail2[] = {'g', '2', '5', '6', '\n', 'r', 0x00, 0x01, 0x00, 0x00};
                static const uint8_t tail4[] = {0x8c, 0x04, 'g', '2', '5', '6', 0x93, 0x94};
                if (proto == 2) CHECK(b.len > 10 && memcmp(b.data + b.len - 10, tail2, 10) == 0);
                else CHECK(b.len > 8 && memcmp(b.data + b.len - 8, tail4, 8) == 0);
            }
        }
        size_t before = b.len;
        pk_global(&w, "m", "g0");
        pk_global(&w, "m", "g299");
        pk_appends(&w);
        REQUIRE_OK(pk_finish(&w));
        static const uint8_t refs[] = {'h', 0x00, 'j', 0x2b, 0x01, 0x00, 0x00, 'e', '.'};
        CHECK(b.len == before + sizeof refs && memcmp(b.data + before, refs, sizeof refs) == 0);
        pk_arena *a;
        pk_obj *r;
        REQUIRE_OK(parse(b.data, b.len, &a, &r));
        REQUIRE(is_seq(r, PK_LIST, 302));
        CHECK(at(r, 300) == at(r, 0) && at(r, 301) == at(r, 299) && pk_is_global(at(r, 299), "m", "g299"));
        pk_arena_free(a);
        sck_buf_free(&b);
    }
}

TEST(writer_errors_are_sticky) {
    sck_buf b;
    sck_buf_init(&b);
    pk_writer w;
    pk_begin(&w, &b, 7);
    pk_none(&w);
    CHECK_ERR(pk_finish(&w), SCK_ERR_INVALID_ARG, "protocol must be 2..5");
    CHECK(b.len == 0);

    pk_begin(&w, &b, 2);
    pk_global(&w, "a\nb", "c");
    size_t len = b.len;
    pk_int(&w, 5);
    pk_global(&w, "m", "x");
    CHECK(b.len == len && w.memo_n == 0);
    CHECK_ERR(pk_finish(&w), SCK_ERR_INVALID_ARG, "pickle writer: newline in a global name");
    CHECK(b.len == len);

    b.len = 0;
    pk_begin(&w, &b, 4);
    pk_str(&w, "\xff", 1);
    CHECK_ERR(pk_finish(&w), SCK_ERR_INVALID_ARG, "not valid UTF-8");

    b.len = 0;
    pk_begin(&w, &b, 4);
    pk_global(&w, "m", "x");
    w.err = SCK_ERR_NOMEM;   /* as if an append had failed: everything after is a no-op */
    len = b.len;
    pk_int(&w, 1);
    pk_cstr(&w, "s");
    pk_bytes(&w, "b", 1);
    pk_global(&w, "m", "y");
    pk_tuple(&w, 1);
    CHECK(b.len == len && w.memo_n == 1);
    CHECK(pk_finish(&w) == SCK_ERR_NOMEM);
    CHECK(b.len == len && w.memo_keys == NULL);   /* no STOP, memo freed */

    b.len = 0;
    pk_begin(&w, &b, 4);
    pk_cstr(&w, NULL);
    CHECK_ERR(pk_finish(&w), SCK_ERR_INVALID_ARG, "NULL string");
    sck_buf_free(&b);
}

/* pk_global_static (names found again by address) writes exactly what pk_global writes, over more
 * distinct names than it keeps by address. */
TEST(pickle_writer_global_static_same_bytes) {
    static const char *const mods[] = {"m", "m", "n", "m", "torch", "torch", "a", "b", "c", "d", "e", "f", "g", "h"};
    static const char *const names[] = {"x", "y", "x", "x", "Size", "Size", "k", "k", "k", "k", "k", "k", "k", "k"};
    size_t nn = sizeof names / sizeof *names;
    for (int proto = 2; proto <= 4; proto += 2) {
        sck_buf a, b;
        sck_buf_init(&a);
        sck_buf_init(&b);
        pk_writer wa, wb;
        pk_begin(&wa, &a, proto);
        pk_begin(&wb, &b, proto);
        pk_empty_list(&wa);
        pk_empty_list(&wb);
        pk_mark(&wa);
        pk_mark(&wb);
        for (int round = 0; round < 3; round++)
            for (size_t i = 0; i < nn; i++) {
                pk_global(&wa, mods[i], names[i]);
                pk_global_static(&wb, mods[i], names[i]);
            }
        pk_appends(&wa);
        pk_appends(&wb);
        REQUIRE_OK(pk_finish(&wa));
        REQUIRE_OK(pk_finish(&wb));
        CHECK(a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
        sck_buf_free(&a);
        sck_buf_free(&b);
    }
}

/* Strings memoized by content (pk_cstr_memo), as CPython memoizes every str: the first emission is
 * followed by BINPUT / LONG_BINPUT (proto 2) or MEMOIZE (proto 4), later ones are BINGET or LONG_BINGET
 * of that index; interleaved with memoized globals, the indices stay in step with the parser's. */
TEST(writer_strings_memoized_by_content) {
    for (int proto = 2; proto <= 4; proto += 2) {
        sck_buf b;
        sck_buf_init(&b);
        pk_writer w;
        pk_begin(&w, &b, proto);
        pk_empty_list(&w);
        pk_mark(&w);
        char keys[600][16];
        for (int i = 0; i < 600; i++) snprintf(keys[i], sizeof keys[i], "key.%d", i);
        char copy[16];
        snprintf(copy, sizeof copy, "key.%d", 7); /* the same content at another address */
        for (int i = 0; i < 600; i++) {
            pk_cstr_memo(&w, keys[i]);
            if (i % 100 == 0) pk_global(&w, "m", i < 300 ? "A" : "B");
        }
        CHECK(w.next_memo == 602);
        size_t before = b.len;
        pk_cstr_memo(&w, keys[0]); /* index 0: BINGET 0 */
        CHECK(b.len == before + 2 && b.data[before] == 'h' && b.data[before + 1] == 0);
        before = b.len;
        pk_cstr_memo(&w, keys[599]); /* past 255: LONG_BINGET */
        CHECK(b.len == before + 5 && b.data[before] == 'j');
        pk_cstr_memo(&w, copy);
        pk_cstr_memo(&w, "");
        pk_cstr_memo(&w, "");
        pk_appends(&w);
        REQUIRE_OK(pk_finish(&w));
        CHECK(w.smemo_key == NULL && w.smemo_n == 0);
        pk_arena *a;
        pk_obj *r;
        REQUIRE_OK(parse(b.data, b.len, &a, &r));
        REQUIRE(is_seq(r, PK_LIST, 600 + 6 + 5));
        size_t k = 0;
        for (int i = 0; i < 600; i++) {
            CHECK(is_str(at(r, k++), keys[i]));
            if (i % 100 == 0) CHECK(pk_is_global(at(r, k++), "m", i < 300 ? "A" : "B"));
        }
        CHECK(at(r, k) == at(r, 0) && is_str(at(r, k), "key.0"));
        CHECK(is_str(at(r, k + 1), "key.599") && is_str(at(r, k + 2), "key.7") && at(r, k + 2) == at(r, 8));
        CHECK(is_str(at(r, k + 3), "") && at(r, k + 4) == at(r, k + 3));
        pk_arena_free(a);
        sck_buf_free(&b);
    }
}

/* pk_cstr_memo's cache by address (64 slots) in front of the memo by content: strings at many
 * addresses, the same contents at two addresses each, in an order that makes slots collide. */
TEST(writer_string_memo_by_address_survives_collisions) {
    sck_buf b;
    sck_buf_init(&b);
    pk_writer w;
    pk_begin(&w, &b, 4);
    static char keys[600][16]; /* 300 contents, each at two addresses */
    for (int i = 0; i < 600; i++) snprintf(keys[i], sizeof keys[i], "k%d", i % 300);
    enum { N = 20000 };
    static int pick[N];
    uint64_t x = 0x243F6A8885A308D3ull;
    pk_empty_list(&w);
    for (int i = 0; i < N; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        pick[i] = (int)(x % 600);
        if (i % 1000 == 0) pk_mark(&w);
        pk_cstr_memo(&w, keys[pick[i]]);
        if (i % 1000 == 999) pk_appends(&w);
    }
    CHECK(w.next_memo == 300); /* each content written once */
    REQUIRE_OK(pk_finish(&w));
    pk_arena *a;
    pk_obj *r;
    REQUIRE_OK(parse(b.data, b.len, &a, &r));
    REQUIRE(is_seq(r, PK_LIST, N));
    const pk_obj *first[300] = {NULL};
    for (int i = 0; i < N; i++) {
        const pk_obj *o = at(r, (size_t)i);
        CHECK(is_str(o, keys[pick[i]]));
        int c = pick[i] % 300;
        if (!first[c]) first[c] = o;
        CHECK(o == first[c]); /* a memo reference to the one node */
    }
    pk_arena_free(a);
    sck_buf_free(&b);
}
