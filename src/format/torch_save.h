/* torch_save.h - what a torch.save `.pt` file holds (a zip of <name>/data.pkl and <name>/data/<n>
 * storages), read without running its pickle: every tensor by key path, and the plain values. */
#ifndef SCK_TORCH_SAVE_H
#define SCK_TORCH_SAVE_H

#include "base/advanced.h"
#include "format/torch_item.h"

/* One entry as the reader keeps it; sck_pt_entry (shardckpt_advanced.h) hands it out as sck_pt_info. */
typedef struct pt_entry {
    char *key;          /* dotted path of dict keys and list/tuple indices ("" for the root) */
    int is_tensor;
    ti_tensor t;        /* tensors: dtype, shape, strides, storage record and offset */
    char type[32];      /* values: "int", "float", "str", "bool", "None", "bytes", "bigint", or the
                         * global of an object ("collections.OrderedDict" ...), which is never called */
    char *text;         /* values: the value for people (a str quoted, bytes as its length) */
} pt_entry;

/* The public API (sck_pt_probe, sck_pt_open, sck_pt_close, sck_pt_prefix, sck_pt_count, sck_pt_entry)
 * is the advanced tier's: include/shardckpt_advanced.h documents it. */
struct sck_pt {
    char *prefix;       /* the archive's top folder, e.g. "archive" */
    pt_entry *e;
    size_t n;
};

#endif
