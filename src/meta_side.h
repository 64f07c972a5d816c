/* meta_side.h - `.metadata.sck`: the decoded model of a checkpoint we saved, beside its `.metadata`.
 *
 * Decoding a big `.metadata` pickle (10 000 tensors over 8 ranks: 80 000 chunks, 15 MiB) takes a
 * quarter to three quarters of a second, as long as reading the tensors themselves; the same model in
 * meta_wire's flat form rebuilds in milliseconds.  So a save also writes that form, and opening a
 * checkpoint uses it when it belongs to the `.metadata` beside it: its header records the length and
 * CRC-32C of those `.metadata` bytes, and of its own payload.  It is only a cache: when it is missing,
 * stale (torch saved over the directory), damaged, or from another library version, the pickle is
 * decoded as before, and torch never reads it.  `sck_ckpt_verify` decodes the pickle too and checks
 * that both describe the same checkpoint.
 *
 * Layout: magic "SCKSIDE" + version byte 1 | u64 .metadata length | u32 its CRC-32C | u32 CRC-32C
 * of the payload | payload (meta_wire_encode's bytes); little-endian. */
#ifndef SCK_META_SIDE_H
#define SCK_META_SIDE_H

#include "dcp_meta.h"

#define META_SIDE_NAME ".metadata.sck"

/* Writes dir/.metadata.sck for model m, whose `.metadata` bytes are meta[0..meta_len), without fsync
 * (a torn file fails its CRC and is ignored).  Errors: SCK_ERR_IO, SCK_ERR_NOMEM,
 * SCK_ERR_INVALID_ARG (meta_wire_encode's). */
int meta_side_write(const char *dir, const ck_meta *m, const uint8_t *meta, size_t meta_len);

/* The payload of dir/.metadata.sck (meta_wire bytes, *wire malloc'ed, caller frees) if that file
 * exists and its header matches meta[0..meta_len) and its payload; else *wire = NULL.  Never an
 * error (the error state is left as it was): the caller then decodes the pickle. */
void meta_side_read(const char *dir, const uint8_t *meta, size_t meta_len, uint8_t **wire, size_t *wire_len);

/* 1 if models a and b describe the same checkpoint: the same entries, and chunk by chunk the same
 * boxes, file names, offsets, lengths, flags and CRC-32Cs (file indices may differ; payload offsets,
 * which .metadata does not record, are not compared: sck_ckpt_verify checks them against the archives). */
int meta_same(const ck_meta *a, const ck_meta *b);

#endif
