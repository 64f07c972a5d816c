/* pickle_scalar.c - the reader's scalar opcodes: ints of any size, floats, text in every protocol's forms
 * (UTF-8 checked, raw-unicode and quoted escapes), bytes, and globals through the caller's allow-list. */
#include "format/pickle_parse.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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
int pk_text_int(pk_parser *P, const uint8_t *s, size_t len, int64_t *out) {
    int r = parse_dec(s, len, out);
    int shown = (int)(len > 40 ? 40 : len);
    if (r == 1) return pk_fail(P, SCK_ERR_FORMAT, "malformed integer \"%.*s\"", shown, (const char *)s);
    return r == 2 ? 2 : SCK_OK;
}

/* A text PUT / GET index: any int64. */
int pk_memo_index(pk_parser *P, const uint8_t *s, size_t len, int64_t *out) {
    int st = pk_text_int(P, s, len, out);
    return st == 2 ? pk_fail(P, SCK_ERR_FORMAT, "memo index beyond 64 bits") : st;
}

/* LONG1 / LONG4 payload: little-endian two's complement, any length (0 bytes = 0).  Returns 2 when it
 * does not fit in int64 (the caller keeps it as a PK_BIGINT). */
int pk_decode_long(const uint8_t *b, size_t k, int64_t *out) {
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

int pk_push_int(pk_parser *P, pk_kind kind, int64_t v) {
    pk_obj *o;
    int st = pk_new_obj(P, kind, &o);
    if (st) return st;
    o->i = v;
    return pk_push(P, o);
}

/* A decimal integer beyond int64 (text INT / LONG, protocols 0 and 1) as a PK_BIGINT. */
int pk_push_text_bigint(pk_parser *P, const uint8_t *s, size_t len) {
    if (len > PK_BIGINT_DIGITS + 1)
        return pk_fail(P, SCK_ERR_UNSUPPORTED, "integer of %zu digits (more than %d)", len, PK_BIGINT_DIGITS);
    uint8_t buf[PK_BIGINT_DIGITS / 2 + 8];
    size_t n = pk_decimal_to_long((const char *)s, len, buf);
    pk_obj *o;
    int st = pk_new_blob(P, PK_BIGINT, buf, n, &o);
    return st ? st : pk_push(P, o);
}

int pk_push_float(pk_parser *P, double v) {
    pk_obj *o;
    int st = pk_new_obj(P, PK_FLOAT, &o);
    if (st) return st;
    o->f = v;
    return pk_push(P, o);
}

/* None / True / False are immutable, so one node each serves every occurrence. */
int pk_push_shared(pk_parser *P, pk_obj **slot, pk_kind kind, int64_t v) {
    if (!*slot) {
        int st = pk_new_obj(P, kind, slot);
        if (st) return st;
        (*slot)->i = v;
    }
    return pk_push(P, *slot);
}

int pk_text_float(pk_parser *P, const uint8_t *s, size_t len) {
    char buf[64];
    if (len == 0 || len >= sizeof buf) return pk_fail(P, SCK_ERR_FORMAT, "malformed float argument");
    memcpy(buf, s, len);
    buf[len] = 0;
    char *end;
    double v = strtod(buf, &end);
    if (end != buf + len) return pk_fail(P, SCK_ERR_FORMAT, "malformed float \"%s\"", buf);
    return pk_push_float(P, v);
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
    if (!pk_utf8_valid(s, len)) return pk_fail(P, SCK_ERR_FORMAT, "string of %zu bytes is not valid UTF-8", len);
    pk_obj *o;
    int st = pk_new_blob(P, PK_STR, s, len, &o);
    return st ? st : pk_push(P, o);
}

/* UNICODE: raw-unicode-escape (bytes are Latin-1 code points, plus \uXXXX and \UXXXXXXXX). */
int pk_push_raw_unicode(pk_parser *P, const uint8_t *s, size_t len) {
    char *buf = pk_arena_alloc(P->arena, 2 * len + 1);   /* each input byte yields at most 2 output bytes */
    if (!buf) return pk_nomem(P);
    size_t o = 0, i = 0;
    while (i < len) {
        if (s[i] == '\\' && i + 1 < len && (s[i + 1] == 'u' || s[i + 1] == 'U')) {
            size_t digits = s[i + 1] == 'u' ? 4 : 8;
            if (len - i - 2 < digits) return pk_fail(P, SCK_ERR_FORMAT, "truncated \\%c escape", s[i + 1]);
            uint32_t cp = 0;
            for (size_t j = 0; j < digits; j++) {
                int h = hex_val(s[i + 2 + j]);
                if (h < 0) return pk_fail(P, SCK_ERR_FORMAT, "bad \\%c escape", s[i + 1]);
                cp = (cp << 4) | (uint32_t)h;
            }
            if (cp > 0x10FFFF) return pk_fail(P, SCK_ERR_FORMAT, "code point 0x%x out of range", (unsigned)cp);
            o += put_utf8(buf + o, cp);
            i += 2 + digits;
        } else {
            o += put_utf8(buf + o, s[i++]);
        }
    }
    buf[o] = 0;
    pk_obj *str;
    int st = pk_new_obj(P, PK_STR, &str);
    if (st) return st;
    str->s = buf;
    str->len = o;
    return pk_push(P, str);
}

/* STRING: a Python 2 str repr, 'quoted' or "quoted", with backslash escapes (codecs.escape_decode). */
int pk_push_quoted(pk_parser *P, const uint8_t *s, size_t len) {
    if (len < 2 || s[0] != s[len - 1] || (s[0] != '\'' && s[0] != '"'))
        return pk_fail(P, SCK_ERR_FORMAT, "argument is not quoted");
    s++;
    len -= 2;
    char *buf = pk_arena_alloc(P->arena, len + 1);   /* escapes only shrink */
    if (!buf) return pk_nomem(P);
    size_t o = 0, i = 0;
    while (i < len) {
        if (s[i] != '\\') {
            buf[o++] = (char)s[i++];
            continue;
        }
        if (i + 1 >= len) return pk_fail(P, SCK_ERR_FORMAT, "trailing backslash in string");
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
            if (h1 < 0 || h2 < 0) return pk_fail(P, SCK_ERR_FORMAT, "bad \\x escape");
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
    int st = pk_new_obj(P, PK_STR, &str);
    if (st) return st;
    str->s = buf;
    str->len = o;
    return pk_push(P, str);
}

/* Pushes a blob whose u8/u32/u64 length prefix has already been read. */
int pk_push_counted(pk_parser *P, pk_kind kind, uint64_t len, int utf8) {
    int st = pk_need(P, len);   /* before any allocation: hostile lengths never reach malloc */
    if (st) return st;
    const uint8_t *s = P->p + P->pos;
    P->pos += (size_t)len;
    if (utf8) return push_utf8(P, s, (size_t)len);
    pk_obj *o;
    st = pk_new_blob(P, kind, s, (size_t)len, &o);
    return st ? st : pk_push(P, o);
}

uint64_t pk_read_le(pk_parser *P, size_t k) {
    uint64_t v = 0;
    for (size_t i = 0; i < k; i++) v |= (uint64_t)P->p[P->pos + i] << (8 * i);
    P->pos += k;
    return v;
}

/* ---- globals ---- */

int pk_push_global(pk_parser *P, const uint8_t *mod, size_t mlen, const uint8_t *name, size_t nlen) {
    if (!mlen || !nlen || memchr(mod, 0, mlen) || memchr(name, 0, nlen) || !pk_utf8_valid(mod, mlen) ||
        !pk_utf8_valid(name, nlen))
        return pk_fail(P, SCK_ERR_FORMAT, "malformed module or attribute name");
    pk_obj *g;
    int st = pk_new_blob(P, PK_GLOBAL, mod, mlen, &g);
    if (st) return st;
    g->name = pk_arena_copy(P, name, nlen);
    if (!g->name) return pk_nomem(P);
    if (!P->allow || !P->allow(P->allow_ctx, g->s, g->name))
        return pk_fail(P, SCK_ERR_UNSUPPORTED, "global %s.%s is not allowed", g->s, g->name);
    return pk_push(P, g);
}
