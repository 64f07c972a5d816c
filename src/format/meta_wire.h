/* meta_wire.h - a decoded checkpoint model (ck_meta) as flat bytes, so that a collective load decodes
 * `.metadata` once (on rank 0) and broadcasts the result instead of the pickle: rebuilding the model
 * from these bytes costs a few allocations, where the pickle costs a whole object tree.
 *
 * The bytes cross process boundaries (MPI), so the decoder trusts nothing: every length and count is
 * checked against the bytes left before anything is read or allocated, and the model it returns
 * satisfies what dcp_meta_decode guarantees (keys sorted and distinct, chunks inside their tensor,
 * plain file names, offset+length without overflow).  The layout is private to one library build
 * (both ends of a load run the same code): a magic and version word, then little-endian fields. */
#ifndef SCK_META_WIRE_H
#define SCK_META_WIRE_H

#include "format/dcp_meta.h"

/* Appends the bytes of m (entries in m's order, which must be sorted by key as after
 * ck_meta_finish) to out.  Errors: SCK_ERR_INVALID_ARG (a key or file name over 4 GiB),
 * SCK_ERR_NOMEM. */
int meta_wire_encode(const ck_meta *m, sck_buf *out);

/* Rebuilds a model from n bytes made by meta_wire_encode.  On success *out is a finished model that
 * uses the pools of ck_meta (free with ck_meta_free); on failure *out is zeroed.  `what` names the
 * source in messages.  Errors: SCK_ERR_FORMAT (the message names the byte offset and what is wrong
 * there), SCK_ERR_NOMEM. */
int meta_wire_decode(const uint8_t *data, size_t n, const char *what, ck_meta *out);

#endif
