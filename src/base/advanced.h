/* advanced.h - include/shardckpt_advanced.h for the library's own files: the advanced tier's
 * declarations (the SCK_API functions the CLI is built from) with SCK_ADVANCED_API defined. */
#ifndef SCK_BASE_ADVANCED_H
#define SCK_BASE_ADVANCED_H

#ifndef SCK_ADVANCED_API
#define SCK_ADVANCED_API
#endif
#include "shardckpt_advanced.h"

#endif
