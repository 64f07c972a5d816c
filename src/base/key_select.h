/* key_select.h - choosing and renaming checkpoint keys for an export: include / exclude globs
 * (fnmatch on the full key) and a leading prefix to strip, as `shardckpt convert` offers them. */
#ifndef SCK_KEY_SELECT_H
#define SCK_KEY_SELECT_H

#include <stddef.h>

typedef struct sck_key_select {
    const char *const *include;   /* globs; a key is kept if it matches one (none given: every key) */
    size_t ninclude;
    const char *const *exclude;   /* globs; a kept key that matches one is dropped */
    size_t nexclude;
    const char *strip_prefix;     /* removed from the start of every kept key that has it; NULL: none */
} sck_key_select;

/* The name `key` gets under selection s, or NULL when s drops it.  The result points into `key`
 * (borrowed, nothing allocated).  A key that is exactly the prefix would become "": it keeps its
 * name.  s NULL keeps every key unchanged. */
const char *sck_key_select_name(const sck_key_select *s, const char *key);

/* Applies s to keys[0..n): out[i] = sck_key_select_name(s, keys[i]).  Two kept keys that end up
 * with the same name are an error naming both.  `what` (e.g. the source path) starts the message.
 * Errors: SCK_ERR_INVALID_ARG (a collision), SCK_ERR_NOMEM. */
int sck_key_select_apply(const sck_key_select *s, const char *what, const char *const *keys, size_t n,
                         const char **out);

#endif
