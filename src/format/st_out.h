/* st_out.h - writing consolidated safetensors output: one file, or the Hugging Face sharded layout
 * (model-0000K-of-0000N.safetensors + model.safetensors.index.json).
 *
 * The layout (which tensor goes to which file, at which absolute byte offset) is a pure function of
 * the tensor list, the metadata and the options, so every rank of a collective save computes the
 * same one and can pwrite() its own bytes straight to their final places.  Files are written under
 * temporary names ("<final>.tmp") and renamed by st_out_commit. */
#ifndef SCK_ST_OUT_H
#define SCK_ST_OUT_H

#include "base/advanced.h"
#include "format/safetensors.h"

#define ST_HF_INDEX SCK_HF_INDEX_NAME
/* transformers' default max_shard_size "5GB" (decimal, as its convert_file_size_to_int reads it) */
#define ST_HF_DEFAULT_SHARD 5000000000ull

typedef struct st_out_file {
    char *name;            /* file name (HF) or full path (single file) */
    sck_buf header;        /* 8-byte length + JSON, padded to 8 bytes */
    uint64_t size;         /* header + data */
} st_out_file;

typedef struct st_layout {
    int hf;                /* HF sharded directory (else one file) */
    char *path;            /* the file (single) or directory (HF) */
    st_out_file *files;
    size_t nfiles;
    size_t n;              /* tensors */
    char **names;          /* tensor i's name (owned copies) */
    uint32_t *file_of;     /* tensor i -> index into files */
    uint64_t *data_off;    /* tensor i -> absolute offset of its first byte in its file */
    uint64_t *nbytes;      /* tensor i -> its byte length */
    uint64_t total_size;   /* sum of tensor bytes (the index's metadata.total_size) */
} st_layout;

/* Lays out tensors t[0..n) (names borrowed only during the call; written in this order) into
 * `path`.  `values` (a dict of strings, may be NULL; st_meta_from_values makes one) goes into
 * __metadata__ of the first file, except "format": every file's __metadata__ holds "format", the
 * string `values` has for it, else "pt" (what transformers checks).  HF: tensors are appended to the
 * current shard until the next one would push its tensor bytes past max_shard (0:
 * ST_HF_DEFAULT_SHARD); a tensor larger than that gets a shard of its own; there is always at least
 * one shard.
 * Errors: SCK_ERR_INVALID_ARG (a "format" that is not a string, bad name, duplicate), SCK_ERR_NOMEM. */
int st_layout_build(const st_tensor *t, size_t n, const sck_value *values, int hf, uint64_t max_shard,
                    const char *path, st_layout *out);
void st_layout_free(st_layout *L);

/* Full path of file i, final (tmp = 0) or temporary (tmp = 1).  Errors: SCK_ERR_INVALID_ARG (too long). */
int st_out_path(const st_layout *L, size_t i, int tmp, char *buf, size_t cap);

/* Step 1 (one process): HF: creates the directory (an old index is left in place: the old export stays
 * whole until step 3).  Creates every temporary file, writes its header and sizes it to its final length.
 * On error, removes what it created.  Nothing is fsynced here: step 3 fsyncs the files with their data.
 * Errors: SCK_ERR_IO, SCK_ERR_INVALID_ARG. */
int st_out_begin(const st_layout *L);
/* Step 2 (any process, after step 1): open temporary file i for writing.  Errors: SCK_ERR_IO. */
int st_out_open(const st_layout *L, size_t i, int *fd);
/* Step 3 (one process, after every writer closed its files): fsyncs the temporary files; HF: when a
 * new shard would replace a file of the same name (same shard count as the old export) removes the old
 * index first, so no index ever names a mix; renames the files to their final names, writes the HF
 * index (atomically; it is the commit marker, replacing an old one in one rename when the shard names
 * differ) and removes stale model-*-of-*.safetensors shards of an earlier save that the new index does
 * not name.  On error, removes the temporary files.  Errors: SCK_ERR_IO, SCK_ERR_NOMEM. */
int st_out_commit(const st_layout *L, int do_fsync);
/* Removes the temporary files (after a failure anywhere). */
void st_out_abort(const st_layout *L);

/* The index JSON for L (HF layout) as transformers writes it: indent 2, keys sorted, final newline.
 * Errors: SCK_ERR_NOMEM. */
int st_index_json(const st_layout *L, sck_buf *out);

/* sck_parse_size (sizes such as "5GB" for max_shard) is the advanced tier's: include/shardckpt_advanced.h. */


#endif
