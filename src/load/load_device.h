/* load_device.h - a load's device pieces, read through bounded host staging (load_device.c). */
#ifndef SCK_LOAD_DEVICE_H
#define SCK_LOAD_DEVICE_H

#include "core/state.h"
#include "load/ckpt.h"

/* Reads every device piece of st's tensor entries marked loaded (found[i]: the model entry of st's
 * entry i) through two host staging buffers of staging_mib MiB (0: 64) each: a block read from the
 * files, then copied to the device while the next block is read.  Call after the host reads of the
 * load, before its final agreement.  Errors: the reads', the ops' (naming tensor and byte offset),
 * SCK_ERR_NOMEM. */
int ld_read_device(sck_ckpt *ck, sck_state *st, const long *found, unsigned staging_mib);

#endif
