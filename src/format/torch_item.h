/* torch_item.h - the torch.save archives DCP stores per item: a tensor (data.pkl calling
 * torch._utils._rebuild_tensor_v2 on one storage "data/0") or a plain Python object. */
#ifndef SCK_TORCH_ITEM_H
#define SCK_TORCH_ITEM_H

#include "base/util.h"
#include "format/pickle.h"
#include "format/zip.h"

/* data.pkl (pickle protocol 2, as torch.save writes) for a contiguous tensor of `sizes` stored in
 * storage "0" at offset 0.  Errors: SCK_ERR_NOMEM. */
int ti_encode_tensor_pkl(sck_buf *out, sck_dtype dt, int ndim, const int64_t *sizes);
/* data.pkl for a value (dict, list, tuple, str, int of any size, float, bool, None, bytes); a
 * SCK_VAL_PICKLE is appended as it is.  Errors: SCK_ERR_NOMEM, SCK_ERR_INVALID_ARG (a PICKLE inside
 * a container: a pickle cannot be spliced into another). */
int ti_encode_value_pkl(sck_buf *out, const sck_value *v);

/* The records of a torch.save archive holding `pkl` (whose CRC-32 is pkl_crc) and optionally one
 * storage payload: data.pkl, data/0, version (at most 3).  Fills e[0..*n) (names point to static
 * strings); payload may be NULL for a value archive. */
void ti_entries(zip_entry *e, size_t *n, const sck_buf *pkl, uint32_t pkl_crc, const void *payload, uint64_t payload_len,
                uint32_t payload_crc);

typedef struct ti_tensor {
    sck_dtype dtype;
    int ndim;
    int64_t size[SCK_MAX_DIMS];
    int64_t stride[SCK_MAX_DIMS];
    int64_t storage_offset;       /* elements */
    char storage_key[64];         /* record "data/<key>" */
    uint64_t storage_bytes;       /* declared storage size in bytes */
} ti_tensor;

/* Decodes a tensor data.pkl (torch._utils._rebuild_tensor_v2 / _v3, legacy typed storages or
 * UntypedStorage).  Checks that every element addressed by size/stride/offset lies in the storage.
 * Errors: SCK_ERR_FORMAT, SCK_ERR_UNSUPPORTED (dtype, quantized tensors ...), SCK_ERR_NOMEM. */
int ti_decode_tensor_pkl(const void *pkl, size_t n, const char *what, ti_tensor *out);
/* The same for one node of a parsed pickle (a torch._utils._rebuild_tensor_v2(...) call inside a
 * state dict).  The message may name strings of the node's arena: free it after reading it. */
int ti_tensor_from_obj(const pk_obj *o, const char *what, ti_tensor *out);
/* pk_allow_fn for tensor pickles: torch._utils._rebuild_tensor*, collections.OrderedDict, torch
 * storage classes and dtypes (recorded, never called). */
int ti_allow_tensor(void *ctx, const char *module, const char *name);
/* The data.pkl record of the torch.save archive held whole in data[0, len) (a .pt file, meta.pt): reads
 * the archive's zip directory into *dir (free it with zip_dir_free, also after an error) and checks
 * data.pkl against its zip CRC-32.  `what` names the archive in errors.
 * Errors: zip_read_dir's, SCK_ERR_FORMAT (no data.pkl), SCK_ERR_CHECKSUM (data.pkl does not match). */
int ti_archive_pkl(const uint8_t *data, size_t len, const char *what, zip_dir *dir, const zip_rec **pkl);
/* The value (as ti_decode_value_pkl decodes it) of the torch.save archive held whole in data[0, len).
 * Errors: ti_archive_pkl's, ti_decode_value_pkl's. */
int ti_archive_value(const uint8_t *data, size_t len, const char *what, sck_value **out);
/* Decodes a pickle (a torch.save archive's data.pkl, meta.pt's, ...) holding a Python object into a
 * value: None, bool, int (beyond int64: SCK_VAL_BIGINT), float, str, bytes (and bytearray), list,
 * tuple (SCK_VAL_TUPLE), dict and OrderedDict (a dict; int keys become their decimal strings).  Any
 * other object anywhere in it (a set, complex, numpy, torch.Size, a class of any module: nothing is
 * imported or run) makes *out a SCK_VAL_PICKLE holding the n bytes, so writing it back is exact.
 * Errors: SCK_ERR_FORMAT (not a readable pickle: offset and opcode named), SCK_ERR_UNSUPPORTED (it
 * refers to storages by persistent id, so the pickle alone is not the value: keep the whole
 * archive), SCK_ERR_NOMEM. */
int ti_decode_value_pkl(const void *pkl, size_t n, const char *what, sck_value **out);
/* The same, but an object outside the subset is SCK_ERR_UNSUPPORTED naming its class (for a pickle
 * whose parts are used one by one, such as Fabric's meta.pt dict: a pickle cannot be cut in parts). */
int ti_decode_plain_value_pkl(const void *pkl, size_t n, const char *what, sck_value **out);
/* What a pickle holds, for people, without running it: "set", "complex", "numpy.ndarray",
 * "tuple holding numpy.ndarray", "torch.Size" ...; "pickle" when it does not parse. */
void ti_describe_pickle(const void *pkl, size_t n, char *buf, size_t cap);

#endif
