/* test_value.c - sck_value trees (constructors, dicts, deep nesting, clone/equal) and their JSON form. */
#include <locale.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "base/json.h"
#include "format/torch_item.h"

/* Parses `text` (strlen) and returns the value, or NULL with a failed check. */
static sck_value *parse_ok(const char *text) {
    sck_value *v = NULL;
    int rc = sck_value_from_json(text, strlen(text), &v);
    if (rc) {
        fprintf(stderr, "  parse of %s failed: %s\n", text, sck_last_error());
        th_fail(__FILE__, __LINE__, "parse_ok");
    }
    return v;
}

/* 1 if to_json(v) is exactly `want`. */
static int json_is(const sck_value *v, const char *want) {
    char *s = sck_value_to_json(v);
    int ok = s && !strcmp(s, want);
    if (!ok) fprintf(stderr, "  json: got %s\n  want %s\n", s ? s : "(null)", want);
    free(s);
    return ok;
}

TEST(value_scalars) {
    sck_value *v = sck_value_null();
    REQUIRE(v);
    CHECK(sck_value_kind_of(v) == SCK_VAL_NULL);
    CHECK(sck_value_len(v) == 0 && sck_value_at(v, 0) == NULL && sck_value_get_int(v) == 0);
    sck_value_free(v);

    v = sck_value_bool(42);
    CHECK(sck_value_kind_of(v) == SCK_VAL_BOOL && sck_value_get_bool(v) == 1);
    CHECK(sck_value_get_int(v) == 0 && sck_value_get_float(v) == 0.0);
    sck_value_free(v);

    v = sck_value_int(INT64_MIN);
    CHECK(sck_value_kind_of(v) == SCK_VAL_INT && sck_value_get_int(v) == INT64_MIN);
    CHECK(sck_value_get_float(v) == -9223372036854775808.0);
    CHECK(sck_value_get_bool(v) == 0);
    sck_value_free(v);

    v = sck_value_float(-2.5);
    CHECK(sck_value_kind_of(v) == SCK_VAL_FLOAT && sck_value_get_float(v) == -2.5 && sck_value_get_int(v) == 0);
    sck_value_free(v);

    size_t n = 99;
    v = sck_value_string("héllo");
    CHECK(sck_value_kind_of(v) == SCK_VAL_STRING);
    CHECK(!strcmp(sck_value_get_string(v, &n), "héllo") && n == 6);
    sck_value_free(v);

    v = sck_value_string_n("a\0b", 3);
    const char *s = sck_value_get_string(v, &n);
    CHECK(n == 3 && !memcmp(s, "a\0b", 4)); /* NUL-terminated too */
    sck_value_free(v);

    v = sck_value_bytes("\x00\xff", 2);
    s = sck_value_get_string(v, &n);
    CHECK(sck_value_kind_of(v) == SCK_VAL_BYTES && n == 2 && (uint8_t)s[1] == 0xff && s[2] == 0);
    sck_value_free(v);

    v = sck_value_bytes(NULL, 0);
    s = sck_value_get_string(v, &n);
    CHECK(v && n == 0 && s && s[0] == 0);
    sck_value_free(v);

    CHECK(sck_value_string(NULL) == NULL);
    CHECK(sck_value_get_string(NULL, &n) == NULL && n == 0);
    CHECK(sck_value_kind_of(NULL) == SCK_VAL_NULL);
    sck_value_free(NULL);
}

TEST(value_list_ops) {
    sck_value *l = sck_value_list();
    REQUIRE(l);
    for (int i = 0; i < 100; i++) CHECK_OK(sck_value_list_append(l, sck_value_int(i)));
    CHECK(sck_value_len(l) == 100);
    CHECK(sck_value_get_int(sck_value_at(l, 57)) == 57);
    CHECK(sck_value_at(l, 100) == NULL);
    CHECK(sck_value_key_at(l, 0) == NULL);
    CHECK(sck_value_dict_get(l, "0") == NULL);

    /* Ownership passes even on failure (ASan's leak check verifies the item is freed). */
    CHECK_ERR(sck_value_list_append(NULL, sck_value_int(1)), SCK_ERR_INVALID_ARG, "NULL list");
    sck_value *notlist = sck_value_int(3);
    CHECK_ERR(sck_value_list_append(notlist, sck_value_string("x")), SCK_ERR_INVALID_ARG, "not a list");
    CHECK_ERR(sck_value_list_append(l, NULL), SCK_ERR_INVALID_ARG, "NULL item");
    CHECK_ERR(sck_value_dict_set(notlist, "k", sck_value_null()), SCK_ERR_INVALID_ARG, "not a dict");
    sck_value_free(notlist);
    sck_value_free(l);
}

TEST(value_dict_order_and_replace) {
    sck_value *d = sck_value_dict();
    REQUIRE(d);
    CHECK_OK(sck_value_dict_set(d, "b", sck_value_int(1)));
    CHECK_OK(sck_value_dict_set(d, "a", sck_value_int(2)));
    CHECK_OK(sck_value_dict_set(d, "c", sck_value_string("three")));
    CHECK_OK(sck_value_dict_set(d, "a", sck_value_string("replaced")));  /* old int freed, position kept */
    REQUIRE(sck_value_len(d) == 3);
    CHECK(!strcmp(sck_value_key_at(d, 0), "b") && !strcmp(sck_value_key_at(d, 1), "a") &&
          !strcmp(sck_value_key_at(d, 2), "c"));
    CHECK(!strcmp(sck_value_get_string(sck_value_at(d, 1), NULL), "replaced"));
    CHECK(!strcmp(sck_value_get_string(sck_value_dict_get(d, "a"), NULL), "replaced"));
    CHECK(sck_value_dict_get(d, "zz") == NULL);
    CHECK(sck_value_key_at(d, 3) == NULL);
    CHECK_OK(sck_value_dict_set(d, "", sck_value_null()));
    CHECK(sck_value_kind_of(sck_value_dict_get(d, "")) == SCK_VAL_NULL);
    CHECK(json_is(d, "{\"b\":1,\"a\":\"replaced\",\"c\":\"three\",\"\":null}"));
    CHECK_ERR(sck_value_dict_set(d, NULL, sck_value_int(1)), SCK_ERR_INVALID_ARG, "NULL key");
    CHECK_ERR(sck_value_dict_set(d, "self", d), SCK_ERR_INVALID_ARG, "itself");
    CHECK(sck_value_len(d) == 4);
    sck_value_free(d);
}

TEST(value_big_dict_100k) {
    enum { N = 100000 };
    sck_value *d = sck_value_dict();
    REQUIRE(d);
    char key[32];
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof key, "key%d", i);
        REQUIRE_OK(sck_value_dict_set(d, key, sck_value_int(i)));
    }
    for (int i = 0; i < N; i += 3) {  /* replacing keeps the size and the order */
        snprintf(key, sizeof key, "key%d", i);
        REQUIRE_OK(sck_value_dict_set(d, key, sck_value_int(-i)));
    }
    REQUIRE(sck_value_len(d) == N);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof key, "key%d", i);
        int64_t want = i % 3 ? i : -i;
        if (strcmp(sck_value_key_at(d, (size_t)i), key) || sck_value_get_int(sck_value_dict_get(d, key)) != want) bad++;
    }
    CHECK(bad == 0);
    CHECK(sck_value_dict_get(d, "key100000") == NULL);

    /* Through JSON and back, with the parser building the same big dict. */
    char *js = sck_value_to_json(d);
    REQUIRE(js);
    sck_value *back = NULL;
    CHECK_OK(sck_value_from_json(js, strlen(js), &back));
    CHECK(sck_value_equal(d, back));
    sck_value *copy = sck_value_clone(d);
    CHECK(sck_value_equal(copy, d));
    CHECK(sck_value_get_int(sck_value_dict_get(copy, "key99998")) == 99998);
    free(js);
    sck_value_free(back);
    sck_value_free(copy);
    sck_value_free(d);
}

/* [[[ ... [depth-th list holding 7] ... ]]] */
static sck_value *deep_list(int depth) {
    sck_value *inner = sck_value_list();
    if (!inner || sck_value_list_append(inner, sck_value_int(7))) return NULL;
    for (int i = 1; i < depth; i++) {
        sck_value *outer = sck_value_list();
        if (!outer || sck_value_list_append(outer, inner)) return NULL;
        inner = outer;
    }
    return inner;
}

TEST(value_deep_nesting_no_recursion) {
    enum { DEPTH = 100000 };  /* well past what recursion on the C stack would survive under ASan */
    sck_value *v = deep_list(DEPTH);
    REQUIRE(v);
    sck_value *c = sck_value_clone(v);
    REQUIRE(c);
    CHECK(sck_value_equal(v, c));
    /* Change the innermost value of the clone: no longer equal. */
    sck_value *p = c;
    for (int i = 1; i < DEPTH; i++) p = sck_value_at(p, 0);
    CHECK(sck_value_get_int(sck_value_at(p, 0)) == 7);
    CHECK_OK(sck_value_list_append(p, sck_value_null()));
    CHECK(!sck_value_equal(v, c));

    char *js = sck_value_to_json(v);
    REQUIRE(js);
    CHECK(strlen(js) == 2 * (size_t)DEPTH + 1);
    CHECK(!strncmp(js, "[[[", 3) && !strncmp(js + DEPTH - 1, "[7]", 3));
    /* The parser refuses such depth instead of recursing. */
    sck_value *back = NULL;
    CHECK_ERR(sck_value_from_json(js, strlen(js), &back), SCK_ERR_FORMAT, "nesting deeper than 512 levels at byte 512");
    CHECK(back == NULL);
    free(js);
    sck_value_free(c);
    sck_value_free(v);

    /* Deep dicts too. */
    sck_value *d = sck_value_dict();
    REQUIRE(d);
    for (int i = 0; i < 10000; i++) {
        sck_value *outer = sck_value_dict();
        REQUIRE(outer);
        REQUIRE_OK(sck_value_dict_set(outer, "k", d));
        d = outer;
    }
    sck_value *dc = sck_value_clone(d);
    CHECK(sck_value_equal(d, dc));
    sck_value_free(dc);
    sck_value_free(d);
}

TEST(value_clone_equal) {
    sck_value *v = parse_ok("{\"a\":[1,2.5,\"s\",null,true,{\"__bytes__\":\"0aff\"}],\"b\":{\"x\":{},\"y\":[]}}");
    REQUIRE(v);
    CHECK(sck_value_kind_of(sck_value_at(sck_value_dict_get(v, "a"), 5)) == SCK_VAL_BYTES);
    sck_value *c = sck_value_clone(v);
    REQUIRE(c);
    CHECK(c != v && sck_value_equal(v, c) && sck_value_equal(c, v));
    CHECK(json_is(c, "{\"a\":[1,2.5,\"s\",null,true,{\"__bytes__\":\"0aff\"}],\"b\":{\"x\":{},\"y\":[]}}"));
    /* Clones are independent. */
    CHECK_OK(sck_value_dict_set(sck_value_dict_get(c, "b"), "z", sck_value_int(1)));
    CHECK(!sck_value_equal(v, c));
    CHECK(sck_value_len(sck_value_dict_get(v, "b")) == 2);
    sck_value_free(c);
    sck_value_free(v);

    /* Dicts compare as mappings; lists by position. */
    sck_value *d1 = parse_ok("{\"a\":1,\"b\":[1,2]}"), *d2 = parse_ok("{\"b\":[1,2],\"a\":1}");
    sck_value *l1 = parse_ok("[1,2]"), *l2 = parse_ok("[2,1]");
    CHECK(sck_value_equal(d1, d2));
    CHECK(!sck_value_equal(l1, l2));
    sck_value *d3 = parse_ok("{\"a\":1,\"c\":[1,2]}");
    CHECK(!sck_value_equal(d1, d3));
    sck_value_free(d1); sck_value_free(d2); sck_value_free(d3); sck_value_free(l1); sck_value_free(l2);

    /* Kinds are strict; floats compare bitwise. */
    sck_value *i1 = sck_value_int(1), *f1 = sck_value_float(1.0), *z = sck_value_float(0.0),
              *nz = sck_value_float(-0.0), *n1 = sck_value_float(NAN), *n2 = sck_value_float(NAN),
              *s = sck_value_string("ab"), *b = sck_value_bytes("ab", 2);
    CHECK(!sck_value_equal(i1, f1));
    CHECK(!sck_value_equal(z, nz));
    CHECK(sck_value_equal(n1, n2));
    CHECK(!sck_value_equal(s, b));
    CHECK(sck_value_equal(NULL, NULL) && !sck_value_equal(i1, NULL));
    CHECK(sck_value_clone(NULL) == NULL);
    sck_value_free(i1); sck_value_free(f1); sck_value_free(z); sck_value_free(nz);
    sck_value_free(n1); sck_value_free(n2); sck_value_free(s); sck_value_free(b);
}

TEST(json_write_exact) {
    sck_value *d = sck_value_dict();
    REQUIRE(d);
    sck_value *l = sck_value_list();
    sck_value_list_append(l, sck_value_bool(1));
    sck_value_list_append(l, sck_value_bool(0));
    sck_value_list_append(l, sck_value_null());
    CHECK_OK(sck_value_dict_set(d, "list", l));
    CHECK_OK(sck_value_dict_set(d, "esc", sck_value_string_n("q\"b\\s/\b\f\n\r\t\x01\x1f\x7f\0.", 16)));
    CHECK_OK(sck_value_dict_set(d, "utf8", sck_value_string("\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80")));
    CHECK_OK(sck_value_dict_set(d, "bad", sck_value_string("a\xff" "b\xc0\xaf")));  /* invalid -> U+FFFD */
    CHECK_OK(sck_value_dict_set(d, "max", sck_value_int(INT64_MAX)));
    CHECK_OK(sck_value_dict_set(d, "min", sck_value_int(INT64_MIN)));
    CHECK_OK(sck_value_dict_set(d, "f1", sck_value_float(0.1)));
    CHECK_OK(sck_value_dict_set(d, "f2", sck_value_float(1e300)));
    CHECK_OK(sck_value_dict_set(d, "f3", sck_value_float(-0.0)));
    CHECK_OK(sck_value_dict_set(d, "f4", sck_value_float(100.0)));
    CHECK_OK(sck_value_dict_set(d, "f5", sck_value_float(1.0 / 3.0)));
    CHECK_OK(sck_value_dict_set(d, "f6", sck_value_float(NAN)));
    CHECK_OK(sck_value_dict_set(d, "f7", sck_value_float(INFINITY)));
    CHECK_OK(sck_value_dict_set(d, "f8", sck_value_float(-INFINITY)));
    CHECK_OK(sck_value_dict_set(d, "f9", sck_value_float(1e16)));
    CHECK_OK(sck_value_dict_set(d, "f10", sck_value_float(123456.789)));
    CHECK_OK(sck_value_dict_set(d, "bytes", sck_value_bytes("\x00\xff\x10", 3)));
    CHECK_OK(sck_value_dict_set(d, "k\"\n", sck_value_dict()));
    CHECK(json_is(d, "{\"list\":[true,false,null],"
                     "\"esc\":\"q\\\"b\\\\s/\\b\\f\\n\\r\\t\\u0001\\u001f\x7f\\u0000.\","
                     "\"utf8\":\"\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\","
                     "\"bad\":\"a\xef\xbf\xbd" "b\xef\xbf\xbd\xef\xbf\xbd\","
                     "\"max\":9223372036854775807,\"min\":-9223372036854775808,"
                     "\"f1\":0.1,\"f2\":1e+300,\"f3\":-0.0,\"f4\":100.0,\"f5\":0.3333333333333333,"
                     "\"f6\":NaN,\"f7\":Infinity,\"f8\":-Infinity,\"f9\":1e+16,\"f10\":123456.789,"
                     "\"bytes\":{\"__bytes__\":\"00ff10\"},\"k\\\"\\n\":{}}"));
    sck_value_free(d);

    sck_value *e = sck_value_list();
    CHECK(json_is(e, "[]"));
    sck_value_free(e);
    e = sck_value_string("");
    CHECK(json_is(e, "\"\""));
    sck_value_free(e);
    e = sck_value_int(-5);
    CHECK(json_is(e, "-5"));
    sck_value_free(e);
}

TEST(json_round_trip) {
    static const char *const texts[] = {
        "{\"a\":1,\"b\":[true,false,null],\"c\":\"x\\\"y\\\\z\\n\\u0001\",\"d\":0.1,\"e\":1e+300,\"f\":-0.0,"
        "\"g\":NaN,\"h\":Infinity,\"i\":-Infinity,\"j\":{\"__bytes__\":\"00ff10\"},\"k\":9223372036854775807,"
        "\"l\":-9223372036854775808,\"m\":100.0,\"n\":{\"o\":[[],{}]},\"\xe5\x90\x8d\":\"\xf0\x9f\x98\x80\"}",
        "[]", "{}", "0", "-1", "\"\"", "true", "null", "[1.5,-2.25e-10,5e-324,1.7976931348623157e+308]",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        sck_value *v = parse_ok(texts[i]);
        REQUIRE(v);
        char *js = sck_value_to_json(v);
        REQUIRE(js);
        sck_value *back = parse_ok(js);
        CHECK(sck_value_equal(v, back));
        char *js2 = sck_value_to_json(back);
        CHECK(js2 && !strcmp(js, js2));
        if (i == 0) CHECK(!strcmp(js, texts[0]));  /* already in canonical form */
        free(js);
        free(js2);
        sck_value_free(back);
        sck_value_free(v);
    }
    /* Doubles of every magnitude survive bit-exactly. */
    uint64_t bits = 0x123456789abcdefull;
    for (int i = 0; i < 2000; i++) {
        bits = bits * 6364136223846793005ull + 1442695040888963407ull;
        double f;
        memcpy(&f, &bits, sizeof f);
        if (isnan(f)) continue;
        sck_value *v = sck_value_float(f);
        char *js = sck_value_to_json(v);
        sck_value *back = NULL;
        CHECK_OK(sck_value_from_json(js, strlen(js), &back));
        if (!sck_value_equal(v, back)) fprintf(stderr, "  float %s did not round trip\n", js);
        CHECK(sck_value_kind_of(back) == SCK_VAL_FLOAT && sck_value_equal(v, back));
        free(js);
        sck_value_free(v);
        sck_value_free(back);
    }
}

TEST(json_parse_numbers_and_strings) {
    sck_value *v = parse_ok(" \t\r\n[9223372036854775807, -9223372036854775808, 9223372036854775808,"
                            " -9223372036854775809, -0, 0, 1E2, 1.5e-3, 1e400, -1e400, 0.0, 12345678901234567890123] ");
    REQUIRE(v && sck_value_len(v) == 12);
    CHECK(sck_value_kind_of(sck_value_at(v, 0)) == SCK_VAL_INT && sck_value_get_int(sck_value_at(v, 0)) == INT64_MAX);
    CHECK(sck_value_kind_of(sck_value_at(v, 1)) == SCK_VAL_INT && sck_value_get_int(sck_value_at(v, 1)) == INT64_MIN);
    /* beyond int64: exact, as Python's json reads them */
    CHECK(sck_value_kind_of(sck_value_at(v, 2)) == SCK_VAL_BIGINT &&
          !strcmp(sck_value_get_string(sck_value_at(v, 2), NULL), "9223372036854775808"));
    CHECK(sck_value_kind_of(sck_value_at(v, 3)) == SCK_VAL_BIGINT &&
          !strcmp(sck_value_get_string(sck_value_at(v, 3), NULL), "-9223372036854775809"));
    CHECK(sck_value_kind_of(sck_value_at(v, 4)) == SCK_VAL_INT && sck_value_get_int(sck_value_at(v, 4)) == 0);
    CHECK(sck_value_kind_of(sck_value_at(v, 6)) == SCK_VAL_FLOAT && sck_value_get_float(sck_value_at(v, 6)) == 100.0);
    CHECK(sck_value_get_float(sck_value_at(v, 7)) == 1.5e-3);
    CHECK(isinf(sck_value_get_float(sck_value_at(v, 8))) && sck_value_get_float(sck_value_at(v, 8)) > 0);
    CHECK(isinf(sck_value_get_float(sck_value_at(v, 9))) && sck_value_get_float(sck_value_at(v, 9)) < 0);
    CHECK(sck_value_kind_of(sck_value_at(v, 10)) == SCK_VAL_FLOAT);
    CHECK(!strcmp(sck_value_get_string(sck_value_at(v, 11), NULL), "12345678901234567890123"));
    sck_value_free(v);

    v = parse_ok("[NaN,Infinity,-Infinity]");
    REQUIRE(v);
    CHECK(isnan(sck_value_get_float(sck_value_at(v, 0))));
    CHECK(sck_value_get_float(sck_value_at(v, 1)) == INFINITY && sck_value_get_float(sck_value_at(v, 2)) == -INFINITY);
    sck_value_free(v);

    /* Escapes, surrogate pairs and raw UTF-8 all decode to UTF-8. */
    v = parse_ok("\"\\u00e9\\u4E2D\\ud83d\\ude00\\/\\b\\f\\n\\r\\t\\\"\\\\\\u0000x\xc3\xa9\xf4\x8f\xbf\xbf\"");
    REQUIRE(v);
    size_t n;
    const char *s = sck_value_get_string(v, &n);
    static const char want[] = "\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80/\b\f\n\r\t\"\\\0x\xc3\xa9\xf4\x8f\xbf\xbf";
    CHECK(n == sizeof want - 1 && !memcmp(s, want, n));
    sck_value_free(v);

    /* Duplicate keys: the last value wins, in the first key's position (as Python). */
    v = parse_ok("{\"a\":1,\"b\":2,\"a\":3}");
    REQUIRE(v);
    CHECK(sck_value_len(v) == 2 && !strcmp(sck_value_key_at(v, 0), "a") && sck_value_get_int(sck_value_at(v, 0)) == 3);
    sck_value_free(v);
    CHECK_ERR(sck_json_parse("{\"a\":1,\"b\":2,\"a\":3}", 19, SCK_JSON_REJECT_DUP_KEYS, &v), SCK_ERR_FORMAT,
              "duplicate key \"a\" at byte 13");

    /* Only an exact {"__bytes__": even hex} becomes bytes. */
    v = parse_ok("[{\"__bytes__\":\"\"},{\"__bytes__\":\"ABcd\"},{\"__bytes__\":\"abc\"},{\"__bytes__\":\"zz\"},"
                 "{\"__bytes__\":\"00\",\"x\":1},{\"__bytes__\":1}]");
    REQUIRE(v);
    CHECK(sck_value_kind_of(sck_value_at(v, 0)) == SCK_VAL_BYTES && sck_value_len(sck_value_at(v, 0)) == 0);
    s = sck_value_get_string(sck_value_at(v, 1), &n);
    CHECK(sck_value_kind_of(sck_value_at(v, 1)) == SCK_VAL_BYTES && n == 2 && !memcmp(s, "\xab\xcd", 2));
    for (size_t i = 2; i < 6; i++) CHECK(sck_value_kind_of(sck_value_at(v, i)) == SCK_VAL_DICT);
    sck_value_free(v);
    CHECK_OK(sck_json_parse("{\"__bytes__\":\"00\"}", 18, SCK_JSON_NO_BYTES, &v));
    CHECK(sck_value_kind_of(v) == SCK_VAL_DICT);
    sck_value_free(v);

    /* Input need not be NUL-terminated: only n bytes are read. */
    CHECK_OK(sck_value_from_json("[12]xyz", 4, &v));
    CHECK(sck_value_get_int(sck_value_at(v, 0)) == 12);
    sck_value_free(v);
}

typedef struct bad_json {
    const char *text;
    size_t len;       /* 0: strlen */
    const char *msg;  /* substring of the error, including the offset */
} bad_json;

TEST(json_rejects_malformed) {
    static const bad_json cases[] = {
        {"", 0, "unexpected end of input at byte 0"},
        {"   ", 0, "unexpected end of input at byte 3"},
        {"[1,2", 0, "unexpected end of input in array at byte 4"},
        {"{\"a\":1", 0, "unexpected end of input in object at byte 6"},
        {"{\"a\":", 0, "unexpected end of input at byte 5"},
        {"{\"a\"", 0, "unexpected end of input in object at byte 4"},
        {"\"abc", 0, "unterminated string at byte 0"},
        {"tru", 0, "unexpected end of input at byte 3"},
        {"{\"a\":1} x", 0, "trailing characters after the JSON value at byte 8"},
        {"[1]\0", 4, "trailing characters after the JSON value at byte 3"},
        {"1 2", 0, "trailing characters after the JSON value at byte 2"},
        {"[1,]", 0, "unexpected character ']' at byte 3"},
        {"[1 2]", 0, "expected ',' or ']' in array at byte 3"},
        {"{\"a\":1,}", 0, "expected a string key in object at byte 7"},
        {"{1:2}", 0, "expected a string key in object at byte 1"},
        {"{\"a\" 1}", 0, "expected ':' after object key at byte 5"},
        {"{\"a\":1 \"b\":2}", 0, "expected ',' or '}' in object at byte 7"},
        {"\"\\x\"", 0, "invalid escape at byte 1"},
        {"\"\\", 0, "truncated escape at byte 1"},
        {"[\"\\u12\",1]", 0, "invalid \\u escape at byte 2"},
        {"\"\\u12", 0, "truncated \\u escape at byte 1"},
        {"\"\\uZZZZ\"", 0, "invalid \\u escape at byte 1"},
        {"\"ab\\ud800\"", 0, "lone high surrogate in \\u escape at byte 3"},
        {"\"\\ud800\\u0041\"", 0, "lone high surrogate in \\u escape at byte 1"},
        {"\"\\ud800\\ud800\"", 0, "lone high surrogate in \\u escape at byte 1"},
        {"\"\\udc00\"", 0, "lone low surrogate in \\u escape at byte 1"},
        {"\"a\xff\"", 0, "invalid UTF-8 in string at byte 2"},
        {"\"\xc0\xaf\"", 0, "invalid UTF-8 in string at byte 1"},          /* overlong '/' */
        {"\"\xe0\x80\xaf\"", 0, "invalid UTF-8 in string at byte 1"},      /* overlong, 3 bytes */
        {"\"\xed\xa0\x80\"", 0, "invalid UTF-8 in string at byte 1"},      /* encoded surrogate */
        {"\"\xf4\x90\x80\x80\"", 0, "invalid UTF-8 in string at byte 1"},  /* above U+10FFFF */
        {"\"\xe4\xb8\"", 0, "invalid UTF-8 in string at byte 1"},          /* truncated sequence */
        {"\"\x80\"", 0, "invalid UTF-8 in string at byte 1"},              /* lone continuation */
        {"\"a\nb\"", 0, "unescaped control character in string at byte 2"},
        {"\xef\xbb\xbf{}", 0, "unexpected byte 0xef at byte 0"},           /* BOM */
        {"01", 0, "leading zero in number at byte 0"},
        {"[-01]", 0, "leading zero in number at byte 1"},
        {"00.5", 0, "leading zero in number at byte 0"},
        {"1.", 0, "expected a digit after '.' in number at byte 0"},
        {"[1.e5]", 0, "expected a digit after '.' in number at byte 1"},
        {"1e", 0, "expected a digit in exponent at byte 0"},
        {"1e+", 0, "expected a digit in exponent at byte 0"},
        {"-", 0, "truncated number at byte 0"},
        {"-x", 0, "invalid number at byte 0"},
        {".5", 0, "unexpected character '.' at byte 0"},
        {"+1", 0, "unexpected character '+' at byte 0"},
        {"trux", 0, "invalid literal at byte 0"},
        {"nan", 0, "invalid literal at byte 0"},
        {"-Inf", 0, "unexpected end of input at byte 4"},
        {"{\"a\\u0000b\":1}", 0, "object key contains U+0000 (unsupported) at byte 1"},
        {"[\x01]", 0, "unexpected byte 0x01 at byte 1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sck_value *v = (sck_value *)1;
        size_t len = cases[i].len ? cases[i].len : strlen(cases[i].text);
        int rc = sck_value_from_json(cases[i].text, len, &v);
        if (rc != SCK_ERR_FORMAT || !strstr(sck_last_error(), cases[i].msg) || v != NULL) {
            fprintf(stderr, "  case %zu: rc %d, message \"%s\", want \"%s\"\n", i, rc, sck_last_error(), cases[i].msg);
            th_fail(__FILE__, __LINE__, "malformed JSON rejected with offset");
        }
    }
}

TEST(json_depth_limit) {
    enum { N = 1 << 20 };
    char *bomb = malloc(N);
    REQUIRE(bomb);
    memset(bomb, '[', N);
    sck_value *v = NULL;
    CHECK_ERR(sck_value_from_json(bomb, N, &v), SCK_ERR_FORMAT, "nesting deeper than 512 levels at byte 512");
    memset(bomb, '{', N);
    CHECK_ERR(sck_value_from_json(bomb, N, &v), SCK_ERR_FORMAT, "expected a string key in object at byte 1");
    /* 512 levels are fine, 513 are not; mixed dict/list nesting counts too. */
    for (int i = 0; i < 512; i++) bomb[i] = '[';
    for (int i = 0; i < 512; i++) bomb[512 + i] = ']';
    CHECK_OK(sck_value_from_json(bomb, 1024, &v));
    sck_value_free(v);
    v = NULL;
    sck_buf b;
    sck_buf_init(&b);
    for (int i = 0; i < 257; i++) sck_buf_append(&b, "{\"k\":[", 6);
    CHECK_ERR(sck_value_from_json((const char *)b.data, b.len, &v), SCK_ERR_FORMAT, "nesting deeper than 512 levels at byte 1536");
    sck_buf_free(&b);
    free(bomb);
}

TEST(json_locale_independent) {
    /* Numbers use '.' whatever LC_NUMERIC says.  Only testable where a comma locale is installed. */
    const char *names[] = {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "de_DE"};
    const char *got = NULL;
    for (size_t i = 0; i < 4 && !got; i++) got = setlocale(LC_NUMERIC, names[i]);
    if (!got) {
        fprintf(stderr, "  (no comma-radix locale installed; checking the C locale only)\n");
    }
    sck_value *v = sck_value_float(0.5);
    CHECK(json_is(v, "0.5"));
    sck_value_free(v);
    v = parse_ok("[2.75,1e-2]");
    CHECK(v && sck_value_get_float(sck_value_at(v, 0)) == 2.75 && sck_value_get_float(sck_value_at(v, 1)) == 0.01);
    sck_value_free(v);
    setlocale(LC_NUMERIC, "C");
}

/* ---- values as torch pickles them (CPython's pickle, protocol 2 as torch.save writes) ---- */

/* {"t": (1, (2, 3), ()), "big": 2**70, "neg": -(2**80) + 7, "l": [(4, 5, 6, 7)]} */
static const uint8_t g_tuple_big[] = {128,2,125,113,0,40,88,1,0,0,0,116,113,1,75,1,75,2,75,3,134,113,2,41,135,113,3,88,3,0,0,0,98,105,103,113,4,138,9,0,0,0,0,0,0,0,0,64,88,3,0,0,0,110,101,103,113,5,138,11,7,0,0,0,0,0,0,0,0,0,255,88,1,0,0,0,108,113,6,93,113,7,40,75,4,75,5,75,6,75,7,116,113,8,97,117,46};
/* {1, 2, 3}; 1+2j; {"x": an object whose __reduce__ is os.system("touch /tmp/sck-evil-ran")} */
static const uint8_t g_set[] = {128,2,99,95,95,98,117,105,108,116,105,110,95,95,10,115,101,116,10,113,0,93,113,1,40,75,1,75,2,75,3,101,133,113,2,82,113,3,46};
static const uint8_t g_complex[] = {128,2,99,95,95,98,117,105,108,116,105,110,95,95,10,99,111,109,112,108,101,120,10,113,0,71,63,240,0,0,0,0,0,0,71,64,0,0,0,0,0,0,0,134,113,1,82,113,2,46};
static const uint8_t g_evil[] = {128,2,125,113,0,88,1,0,0,0,120,113,1,99,112,111,115,105,120,10,115,121,115,116,101,109,10,113,2,88,23,0,0,0,116,111,117,99,104,32,47,116,109,112,47,115,99,107,45,101,118,105,108,45,114,97,110,113,3,133,113,4,82,113,5,115,46};

TEST(value_pickle_tuples_and_big_ints_round_trip) {
    sck_value *v;
    REQUIRE_OK(ti_decode_value_pkl(g_tuple_big, sizeof g_tuple_big, "t.pkl", &v));
    const sck_value *t = sck_value_dict_get(v, "t");
    CHECK(sck_value_kind_of(t) == SCK_VAL_TUPLE && sck_value_len(t) == 3);
    CHECK(sck_value_kind_of(sck_value_at(t, 1)) == SCK_VAL_TUPLE && sck_value_get_int(sck_value_at(sck_value_at(t, 1), 1)) == 3);
    CHECK(sck_value_kind_of(sck_value_at(t, 2)) == SCK_VAL_TUPLE && sck_value_len(sck_value_at(t, 2)) == 0);
    CHECK(sck_value_kind_of(sck_value_dict_get(v, "big")) == SCK_VAL_BIGINT &&
          !strcmp(sck_value_get_string(sck_value_dict_get(v, "big"), NULL), "1180591620717411303424"));
    CHECK(!strcmp(sck_value_get_string(sck_value_dict_get(v, "neg"), NULL), "-1208925819614629174706169"));
    CHECK(sck_value_len(sck_value_at(sck_value_dict_get(v, "l"), 0)) == 4);
    /* written back and read again: the same kinds and numbers (a tuple stays a tuple) */
    sck_buf b;
    sck_buf_init(&b);
    REQUIRE_OK(ti_encode_value_pkl(&b, v));
    sck_value *w;
    REQUIRE_OK(ti_decode_value_pkl(b.data, b.len, "again.pkl", &w));
    CHECK(sck_value_equal(v, w));
    char *js = sck_value_to_json(w);
    CHECK(js && !strcmp(js, "{\"t\":[1,[2,3],[]],\"big\":1180591620717411303424,\"neg\":-1208925819614629174706169,\"l\":[[4,5,6,7]]}"));
    free(js);
    sck_value *l = sck_value_list(), *tu = sck_value_tuple();
    CHECK(!sck_value_equal(l, tu));   /* a tuple is not a list */
    sck_value_free(l);
    sck_value_free(tu);
    sck_value_free(w);
    sck_value_free(v);
    sck_buf_free(&b);
}

TEST(value_bigint_constructor_is_canonical) {
    sck_value *v = sck_value_bigint("42");
    CHECK(sck_value_kind_of(v) == SCK_VAL_INT && sck_value_get_int(v) == 42);   /* fits: an int */
    sck_value_free(v);
    v = sck_value_bigint("-9223372036854775809");
    CHECK(sck_value_kind_of(v) == SCK_VAL_BIGINT);
    sck_value *c = sck_value_clone(v);
    CHECK(sck_value_equal(v, c));
    sck_value_free(c);
    sck_value_free(v);
    CHECK(!sck_value_bigint("007") && !sck_value_bigint("1e5") && !sck_value_bigint("") && !sck_value_bigint("-"));
}

TEST(value_pickle_outside_subset_kept_verbatim_never_run) {
    const struct { const uint8_t *p; size_t n; const char *what; } cases[] = {
        {g_set, sizeof g_set, "set"},
        {g_complex, sizeof g_complex, "complex"},
        {g_evil, sizeof g_evil, "dict holding posix.system"},
    };
    unlink("/tmp/sck-evil-ran");
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sck_value *v;
        REQUIRE_OK(ti_decode_value_pkl(cases[i].p, cases[i].n, "t.pkl", &v));
        size_t n;
        const char *s = sck_value_get_string(v, &n);
        CHECK(sck_value_kind_of(v) == SCK_VAL_PICKLE && n == cases[i].n && !memcmp(s, cases[i].p, n));
        char what[128];
        ti_describe_pickle(s, n, what, sizeof what);
        CHECK(!strcmp(what, cases[i].what));
        sck_buf b;
        sck_buf_init(&b);
        REQUIRE_OK(ti_encode_value_pkl(&b, v));   /* written back byte for byte */
        CHECK(b.len == cases[i].n && !memcmp(b.data, cases[i].p, b.len));
        sck_buf_free(&b);
        /* inside a container it cannot be spliced into another pickle: an error, not a wrong pickle */
        sck_value *l = sck_value_list();
        REQUIRE_OK(sck_value_list_append(l, v));
        sck_buf_init(&b);
        CHECK_ERR(ti_encode_value_pkl(&b, l), SCK_ERR_INVALID_ARG, "whole item");
        sck_buf_free(&b);
        /* JSON keeps it as hex and reads it back as a pickle */
        char *js = sck_value_to_json(l);
        sck_value *back = NULL;
        REQUIRE_OK(sck_value_from_json(js, strlen(js), &back));
        CHECK(sck_value_equal(l, back) && !strncmp(js, "[{\"__pickle__\":\"", 16));
        free(js);
        sck_value_free(back);
        sck_value_free(l);
    }
    CHECK(access("/tmp/sck-evil-ran", F_OK) != 0);
}
