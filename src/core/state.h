/* state.h - the entries of an sck_state, as save and load see them. */
#ifndef SCK_STATE_H
#define SCK_STATE_H

#include "base/box.h"
#include "base/util.h"
#include "io/wstream.h"

typedef enum ent_kind { ENT_TENSOR = 0, ENT_BLOB = 1, ENT_VALUE = 2 } ent_kind;

typedef struct st_piece {
    sck_box box;
    void *data;          /* row-major over box */
    int dev;             /* data is a device address: touched only through the state's dev_ops */
} st_piece;

typedef struct st_entry {
    char *key;
    ent_kind kind;
    /* tensors */
    sck_dtype dtype;
    int ndim;
    int64_t shape[SCK_MAX_DIMS];
    int replicated;
    st_piece *pieces;
    size_t npieces, cap;
    /* blobs and values: `present` is 1 when the caller supplied data (save) or load filled it */
    int present;
    uint8_t *blob;
    size_t blob_n;
    int verbatim;        /* blob: its bytes are the stored item itself (sck_state_add_item_bytes), not
                          * wrapped in a torch.save archive of bytes */
    sck_value *value;
    int loaded;
    uint8_t *path;       /* sck_state_set_path's path, encoded (src/key_path.h); NULL: the default */
    uint32_t path_len;
} st_entry;

struct sck_state {
    st_entry *e;
    size_t n, cap;
    size_t *slots;       /* open-addressing hash: index+1 of entries, 0 = empty */
    size_t nslots;
    char **unexpected;   /* filled by sck_load */
    size_t nunexpected;
    int flat;            /* an async save's copy: entries, keys, pieces and blobs live in the handle's
                          * snapshot memory (only values are owned; no hash, state_find finds nothing) */
    const sck_device_ops *dev_ops; /* sck_state_set_device (borrowed), or NULL */
    void *dev_ctx;
    size_t ndev;         /* device pieces */
    ws_pool dev_stage;   /* pinned staging buffers (dev_ops->host_alloc) kept for the next save or load */
    uint64_t stamp;      /* drawn anew (state_touch) whenever the structure may change: no two states,
                          * and no two structures of one state, share a stamp; 0 for a flat copy */
};

st_entry *state_find(const sck_state *st, const char *key);
/* Gives st a new stamp: called by everything that adds to a state or loads into it. */
void state_touch(sck_state *st);
/* 1 if a and b have the same ndim and the same boxes, piece for piece (data pointers aside). */
int state_same_boxes(const st_entry *a, const st_entry *b);
void state_clear_unexpected(sck_state *st);
int state_add_unexpected(sck_state *st, const char *key);

#endif
