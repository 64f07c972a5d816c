/* meta_side.h - `.metadata.sck`: the decoded model of a checkpoint we saved, beside its `.metadata`.
 *
 * Decoding a big `.metadata` pickle (10 000 tensors over 8 ranks: 80 000 chunks, 15 MiB) takes a
 * quarter to three quarters of a second, as long as reading the tensors themselves; the same model in
 * meta_wire's flat form rebuilds in milliseconds.  So a save also writes that form, and opening a
 * checkpoint uses it when it belongs to the `.metadata` beside it.  Its header records:
 * - the identity of that `.metadata` file as the save left it (inode, size, modification and change
 *   times): while the file is still that one, opening does not read it at all (15 MiB for the
 *   example above, as long to read from disk as the cache takes to decode).  Any write, rename,
 *   copy or chmod changes the change time, which no program can set back.  Only trusted where the
 *   file system keeps sub-second times: with whole seconds, a rewrite within the second of the save
 *   could look the same.
 * - the length and CRC-32C of those `.metadata` bytes: a copied checkpoint (new inode, new times)
 *   still uses its cache, after reading `.metadata` to compare.
 * - the CRC-32C of its own payload, and of the header.
 * It is only a cache: when it is missing, stale (torch saved over the directory), damaged, or from
 * another library version, the pickle is decoded as before, and torch never reads it.
 * `sck_ckpt_verify` decodes the pickle too and checks that both describe the same checkpoint.
 *
 * Layout (little-endian): magic "SCKSIDE" + version byte 2 | u64 .metadata length | u32 its CRC-32C |
 * u32 CRC-32C of the payload | u64 inode | i64 mtime seconds | u32 mtime ns | u32 ctime ns |
 * i64 ctime seconds | u32 1 if the identity is recorded, else 0 | u32 CRC-32C of the 60 bytes before
 * | payload (meta_wire_encode's bytes).  Version 1 (earlier builds) has only the first 24 bytes of
 * the header; it is still read, compared by CRC. */
#ifndef SCK_META_SIDE_H
#define SCK_META_SIDE_H

#include "format/dcp_meta.h"

#define META_SIDE_NAME ".metadata.sck"

/* Writes dir/.metadata.sck for model m, whose `.metadata` bytes are meta[0..meta_len), without fsync
 * (a torn file fails its CRC and is ignored).  Call it once dir/.metadata is written and closed: it
 * records that file's identity (none if it is missing or has another length).  Errors: SCK_ERR_IO,
 * SCK_ERR_NOMEM, SCK_ERR_INVALID_ARG (meta_wire_encode's). */
int meta_side_write(const char *dir, const ck_meta *m, const uint8_t *meta, size_t meta_len);

/* Opens the model of DCP directory `dir`: *wire is the payload of dir/.metadata.sck (meta_wire
 * bytes, from sck_big_alloc: the caller frees it with sck_big_free) if that cache is whole and belongs to dir/.metadata (see above),
 * else NULL.  *meta is dir/.metadata's bytes (sck_big_alloc'ed, likewise) if they had to be read: the
 * identity did not match; NULL when the cache was trusted without reading them.  A cache that is
 * missing or does not belong is no error (the error state is left as it was).  Errors: reading
 * dir/.metadata (SCK_ERR_IO, SCK_ERR_NOMEM), nothing returned then. */
int meta_side_open(const char *dir, uint8_t **wire, size_t *wire_len, uint8_t **meta, size_t *meta_len);

/* 1 if models a and b describe the same checkpoint: the same entries, and chunk by chunk the same
 * boxes, file names, offsets, lengths, flags and CRC-32Cs (file indices may differ; payload offsets,
 * which .metadata does not record, are not compared: sck_ckpt_verify checks them against the archives). */
int meta_same(const ck_meta *a, const ck_meta *b);

#endif
