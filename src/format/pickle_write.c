/* pickle_write.c - the pickle writer: the opcodes CPython's pickler emits (without FRAME, memoizing only globals
 * and repeated strings), and integers of any size as decimal text or little-endian bytes. */
#include "format/pickle_parse.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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
    if (n && !pk_utf8_valid((const uint8_t *)s, n)) { w_invalid(w, "string is not valid UTF-8"); return; }
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
