/*
 * shardckpt.h - save and load sharded checkpoints of distributed training state
 *                in the PyTorch Distributed Checkpoint (DCP) on-disk format.
 *
 * Overview
 * --------
 * A *state* (sck_state) is a set of named entries.  Keys are chosen freely by
 * the caller ("model.layer1.weight", "optimizer.state.layer1.weight.exp_avg",
 * "other.step" ...).  An entry is one of:
 *   - a tensor, of which this rank holds one or more boxes (n-d sub-blocks of
 *     the global tensor) or flat ranges (FSDP/ZeRO style 1-d slices of the
 *     row-major flattened tensor), or the whole tensor (replicated);
 *   - a byte blob;
 *   - a small JSON-like value (sck_value: null, bool, int, float, string, list, dict).
 *
 * sck_save() is collective over a communicator (sck_comm): every rank calls it
 * with its own state; the result is a DCP directory with one data file per
 * rank (__<rank>_0.distcp) and a `.metadata` file, loadable by
 * torch.distributed.checkpoint.  sck_load() is collective too and fills the
 * caller's buffers from any checkpoint, whatever sharding and world size it
 * was saved with, reading only the bytes each rank needs.
 *
 * Errors
 * ------
 * Every function that can fail returns an int status: SCK_OK (0) on success,
 * otherwise one of the negative sck_status codes below.  A human readable
 * message naming the file, key and offset involved is available from
 * sck_last_error() in the same thread until the next failing call.
 * Collective calls return the same status and message on every rank.
 *
 * Memory
 * ------
 * Objects returned by *_new / *_create / *_open functions are owned by the
 * caller and released with the matching *_free / *_close.  Tensor data
 * buffers are always owned by the caller; the library never frees them.
 * Loads keep their large working arrays (read plans, check lists) in huge
 * pages of their own and, once done, keep up to 64 MiB of those mappings in
 * the process for the next load (a fresh page costs a fault on first touch).
 *
 * Thread safety
 * -------------
 * Distinct objects may be used from distinct threads concurrently.  One
 * object must not be used from two threads at once.
 */
#ifndef SHARDCKPT_H
#define SHARDCKPT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Exported symbols                                                          */
/* ------------------------------------------------------------------------ */

/* SCK_API marks the functions the library exports.  The library is compiled with
 * -fvisibility=hidden, so libshardckpt.so exports exactly these, and libshardckpt.a
 * is one object whose other globals are local: no internal name can collide with one
 * of the caller's.  Defined elsewhere first (e.g. empty), that definition is kept. */
#ifndef SCK_API
#if defined(__GNUC__) || defined(__clang__)
#define SCK_API __attribute__((visibility("default")))
#else
#define SCK_API
#endif
#endif

#define SCK_VERSION_MAJOR 0
#define SCK_VERSION_MINOR 1
#define SCK_VERSION_PATCH 0
#define SCK_VERSION_STR2_(x) #x
#define SCK_VERSION_STR_(a, b, c) SCK_VERSION_STR2_(a) "." SCK_VERSION_STR2_(b) "." SCK_VERSION_STR2_(c)
/** The version of this header, "MAJOR.MINOR.PATCH" ("0.1.0"). */
#define SCK_VERSION_STRING SCK_VERSION_STR_(SCK_VERSION_MAJOR, SCK_VERSION_MINOR, SCK_VERSION_PATCH)

/** The version of the library linked at run time, "MAJOR.MINOR.PATCH": compare it with
 *  SCK_VERSION_STRING to find a shared library older or newer than the header a program was
 *  built with.  The string is static, owned by the library; never fails. */
SCK_API const char *sck_version(void);

/** Most tensor dimensions supported. */
#define SCK_MAX_DIMS 16

/* ------------------------------------------------------------------------ */
/* Status codes                                                              */
/* ------------------------------------------------------------------------ */

typedef enum sck_status {
    SCK_OK = 0,
    SCK_ERR_INVALID_ARG = -1,  /**< bad argument from the caller */
    SCK_ERR_NOMEM = -2,        /**< an allocation failed */
    SCK_ERR_IO = -3,           /**< open/read/write/fsync/rename failed (errno in message) */
    SCK_ERR_FORMAT = -4,       /**< a file is malformed, truncated or hostile */
    SCK_ERR_UNSUPPORTED = -5,  /**< valid input using a feature we do not implement */
    SCK_ERR_MISSING_KEY = -6,  /**< a requested key is not in the checkpoint */
    SCK_ERR_UNEXPECTED_KEY = -7, /**< the checkpoint holds a key that was not requested (opt-in) */
    SCK_ERR_MISMATCH = -8,     /**< dtype, shape or kind differ between request and checkpoint, or between ranks */
    SCK_ERR_COVERAGE = -9,     /**< shards overlap, leave holes, or fall outside the tensor */
    SCK_ERR_COMM = -10,        /**< the communicator failed */
    SCK_ERR_PEER = -11,        /**< another rank failed; the message is that rank's message */
    SCK_ERR_CHECKSUM = -12,    /**< stored bytes do not match their checksum */
    SCK_ERR_BUSY = -13         /**< another save of the same checkpoint directory is running, or
                                     replaced the checkpoint while it was being read */
} sck_status;

#if defined(__GNUC__) || defined(__clang__)
#define SCK_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define SCK_PRINTF(a, b)
#endif

/** Records `status` and a printf-formatted message as the calling thread's last error (what
 *  sck_last_error() returns) and returns `status`, so that a communication backend (sck_comm_ops)
 *  can write `return sck_err(SCK_ERR_COMM, "send to rank %d failed", r);`.  Messages longer than
 *  1 KiB are shortened.  Never fails; allocates nothing the caller owns. */
SCK_API int sck_err(int status, const char *fmt, ...) SCK_PRINTF(2, 3);

/** Message describing the last error in the calling thread (never NULL; "" if none).
 *  The string is owned by the library and valid until the next failing call in this thread. */
SCK_API const char *sck_last_error(void);

/** Short constant name of a status code, e.g. "SCK_ERR_IO". */
SCK_API const char *sck_status_name(int status);

/* ------------------------------------------------------------------------ */
/* Data types                                                                */
/* ------------------------------------------------------------------------ */

/* Every dtype torch can save (its storage dtypes).  Values are stable: they are stored in shardckpt's
 * metadata side file, so new dtypes are only ever appended.  The library moves elements as opaque
 * bytes of sck_dtype_size() each; only a big-endian torch file makes it look inside (a byte swap per
 * component: complex numbers swap each half).  COMPLEX32/64/128 are (real, imaginary) pairs of
 * float16/32/64.  The float8 dtypes are one byte each: E4M3FN and E5M2 as in the OCP FP8 spec, the FNUZ
 * variants with a single NaN and no negative zero, E8M0FNU an unsigned power-of-two scale.  BITS* are
 * torch's uninterpreted bit containers.  Quantized (qint8 ...) and sub-byte (uint1..7, int1..7)
 * dtypes are not storage dtypes torch can save, and are refused wherever met, naming them. */
typedef enum sck_dtype {
    SCK_F32 = 0, SCK_F64, SCK_F16, SCK_BF16,
    SCK_I8, SCK_I16, SCK_I32, SCK_I64,
    SCK_U8, SCK_BOOL,
    SCK_COMPLEX64, SCK_COMPLEX128, SCK_COMPLEX32,
    SCK_U16, SCK_U32, SCK_U64,
    SCK_F8_E4M3FN, SCK_F8_E4M3FNUZ, SCK_F8_E5M2, SCK_F8_E5M2FNUZ, SCK_F8_E8M0FNU,
    SCK_BITS8, SCK_BITS16, SCK_BITS1X8, SCK_BITS2X4, SCK_BITS4X2,
    SCK_DTYPE_COUNT
} sck_dtype;

/** Bytes per element of `dt`, or 0 for an invalid dtype. */
SCK_API size_t sck_dtype_size(sck_dtype dt);
/** torch's name for `dt` ("float32", "bfloat16", "float8_e4m3fn", "complex64", "uint16", "bool" ...),
 *  or "?" for an invalid dtype. */
SCK_API const char *sck_dtype_name(sck_dtype dt);
/** safetensors' name for `dt` ("F32", "F8_E4M3", "C64" ...), or NULL where safetensors has none
 *  (complex32/128, the float8 FNUZ variants, bits*) or `dt` is invalid. */
SCK_API const char *sck_dtype_safetensors_name(sck_dtype dt);
/** Parse a dtype name: torch names and aliases ("float32", "half", "cfloat", "float8_e5m2" ...) or
 *  safetensors names ("F32", "BF16", "F8_E4M3", "U64" ...).
 *  Returns SCK_OK and sets *out, or SCK_ERR_INVALID_ARG. */
SCK_API int sck_dtype_from_name(const char *name, sck_dtype *out);

/* ------------------------------------------------------------------------ */
/* JSON-like values (for user data: step counters, RNG state, config ...)    */
/* ------------------------------------------------------------------------ */

typedef struct sck_value sck_value;

/* TUPLE is a list that torch gets back as a Python tuple (the list functions work on it).  BIGINT is
 * an integer beyond int64, held as decimal text (sck_value_get_string).  PICKLE is a Python object
 * outside this subset (a set, complex, a numpy array, torch.Size ...), kept as the pickle bytes that
 * torch.save wrote for it (sck_value_get_string): nothing in it is ever run or imported, and saving
 * it writes those bytes back unchanged.  Only a whole byte item can be a PICKLE value. */
typedef enum sck_value_kind {
    SCK_VAL_NULL = 0, SCK_VAL_BOOL, SCK_VAL_INT, SCK_VAL_FLOAT,
    SCK_VAL_STRING, SCK_VAL_BYTES, SCK_VAL_LIST, SCK_VAL_DICT,
    SCK_VAL_TUPLE, SCK_VAL_BIGINT, SCK_VAL_PICKLE
} sck_value_kind;

/* Constructors return a new value owned by the caller, or NULL when out of memory. */
SCK_API sck_value *sck_value_null(void);
SCK_API sck_value *sck_value_bool(int b);
SCK_API sck_value *sck_value_int(int64_t i);
SCK_API sck_value *sck_value_float(double f);
/** Copies the NUL-terminated UTF-8 string `s`. */
SCK_API sck_value *sck_value_string(const char *s);
/** Copies `n` bytes of `s` (may contain NUL). */
SCK_API sck_value *sck_value_string_n(const char *s, size_t n);
/** Copies `n` bytes of raw data. */
SCK_API sck_value *sck_value_bytes(const void *data, size_t n);
SCK_API sck_value *sck_value_list(void);
SCK_API sck_value *sck_value_dict(void);
/** An empty tuple (fill it with sck_value_list_append). */
SCK_API sck_value *sck_value_tuple(void);
/** The integer written as decimal text `s` ("-?[0-9]+", no leading zeros); one that fits in int64
 *  comes back as SCK_VAL_INT.  NULL when out of memory or `s` is not such a number. */
SCK_API sck_value *sck_value_bigint(const char *s);
/** Copies `n` (> 0) bytes of a pickle stream (a torch.save archive's data.pkl) as a PICKLE value.
 *  The bytes are not checked here; saving a state that holds one writes them as they are. */
SCK_API sck_value *sck_value_pickle(const void *data, size_t n);

/** Appends `item` to `list` (a list or tuple), taking ownership of `item` (also on failure, where it is freed).
 *  Errors: SCK_ERR_INVALID_ARG (not a list / NULL), SCK_ERR_NOMEM. */
SCK_API int sck_value_list_append(sck_value *list, sck_value *item);
/** Sets dict[key] = item, replacing (and freeing) any previous value; keeps insertion order.
 *  Takes ownership of `item` (also on failure).  Errors: SCK_ERR_INVALID_ARG, SCK_ERR_NOMEM. */
SCK_API int sck_value_dict_set(sck_value *dict, const char *key, sck_value *item);

/** Deep copy; NULL when out of memory. */
SCK_API sck_value *sck_value_clone(const sck_value *v);
/** Frees `v` and everything it contains.  NULL is allowed. */
SCK_API void sck_value_free(sck_value *v);

/* Accessors.  Pointers returned are borrowed from `v` and live as long as it does. */
SCK_API sck_value_kind sck_value_kind_of(const sck_value *v);
SCK_API int sck_value_get_bool(const sck_value *v);       /**< 0 unless a true bool */
SCK_API int64_t sck_value_get_int(const sck_value *v);    /**< 0 unless an int */
SCK_API double sck_value_get_float(const sck_value *v);   /**< floats, and ints converted; else 0 */
/** String, bytes, bigint (decimal) or pickle data (NUL-terminated for convenience) and its length in
 *  *n (may be NULL); NULL for other kinds. */
SCK_API const char *sck_value_get_string(const sck_value *v, size_t *n);
/** Number of items of a list, tuple or dict; 0 otherwise. */
SCK_API size_t sck_value_len(const sck_value *v);
/** i-th item of a list / tuple or i-th value of a dict (insertion order); NULL if out of range. */
SCK_API sck_value *sck_value_at(const sck_value *v, size_t i);
/** i-th key of a dict; NULL if out of range. */
SCK_API const char *sck_value_key_at(const sck_value *v, size_t i);
/** Value of `key` in a dict; NULL if absent or not a dict. */
SCK_API sck_value *sck_value_dict_get(const sck_value *v, const char *key);
/** 1 if a and b are deeply equal (floats compared bitwise; a tuple never equals a list; pickles
 *  compare by their bytes), else 0. */
SCK_API int sck_value_equal(const sck_value *a, const sck_value *b);

/** Serializes `v` as compact JSON into a new NUL-terminated string owned by the caller (free()).
 *  Bytes become {"__bytes__": "<hex>"}, pickles {"__pickle__": "<hex>"}, tuples arrays, big ints
 *  plain JSON numbers; non-finite floats become NaN/Infinity/-Infinity.
 *  Returns NULL when out of memory. */
SCK_API char *sck_value_to_json(const sck_value *v);
/** Parses JSON text of `n` bytes into *out (owned by the caller).
 *  Errors: SCK_ERR_FORMAT (message gives the byte offset), SCK_ERR_NOMEM. */
SCK_API int sck_value_from_json(const char *text, size_t n, sck_value **out);

/* ------------------------------------------------------------------------ */
/* Communicators                                                             */
/* ------------------------------------------------------------------------ */

typedef struct sck_comm sck_comm;

/** The operations a communication backend provides.  All are collective
 *  except where noted and return SCK_OK or a negative status.  `ctx` is the
 *  backend's own pointer given to sck_comm_create. */
typedef struct sck_comm_ops {
    /** Every rank contributes `n` bytes at `send`; on return *recv points to a
     *  malloc'ed buffer (freed by the caller with free()) holding all ranks'
     *  contributions concatenated in rank order, and counts[r] is rank r's
     *  length (counts has room for size entries). */
    int (*allgatherv)(void *ctx, const void *send, size_t n, void **recv, size_t *counts);
    /** Root's `*n` bytes at `*buf` are delivered to every rank: non-root ranks
     *  receive a malloc'ed *buf (caller frees) and *n.  On root nothing changes. */
    int (*bcast)(void *ctx, void **buf, size_t *n, int root);
    /** Waits until every rank has entered. */
    int (*barrier)(void *ctx);
    /** Releases `ctx` (not collective).  May be NULL. */
    void (*destroy)(void *ctx);
} sck_comm_ops;

/** Wraps a backend.  The ops table must outlive the comm.  Returns NULL when out of memory. */
SCK_API sck_comm *sck_comm_create(const sck_comm_ops *ops, void *ctx, int rank, int size);
/** A communicator of one rank (rank 0 of 1).  Returns NULL when out of memory. */
SCK_API sck_comm *sck_comm_single(void);
/** Frees a communicator (calls the backend's destroy).  NULL is allowed. */
SCK_API void sck_comm_free(sck_comm *comm);
SCK_API int sck_comm_rank(const sck_comm *comm);
SCK_API int sck_comm_size(const sck_comm *comm);

/** Collective: every rank passes its own status (message in sck_last_error()).  Every rank
 *  returns the status of the lowest-numbered failing rank, its message prefixed "rank R: ",
 *  or SCK_OK if all succeeded.  Use it before any collective that a local failure would skip.
 *  Errors also: SCK_ERR_COMM, SCK_ERR_NOMEM. */
SCK_API int sck_comm_agree(sck_comm *comm, int status);

/** Threads backend: runs fn(comm, arg) on `nranks` threads, each with its own
 *  communicator of rank r of nranks, and waits for all.  The communicators
 *  are freed when the threads end.  Returns SCK_OK if every fn returned
 *  SCK_OK, otherwise the status returned by the lowest failing rank.
 *  Errors also: SCK_ERR_INVALID_ARG (nranks < 1), SCK_ERR_NOMEM, SCK_ERR_COMM
 *  (a thread could not be started). */
SCK_API int sck_threads_run(int nranks, int (*fn)(sck_comm *comm, void *arg), void *arg);

/* ------------------------------------------------------------------------ */
/* State                                                                     */
/* ------------------------------------------------------------------------ */

typedef struct sck_state sck_state;

/** A new empty state, or NULL when out of memory.  Free with sck_state_free. */
SCK_API sck_state *sck_state_new(void);
/** Frees the state and the blobs/values it holds.  Never frees tensor buffers.  NULL allowed. */
SCK_API void sck_state_free(sck_state *st);

/**
 * Adds a box of tensor `key` held by this rank: the n-d block at `offsets`
 * with extent `sizes` of a global tensor of shape `shape` (ndim entries
 * each; ndim 0 is a scalar).  `data` points to the block's elements in
 * row-major order; it is read by sck_save and written by sck_load, and must
 * stay valid until then.  A key may get several boxes on one rank; all calls
 * for one key must agree on dtype and shape.
 * Errors: SCK_ERR_INVALID_ARG (NULL key/data with non-empty box, ndim out of
 * range, box outside shape, boxes of one key overlapping on this rank),
 * SCK_ERR_MISMATCH (dtype/shape differ from earlier calls for key), SCK_ERR_NOMEM.
 */
SCK_API int sck_state_add_box(sck_state *st, const char *key, sck_dtype dtype, int ndim,
                      const int64_t *shape, const int64_t *offsets, const int64_t *sizes,
                      void *data);

/**
 * Adds a flat shard: elements [begin, begin+count) of tensor `key` flattened
 * in row-major order (how FSDP and ZeRO shard parameters).  `data` holds the
 * `count` elements.  Internally the range is split into at most 2*ndim-1 boxes,
 * which is how it is stored on disk.  Errors as sck_state_add_box.
 */
SCK_API int sck_state_add_flat(sck_state *st, const char *key, sck_dtype dtype, int ndim,
                       const int64_t *shape, int64_t begin, int64_t count, void *data);

/**
 * Adds a tensor every rank holds in full.  It is written once (by one rank)
 * rather than once per rank; every rank receives all of it on load.
 * Errors as sck_state_add_box.
 */
SCK_API int sck_state_add_replicated(sck_state *st, const char *key, sck_dtype dtype, int ndim,
                             const int64_t *shape, void *data);

/**
 * Adds a byte blob.  For save, `data` (n bytes) is copied.  For load, pass
 * data=NULL, n=0 to request the blob; read it after sck_load with sck_state_blob.
 * Blobs are treated as replicated: when several ranks save the same key, the
 * lowest rank's copy is kept.
 * Errors: SCK_ERR_INVALID_ARG (duplicate key), SCK_ERR_NOMEM.
 */
SCK_API int sck_state_add_blob(sck_state *st, const char *key, const void *data, size_t n);

/**
 * Adds a byte entry stored as exactly the `n` bytes at `data` (copied): the
 * item in the data file is those bytes, not a torch.save archive of them as
 * sck_state_add_blob makes.  For bytes another writer serialized already,
 * chiefly the torch.save archive torch's SavePlanner hands a StorageWriter
 * for each non-tensor item (python/shardckpt/torch.py): torch's DCP loader
 * torch.loads the item, shardckpt's loader decodes it as a value (load it
 * with sck_state_add_value(st, key, NULL)).  Its CRC-32C is recorded like
 * every item's.  The entry never goes to meta.pt (SCK_SAVE_FABRIC keeps it a
 * DCP item); sck_save_full decodes it and stores its value.  Replicated like
 * blobs: every rank that saves `key` must add it this way.  Save only.
 * Errors: SCK_ERR_INVALID_ARG (duplicate key; NULL data or n == 0), SCK_ERR_NOMEM.
 */
SCK_API int sck_state_add_item_bytes(sck_state *st, const char *key, const void *data, size_t n);

/**
 * Adds a JSON-like value, taking ownership of `v` (also on failure).  For load,
 * pass v=NULL to request the value; read it after sck_load with sck_state_value.
 * Values are replicated like blobs.
 * Errors: SCK_ERR_INVALID_ARG (duplicate key), SCK_ERR_NOMEM.
 */
SCK_API int sck_state_add_value(sck_state *st, const char *key, sck_value *v);

/**
 * Sets the path of entry `key` (added before) in the nested state dict its
 * flattened key stands for: `path` is a list value of strings (dict keys)
 * and non-negative ints (list positions) whose elements joined by "." make
 * `key`, e.g. ["optimizer", "state", "fc1.weight", "exp_avg"] for
 * "optimizer.state.fc1.weight.exp_avg".  torch records it in `.metadata`'s
 * planner_data and unflattens with it (dcp_to_torch_save, optimizer state
 * loading), so a key whose path torch would split otherwise needs it.  An
 * entry without one has the default path: the key's part before its first
 * dot, then the rest (["model", "layer.weight"]), or [key] for a key
 * without a dot.  `path` is copied (the caller keeps it).  On a save,
 * ranks that set a path for a key must set the same (SCK_ERR_MISMATCH).
 * Errors: SCK_ERR_INVALID_ARG (no such entry; not such a list; the
 * elements do not make the key), SCK_ERR_NOMEM.
 */
SCK_API int sck_state_set_path(sck_state *st, const char *key, const sck_value *path);

/** After sck_load: the blob of `key` (borrowed, valid until the state is freed).
 *  Errors: SCK_ERR_MISSING_KEY (not requested, or not found in a non-strict load). */
SCK_API int sck_state_blob(const sck_state *st, const char *key, const void **data, size_t *n);
/** After sck_load: the value of `key` (borrowed), or NULL if absent. */
SCK_API const sck_value *sck_state_value(const sck_state *st, const char *key);

/** Number of entries (distinct keys) in the state. */
SCK_API size_t sck_state_count(const sck_state *st);
/** Key of the i-th entry (insertion order), or NULL. */
SCK_API const char *sck_state_key(const sck_state *st, size_t i);
/** After sck_load: 1 if `key` was found in the checkpoint and loaded, else 0. */
SCK_API int sck_state_loaded(const sck_state *st, const char *key);
/** After sck_load: keys present in the checkpoint but not requested.  Returns
 *  their number; *keys (borrowed, may be NULL) receives the array. */
SCK_API size_t sck_state_unexpected(const sck_state *st, const char *const **keys);

/* ------------------------------------------------------------------------ */
/* Device memory (tensors on a GPU or other accelerator)                     */
/* ------------------------------------------------------------------------ */

/** The memory operations of a device whose memory the library must never touch directly (a GPU's).
 *  A state that holds device pieces (sck_state_add_device_box ...) is saved and loaded through them:
 *  sck_save copies each piece device -> host into the writer's staging buffers (2 x staging_mib, from
 *  host_alloc when given) and writes them from there, the copy of the next block overlapping the
 *  write of the one before; sck_load reads each block into host staging and copies it up.  No
 *  second host copy of the state is ever made (an async save's snapshot aside: sck_save_async).
 *  All return SCK_OK or a negative status (set a message with sck_err: the library prefixes it with
 *  the tensor and byte offset).  `ctx` is the pointer given to sck_state_set_device.  The library
 *  calls them from the thread of the save or load, or (sck_save_async with SCK_SAVE_NO_COPY) its
 *  background writer, never from two threads at once for one state; give each rank its own ctx.
 *  libshardckpt_cuda implements them for CUDA (include/shardckpt_cuda.h). */
typedef struct sck_device_ops {
    /** Copies n bytes from device address `dev` to host memory `host`.  May return before the copy
     *  is done when `wait` is set: the bytes are read only after wait returns. */
    int (*copy_to_host)(void *ctx, void *host, const void *dev, size_t n);
    /** Copies n bytes from host memory `host` to device address `dev`; asynchronous as copy_to_host
     *  (`host` stays unchanged until wait returns). */
    int (*copy_to_device)(void *ctx, void *dev, const void *host, size_t n);
    /** Waits for every copy issued through ctx so far and returns the first error among them.
     *  NULL: both copies are synchronous. */
    int (*wait)(void *ctx);
    /** n bytes of page-locked (pinned) host memory, 4 KiB aligned, or NULL when none is left; NULL
     *  function: the library uses its own (pageable) memory for staging and snapshots. */
    void *(*host_alloc)(void *ctx, size_t n);
    /** Frees what host_alloc returned (p, and the n asked for).  Required with host_alloc. */
    void (*host_free)(void *ctx, void *p, size_t n);
} sck_device_ops;

/** Sets the device operations of `st`'s device pieces.  The table and ctx are borrowed: they must
 *  outlive `st` and every sck_async handle that saved it (its snapshot is host_alloc'ed memory).  The
 *  state keeps the two pinned staging buffers of its last save or load (host_alloc'ed, staging_mib
 *  each) for the next one, and gives them back with host_free in sck_state_free (or when the ops
 *  change).  Calls per save: one copy_to_host and one wait per staging block of each piece; per
 *  load: one copy_to_device per piece part in a block and one wait per block.  One table per
 *  state; setting another while device pieces are added is SCK_ERR_INVALID_ARG.
 *  Errors: SCK_ERR_INVALID_ARG (NULL st/ops, copy_to_host or copy_to_device missing, host_alloc
 *  without host_free). */
SCK_API int sck_state_set_device(sck_state *st, const sck_device_ops *ops, void *ctx);

/** As sck_state_add_box, for a box whose `data` is a device address (sck_state_set_device first).
 *  The library reads and writes it only through the ops.  Errors as sck_state_add_box, and
 *  SCK_ERR_INVALID_ARG when the state has no device operations. */
SCK_API int sck_state_add_device_box(sck_state *st, const char *key, sck_dtype dtype, int ndim, const int64_t *shape,
                                     const int64_t *offsets, const int64_t *sizes, void *data);
/** As sck_state_add_flat, for a flat range at device address `data`.  Errors as sck_state_add_device_box. */
SCK_API int sck_state_add_device_flat(sck_state *st, const char *key, sck_dtype dtype, int ndim, const int64_t *shape,
                                      int64_t begin, int64_t count, void *data);
/** As sck_state_add_replicated, for a tensor at device address `data`.  Errors as sck_state_add_device_box. */
SCK_API int sck_state_add_device_replicated(sck_state *st, const char *key, sck_dtype dtype, int ndim, const int64_t *shape,
                                            void *data);

/* ------------------------------------------------------------------------ */
/* Save and load                                                             */
/* ------------------------------------------------------------------------ */

typedef struct sck_save_opts {
    /** Bit set of SCK_SAVE_* flags. */
    unsigned flags;
    /** Size in MiB of each of the two staging buffers a rank's writer uses
     *  (0: 64).  Headers are copied into them; tensor data is written
     *  straight from the caller's buffers, except pieces under 1 KiB and,
     *  with SCK_SAVE_DIRECT_IO, pieces under 256 KiB and unaligned data,
     *  which are copied too.  This bounds the extra memory of sck_save to
     *  about 2 x staging_mib per rank.  Device pieces (sck_state_add_device_box)
     *  are copied device -> host into these buffers block by block (pinned when
     *  the ops have host_alloc) and written from there, within the same bound. */
    unsigned staging_mib;
    /** Reserved, must be 0 (sck_save and sck_save_async reject a nonzero one with SCK_ERR_INVALID_ARG naming it). */
    unsigned reserved[6];
} sck_save_opts;

/** The fsync policy.  By default every rank fsyncs its data file, and rank 0
 *  fsyncs `.metadata` and the directories it creates and renames, before
 *  sck_save returns.  This flag skips every fsync (data files and
 *  directories): faster, but a crash may then leave a checkpoint that
 *  fails its checksums or is missing. */
#define SCK_SAVE_NO_FSYNC 0x1u
/** Write data files with O_DIRECT, bypassing the page cache (falls back to
 *  buffered writes where the file system refuses it).  Tensor data that is
 *  4 KiB aligned in memory is written from the caller's buffers; the rest is
 *  copied through the staging buffers.  Without it, writes are buffered and
 *  writeback is streamed behind the writer, so the final fsync is short and
 *  the page cache does not fill up with checkpoint data. */
#define SCK_SAVE_DIRECT_IO 0x2u
/** sck_save_async only: do not copy tensor data; the caller promises not to
 *  modify (or free) any tensor buffer of the state until sck_wait returns. */
#define SCK_SAVE_NO_COPY 0x4u
/** sck_save_async only: the background writer runs at the caller's CPU
 *  priority and scheduling policy.  By default (Linux) it runs 10 nice levels
 *  below the calling thread (at most 19) and under SCHED_BATCH (its wake-ups
 *  do not preempt other threads), so that it yields the CPU to the caller's
 *  threads; on idle CPUs that costs it nothing. */
#define SCK_SAVE_FULL_PRIORITY 0x8u
/** Lightning Fabric's layout: the values and blobs at the top of the state
 *  dict (those whose path, sck_state_set_path, has one element; by default
 *  keys without a dot, such as "step" or "hparams") go to `meta.pt`, a
 *  torch.save archive of the dict {key: value} that rank 0 writes beside
 *  `.metadata` (blobs as Python bytes), instead of being DCP byte items.
 *  `torch.load(dir + "/meta.pt", weights_only=True)` returns that dict, and
 *  fabric.load(dir, state) takes the directory for a sharded checkpoint (it
 *  requires meta.pt) and restores them.  Everything else (tensors, values
 *  under "model." or "optimizer.") stays in DCP.  As Fabric does, meta.pt
 *  holds rank 0's copy: an entry for it that rank 0 does not supply is
 *  SCK_ERR_INVALID_ARG on every rank.  The file is written inside the
 *  atomic commit, before `.metadata`.  Loads read meta.pt's entries
 *  wherever a checkpoint has one (sck_load, sck_ckpt_open). */
#define SCK_SAVE_FABRIC 0x10u

/**
 * Saves the state of every rank of `comm` into directory `dir` (created if
 * needed, parents must exist).  Collective: every rank must call it with the
 * same `dir`.  opts may be NULL for defaults.
 *
 * Checks across ranks before writing anything: every key has one kind, dtype
 * and global shape on all ranks; the boxes of each tensor do not overlap
 * (replicated copies aside) and cover it exactly once.
 *
 * Atomic: ranks write into the sibling directory `<dir>.tmp-<id>`, which
 * replaces `dir` only once complete (docs/FORMAT.md, "Commit").  On error,
 * and after a crash at any point, `dir` is the previous checkpoint (or
 * absent if there was none).  Saving over an existing `dir` replaces it
 * whole, so it may hold only checkpoint files (`.metadata`, `.metadata.sck`,
 * `*.distcp`, `meta.pt`); the parent directory must be writable.  One save per `dir`
 * at a time.  Every item's CRC-32C is recorded in `.metadata`, where torch
 * ignores it; `.metadata.sck` holds the decoded index for fast loads.
 *
 * Errors (the same on every rank): SCK_ERR_INVALID_ARG (also: `dir` holds
 * other files), SCK_ERR_BUSY (another save of `dir` is running),
 * SCK_ERR_MISMATCH, SCK_ERR_COVERAGE, SCK_ERR_IO, SCK_ERR_NOMEM,
 * SCK_ERR_COMM, SCK_ERR_PEER.
 */
SCK_API int sck_save(sck_comm *comm, const char *dir, const sck_state *st, const sck_save_opts *opts);

/**
 * Asynchronous save: a handle that runs one save at a time in the
 * background.  Create it once and reuse it for every checkpoint: it keeps
 * its snapshot memory between saves.  Returns NULL when out of memory.
 */
typedef struct sck_async sck_async;
SCK_API sck_async *sck_async_new(void);
/** Frees the handle and its snapshot memory.  If a save is still pending
 *  (sck_wait not called), waits for this rank's file writing and abandons
 *  the save: nothing is published, and the next save into the same `dir`
 *  removes what it left.  NULL is allowed. */
SCK_API void sck_async_free(sck_async *a);

/**
 * Starts saving `st` like sck_save (same arguments, checks, atomicity and
 * errors) and returns once this rank's part is snapshotted: the local plans
 * are exchanged, blobs and values are copied, and every tensor piece of the
 * state is copied into the handle's snapshot memory (not copied with
 * SCK_SAVE_NO_COPY).  Device pieces (sck_state_add_device_box) are copied
 * device -> host into the snapshot through the state's ops, in pinned memory
 * from their host_alloc where they have one (the snapshot is host memory,
 * never a second copy on the device); with SCK_SAVE_NO_COPY they are instead
 * streamed from the device by the background writer, through pinned staging,
 * and must stay unchanged until sck_wait.  The data file is written by a background thread
 * while the caller goes on, at a lower CPU priority (SCK_SAVE_FULL_PRIORITY);
 * sck_wait finishes the save.  After a successful
 * return the caller may modify its tensors and free `st` (with
 * SCK_SAVE_NO_COPY: tensor buffers must stay unchanged until sck_wait).
 *
 * Collective, and so is sck_wait.  Rule for the communicator: the library
 * uses `comm` only inside sck_save_async and sck_wait, in the calling
 * thread; the background thread never touches it, so the caller may use
 * `comm` for its own collectives in between.  Every rank must call
 * sck_wait before the next sck_save_async on the same handle.
 *
 * Only the plan exchange and the copy run in the caller's thread: the
 * plan's checks (dtype, shape, coverage) run on the background thread too.
 * The handle keeps the last plan and its snapshot memory: when every rank
 * saves a state of the same structure as last time through this handle
 * (same keys, kinds, dtypes, shapes and boxes; the usual training loop),
 * the plans are not exchanged or checked again, and the caller's thread
 * pays for one small status exchange, a structure compare and the copy.
 * The copy comes first, before the exchange; its tensor bytes may be split
 * over up to 4 short-lived threads (no more than the CPUs this thread may
 * run on, shared among the thread ranks of the process).
 * Returns the status of the copy and the plan exchange, agreed by every
 * rank (bad arguments, SCK_ERR_NOMEM, also for the snapshot, SCK_ERR_COMM,
 * SCK_ERR_PEER; also SCK_ERR_INVALID_ARG when a save is already pending on
 * `a`).  On error no save is pending.  Every later error (SCK_ERR_MISMATCH,
 * SCK_ERR_COVERAGE, I/O, commit) is returned by sck_wait.
 */
SCK_API int sck_save_async(sck_async *a, sck_comm *comm, const char *dir, const sck_state *st, const sck_save_opts *opts);

/**
 * Waits for the pending save of `a`, then completes it collectively (offsets
 * and checksums gathered, rank 0 writes `.metadata` and commits).  Returns
 * the save's status, the same on every rank (errors as sck_save).  With no
 * save pending it returns SCK_OK at once.  The handle can then start the
 * next save.
 */
SCK_API int sck_wait(sck_async *a);

typedef struct sck_load_opts {
    /** Bit set of SCK_LOAD_* flags. */
    unsigned flags;
    /** Reserved, must be 0 (sck_load rejects a nonzero one with SCK_ERR_INVALID_ARG naming it). */
    unsigned reserved[6];
    /** Device pieces only (sck_state_add_device_box): size in MiB of each of the two host staging
     *  buffers their bytes are read into before the copy to the device (0: 64), from the ops'
     *  host_alloc when it is given.  This field took the place of the last reserved slot
     *  (reserved[6]): the struct's size and layout are unchanged, a caller that zeroed the struct
     *  gets the default, and initializers such as {flags, {0}} still compile (-Wextra's
     *  -Wmissing-field-initializers asks for the trailing 0: {flags, {0}, 0}). */
    unsigned staging_mib;
} sck_load_opts;

/** Keys requested but absent from the checkpoint are skipped, not an error;
 *  check sck_state_loaded() afterwards. */
#define SCK_LOAD_ALLOW_MISSING 0x1u
/** Keys in the checkpoint that were not requested are an error. */
#define SCK_LOAD_REJECT_UNEXPECTED 0x2u
/** Skip checking CRC-32Cs.  By default every item read whole or in part is
 *  checked once against the checksum in `.metadata` (checkpoints without
 *  checksums, e.g. torch-written, are read unchecked). */
#define SCK_LOAD_NO_VERIFY 0x4u
/** Read long runs of tensor data with O_DIRECT, straight from the disk into
 *  the caller's buffers, bypassing the page cache.  Used where the saved
 *  payload and the destination are equally aligned to 4 KiB (shardckpt saves
 *  payloads of 256 KiB and more page-aligned; a buffer from mmap or
 *  aligned_alloc(4096, ...) is); everything else is read buffered.
 *
 *  Without this flag or SCK_LOAD_BUFFERED_IO, the choice is made item by
 *  item: a large item (over 1 MiB) whose middle page is not in the page
 *  cache, read into a destination aligned as its payload, is read with
 *  O_DIRECT; one still in the cache is copied from it.  A cold load then
 *  skips the page cache's cost (about a third of the time here), and a warm
 *  one keeps the cache's speed.
 *
 *  With O_DIRECT the disk reads into the caller's pages themselves, so their
 *  physical layout shapes the requests: one request holds at most the
 *  device's max_segments runs of contiguous memory (254 on a virtio disk),
 *  so scattered 4 KiB pages cap it near 1 MiB, where memory backed by huge
 *  pages (madvise(MADV_HUGEPAGE) on an mmap'ed, 2 MiB-aligned buffer) lets it
 *  reach max_sectors_kb.  The same holds for SCK_SAVE_DIRECT_IO's writes. */
#define SCK_LOAD_DIRECT_IO 0x8u
/** Read everything through the page cache (no O_DIRECT): for file systems
 *  where O_DIRECT is slow or misbehaves, or to leave the checkpoint cached
 *  for a later reader.  SCK_ERR_INVALID_ARG together with
 *  SCK_LOAD_DIRECT_IO. */
#define SCK_LOAD_BUFFERED_IO 0x10u

/**
 * Loads checkpoint `dir` into the state of every rank: each tensor box /
 * flat range receives the matching elements, wherever and however they were
 * saved; blobs and values requested are filled in.  Collective.
 *
 * Checksums: a CRC-32C covers a whole saved item (chunk).  When several ranks
 * read parts of one item (a resharded load), each reading it as a few runs
 * (e.g. row blocks), every reader checksums the runs it reads, the rank
 * needing most of the item (its owner; among ranks of one node needing
 * about as much, the one whose share of the files holds it) reads only the
 * rest (headers, bytes nobody requested), and the final agreement combines these CRCs into the
 * item's: the item is read once in all.  Read as many short runs (column
 * blocks), the owner reads and checks it whole and the others read only
 * their bytes; when the ranks are threads of one process (sck_threads_run)
 * the owner copies the others' bytes into their buffers from its own pass
 * over the item, and they read nothing of it.  If any check fails the load fails on every rank, so no rank
 * returns SCK_OK with a byte from an item that does not match.  Items no
 * rank reads are not checked.  A rank loading with SCK_LOAD_NO_VERIFY
 * checks nothing, for itself or for others.
 *
 * Errors (the same on every rank): SCK_ERR_MISSING_KEY (strict by default),
 * SCK_ERR_UNEXPECTED_KEY (with SCK_LOAD_REJECT_UNEXPECTED), SCK_ERR_MISMATCH
 * (dtype, shape or kind differ), SCK_ERR_COVERAGE (the saved chunks do not
 * cover a requested region, or overlap), SCK_ERR_CHECKSUM (stored bytes do
 * not match their CRC-32C; the message names file, key, item offset and
 * chunk), SCK_ERR_BUSY (a save replaced `dir` while it was read: the bytes
 * are not wrong, the checkpoint changed; load again), SCK_ERR_FORMAT,
 * SCK_ERR_UNSUPPORTED, SCK_ERR_IO, SCK_ERR_NOMEM, SCK_ERR_COMM, SCK_ERR_PEER.
 */
SCK_API int sck_load(sck_comm *comm, const char *dir, sck_state *st, const sck_load_opts *opts);

/* ------------------------------------------------------------------------ */
/* Full (consolidated) checkpoints: safetensors and Hugging Face layouts      */
/* ------------------------------------------------------------------------ */

typedef enum sck_full_format {
    /** One safetensors file at `path`. */
    SCK_FULL_SAFETENSORS = 0,
    /** Directory `path` (created if needed) in the Hugging Face sharded layout:
     *  model-0000K-of-0000N.safetensors files plus model.safetensors.index.json
     *  {"metadata": {"total_size": N}, "weight_map": {tensor: file}}, written even for one shard. */
    SCK_FULL_HF_SHARDED = 1
} sck_full_format;

typedef struct sck_full_opts {
    sck_full_format format;
    /** Bit set of SCK_SAVE_* flags (SCK_SAVE_NO_FSYNC). */
    unsigned flags;
    /** HF layout: most tensor bytes per file (headers not counted); a larger tensor gets a file of
     *  its own.  0 means 5 GB (5e9 bytes), transformers' default "5GB". */
    uint64_t max_shard_bytes;
    /** Reserved, must be 0 (sck_save_full rejects a nonzero one with SCK_ERR_INVALID_ARG naming it). */
    unsigned reserved[6];
} sck_full_opts;

/**
 * Saves the state of every rank of `comm` as ONE consolidated checkpoint:
 * every tensor whole, in key order, with dtypes and shapes as given.
 * Collective: every rank calls it with the same `path` and options.  opts
 * may be NULL (one safetensors file, fsync on).
 *
 * No rank gathers tensor data: ranks exchange only their box lists, every
 * rank computes the same file layout, rank 0 writes the headers, and each
 * rank writes its own boxes' bytes straight to their final offsets.  Extra
 * memory is the plan and the headers, never tensor data.  Files are written
 * under "<name>.tmp" and renamed once every rank has written and synced;
 * for the HF layout the new index, written last, is the commit marker.  An
 * old HF export stays whole (index and shards) until the renames: where the
 * shard count changes the new shards get other names and the new index
 * replaces the old one in one rename, so a crash leaves the old export or
 * the new one; where it is the same, the old index is removed just before
 * the first shard is replaced, so a crash during the renames leaves no index
 * (never one naming a mix).  Shards of an earlier save that the new index
 * does not name (model-*-of-*.safetensors) are removed.
 *
 * Blobs and values go into the first file's `__metadata__` under their own
 * key: a string value as itself, any other value as JSON text (blobs as
 * {"__bytes__": "<hex>"}), the keys of JSON text listed in the reserved key
 * "shardckpt.json_keys" (docs/FORMAT.md).  Every file's __metadata__ also
 * holds "format": the string value named "format" if there is one, else
 * "pt".  sck_load and sck_ckpt_open read the tensors of such files back into
 * any sharding.
 *
 * Errors (the same on every rank): SCK_ERR_INVALID_ARG (bad options, a value
 * "shardckpt.json_keys" or a "format" that is not a string, name not valid UTF-8), SCK_ERR_MISMATCH, SCK_ERR_COVERAGE (as sck_save),
 * SCK_ERR_IO, SCK_ERR_NOMEM, SCK_ERR_COMM, SCK_ERR_PEER.  On error the
 * temporary files are removed and an existing single file is left as it was
 * (unless only the final fsync of its directory failed: the rename is atomic,
 * so the file is then the new, complete one); an HF directory keeps its old
 * export when the error came before the renames, and is otherwise left
 * without an index (so it is never taken for a complete checkpoint) or
 * with the new one.
 */
SCK_API int sck_save_full(sck_comm *comm, const char *path, const sck_state *st, const sck_full_opts *opts);

/* ------------------------------------------------------------------------ */
/* Reading what a checkpoint holds (no communicator needed)                  */
/* ------------------------------------------------------------------------ */

typedef struct sck_ckpt sck_ckpt;

typedef enum sck_entry_kind { SCK_ENTRY_TENSOR = 0, SCK_ENTRY_BYTES = 1 } sck_entry_kind;

typedef struct sck_entry_info {
    const char *key;          /**< flattened key (borrowed) */
    sck_entry_kind kind;      /**< tensor, or DCP byte item (blob or value) */
    sck_dtype dtype;          /**< tensors only */
    int ndim;                 /**< tensors only */
    int64_t shape[SCK_MAX_DIMS];
    size_t nchunks;           /**< saved chunks of a tensor (1 for bytes) */
    uint64_t nbytes;          /**< tensor: product(shape)*elem size; bytes: stored length */
    const char *file;         /**< data file of the first chunk (borrowed) */
} sck_entry_info;

typedef struct sck_chunk_info {
    int64_t offsets[SCK_MAX_DIMS];
    int64_t sizes[SCK_MAX_DIMS];
    const char *file;         /**< relative file name (borrowed) */
    uint64_t offset;          /**< item start in the file */
    uint64_t length;          /**< item length in the file */
} sck_chunk_info;

/** Opens checkpoint directory `dir` and reads its `.metadata` (taking the decoded
 *  index from `.metadata.sck` when that belongs to it; or a safetensors
 *  file / Hugging Face sharded directory, see docs/FORMAT.md).  *out is owned by the
 *  caller (sck_ckpt_close).  Reads check CRC-32Cs where `.metadata` records them.
 *  Memory stays proportional to the metadata's size: metadata that would expand
 *  beyond the limits of docs/FORMAT.md ("Memory limits": memo references that repeat
 *  records, a safetensors header over 100,000,000 bytes) is refused early.
 *  Errors: SCK_ERR_IO, SCK_ERR_FORMAT (also those limits, naming the file and the
 *  limit), SCK_ERR_UNSUPPORTED, SCK_ERR_NOMEM, SCK_ERR_COVERAGE (saved chunks of a
 *  tensor overlap). */
SCK_API int sck_ckpt_open(const char *dir, sck_ckpt **out);
SCK_API void sck_ckpt_close(sck_ckpt *ck);
/** Number of entries, sorted by key. */
SCK_API size_t sck_ckpt_count(const sck_ckpt *ck);
/** Fills *info for entry i.  Errors: SCK_ERR_INVALID_ARG (i out of range). */
SCK_API int sck_ckpt_entry(const sck_ckpt *ck, size_t i, sck_entry_info *info);
/** Fills *info for chunk j of entry i.  Errors: SCK_ERR_INVALID_ARG. */
SCK_API int sck_ckpt_chunk(const sck_ckpt *ck, size_t i, size_t j, sck_chunk_info *info);
/** Index of `key`, or -1. */
SCK_API long sck_ckpt_find(const sck_ckpt *ck, const char *key);
/** The path of entry i in the nested state dict (see sck_state_set_path):
 *  from `.metadata`'s planner_data where it records one, else the key's
 *  default path; [key] for a `meta.pt` entry.
 *  *out is a new list value owned by the caller (sck_value_free).
 *  Errors: SCK_ERR_INVALID_ARG (i out of range), SCK_ERR_NOMEM. */
SCK_API int sck_ckpt_entry_path(const sck_ckpt *ck, size_t i, sck_value **out);
/** Reads the box (offsets, sizes) of tensor entry i into `dst` (row-major,
 *  caller-owned, product(sizes)*elem bytes), from whichever chunks overlap it.
 *  Errors: SCK_ERR_INVALID_ARG, SCK_ERR_COVERAGE, SCK_ERR_FORMAT, SCK_ERR_IO, SCK_ERR_NOMEM. */
SCK_API int sck_ckpt_read_box(sck_ckpt *ck, size_t i, const int64_t *offsets, const int64_t *sizes, void *dst);
/** What sck_ckpt_verify checked. */
typedef struct sck_verify_stats {
    uint64_t entries;         /**< entries checked */
    uint64_t chunks;          /**< chunks (items) read whole */
    uint64_t checksummed;     /**< of those, chunks whose CRC-32C matched, or (torch-written,
                               *   no CRC-32C) whose every zip record matched its zip CRC-32 */
    uint64_t bytes;           /**< item bytes read */
} sck_verify_stats;

/** Checks the whole checkpoint: every chunk's item is readable in full and
 *  decodes (tensor items: archive and data.pkl agree with the metadata's
 *  dtype and chunk shape); the chunks of each tensor cover it exactly once;
 *  every recorded CRC-32C matches; an item without one (torch-written)
 *  has every zip record checked against its zip CRC-32.  When ck was opened from `.metadata.sck`
 *  (docs/FORMAT.md), the `.metadata` pickle is decoded too and must describe
 *  the same checkpoint, and every payload must lie where the cache says
 *  (SCK_ERR_FORMAT).  Stops at the first problem.  stats may
 *  be NULL.  Errors: SCK_ERR_COVERAGE (overlap or hole: names the tensor),
 *  SCK_ERR_CHECKSUM, SCK_ERR_FORMAT, SCK_ERR_UNSUPPORTED, SCK_ERR_IO (each
 *  naming the file, key and item offset), SCK_ERR_NOMEM, SCK_ERR_INVALID_ARG. */
SCK_API int sck_ckpt_verify(sck_ckpt *ck, sck_verify_stats *stats);

/** Reads byte entry i.  If it is a torch.save archive of a Python object, *value
 *  receives it and *data is NULL: plain values (int of any size, float, str,
 *  bytes, bool, None, list, tuple, dict) decoded, any other object as a
 *  SCK_VAL_PICKLE holding its data.pkl (never run).  Otherwise (not an archive,
 *  or an archive with storages of its own) *data and *n receive the raw item
 *  bytes and *value is NULL.  Either output is owned by the caller (free() /
 *  sck_value_free).  A value sck_load loads the same way; a blob request of a
 *  PICKLE item gets the item's bytes.
 *  Errors: SCK_ERR_INVALID_ARG, SCK_ERR_FORMAT (a damaged pickle or archive),
 *  SCK_ERR_IO, SCK_ERR_NOMEM. */
SCK_API int sck_ckpt_read_bytes(sck_ckpt *ck, size_t i, void **data, size_t *n, sck_value **value);

#ifdef __cplusplus
}
#endif
#endif /* SHARDCKPT_H */
