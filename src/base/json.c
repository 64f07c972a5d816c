/* json.c - JSON reading and writing for sck_value.
 *
 * Reading follows RFC 8259 strictly (UTF-8 validated, no leading zeros, no trailing commas) and
 * accepts NaN, Infinity and -Infinity as Python's json module does.  Integers that fit int64 become
 * SCK_VAL_INT, longer ones SCK_VAL_BIGINT (as Python reads them), other numbers SCK_VAL_FLOAT.  Writing is compact, keeps dict order, and prints floats
 * in the shortest form that reads back to the same double. */
#include "base/json.h"

#include <inttypes.h>
#include <langinfo.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* UTF-8                                                                     */
/* ------------------------------------------------------------------------ */

/* Length of the well-formed UTF-8 sequence at s (RFC 3629: no overlongs, no surrogates,
 * nothing above U+10FFFF), or 0 if it is not one. */
static size_t utf8_seq_len(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    uint8_t lo = 0x80, hi = 0xBF;  /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    if (n < len) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return len;
}

size_t sck_utf8_valid_prefix(const char *s, size_t n) {
    const uint8_t *u = (const uint8_t *)s;
    size_t i = 0;
    while (i < n) {
        size_t k = utf8_seq_len(u + i, n - i);
        if (!k) break;
        i += k;
    }
    return i;
}

static int put_utf8(sck_buf *b, uint32_t cp) {
    uint8_t t[4];
    size_t k;
    if (cp < 0x80) { t[0] = (uint8_t)cp; k = 1; }
    else if (cp < 0x800) { t[0] = (uint8_t)(0xC0 | (cp >> 6)); t[1] = (uint8_t)(0x80 | (cp & 0x3F)); k = 2; }
    else if (cp < 0x10000) {
        t[0] = (uint8_t)(0xE0 | (cp >> 12)); t[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        t[2] = (uint8_t)(0x80 | (cp & 0x3F)); k = 3;
    } else {
        t[0] = (uint8_t)(0xF0 | (cp >> 18)); t[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
        t[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F)); t[3] = (uint8_t)(0x80 | (cp & 0x3F)); k = 4;
    }
    return sck_buf_append(b, t, k);
}

/* ------------------------------------------------------------------------ */
/* Locale independence: JSON numbers always use '.', the C library uses the  */
/* current locale's radix character.                                          */
/* ------------------------------------------------------------------------ */

static const char *locale_radix(void) {
    const char *r = nl_langinfo(RADIXCHAR);
    return r && *r ? r : ".";
}

/* Replaces the locale radix in NUL-terminated `s` by '.', in place (the radix is >= 1 byte). */
static void radix_to_dot(char *s) {
    const char *r = locale_radix();
    if (!strcmp(r, ".")) return;
    char *at = strstr(s, r);
    if (!at) return;
    size_t rl = strlen(r);
    *at = '.';
    memmove(at + 1, at + rl, strlen(at + rl) + 1);
}

/* strtod of the JSON number text s[0..n) (already validated), whatever the locale. */
static int json_strtod(const char *s, size_t n, double *out) {
    const char *r = locale_radix();
    size_t rl = strlen(r);
    char small[128];
    if (rl > SIZE_MAX - n - 1) return SCK_ERR_NOMEM;
    size_t cap = n + rl + 1;
    char *buf = cap <= sizeof small ? small : malloc(cap);
    if (!buf) return SCK_ERR_NOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '.') {
            memcpy(buf + k, r, rl);
            k += rl;
        } else {
            buf[k++] = s[i];
        }
    }
    buf[k] = 0;
    *out = strtod(buf, NULL);  /* ERANGE is fine: overflow gives +-inf and underflow 0, as in Python */
    if (buf != small) free(buf);
    return SCK_OK;
}

/* ------------------------------------------------------------------------ */
/* Parser                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct parser {
    const uint8_t *s;
    size_t n, pos;
    unsigned flags;
    int depth;
    sck_buf scratch;  /* decoded string being built; reused to avoid a malloc per string */
} parser;

static int perr(size_t at, const char *what) { return sck_err(SCK_ERR_FORMAT, "JSON: %s at byte %zu", what, at); }

static int nomem(size_t at) { return sck_err(SCK_ERR_NOMEM, "JSON: out of memory at byte %zu", at); }

static void skip_ws(parser *p) {
    while (p->pos < p->n) {
        uint8_t c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static int hex_val(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Reads the 4 hex digits of a \u escape whose backslash is at `at`. */
static int read_u16(parser *p, size_t at, uint32_t *out) {
    if (at + 6 > p->n) return perr(at, "truncated \\u escape");
    uint32_t v = 0;
    for (size_t i = at + 2; i < at + 6; i++) {
        int h = hex_val(p->s[i]);
        if (h < 0) return perr(at, "invalid \\u escape");
        v = (v << 4) | (uint32_t)h;
    }
    *out = v;
    return SCK_OK;
}

/* Decodes a \uXXXX escape (and the low half of a surrogate pair) at p->pos into scratch. */
static int parse_u_escape(parser *p) {
    size_t at = p->pos;
    uint32_t cp;
    int rc = read_u16(p, at, &cp);
    if (rc) return rc;
    p->pos += 6;
    if (cp >= 0xDC00 && cp <= 0xDFFF) return perr(at, "lone low surrogate in \\u escape");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        uint32_t lo;
        if (p->pos + 1 >= p->n || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
            return perr(at, "lone high surrogate in \\u escape");
        if ((rc = read_u16(p, p->pos, &lo))) return rc;
        if (lo < 0xDC00 || lo > 0xDFFF) return perr(at, "lone high surrogate in \\u escape");
        p->pos += 6;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    return put_utf8(&p->scratch, cp) ? nomem(at) : SCK_OK;
}

/* Parses the string starting at the '"' at p->pos; the decoded bytes are left in p->scratch. */
static int parse_string(parser *p) {
    size_t start = p->pos++;
    p->scratch.len = 0;
    for (;;) {
        size_t run = p->pos;  /* copy runs of plain characters in one append */
        while (p->pos < p->n) {
            uint8_t c = p->s[p->pos];
            if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) break;
            p->pos++;
        }
        if (sck_buf_append(&p->scratch, p->s + run, p->pos - run)) return nomem(run);
        if (p->pos >= p->n) return perr(start, "unterminated string");
        uint8_t c = p->s[p->pos];
        if (c == '"') {
            p->pos++;
            return SCK_OK;
        }
        if (c < 0x20) return perr(p->pos, "unescaped control character in string");
        if (c >= 0x80) {
            size_t k = utf8_seq_len(p->s + p->pos, p->n - p->pos);
            if (!k) return perr(p->pos, "invalid UTF-8 in string");
            if (sck_buf_append(&p->scratch, p->s + p->pos, k)) return nomem(p->pos);
            p->pos += k;
            continue;
        }
        /* backslash */
        if (p->pos + 1 >= p->n) return perr(p->pos, "truncated escape");
        char e = (char)p->s[p->pos + 1], out;
        switch (e) {
        case '"': out = '"'; break;
        case '\\': out = '\\'; break;
        case '/': out = '/'; break;
        case 'b': out = '\b'; break;
        case 'f': out = '\f'; break;
        case 'n': out = '\n'; break;
        case 'r': out = '\r'; break;
        case 't': out = '\t'; break;
        case 'u': {
            int rc = parse_u_escape(p);
            if (rc) return rc;
            continue;
        }
        default: return perr(p->pos, "invalid escape");
        }
        if (sck_buf_put_u8(&p->scratch, (uint8_t)out)) return nomem(p->pos);
        p->pos += 2;
    }
}

static int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

static int parse_number(parser *p, sck_value **out) {
    size_t start = p->pos;
    int neg = 0, is_int = 1;
    if (p->s[p->pos] == '-') {
        neg = 1;
        p->pos++;
    }
    if (p->pos >= p->n) return perr(start, "truncated number");
    if (p->s[p->pos] == '0') {
        p->pos++;
        if (p->pos < p->n && is_digit(p->s[p->pos])) return perr(start, "leading zero in number");
    } else if (is_digit(p->s[p->pos])) {
        while (p->pos < p->n && is_digit(p->s[p->pos])) p->pos++;
    } else {
        return perr(start, "invalid number");
    }
    if (p->pos < p->n && p->s[p->pos] == '.') {
        is_int = 0;
        p->pos++;
        if (p->pos >= p->n || !is_digit(p->s[p->pos])) return perr(start, "expected a digit after '.' in number");
        while (p->pos < p->n && is_digit(p->s[p->pos])) p->pos++;
    }
    if (p->pos < p->n && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        is_int = 0;
        p->pos++;
        if (p->pos < p->n && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) p->pos++;
        if (p->pos >= p->n || !is_digit(p->s[p->pos])) return perr(start, "expected a digit in exponent");
        while (p->pos < p->n && is_digit(p->s[p->pos])) p->pos++;
    }
    if (is_int) {
        /* Magnitude limit: 2^63 for negatives, 2^63-1 otherwise; beyond that, fall back to float. */
        uint64_t lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, mag = 0;
        int fits = 1;
        for (size_t i = start + (size_t)neg; i < p->pos && fits; i++) {
            uint64_t d = (uint64_t)(p->s[i] - '0');
            if (mag > (lim - d) / 10) fits = 0;
            else mag = mag * 10 + d;
        }
        if (fits) {
            int64_t v = neg ? (mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag) : (int64_t)mag;
            *out = sck_value_int(v);
            return *out ? SCK_OK : nomem(start);
        }
        /* beyond int64: an exact big int, as Python's json reads it (up to Python's own digit limit) */
        size_t nd = p->pos - start;
        if (nd <= 4301) {
            char *t = malloc(nd + 1);
            if (!t) return nomem(start);
            memcpy(t, p->s + start, nd);
            t[nd] = 0;
            *out = sck_value_bigint(t);
            free(t);
            return *out ? SCK_OK : nomem(start);
        }
    }
    double d;
    if (json_strtod((const char *)p->s + start, p->pos - start, &d)) return nomem(start);
    *out = sck_value_float(d);
    return *out ? SCK_OK : nomem(start);
}

/* Matches literal `lit` at p->pos. */
static int match_literal(parser *p, const char *lit) {
    size_t k = strlen(lit), avail = p->n - p->pos;
    if (avail < k) {
        if (!memcmp(p->s + p->pos, lit, avail)) return perr(p->n, "unexpected end of input");
        return perr(p->pos, "invalid literal");
    }
    if (memcmp(p->s + p->pos, lit, k)) return perr(p->pos, "invalid literal");
    p->pos += k;
    return SCK_OK;
}

static int parse_value(parser *p, sck_value **out);

static int enter(parser *p) {
    if (++p->depth > SCK_JSON_MAX_DEPTH) return perr(p->pos, "nesting deeper than 512 levels");
    p->pos++;  /* the bracket */
    return SCK_OK;
}

static int parse_array(parser *p, sck_value **out) {
    int rc = enter(p);
    if (rc) return rc;
    sck_value *list = sck_value_list();
    if (!list) return nomem(p->pos);
    skip_ws(p);
    if (p->pos < p->n && p->s[p->pos] == ']') {
        p->pos++;
        goto done;
    }
    for (;;) {
        sck_value *item;
        if ((rc = parse_value(p, &item))) goto fail;
        if (sck_value_list_append(list, item)) {
            rc = nomem(p->pos);
            goto fail;
        }
        skip_ws(p);
        if (p->pos >= p->n) {
            rc = perr(p->pos, "unexpected end of input in array");
            goto fail;
        }
        uint8_t c = p->s[p->pos++];
        if (c == ']') break;
        if (c != ',') {
            rc = perr(p->pos - 1, "expected ',' or ']' in array");
            goto fail;
        }
    }
done:
    p->depth--;
    *out = list;
    return SCK_OK;
fail:
    sck_value_free(list);
    return rc;
}

/* {"__bytes__": "<even-length hex>"} is how sck_json_write spells bytes, {"__pickle__": ...} a pickled
 * value; turn them back into bytes / a pickle. */
static int maybe_bytes(sck_value **v) {
    if (sck_value_len(*v) != 1) return SCK_OK;
    int pickle = !strcmp(sck_value_key_at(*v, 0), "__pickle__");
    if (!pickle && strcmp(sck_value_key_at(*v, 0), "__bytes__")) return SCK_OK;
    const sck_value *hex = sck_value_at(*v, 0);
    size_t n;
    const char *h = sck_value_get_string(hex, &n);
    if (sck_value_kind_of(hex) != SCK_VAL_STRING || n % 2) return SCK_OK;
    for (size_t i = 0; i < n; i++)
        if (hex_val((uint8_t)h[i]) < 0) return SCK_OK;
    uint8_t *raw = malloc(n / 2 + 1);
    if (!raw) return SCK_ERR_NOMEM;
    for (size_t i = 0; i < n / 2; i++) raw[i] = (uint8_t)(hex_val((uint8_t)h[2 * i]) << 4 | hex_val((uint8_t)h[2 * i + 1]));
    if (pickle && n == 0) {
        free(raw);
        return SCK_OK;
    }
    sck_value *b = pickle ? sck_value_pickle(raw, n / 2) : sck_value_bytes(raw, n / 2);
    free(raw);
    if (!b) return SCK_ERR_NOMEM;
    sck_value_free(*v);
    *v = b;
    return SCK_OK;
}

static int parse_object(parser *p, sck_value **out) {
    int rc = enter(p);
    if (rc) return rc;
    sck_value *dict = sck_value_dict();
    char *key = NULL;
    if (!dict) return nomem(p->pos);
    skip_ws(p);
    if (p->pos < p->n && p->s[p->pos] == '}') {
        p->pos++;
        goto done;
    }
    for (;;) {
        skip_ws(p);
        size_t key_at = p->pos;
        if (p->pos >= p->n) {
            rc = perr(p->pos, "unexpected end of input in object");
            goto fail;
        }
        if (p->s[p->pos] != '"') {
            rc = perr(p->pos, "expected a string key in object");
            goto fail;
        }
        if ((rc = parse_string(p))) goto fail;
        if (p->scratch.len && memchr(p->scratch.data, 0, p->scratch.len)) {
            rc = perr(key_at, "object key contains U+0000 (unsupported)");
            goto fail;
        }
        if (!(key = sck_strndup(p->scratch.len ? (const char *)p->scratch.data : "", p->scratch.len))) {
            rc = nomem(key_at);
            goto fail;
        }
        skip_ws(p);
        if (p->pos >= p->n || p->s[p->pos] != ':') {
            rc = perr(p->pos, p->pos >= p->n ? "unexpected end of input in object" : "expected ':' after object key");
            goto fail;
        }
        p->pos++;
        if ((p->flags & SCK_JSON_REJECT_DUP_KEYS) && sck_value_dict_get(dict, key)) {
            rc = sck_err(SCK_ERR_FORMAT, "JSON: duplicate key \"%.200s\" at byte %zu", key, key_at);
            goto fail;
        }
        sck_value *item;
        if ((rc = parse_value(p, &item))) goto fail;
        if (sck_value_dict_set(dict, key, item)) {
            rc = nomem(key_at);
            goto fail;
        }
        free(key);
        key = NULL;
        skip_ws(p);
        if (p->pos >= p->n) {
            rc = perr(p->pos, "unexpected end of input in object");
            goto fail;
        }
        uint8_t c = p->s[p->pos++];
        if (c == '}') break;
        if (c != ',') {
            rc = perr(p->pos - 1, "expected ',' or '}' in object");
            goto fail;
        }
    }
done:
    p->depth--;
    if (!(p->flags & SCK_JSON_NO_BYTES) && maybe_bytes(&dict)) {
        sck_value_free(dict);
        return nomem(p->pos);
    }
    *out = dict;
    return SCK_OK;
fail:
    free(key);
    sck_value_free(dict);
    return rc;
}

static int parse_value(parser *p, sck_value **out) {
    *out = NULL;
    skip_ws(p);
    if (p->pos >= p->n) return perr(p->pos, "unexpected end of input");
    uint8_t c = p->s[p->pos];
    size_t at = p->pos;
    int rc;
    switch (c) {
    case '{': return parse_object(p, out);
    case '[': return parse_array(p, out);
    case '"':
        if ((rc = parse_string(p))) return rc;
        *out = sck_value_string_n(p->scratch.len ? (const char *)p->scratch.data : "", p->scratch.len);
        return *out ? SCK_OK : nomem(at);
    case 't':
    case 'f':
        if ((rc = match_literal(p, c == 't' ? "true" : "false"))) return rc;
        *out = sck_value_bool(c == 't');
        return *out ? SCK_OK : nomem(at);
    case 'n':
        if ((rc = match_literal(p, "null"))) return rc;
        *out = sck_value_null();
        return *out ? SCK_OK : nomem(at);
    case 'N':
        if ((rc = match_literal(p, "NaN"))) return rc;
        *out = sck_value_float(NAN);
        return *out ? SCK_OK : nomem(at);
    case 'I':
        if ((rc = match_literal(p, "Infinity"))) return rc;
        *out = sck_value_float(INFINITY);
        return *out ? SCK_OK : nomem(at);
    case '-':
        if (p->pos + 1 < p->n && p->s[p->pos + 1] == 'I') {
            if ((rc = match_literal(p, "-Infinity"))) return rc;
            *out = sck_value_float(-INFINITY);
            return *out ? SCK_OK : nomem(at);
        }
        return parse_number(p, out);
    default:
        if (is_digit(c)) return parse_number(p, out);
        if (c >= 0x20 && c < 0x7F) return sck_err(SCK_ERR_FORMAT, "JSON: unexpected character '%c' at byte %zu", c, at);
        return sck_err(SCK_ERR_FORMAT, "JSON: unexpected byte 0x%02x at byte %zu", c, at);
    }
}

int sck_json_parse(const char *text, size_t n, unsigned flags, sck_value **out) {
    if (!out) return sck_err(SCK_ERR_INVALID_ARG, "JSON: NULL output pointer");
    *out = NULL;
    if (!text && n) return sck_err(SCK_ERR_INVALID_ARG, "JSON: NULL text");
    parser p = {(const uint8_t *)text, n, 0, flags, 0, {NULL, 0, 0}};
    sck_value *v;
    int rc = parse_value(&p, &v);
    if (!rc) {
        skip_ws(&p);
        if (p.pos != p.n) {
            rc = perr(p.pos, "trailing characters after the JSON value");
            sck_value_free(v);
        }
    }
    sck_buf_free(&p.scratch);
    if (!rc) *out = v;
    return rc;
}

/* ---- one value at a time ---- */

int sck_json_peek(const char *text, size_t n, size_t *pos) {
    parser p = {(const uint8_t *)text, n, *pos, 0, 0, {NULL, 0, 0}};
    skip_ws(&p);
    *pos = p.pos;
    return p.pos < n ? (unsigned char)text[p.pos] : -1;
}

int sck_json_read_string(const char *text, size_t n, size_t *pos, sck_buf *out) {
    parser p = {(const uint8_t *)text, n, *pos, 0, 0, *out};
    skip_ws(&p);
    int rc = p.pos >= n ? perr(p.pos, "unexpected end of input") : p.s[p.pos] != '"' ? perr(p.pos, "expected a string")
           : parse_string(&p);
    if (!rc && sck_buf_put_u8(&p.scratch, 0)) rc = nomem(p.pos);
    if (!rc) p.scratch.len--;   /* NUL-terminated, not counted */
    *out = p.scratch;
    *pos = p.pos;
    return rc;
}

int sck_json_read_value(const char *text, size_t n, size_t *pos, unsigned flags, sck_value **out) {
    parser p = {(const uint8_t *)text, n, *pos, flags, 0, {NULL, 0, 0}};
    int rc = parse_value(&p, out);
    sck_buf_free(&p.scratch);
    *pos = p.pos;
    return rc;
}

/* Checks one value and steps over it, building nothing (scalars are built and dropped: they are small). */
static int skip_value(parser *p) {
    skip_ws(p);
    if (p->pos >= p->n) return perr(p->pos, "unexpected end of input");
    uint8_t open = p->s[p->pos];
    if (open == '"') return parse_string(p);
    if (open != '[' && open != '{') {
        sck_value *v;
        int rc = parse_value(p, &v);
        sck_value_free(v);
        return rc;
    }
    int rc = enter(p);
    if (rc) return rc;
    uint8_t close = open == '[' ? ']' : '}';
    skip_ws(p);
    if (p->pos < p->n && p->s[p->pos] == close) {
        p->pos++;
        p->depth--;
        return SCK_OK;
    }
    for (;;) {
        if (open == '{') {
            skip_ws(p);
            if (p->pos >= p->n) return perr(p->pos, "unexpected end of input in object");
            if (p->s[p->pos] != '"') return perr(p->pos, "expected a string key in object");
            if ((rc = parse_string(p))) return rc;
            skip_ws(p);
            if (p->pos >= p->n || p->s[p->pos] != ':')
                return perr(p->pos, p->pos >= p->n ? "unexpected end of input in object" : "expected ':' after object key");
            p->pos++;
        }
        if ((rc = skip_value(p))) return rc;
        skip_ws(p);
        if (p->pos >= p->n) return perr(p->pos, open == '[' ? "unexpected end of input in array" : "unexpected end of input in object");
        uint8_t c = p->s[p->pos++];
        if (c == close) break;
        if (c != ',') return perr(p->pos - 1, open == '[' ? "expected ',' or ']' in array" : "expected ',' or '}' in object");
    }
    p->depth--;
    return SCK_OK;
}

int sck_json_skip_value(const char *text, size_t n, size_t *pos) {
    parser p = {(const uint8_t *)text, n, *pos, 0, 0, {NULL, 0, 0}};
    int rc = skip_value(&p);
    sck_buf_free(&p.scratch);
    *pos = p.pos;
    return rc;
}

int sck_value_from_json(const char *text, size_t n, sck_value **out) { return sck_json_parse(text, n, 0, out); }

/* ------------------------------------------------------------------------ */
/* Writer                                                                    */
/* ------------------------------------------------------------------------ */

int sck_json_put_string(sck_buf *b, const char *s, size_t n) {
    static const char hexd[] = "0123456789abcdef";
    const uint8_t *u = (const uint8_t *)s;
    if (sck_buf_put_u8(b, '"')) return SCK_ERR_NOMEM;
    size_t i = 0;
    while (i < n) {
        size_t run = i;  /* bytes that need no escaping go out in one append */
        while (i < n && u[i] >= 0x20 && u[i] < 0x80 && u[i] != '"' && u[i] != '\\') i++;
        if (sck_buf_append(b, u + run, i - run)) return SCK_ERR_NOMEM;
        if (i >= n) break;
        uint8_t c = u[i];
        int rc;
        if (c >= 0x80) {
            size_t k = utf8_seq_len(u + i, n - i);
            rc = k ? sck_buf_append(b, u + i, k) : sck_buf_append(b, "\xEF\xBF\xBD", 3);
            i += k ? k : 1;
        } else {
            /* The short escapes Python and serde_json use; other control characters as \u00XX. */
            char esc[7] = {'\\', 0, 0, 0, 0, 0, 0};
            size_t len = 2;
            switch (c) {
            case '"': esc[1] = '"'; break;
            case '\\': esc[1] = '\\'; break;
            case '\b': esc[1] = 'b'; break;
            case '\f': esc[1] = 'f'; break;
            case '\n': esc[1] = 'n'; break;
            case '\r': esc[1] = 'r'; break;
            case '\t': esc[1] = 't'; break;
            default:
                memcpy(esc + 1, "u00", 3);
                esc[4] = hexd[c >> 4];
                esc[5] = hexd[c & 15];
                len = 6;
            }
            rc = sck_buf_append(b, esc, len);
            i++;
        }
        if (rc) return SCK_ERR_NOMEM;
    }
    return sck_buf_put_u8(b, '"');
}

static int put_double(sck_buf *b, double f) {
    if (isnan(f)) return sck_buf_append(b, "NaN", 3);
    if (isinf(f)) return f > 0 ? sck_buf_append(b, "Infinity", 8) : sck_buf_append(b, "-Infinity", 9);
    /* Shortest of 15..17 significant digits that reads back to the same bits (17 always does). */
    char tmp[64];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, f);
        double back = strtod(tmp, NULL);
        if (!memcmp(&back, &f, sizeof f)) break;
    }
    radix_to_dot(tmp);
    if (!strpbrk(tmp, ".eni")) strcat(tmp, ".0");  /* keep it a float when read back */
    return sck_buf_append(b, tmp, strlen(tmp));
}

static int put_scalar(sck_buf *b, const sck_value *v) {
    static const char hexd[] = "0123456789abcdef";
    size_t n;
    const char *s;
    switch (sck_value_kind_of(v)) {
    case SCK_VAL_NULL: return sck_buf_append(b, "null", 4);
    case SCK_VAL_BOOL: return sck_value_get_bool(v) ? sck_buf_append(b, "true", 4) : sck_buf_append(b, "false", 5);
    case SCK_VAL_INT: return sck_buf_printf(b, "%" PRId64, sck_value_get_int(v));
    case SCK_VAL_FLOAT: return put_double(b, sck_value_get_float(v));
    case SCK_VAL_STRING:
        s = sck_value_get_string(v, &n);
        return sck_json_put_string(b, s, n);
    case SCK_VAL_BIGINT:
        s = sck_value_get_string(v, &n);
        return sck_buf_append(b, s, n);
    case SCK_VAL_BYTES:
    case SCK_VAL_PICKLE:
        s = sck_value_get_string(v, &n);
        if (n > (SIZE_MAX - 32) / 2 || sck_buf_reserve(b, 2 * n + 32)) return SCK_ERR_NOMEM;
        if (sck_value_kind_of(v) == SCK_VAL_PICKLE ? sck_buf_append(b, "{\"__pickle__\":\"", 15)
                                                   : sck_buf_append(b, "{\"__bytes__\":\"", 14))
            return SCK_ERR_NOMEM;
        for (size_t i = 0; i < n; i++) {
            uint8_t c = (uint8_t)s[i];
            b->data[b->len++] = (uint8_t)hexd[c >> 4];
            b->data[b->len++] = (uint8_t)hexd[c & 15];
        }
        return sck_buf_append(b, "\"}", 2);
    case SCK_VAL_LIST:
    case SCK_VAL_TUPLE:
    case SCK_VAL_DICT: break;
    }
    return SCK_ERR_INVALID_ARG;
}

typedef struct write_frame {
    const sck_value *v;
    size_t i;
} write_frame;

/* Iterative, so that user values nested arbitrarily deep cannot overflow the C stack. */
int sck_json_write(sck_buf *b, const sck_value *v) {
    sck_value_kind k = sck_value_kind_of(v);
    if (k != SCK_VAL_LIST && k != SCK_VAL_TUPLE && k != SCK_VAL_DICT) return put_scalar(b, v);
    write_frame *st = NULL;
    size_t len = 0, cap = 0;
    int rc = SCK_ERR_NOMEM;
    const sck_value *open = v;  /* container to open next */
    for (;;) {
        if (open) {
            if (len == cap) {
                size_t nc = cap ? cap * 2 : 16;
                write_frame *p = nc > SIZE_MAX / sizeof *p ? NULL : realloc(st, nc * sizeof *p);
                if (!p) goto out;
                st = p;
                cap = nc;
            }
            st[len++] = (write_frame){open, 0};
            if (sck_buf_put_u8(b, sck_value_kind_of(open) == SCK_VAL_DICT ? '{' : '[')) goto out;
            open = NULL;
        }
        write_frame *f = &st[len - 1];
        int is_dict = sck_value_kind_of(f->v) == SCK_VAL_DICT;
        if (f->i == sck_value_len(f->v)) {
            if (sck_buf_put_u8(b, is_dict ? '}' : ']')) goto out;
            if (--len == 0) break;
            continue;
        }
        size_t i = f->i++;
        if (i && sck_buf_put_u8(b, ',')) goto out;
        if (is_dict) {
            const char *key = sck_value_key_at(f->v, i);
            if (sck_json_put_string(b, key, strlen(key)) || sck_buf_put_u8(b, ':')) goto out;
        }
        const sck_value *child = sck_value_at(f->v, i);
        k = sck_value_kind_of(child);
        if (k == SCK_VAL_LIST || k == SCK_VAL_TUPLE || k == SCK_VAL_DICT) open = child;
        else if (put_scalar(b, child)) goto out;
    }
    rc = SCK_OK;
out:
    free(st);
    return rc;
}

char *sck_value_to_json(const sck_value *v) {
    sck_buf b;
    sck_buf_init(&b);
    if (sck_json_write(&b, v) || sck_buf_put_u8(&b, 0)) {
        sck_buf_free(&b);
        sck_err(SCK_ERR_NOMEM, "sck_value_to_json: out of memory");
        return NULL;
    }
    return (char *)b.data;
}
