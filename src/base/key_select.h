/* key_select.h - choosing and renaming checkpoint keys for an export: include / exclude globs
 * (fnmatch on the full key) and a leading prefix to strip, as `shardckpt convert` offers them.
 * The API (sck_key_select, sck_key_select_name, sck_key_select_apply) is the advanced tier's:
 * include/shardckpt_advanced.h documents it. */
#ifndef SCK_KEY_SELECT_H
#define SCK_KEY_SELECT_H

#include <stddef.h>

#include "base/advanced.h"

#endif
