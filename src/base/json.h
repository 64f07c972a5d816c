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

/* Reading a document one value at a time, for one too big to hold as a tree (a safetensors header of
 * a million tensors): each call starts at *pos (whitespace first) and leaves *pos after what it read.
 * Errors as sck_json_parse, offsets from `text`.
 * sck_json_peek: the next non-whitespace byte (*pos moved to it), -1 at the end.
 * sck_json_read_string: a string, decoded into out (NUL-terminated; out->len excludes the NUL).
 * sck_json_read_value: any value into *out (NULL on error).
 * sck_json_skip_value: checks a value and steps over it without building it. */
int sck_json_peek(const char *text, size_t n, size_t *pos);
int sck_json_read_string(const char *text, size_t n, size_t *pos, sck_buf *out);
int sck_json_read_value(const char *text, size_t n, size_t *pos, unsigned flags, sck_value **out);
int sck_json_skip_value(const char *text, size_t n, size_t *pos);

/* Appends the compact JSON of `v` to `b` (no NUL).  Returns SCK_OK or SCK_ERR_NOMEM. */
int sck_json_write(sck_buf *b, const sck_value *v);

/* Appends `n` bytes of `s` as a quoted JSON string; bytes that are not valid UTF-8 become U+FFFD.
 * Returns SCK_OK or SCK_ERR_NOMEM. */
int sck_json_put_string(sck_buf *b, const char *s, size_t n);

/* Length of the longest valid UTF-8 prefix of s[0..n) (== n when all of it is valid). */
size_t sck_utf8_valid_prefix(const char *s, size_t n);

#endif
