/*
 * shardckpt_advanced.h - the advanced tier of shardckpt: the building blocks the `shardckpt`
 *                        command line tool is made of, for programs that do what it does.
 *
 * Stability
 * ---------
 * Unlike shardckpt.h, whose functions and types keep their meaning and layout across minor
 * versions, everything declared here MAY CHANGE BETWEEN MINOR VERSIONS (0.1 -> 0.2): a function
 * may gain a parameter, a struct a field, or be removed.  As with zstd's ZSTD_STATIC_LINKING_ONLY
 * section, the declarations are visible only where the program asks for them, by defining
 * SCK_ADVANCED_API before including this header:
 *
 *     #define SCK_ADVANCED_API
 *     #include "shardckpt_advanced.h"
 *
 * and a program that uses them should be built against the exact version it was written for
 * (check sck_version() against SCK_VERSION_STRING).  The functions are exported by both
 * libshardckpt.a and libshardckpt.so like the rest of the API.
 *
 * Errors, memory and threads follow shardckpt.h: every function that can fail returns SCK_OK or a
 * negative sck_status with the message in sck_last_error(); objects from *_open are released with
 * the matching *_close / *_free; distinct objects may be used from distinct threads.
 *
 * What is here
 * ------------
 *   - sck_ckpt_read_flat: a flat row-major element range of a checkpoint tensor;
 *   - sck_safetensors_values: the non-tensor entries a safetensors file or HF directory keeps
 *     in __metadata__;
 *   - sck_st_writer: the streaming safetensors / Hugging Face writer behind `convert`, which lays
 *     the output out first and takes the tensor bytes in any order and any block size;
 *   - sck_key_select: include / exclude globs and a prefix to strip, over checkpoint keys;
 *   - sck_parse_size: sizes such as "5GB" as transformers reads max_shard_size;
 *   - sck_value_describe_pickle: what a pickled Python object is, without running it;
 *   - sck_pt: the tensors and values of a torch.save `.pt` file, read without running its pickle.
 */
#ifndef SHARDCKPT_ADVANCED_H
#define SHARDCKPT_ADVANCED_H

#include "shardckpt.h"

#if !defined(SCK_ADVANCED_API)
#error "shardckpt_advanced.h: define SCK_ADVANCED_API before including it (its API may change between minor versions)"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Reading a checkpoint in flat ranges                                       */
/* ------------------------------------------------------------------------ */

/** Reads elements [begin, begin+count) of tensor entry i of `ck`, the tensor flattened in row-major
 *  order, into `dst` (caller-owned, count * sck_dtype_size(dtype) bytes): the counterpart of
 *  sck_state_add_flat, and how to stream a tensor of any shape in blocks of bounded size.  The
 *  range is read as at most 2*ndim-1 boxes (sck_ckpt_read_box), checksums checked as there.
 *  count 0 reads nothing.
 *  Errors: SCK_ERR_INVALID_ARG (i out of range, a byte entry, the range outside the tensor: the
 *  message names the key and the range), SCK_ERR_MISMATCH (a value of meta.pt), and those of
 *  sck_ckpt_read_box. */
SCK_API int sck_ckpt_read_flat(sck_ckpt *ck, size_t i, uint64_t begin, uint64_t count, void *dst);

/* ------------------------------------------------------------------------ */
/* safetensors __metadata__                                                  */
/* ------------------------------------------------------------------------ */

/** The name of the Hugging Face sharded layout's index file, the commit marker of an HF directory. */
#define SCK_HF_INDEX_NAME "model.safetensors.index.json"

/** The non-tensor entries that the safetensors file `path`, or the Hugging Face directory `path`
 *  (every file its index names), keeps in __metadata__, as sck_save_full writes them
 *  (docs/FORMAT.md): each string exactly as stored, the keys "shardckpt.json_keys" lists decoded
 *  from JSON, the "format" tag left out.  The first file holding a key wins.  sck_ckpt_open does
 *  not read these: it sees only the tensors.
 *  *out receives a dict (possibly empty) owned by the caller (sck_value_free); NULL on error.
 *  Errors: SCK_ERR_IO (path unreadable), SCK_ERR_FORMAT (a malformed header or index, naming the
 *  file), SCK_ERR_NOMEM, SCK_ERR_INVALID_ARG (NULL argument). */
SCK_API int sck_safetensors_values(const char *path, sck_value **out);

/* ------------------------------------------------------------------------ */
/* Streaming safetensors / Hugging Face writer                               */
/* ------------------------------------------------------------------------ */

/** One tensor of the output: its name, dtype and shape (the name is copied). */
typedef struct sck_st_tensor {
    const char *name;
    sck_dtype dtype;
    int ndim;
    int64_t shape[SCK_MAX_DIMS];
} sck_st_tensor;

typedef struct sck_st_writer sck_st_writer;

/**
 * Lays out tensors t[0..n) (in this order) and `values` (a dict of any values, may be NULL) as
 * sck_save_full would write them to `path`, with opts->format, opts->flags (SCK_SAVE_NO_FSYNC)
 * and opts->max_shard_bytes as there (opts may be NULL: one safetensors file, fsync on), then
 * creates the output files under their temporary names ("<name>.tmp"), each holding its header
 * and sized to its final length.  For the HF layout the directory is created if needed; an old
 * export in it (index and shards) is left whole: nothing is renamed into place or removed before
 * sck_st_writer_commit, so a writer freed without a commit, or a crash before it, leaves the
 * old export loadable.  *out is owned by the caller (sck_st_writer_free), NULL on error; on
 * error nothing is left behind (but a directory it created).
 * Errors: SCK_ERR_INVALID_ARG (bad options or arguments, a dtype safetensors cannot name, a
 * duplicate or invalid name, a value "format" or "shardckpt.json_keys" that is not allowed, as in
 * sck_save_full), SCK_ERR_IO, SCK_ERR_NOMEM.
 */
SCK_API int sck_st_writer_open(const char *path, const sck_st_tensor *t, size_t n, const sck_value *values,
                               const sck_full_opts *opts, sck_st_writer **out);

/** Writes `len` bytes at `data` as bytes [offset, offset+len) of tensor i's row-major data (i in
 *  the order given to sck_st_writer_open).  Blocks may come in any order and from any number of
 *  calls; bytes never written read back as zeros.  Errors: SCK_ERR_INVALID_ARG (i out of range, the
 *  range past the tensor's end, NULL data, the writer committed), SCK_ERR_IO (naming the file).
 *  After an error the writer may still be written to, committed or freed. */
SCK_API int sck_st_writer_write(sck_st_writer *w, size_t i, uint64_t offset, const void *data, size_t len);

/** Finishes the output: fsyncs and closes the temporary files (unless SCK_SAVE_NO_FSYNC), renames
 *  them to their final names, and for the HF layout writes the index (atomically, the commit
 *  marker) and removes shards of an earlier save (model-*-of-*.safetensors) the new index does not
 *  name.  Replacing an HF export of another shard count, a crash leaves the old export or the new
 *  one; of the same count (the new shards replace files the old index names), the old index is
 *  removed just before the renames, so a crash during them leaves no index, never a mixed one.  On error the temporary files are removed.  Either way the writer is then only freed.
 *  Errors: SCK_ERR_IO, SCK_ERR_NOMEM, SCK_ERR_INVALID_ARG (already committed). */
SCK_API int sck_st_writer_commit(sck_st_writer *w);

/** Frees the writer; one not committed is abandoned and its temporary files removed.  NULL allowed. */
SCK_API void sck_st_writer_free(sck_st_writer *w);

/* ------------------------------------------------------------------------ */
/* Choosing keys                                                             */
/* ------------------------------------------------------------------------ */

/** Which keys an export keeps and under which names (the arrays and strings are borrowed). */
typedef struct sck_key_select {
    const char *const *include;   /**< globs (fnmatch on the full key); a key is kept if it matches one (none: every key) */
    size_t ninclude;
    const char *const *exclude;   /**< globs; a kept key that matches one is dropped */
    size_t nexclude;
    const char *strip_prefix;     /**< removed from the start of every kept key that has it; NULL: none */
} sck_key_select;

/** The name `key` gets under selection s, or NULL when s drops it.  The result points into `key`
 *  (nothing allocated).  A key that is exactly the prefix keeps its name (it would become "").
 *  s NULL keeps every key unchanged.  Never fails. */
SCK_API const char *sck_key_select_name(const sck_key_select *s, const char *key);

/** Applies s to keys[0..n): out[i] = sck_key_select_name(s, keys[i]) (out has room for n pointers,
 *  borrowed from keys).  Two kept keys that end up with the same name are an error naming both;
 *  `what` (e.g. the source path) starts the message.
 *  Errors: SCK_ERR_INVALID_ARG (a collision), SCK_ERR_NOMEM. */
SCK_API int sck_key_select_apply(const sck_key_select *s, const char *what, const char *const *keys, size_t n,
                                 const char **out);

/* ------------------------------------------------------------------------ */
/* Sizes and values for people                                               */
/* ------------------------------------------------------------------------ */

/** Parses a size such as "5GB", "500MB", "1.5GiB", "10M" or "4096" (bytes), as transformers reads
 *  max_shard_size: decimal units (K/KB, M/MB, G/GB, T/TB, any case) are powers of 1000, binary ones
 *  (KiB, MiB, GiB, TiB) powers of 1024.  Sets *out (e.g. for sck_full_opts.max_shard_bytes).
 *  Errors: SCK_ERR_INVALID_ARG (malformed, zero, negative or over 2^64, the message quoting s). */
SCK_API int sck_parse_size(const char *s, uint64_t *out);

/** What the SCK_VAL_PICKLE value `v` is, without running or importing anything: the Python type
 *  of its root ("set", "complex", "numpy.ndarray", "collections.OrderedDict" ...), followed by
 *  " holding <type>" when a plain container holds such an object ("list holding set").  A pickle
 *  that does not parse is "pickle".  Writes a NUL-terminated string of at most cap-1 bytes into
 *  buf (cap > 0).  For a value of any other kind writes "" and returns SCK_ERR_INVALID_ARG; else
 *  SCK_OK.  Never allocates anything the caller owns. */
SCK_API int sck_value_describe_pickle(const sck_value *v, char *buf, size_t cap);

/* ------------------------------------------------------------------------ */
/* torch.save files                                                          */
/* ------------------------------------------------------------------------ */

typedef struct sck_pt sck_pt;

/** One entry of a torch.save file: a tensor or a plain value, by its key path. */
typedef struct sck_pt_info {
    const char *key;          /**< dotted path of dict keys and list / tuple indices ("" for the root) */
    int is_tensor;
    /* tensors */
    sck_dtype dtype;
    int ndim;
    int64_t shape[SCK_MAX_DIMS];
    uint64_t nbytes;          /**< product(shape) * element size */
    const char *storage;      /**< its storage record, "data/<storage>" in the archive */
    int64_t storage_offset;   /**< in elements */
    /* values */
    const char *type;         /**< "int", "float", "str", "bool", "None", "bytes", "bigint", or the global
                               *   of an object ("collections.OrderedDict" ...), which is never called */
    const char *text;         /**< the value for people (a str quoted, bytes as its length) */
} sck_pt_info;

/** 1 if the file at `path` starts like a zip archive (as a torch.save file does), 0 if not or
 *  unreadable.  Never fails. */
SCK_API int sck_pt_probe(const char *path);

/** Reads the torch.save archive at `path` without running its pickle: data.pkl must match its
 *  CRC-32 and is parsed by the safe reader, which admits only the globals a tensor needs (any other
 *  global, os.system ..., is refused by name, never imported or called); every tensor's storage
 *  record must exist and hold the elements its size, stride and offset address.
 *  *out is owned by the caller (sck_pt_close), NULL on error.
 *  Errors: SCK_ERR_FORMAT (naming the file, the key and what is wrong), SCK_ERR_CHECKSUM (data.pkl
 *  does not match its CRC-32), SCK_ERR_UNSUPPORTED (a refused global, a compressed record, a dtype),
 *  SCK_ERR_IO, SCK_ERR_NOMEM, SCK_ERR_INVALID_ARG (NULL argument). */
SCK_API int sck_pt_open(const char *path, sck_pt **out);
/** Frees `pt`.  NULL allowed. */
SCK_API void sck_pt_close(sck_pt *pt);
/** The archive's top folder, e.g. "archive" (borrowed, lives as long as pt). */
SCK_API const char *sck_pt_prefix(const sck_pt *pt);
/** Number of entries, in the pickle's order. */
SCK_API size_t sck_pt_count(const sck_pt *pt);
/** Fills *info for entry i (pointers borrowed from pt).  Errors: SCK_ERR_INVALID_ARG (i out of range). */
SCK_API int sck_pt_entry(const sck_pt *pt, size_t i, sck_pt_info *info);

#ifdef __cplusplus
}
#endif
#endif /* SHARDCKPT_ADVANCED_H */
