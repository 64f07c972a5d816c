/* torch_save.h - what a torch.save `.pt` file holds (a zip of <name>/data.pkl and <name>/data/<n>
 * storages), read without running its pickle: every tensor by key path, and the plain values. */
#ifndef SCK_TORCH_SAVE_H
#define SCK_TORCH_SAVE_H

#include "format/torch_item.h"

typedef struct sck_pt_entry {
    char *key;          /* dotted path of dict keys and list/tuple indices ("" for the root) */
    int is_tensor;
    ti_tensor t;        /* tensors: dtype, shape, strides, storage record and offset */
    char type[32];      /* values: "int", "float", "str", "bool", "None", "bytes", "bigint", or the
                         * global of an object ("collections.OrderedDict" ...), which is never called */
    char *text;         /* values: the value for people (a str quoted, bytes as its length) */
} sck_pt_entry;

typedef struct sck_pt {
    char *prefix;       /* the archive's top folder, e.g. "archive" */
    sck_pt_entry *e;
    size_t n;
} sck_pt;

/* 1 if the file at path starts like a zip archive (PK\3\4), 0 if not or unreadable. */
int sck_pt_looks_like(const char *path);

/* Reads the torch.save archive at `path` into *out (caller frees with sck_pt_free, also after an
 * error).  data.pkl must match its CRC-32; it is parsed by the safe reader, which admits only the
 * globals a tensor needs (torch._utils._rebuild_tensor*, storage classes, OrderedDict): any other
 * global (os.system ...) is refused by name, never imported or called.  Every tensor's storage record
 * must exist and hold the elements its size, stride and offset address.
 * Errors: SCK_ERR_FORMAT (the message names the file, the key and what is wrong), SCK_ERR_CHECKSUM
 * (data.pkl does not match its CRC-32), SCK_ERR_UNSUPPORTED (a refused global, a compressed record, a
 * dtype), SCK_ERR_IO, SCK_ERR_NOMEM. */
int sck_pt_open(const char *path, sck_pt *out);
void sck_pt_free(sck_pt *pt);

#endif
