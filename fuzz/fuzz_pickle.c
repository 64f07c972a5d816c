/* fuzz_pickle.c - libFuzzer entry point for the pickle reader: any input must parse or fail cleanly.
 * Build: make fuzz (see the Makefile); run: build/fuzz/fuzz_pickle -max_total_time=60 fuzz/corpus/pickle */
#include <stddef.h>
#include <stdint.h>

#include "format/pickle.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int allow_all(void *ctx, const char *module, const char *name) {
    (void)ctx;
    (void)module;
    (void)name;
    return 1;
}

/* Reads every reachable node so the sanitizers see any dangling or out-of-bounds pointer; the
 * budget bounds the walk because shared (memoized) nodes can make a DAG exponentially wide. */
static size_t touch(const pk_obj *o, size_t *budget) {
    if (!o || !*budget) return 0;
    (*budget)--;
    size_t sum = (size_t)o->kind;
    switch (o->kind) { /* the kind-specific fields share memory: read only this kind's */
    case PK_NONE: return sum;
    case PK_BOOL:
    case PK_INT: return sum + (size_t)o->i;
    case PK_FLOAT: return sum + (o->f > 0);
    case PK_STR:
    case PK_BYTES:
    case PK_BIGINT: return sum + (unsigned char)o->s[o->len];
    case PK_GLOBAL: return sum + (unsigned char)o->s[0] + (unsigned char)o->name[0];
    default: break;
    }
    size_t entries = o->kind == PK_DICT || o->kind == PK_REDUCE || o->kind == PK_NEWOBJ ? 2 * o->n : o->n;
    for (size_t i = 0; i < entries; i++) sum += touch(o->items[i], budget);
    return sum + touch(o->a, budget) + touch(o->b, budget) + touch(o->state, budget);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    pk_arena *arena = NULL;
    pk_obj *root = NULL;
    if (pk_parse(data, size, "fuzz", allow_all, NULL, NULL, &arena, &root) == SCK_OK) {
        size_t budget = 1u << 16;
        volatile size_t sink = touch(root, &budget);
        (void)sink;
        (void)pk_dict_get(root, "key");
    }
    pk_arena_free(arena);
    return 0;
}
