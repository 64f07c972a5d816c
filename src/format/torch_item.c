/* torch_item.c - encode and decode the data.pkl of DCP items without running any Python. */
#include "format/torch_item.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/advanced.h"
#include "format/pickle.h"

int ti_encode_tensor_pkl(sck_buf *out, sck_dtype dt, int ndim, const int64_t *sizes) {
    pk_writer w;
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) numel *= sizes[i];
    /* As torch.save writes it: dtypes with a legacy typed storage class go through _rebuild_tensor_v2
     * with that class; the newer ones (float8, uint16 ...) through _rebuild_tensor_v3 with an
     * UntypedStorage, whose size is in bytes, and the dtype as a seventh argument. */
    const char *storage = sck_dtype_storage_name(dt);
    pk_begin(&w, out, 2);
    pk_global_static(&w, "torch._utils", storage ? "_rebuild_tensor_v2" : "_rebuild_tensor_v3");
    pk_mark(&w);
    /* persistent id: ('storage', torch.<X>Storage, '0', 'cpu', numel) */
    pk_mark(&w);
    pk_cstr(&w, "storage");
    if (storage) pk_global_static(&w, "torch", storage);
    else pk_global_static(&w, "torch.storage", "UntypedStorage");
    pk_cstr(&w, "0");
    pk_cstr(&w, "cpu");
    pk_int(&w, storage ? numel : numel * (int64_t)sck_dtype_size(dt));
    pk_tuple(&w, 5);
    pk_binpersid(&w);
    pk_int(&w, 0); /* storage offset */
    if (ndim > 3) pk_mark(&w); /* TUPLE1..3 need no MARK */
    for (int i = 0; i < ndim; i++) pk_int(&w, sizes[i]);
    pk_tuple(&w, (size_t)ndim);
    int64_t stride[SCK_MAX_DIMS];
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        stride[i] = s;
        s *= sizes[i] ? sizes[i] : 1;
    }
    if (ndim > 3) pk_mark(&w);
    for (int i = 0; i < ndim; i++) pk_int(&w, stride[i]);
    pk_tuple(&w, (size_t)ndim);
    pk_bool(&w, 0); /* requires_grad */
    pk_global_static(&w, "collections", "OrderedDict");
    pk_tuple(&w, 0);
    pk_reduce(&w); /* backward_hooks */
    if (!storage) pk_global_static(&w, "torch", sck_dtype_torch_name(dt));
    pk_tuple(&w, storage ? 6 : 7);
    pk_reduce(&w);
    return pk_finish(&w);
}

/* Explicit stack so deeply nested user values cannot overflow the C stack. */
typedef struct enc_frame {
    const sck_value *v;
    size_t next;
} enc_frame;

/* bytes as pickle protocol 2 writes them, _codecs.encode(<the bytes as latin-1 characters>, 'latin1'): the
 * form torch.load(weights_only=True) reads (torch 2.6's weights-only unpickler knows no BINBYTES opcode;
 * protocol 2 writes b"" as builtins.bytes(), which it refuses too, so that goes the same way). */
static int enc_bytes(pk_writer *w, const uint8_t *p, size_t n) {
    if (n > (SIZE_MAX - 1) / 2) return sck_err(SCK_ERR_NOMEM, "out of memory encoding %zu bytes", n);
    char *u = malloc(2 * n + 1);
    if (!u) return sck_err(SCK_ERR_NOMEM, "out of memory encoding %zu bytes", n);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < 0x80) {
            u[k++] = (char)p[i];
        } else { /* U+0080..U+00FF in UTF-8 */
            u[k++] = (char)(0xC0 | (p[i] >> 6));
            u[k++] = (char)(0x80 | (p[i] & 0x3F));
        }
    }
    pk_global(w, "_codecs", "encode");
    pk_str(w, u, k);
    pk_cstr_memo(w, "latin1");
    pk_tuple(w, 2);
    pk_reduce(w);
    free(u);
    return SCK_OK;
}

int ti_encode_value_pkl(sck_buf *out, const sck_value *root) {
    if (sck_value_kind_of(root) == SCK_VAL_PICKLE) {   /* kept as torch wrote it */
        size_t n;
        const char *p = sck_value_get_string(root, &n);
        return sck_buf_append(out, p, n) ? sck_err(SCK_ERR_NOMEM, "out of memory encoding a value") : SCK_OK;
    }
    pk_writer w;
    pk_begin(&w, out, 2);
    size_t cap = 64, depth = 0;
    enc_frame stack_small[64];
    enc_frame *stack = stack_small;
    int rc = SCK_OK;
    const sck_value *v = root;
    for (;;) {
        /* emit v (scalars fully, containers opened and pushed) */
        switch (sck_value_kind_of(v)) {
        case SCK_VAL_NULL: pk_none(&w); break;
        case SCK_VAL_BOOL: pk_bool(&w, sck_value_get_bool(v)); break;
        case SCK_VAL_INT: pk_int(&w, sck_value_get_int(v)); break;
        case SCK_VAL_FLOAT: pk_float(&w, sck_value_get_float(v)); break;
        case SCK_VAL_STRING: {
            size_t n;
            const char *s = sck_value_get_string(v, &n);
            pk_str(&w, s, n);
            break;
        }
        case SCK_VAL_BYTES: {
            size_t n;
            const char *s = sck_value_get_string(v, &n);
            if ((rc = enc_bytes(&w, (const uint8_t *)s, n))) goto done;
            break;
        }
        case SCK_VAL_BIGINT: {
            const char *s = sck_value_get_string(v, NULL);
            size_t n = strlen(s);
            uint8_t *le = malloc(n / 2 + 8);
            if (!le) {
                rc = sck_err(SCK_ERR_NOMEM, "out of memory encoding a value");
                goto done;
            }
            pk_long(&w, le, pk_decimal_to_long(s, n, le));
            free(le);
            break;
        }
        case SCK_VAL_PICKLE:
            rc = sck_err(SCK_ERR_INVALID_ARG, "a pickled value (SCK_VAL_PICKLE) can only be a whole item, not part of a list or dict");
            goto done;
        case SCK_VAL_TUPLE:
        case SCK_VAL_LIST:
        case SCK_VAL_DICT:
            if (sck_value_kind_of(v) == SCK_VAL_TUPLE) {
                if (sck_value_len(v) == 0) {
                    pk_tuple(&w, 0);
                    break;
                }
            } else if (sck_value_kind_of(v) == SCK_VAL_LIST) {
                pk_empty_list(&w);
            } else {
                pk_empty_dict(&w);
            }
            if (sck_value_len(v) == 0) break;
            if (depth == cap) {
                enc_frame *ns = malloc(cap * 2 * sizeof *ns);
                if (!ns) {
                    rc = sck_err(SCK_ERR_NOMEM, "out of memory encoding a value");
                    goto done;
                }
                memcpy(ns, stack, depth * sizeof *ns);
                if (stack != stack_small) free(stack);
                stack = ns;
                cap *= 2;
            }
            stack[depth].v = v;
            stack[depth].next = 0;
            depth++;
            if (sck_value_kind_of(v) != SCK_VAL_TUPLE || sck_value_len(v) > 3) pk_mark(&w);   /* TUPLE1..3 take no mark */
            break;
        }
        /* advance to the next item to emit, closing finished containers */
        for (;;) {
            if (depth == 0) goto done;
            enc_frame *f = &stack[depth - 1];
            if (f->next < sck_value_len(f->v)) {
                size_t i = f->next++;
                if (sck_value_kind_of(f->v) == SCK_VAL_DICT) pk_cstr(&w, sck_value_key_at(f->v, i));
                v = sck_value_at(f->v, i);
                break;
            }
            if (sck_value_kind_of(f->v) == SCK_VAL_TUPLE) pk_tuple(&w, sck_value_len(f->v));
            else if (sck_value_kind_of(f->v) == SCK_VAL_LIST) pk_appends(&w);
            else pk_setitems(&w);
            depth--;
        }
    }
done:
    if (stack != stack_small) free(stack);
    int frc = pk_finish(&w);
    if (rc) return rc;
    if (frc) return sck_err(frc, "out of memory encoding a value");
    return SCK_OK;
}

/* The CRC-32 of the constant record (a save of 80 000 small tensors asked for it 80 000 times;
 * tests/test_zip.c, torch_item_entries_carry_their_crcs, checks it). */
#define CRC_VERSION 0x55679ed1u /* "3\n" */

void ti_entries(zip_entry *e, size_t *n, const sck_buf *pkl, uint32_t pkl_crc, const void *payload, uint64_t payload_len,
                uint32_t payload_crc) {
    size_t k = 0;
    e[k].name = "data.pkl";
    e[k].data = pkl->data;
    e[k].size = pkl->len;
    e[k].crc = pkl_crc;
    k++;
    /* No `byteorder` record: torch 1.13 writes none and newer torch reads a missing one as
     * little-endian, which our payloads are.  It took 64 of the 640 bytes a small tensor's item
     * adds to its data (a local header, 6 bytes, a central directory entry, less alignment). */
    if (payload) {
        e[k].name = "data/0";
        e[k].data = payload;
        e[k].size = payload_len;
        e[k].crc = payload_crc;
        k++;
    }
    e[k].name = "version";
    e[k].data = "3\n";
    e[k].size = 2;
    e[k].crc = CRC_VERSION;
    k++;
    *n = k;
}

/* ---- decoding ---- */

int ti_allow_tensor(void *ctx, const char *module, const char *name) {
    (void)ctx;
    sck_dtype dt;
    if (!strcmp(module, "torch._utils"))
        return !strcmp(name, "_rebuild_tensor_v2") || !strcmp(name, "_rebuild_tensor_v3") ||
               !strcmp(name, "_rebuild_tensor");
    if (!strcmp(module, "collections")) return !strcmp(name, "OrderedDict");
    if (!strcmp(module, "torch.storage")) return !strcmp(name, "UntypedStorage"); /* torch >= 2.0 */
    /* Any torch storage class or dtype name passes here (nothing is ever called), so that one we do
     * not know is reported by name below rather than as a refused global. */
    if (!strcmp(module, "torch"))
        return !strcmp(name, "UntypedStorage") || sck_dtype_from_storage_name(name, &dt) == SCK_OK ||
               sck_dtype_from_name(name, &dt) == SCK_OK || strstr(name, "Storage") != NULL ||
               strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_") == strlen(name);
    return 0;
}

static int get_int(const pk_obj *o, int64_t *out) {
    if (!o || (o->kind != PK_INT && o->kind != PK_BOOL)) return 0;
    *out = o->i;
    return 1;
}

static int get_dims(const pk_obj *o, int *ndim, int64_t *dims) {
    /* a plain tuple, or torch.Size((...)) */
    if (o && o->kind == PK_REDUCE && o->b && o->b->kind == PK_TUPLE && o->b->n == 1) o = o->b->items[0];
    if (!o || (o->kind != PK_TUPLE && o->kind != PK_LIST) || o->n > SCK_MAX_DIMS) return 0;
    for (size_t i = 0; i < o->n; i++) {
        if (!get_int(o->items[i], &dims[i])) return 0;
    }
    *ndim = (int)o->n;
    return 1;
}

int ti_tensor_from_obj(const pk_obj *root, const char *what, ti_tensor *out) {
    memset(out, 0, sizeof *out);
    int rc = SCK_ERR_FORMAT;
    const char *why = "not a tensor (expected torch._utils._rebuild_tensor_v2(...))";
    if (root->kind != PK_REDUCE || !root->a || root->a->kind != PK_GLOBAL || !root->b || root->b->kind != PK_TUPLE) goto bad;
    int v3 = !strcmp(root->a->name, "_rebuild_tensor_v3");
    if (strcmp(root->a->name, "_rebuild_tensor_v2") && !v3) goto bad;
    pk_obj *args = root->b;
    if (args->n < (v3 ? 7u : 4u)) {
        why = "too few arguments to _rebuild_tensor";
        goto bad;
    }
    pk_obj *pid = args->items[0];
    if (!pid || pid->kind != PK_PERSID || !pid->a || pid->a->kind != PK_TUPLE || pid->a->n < 5) {
        why = "storage is not a persistent id ('storage', type, key, location, size)";
        goto bad;
    }
    pk_obj **p = pid->a->items;
    if (p[0]->kind != PK_STR || strcmp(p[0]->s, "storage") || p[1]->kind != PK_GLOBAL || p[2]->kind != PK_STR) {
        why = "malformed storage persistent id";
        goto bad;
    }
    int64_t numel;
    if (!get_int(p[4], &numel) || numel < 0) {
        why = "malformed storage size";
        goto bad;
    }
    if (p[2]->len >= sizeof out->storage_key) {
        why = "storage key too long";
        goto bad;
    }
    memcpy(out->storage_key, p[2]->s, p[2]->len + 1);
    int untyped = !strcmp(p[1]->name, "UntypedStorage");
    if (v3) {
        pk_obj *d = args->items[6];
        if (!d || d->kind != PK_GLOBAL || strcmp(d->s, "torch") || sck_dtype_from_name(d->name, &out->dtype)) {
            return sck_err(SCK_ERR_UNSUPPORTED, "%s: tensor dtype %s is not supported", what,
                           d && d->kind == PK_GLOBAL ? d->name : "?");
        }
    } else if (untyped) {
        why = "UntypedStorage without a dtype";
        goto bad;
    } else if (sck_dtype_from_storage_name(p[1]->name, &out->dtype)) {
        return sck_err(SCK_ERR_UNSUPPORTED, "%s: storage type torch.%s is not supported", what, p[1]->name);
    }
    size_t elem = sck_dtype_size(out->dtype);
    if (untyped) out->storage_bytes = (uint64_t)numel;
    else if (sck_mul_overflow_u64((uint64_t)numel, elem, &out->storage_bytes)) {
        why = "storage size overflows";
        goto bad;
    }
    int nd2;
    if (!get_int(args->items[1], &out->storage_offset) || out->storage_offset < 0 ||
        !get_dims(args->items[2], &out->ndim, out->size) || !get_dims(args->items[3], &nd2, out->stride) || nd2 != out->ndim) {
        why = "malformed storage offset, size or stride";
        goto bad;
    }
    /* Every addressed element must lie inside the storage: offset + sum((size-1)*stride) < numel. */
    uint64_t last = (uint64_t)out->storage_offset, any_empty = 0;
    for (int i = 0; i < out->ndim; i++) {
        if (out->size[i] < 0 || out->stride[i] < 0) {
            why = "negative size or stride";
            goto bad;
        }
        if (out->size[i] == 0) any_empty = 1;
        uint64_t t;
        if (out->size[i] > 0 && (sck_mul_overflow_u64((uint64_t)(out->size[i] - 1), (uint64_t)out->stride[i], &t) ||
                                 sck_add_overflow_u64(last, t, &last))) {
            why = "size/stride overflow";
            goto bad;
        }
    }
    uint64_t end_bytes;
    if (!any_empty && (sck_add_overflow_u64(last, 1, &end_bytes) || sck_mul_overflow_u64(end_bytes, elem, &end_bytes) ||
                       end_bytes > out->storage_bytes)) {
        why = "size/stride/offset address elements beyond the storage";
        goto bad;
    }
    return SCK_OK;
bad:
    return sck_err(rc, "%s: data.pkl: %s", what, why);
}

int ti_decode_tensor_pkl(const void *pkl, size_t n, const char *what, ti_tensor *out) {
    pk_arena *arena = NULL;
    pk_obj *root = NULL;
    memset(out, 0, sizeof *out);
    int rc = pk_parse(pkl, n, what, ti_allow_tensor, NULL, NULL, &arena, &root);
    if (!rc) rc = ti_tensor_from_obj(root, what, out);
    pk_arena_free(arena); /* after the message: it may name a string in the arena */
    return rc;
}

int ti_archive_pkl(const uint8_t *data, size_t len, const char *what, zip_dir *dir, const zip_rec **pkl) {
    zip_mem zm = {data, len};
    memset(dir, 0, sizeof *dir);
    *pkl = NULL;
    int rc = zip_read_dir(zip_pread_mem, &zm, 0, len, what, dir);
    if (rc) return rc;
    const zip_rec *pk = zip_find(dir, "data.pkl");
    if (!pk) return sck_err(SCK_ERR_FORMAT, "%s: a torch.save archive without data.pkl", what);
    if (sck_crc32(0, data + pk->data_off, (size_t)pk->size) != pk->crc)
        return sck_err(SCK_ERR_CHECKSUM, "%s: %s/data.pkl does not match its zip CRC-32 (0x%08x)", what,
                       dir->prefix ? dir->prefix : "", pk->crc);
    *pkl = pk;
    return SCK_OK;
}

/* The value a torch.save archive held whole in data[0, len) holds (ti_archive_pkl, then
 * ti_decode_value_pkl). */
int ti_archive_value(const uint8_t *data, size_t len, const char *what, sck_value **out) {
    zip_dir d;
    const zip_rec *pk;
    *out = NULL;
    int rc = ti_archive_pkl(data, len, what, &d, &pk);
    if (!rc) rc = ti_decode_value_pkl(data + pk->data_off, (size_t)pk->size, what, out);
    zip_dir_free(&d);
    return rc;
}

/* ---- plain values ---- */

/* Every global is accepted while parsing: pk_parse only records (module, name) and never imports or
 * calls anything.  to_value then turns the few it knows into values; an object of any other class
 * makes the whole item a PICKLE value, kept as its bytes. */
static int allow_any(void *ctx, const char *module, const char *name) {
    (void)ctx, (void)module, (void)name;
    return 1;
}

/* Protocol 2 spells Python 3's builtins "__builtin__". */
static int is_builtin(const pk_obj *g, const char *name) {
    return g && g->kind == PK_GLOBAL && (!strcmp(g->s, "builtins") || !strcmp(g->s, "__builtin__")) && !strcmp(g->name, name);
}

static int is_known(const pk_obj *g, const char *module, const char *name) {
    return g && g->kind == PK_GLOBAL && !strcmp(g->s, module) && !strcmp(g->name, name);
}

/* The longest int decoded as a value (Python's own limit for printing one). */
#define BIGINT_MAX_BYTES ((size_t)PK_BIGINT_DIGITS * 10 / 24)

#define VALUE_MAX_DEPTH 200

static int to_value(const pk_obj *o, const char *what, int depth, sck_value **out);

static int key_string(const pk_obj *k, char *buf, size_t cap, const char **s) {
    if (k->kind == PK_STR) {
        *s = k->s;
        return 1;
    }
    if (k->kind == PK_INT) {
        snprintf(buf, cap, "%lld", (long long)k->i);
        *s = buf;
        return 1;
    }
    return 0;
}

static int dict_items_to_value(const pk_obj *o, const char *what, int depth, sck_value **out) {
    sck_value *d = sck_value_dict();
    if (!d) return sck_err(SCK_ERR_NOMEM, "%s: out of memory", what);
    for (size_t i = 0; i < o->n; i++) {
        char buf[32];
        const char *ks;
        if (!key_string(o->items[2 * i], buf, sizeof buf, &ks)) {
            sck_value_free(d);
            return sck_err(SCK_ERR_UNSUPPORTED, "%s: dict key of unsupported type (only str and int keys)", what);
        }
        sck_value *item;
        int rc = to_value(o->items[2 * i + 1], what, depth + 1, &item);
        if (rc || (rc = sck_value_dict_set(d, ks, item))) {
            sck_value_free(d);
            return rc == SCK_ERR_NOMEM ? sck_err(rc, "%s: out of memory", what) : rc;
        }
    }
    *out = d;
    return SCK_OK;
}

static int seq_to_value(pk_obj *const *items, size_t n, int tuple, const char *what, int depth, sck_value **out) {
    sck_value *l = tuple ? sck_value_tuple() : sck_value_list();
    if (!l) return sck_err(SCK_ERR_NOMEM, "%s: out of memory", what);
    for (size_t i = 0; i < n; i++) {
        sck_value *item;
        int rc = to_value(items[i], what, depth + 1, &item);
        if (rc || (rc = sck_value_list_append(l, item))) {
            sck_value_free(l);
            return rc == SCK_ERR_NOMEM ? sck_err(rc, "%s: out of memory", what) : rc;
        }
    }
    *out = l;
    return SCK_OK;
}

static int to_value(const pk_obj *o, const char *what, int depth, sck_value **out) {
    *out = NULL;
    if (depth > VALUE_MAX_DEPTH) return sck_err(SCK_ERR_FORMAT, "%s: value nested deeper than %d", what, VALUE_MAX_DEPTH);
    sck_value *v = NULL;
    switch (o->kind) {
    case PK_NONE: v = sck_value_null(); break;
    case PK_BOOL: v = sck_value_bool((int)o->i); break;
    case PK_INT: v = sck_value_int(o->i); break;
    case PK_FLOAT: v = sck_value_float(o->f); break;
    case PK_STR: v = sck_value_string_n(o->s, o->len); break;
    case PK_BYTES: v = sck_value_bytes(o->s, o->len); break;
    case PK_BIGINT: {
        if (o->len > BIGINT_MAX_BYTES) return sck_err(SCK_ERR_UNSUPPORTED, "%s: an int of %zu bytes", what, o->len);
        char *dec = malloc(o->len * 5 / 2 + 3);
        if (!dec) return sck_err(SCK_ERR_NOMEM, "%s: out of memory", what);
        v = pk_long_to_decimal((const uint8_t *)o->s, o->len, dec) ? sck_value_bigint(dec) : NULL;
        free(dec);
        break;
    }
    case PK_TUPLE: return seq_to_value(o->items, o->n, 1, what, depth, out);
    case PK_LIST: return seq_to_value(o->items, o->n, 0, what, depth, out);
    case PK_DICT: return dict_items_to_value(o, what, depth, out);
    case PK_REDUCE:
        if (is_known(o->a, "collections", "OrderedDict") && (!o->b || (o->b->kind == PK_TUPLE && o->b->n == 0)) && !o->state) {
            /* OrderedDict() followed by SETITEMS lands its pairs in the node's items */
            return dict_items_to_value(o, what, depth, out);
        }
        if (is_known(o->a, "_codecs", "encode") && o->b && o->b->kind == PK_TUPLE &&
            o->b->n == 2 && o->b->items[0]->kind == PK_STR && o->b->items[1]->kind == PK_STR &&
            !strcmp(o->b->items[1]->s, "latin1")) {
            /* protocol-2 bytes: _codecs.encode(str_of_latin1_chars, 'latin1') */
            const pk_obj *s = o->b->items[0];
            uint8_t *raw = malloc(s->len ? s->len : 1);
            if (!raw) return sck_err(SCK_ERR_NOMEM, "%s: out of memory", what);
            size_t k = 0;
            for (size_t i = 0; i < s->len; i++) {
                uint8_t c = (uint8_t)s->s[i];
                if (c >= 0xC0 && c <= 0xC3 && i + 1 < s->len) {
                    raw[k++] = (uint8_t)(((c & 0x03) << 6) | ((uint8_t)s->s[++i] & 0x3F));
                } else if (c < 0x80) {
                    raw[k++] = c;
                } else {
                    free(raw);
                    return sck_err(SCK_ERR_FORMAT, "%s: bytes encoded with characters outside latin-1", what);
                }
            }
            v = sck_value_bytes(raw, k);
            free(raw);
            break;
        }
        if (is_builtin(o->a, "bytearray") && o->b && o->b->kind == PK_TUPLE &&
            o->b->n == 1 && o->b->items[0]->kind == PK_BYTES) {
            v = sck_value_bytes(o->b->items[0]->s, o->b->items[0]->len);
            break;
        }
        /* fallthrough */
    default:
        return sck_err(SCK_ERR_UNSUPPORTED, "%s: object of type %s.%s cannot be represented as a value", what,
                       o->a && o->a->kind == PK_GLOBAL ? o->a->s : "?", o->a && o->a->kind == PK_GLOBAL ? o->a->name : "?");
    }
    if (!v) return sck_err(SCK_ERR_NOMEM, "%s: out of memory", what);
    *out = v;
    return SCK_OK;
}

/* Whether o refers to a persistent id (a storage); also 1 once `budget` nodes were visited (memo
 * sharing can make a small pickle a huge tree: treat it as referring to one, the safe answer). */
static int has_persid(const pk_obj *o, int depth, size_t *budget) {
    if (!o || depth > VALUE_MAX_DEPTH + 64 || (*budget)-- == 0) return 1;
    switch (o->kind) {
    case PK_PERSID: return 1;
    case PK_TUPLE: case PK_LIST: case PK_SET:
        for (size_t i = 0; i < o->n; i++)
            if (has_persid(o->items[i], depth + 1, budget)) return 1;
        return 0;
    case PK_DICT:
        for (size_t i = 0; i < 2 * o->n; i++)
            if (has_persid(o->items[i], depth + 1, budget)) return 1;
        return 0;
    case PK_REDUCE: case PK_NEWOBJ:
        for (size_t i = 0; i < 2 * o->n; i++)
            if (has_persid(o->items[i], depth + 1, budget)) return 1;
        return (o->b && has_persid(o->b, depth + 1, budget)) || (o->state && has_persid(o->state, depth + 1, budget));
    default: return 0;
    }
}

static int decode_value(const void *pkl, size_t n, const char *what, int keep_pickle, sck_value **out) {
    pk_arena *arena = NULL;
    pk_obj *root = NULL;
    *out = NULL;
    int rc = pk_parse(pkl, n, what, allow_any, NULL, NULL, &arena, &root);
    if (rc == SCK_OK) rc = to_value(root, what, 0, out);
    if (rc == SCK_ERR_UNSUPPORTED && root) {
        size_t budget = 1u << 20;
        if (has_persid(root, 0, &budget)) {   /* refers to storages beside data.pkl: data.pkl alone is not it */
            pk_arena_free(arena);
            return sck_err(SCK_ERR_UNSUPPORTED, "%s: a value holding tensors or storages", what);
        }
    }
    pk_arena_free(arena);
    if (rc != SCK_ERR_UNSUPPORTED || !keep_pickle) return rc;
    /* Outside the subset (a set, complex, numpy, torch.Size, ...): kept as the bytes torch wrote. */
    sck_err_clear();
    *out = sck_value_pickle(pkl, n);
    return *out ? SCK_OK : sck_err(SCK_ERR_NOMEM, "%s: out of memory", what);
}

int ti_decode_value_pkl(const void *pkl, size_t n, const char *what, sck_value **out) {
    return decode_value(pkl, n, what, 1, out);
}

int ti_decode_plain_value_pkl(const void *pkl, size_t n, const char *what, sck_value **out) {
    return decode_value(pkl, n, what, 0, out);
}

/* ---- naming a pickled value without running it ---- */

/* The first node to_value cannot represent, depth first (NULL if none within the budget). */
static const pk_obj *first_foreign(const pk_obj *o, int depth, size_t *budget) {
    if (!o || depth > VALUE_MAX_DEPTH || (*budget)-- == 0) return NULL;
    pk_obj *const *items = NULL;
    size_t n = 0;
    switch (o->kind) {
    case PK_TUPLE: case PK_LIST: items = o->items, n = o->n; break;
    case PK_DICT: items = o->items, n = 2 * o->n; break;
    case PK_BIGINT: return o->len > BIGINT_MAX_BYTES ? o : NULL;
    case PK_REDUCE:
        if (is_known(o->a, "collections", "OrderedDict")) {
            items = o->items, n = 2 * o->n;
            break;
        }
        if (is_known(o->a, "_codecs", "encode") || is_builtin(o->a, "bytearray")) return NULL;
        return o;
    case PK_NONE: case PK_BOOL: case PK_INT: case PK_FLOAT: case PK_STR: case PK_BYTES: return NULL;
    default: return o;
    }
    for (size_t i = 0; i < n; i++) {
        const pk_obj *f = first_foreign(items[i], depth + 1, budget);
        if (f) return f;
    }
    return NULL;
}

static void name_node(const pk_obj *o, char *buf, size_t cap) {
    const pk_obj *g = o && (o->kind == PK_REDUCE || o->kind == PK_NEWOBJ) ? o->a : NULL;
    if (g && g->kind == PK_GLOBAL) {
        int builtin = !strcmp(g->s, "builtins") || !strcmp(g->s, "__builtin__");
        /* numpy pickles arrays and scalars through helpers; name what they rebuild */
        int np = !strcmp(g->s, "numpy.core.multiarray") || !strcmp(g->s, "numpy._core.multiarray");
        if (np && !strcmp(g->name, "_reconstruct")) snprintf(buf, cap, "numpy.ndarray");
        else if (np && !strcmp(g->name, "scalar")) snprintf(buf, cap, "numpy scalar");
        else if (builtin) snprintf(buf, cap, "%.60s", g->name);
        else snprintf(buf, cap, "%.60s.%.60s", g->s, g->name);
    } else if (o && o->kind == PK_PERSID) {
        snprintf(buf, cap, "storage");
    } else {
        snprintf(buf, cap, "%s", o ? pk_kind_name(o->kind) : "object");
    }
}

void ti_describe_pickle(const void *pkl, size_t n, char *buf, size_t cap) {
    pk_arena *arena = NULL;
    pk_obj *root = NULL;
    if (pk_parse(pkl, n, "pickle", allow_any, NULL, NULL, &arena, &root) != SCK_OK) {
        sck_err_clear();
        snprintf(buf, cap, "pickle");
        return;
    }
    size_t budget = 1u << 20;
    const pk_obj *f = first_foreign(root, 0, &budget);
    char rn[128], fn[128];
    name_node(root, rn, sizeof rn);
    if (f && f != root) {
        name_node(f, fn, sizeof fn);
        snprintf(buf, cap, "%s holding %s", rn, fn);
    } else {
        snprintf(buf, cap, "%s", rn);
    }
    pk_arena_free(arena);
}

int sck_value_describe_pickle(const sck_value *v, char *buf, size_t cap) {
    if (!buf || !cap) return sck_err(SCK_ERR_INVALID_ARG, "sck_value_describe_pickle: no buffer");
    buf[0] = 0;
    if (sck_value_kind_of(v) != SCK_VAL_PICKLE)
        return sck_err(SCK_ERR_INVALID_ARG, "sck_value_describe_pickle: not a pickle value");
    size_t n = 0;
    const char *s = sck_value_get_string(v, &n);
    ti_describe_pickle(s, n, buf, cap);
    return SCK_OK;
}
