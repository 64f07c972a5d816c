/* safetensors.h - the safetensors file format: 8-byte little-endian header length, a JSON header
 * {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {str: str}},
 * then the byte buffer.  Offsets are relative to the end of the header. */
#ifndef SCK_SAFETENSORS_H
#define SCK_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "shardckpt.h"
#include "base/util.h"

/* The reference crate's limit on the header (MAX_HEADER_SIZE in safetensors/src/tensor.rs). */
#define ST_MAX_HEADER 100000000ull
#define ST_METADATA_KEY "__metadata__"
/* __metadata__ entries we hold at most: each costs a dict entry and two strings, some 170 bytes for
 * as few as 8 of JSON, so the cap keeps a header of tiny entries under 64 MiB beyond 8x its size;
 * files carry a handful (ours: one per non-tensor entry). */
#define ST_MAX_METADATA 262144

typedef struct st_tensor {
    char *name;
    sck_dtype dtype;
    int ndim;
    int64_t shape[SCK_MAX_DIMS];
    uint64_t begin, end;    /* relative to the data section */
} st_tensor;

typedef struct st_header {
    uint64_t header_len;     /* JSON length (the u64 at offset 0) */
    uint64_t data_start;     /* 8 + header_len */
    st_tensor *t;            /* in file order of data_offsets */
    size_t n;
    sck_value *metadata;     /* "__metadata__" dict of strings, or NULL */
} st_header;

/* Parses a header from `buf` (the first bytes of a file, at least 8 bytes; pass file_size for
 * bounds checks).  If `buf` is too short to hold the whole header, returns SCK_ERR_FORMAT only if
 * the declared length is invalid, else sets *need to the bytes required and returns 1 (call again
 * with more).  Checks: header length <= 100 MB and <= file_size - 8, valid UTF-8 JSON object, known
 * dtypes, shape * elem size == end - begin, offsets within data, tensors contiguous and
 * non-overlapping covering the data section, no duplicate names.
 * Errors: SCK_ERR_FORMAT (message names the file `what` and the tensor), SCK_ERR_UNSUPPORTED (dtype we
 * do not support, e.g. F8), SCK_ERR_NOMEM. */
int st_parse_header(const uint8_t *buf, size_t buflen, uint64_t file_size, const char *what,
                    st_header *out, uint64_t *need);
void st_header_free(st_header *h);
/* Index of tensor `name` or -1. */
long st_find(const st_header *h, const char *name);

/* Builds a header for tensors laid out back to back in the given order (begin/end computed and
 * stored back into t[]).  `metadata` (dict of strings, may be NULL) becomes "__metadata__".  The
 * JSON is padded with spaces so the data section starts 8-byte aligned, as the reference
 * implementation does.  `out` receives the 8-byte length + JSON.  Errors: SCK_ERR_INVALID_ARG, SCK_ERR_NOMEM. */
int st_build_header(st_tensor *t, size_t n, const sck_value *metadata, sck_buf *out);

/* The JSON of a header (len bytes from its '{'), read one entry at a time into h->t (file order, not
 * sorted or checked against the data section yet; every entry's own checks made) and h->metadata.
 * On error h may hold part of the result: free it with st_header_free.  Errors: SCK_ERR_FORMAT,
 * SCK_ERR_UNSUPPORTED, SCK_ERR_NOMEM. */
int st_json_header(const char *what, const uint8_t *json, size_t len, st_header *h);

/* Reads and parses the header of the safetensors file at `path` (st_parse_header's checks).
 * Errors: SCK_ERR_IO, SCK_ERR_FORMAT, SCK_ERR_UNSUPPORTED, SCK_ERR_NOMEM. */
int st_read_header_file(const char *path, st_header *out);

/* The values a safetensors file or a Hugging Face directory (every file its index names) holds in
 * __metadata__ (st_meta_values: strings exactly as they are, the keys "shardckpt.json_keys" lists
 * decoded from JSON, "format": "pt" skipped; see docs/FORMAT.md).  The first file holding a key
 * wins.  *out receives a dict (possibly empty) owned by the caller.
 * Errors: SCK_ERR_IO, SCK_ERR_FORMAT, SCK_ERR_NOMEM. */
int st_read_values(const char *path, sck_value **out);

/* Reads dir/model.safetensors.index.json (the Hugging Face sharded layout).  On success *idx is the
 * parsed index (caller frees) and *weight_map points into it: a dict whose every value is a plain
 * file name (no '/', not "." or "..").  Errors: SCK_ERR_IO, SCK_ERR_FORMAT (naming the index file
 * and the offending key), SCK_ERR_NOMEM. */
int st_read_index(const char *dir, sck_value **idx, const sck_value **weight_map);

#endif
