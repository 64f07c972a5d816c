/* meta_pt.h - Lightning Fabric's `meta.pt`: the torch.save archive of a dict that holds, beside a
 * sharded (DCP) checkpoint, every top-level entry of the saved state that is not a module or optimizer
 * (step, epoch, config ...).  fabric.load takes a directory for a sharded checkpoint only if it holds
 * one. */
#ifndef SCK_META_PT_H
#define SCK_META_PT_H

#include "base/util.h"

#define META_PT_NAME "meta.pt"

/* The torch.save archive of `dict` (a dict value), appended to out: torch.load(..., weights_only=True)
 * reads it back as that dict.  Errors: SCK_ERR_NOMEM. */
int meta_pt_encode(const sck_value *dict, sck_buf *out);

/* Reads DIR/meta.pt: *out is NULL when there is none, else the dict it holds (caller frees), keys
 * strings.  Only a regular file is read; its data.pkl's zip CRC-32 must match; the pickle is read by
 * the safe subset reader (nothing is imported or run).  Errors: SCK_ERR_FORMAT (the message names the
 * file and what is wrong, e.g. the opcode or global outside the subset), SCK_ERR_UNSUPPORTED,
 * SCK_ERR_IO, SCK_ERR_NOMEM. */
int meta_pt_read(const char *dir, sck_value **out);

#endif
