/* json.h - JSON text <-> sck_value (RFC 8259 plus NaN/Infinity), and the pieces other writers reuse
 * (string escaping, UTF-8 validation).  The public entry points are sck_value_to_json /
 * sck_value_from_json in shardckpt.h; these are the variants with options. */
#ifndef SCK_JSON_H
#define SCK_JSON_H

#include <stddef.h>

#include "shardckpt.h"
#include "base/util.h"

/* Nesting deeper than this is SCK_ERR_FORMAT (keeps the recursive parser's stack bounded). */
#define SCK_JSON_MAX_DEPTH 512

/* Duplicate object keys are an error naming the key (default: the last one wins, as in Python). */
#define SCK_JSON_REJECT_DUP_KEYS 0x1u
/* Keep {"__bytes__": "<hex>"} as a dict (default: it becomes a SCK_VAL_BYTES value). */
#define SCK_JSON_NO_BYTES 0x2u

/* Parses exactly `n` bytes of JSON (surrounding whitespace allowed) into *out.
 * Errors: SCK_ERR_FORMAT ("JSON: <what> at byte <offset>", offset from `text`), SCK_ERR_NOMEM. */
int sck_json_parse(const char *text, size_t n, unsigned flags, sck_value **out);

/* Appends the compact JSON of `v` to `b` (no NUL).  Returns SCK_OK or SCK_ERR_NOMEM. */
int sck_json_write(sck_buf *b, const sck_value *v);

/* Appends `n` bytes of `s` as a quoted JSON string; bytes that are not valid UTF-8 become U+FFFD.
 * Returns SCK_OK or SCK_ERR_NOMEM. */
int sck_json_put_string(sck_buf *b, const char *s, size_t n);

/* Length of the longest valid UTF-8 prefix of s[0..n) (== n when all of it is valid). */
size_t sck_utf8_valid_prefix(const char *s, size_t n);

#endif
