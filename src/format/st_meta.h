/* st_meta.h - the strings of a safetensors __metadata__ and the values they stand for.
 *
 * A __metadata__ string is kept as the exact text it is: a string value is written as itself, and a
 * string read from a file is a string value, byte for byte, never re-encoded.  Only values of other
 * kinds (numbers, lists, dicts, bytes, pickles ...) are written as compact JSON text, and the writer
 * names those keys in one reserved entry, ST_JSON_KEYS, a JSON array of strings: a reader decodes
 * exactly the keys listed there, so "3" written by another tool stays the string "3".  "format" is
 * the file's format tag (transformers wants "pt"): every file gets the one in the values, else "pt";
 * a reader skips "format": "pt" (every writer adds it) and keeps any other tag as a string value. */
#ifndef SCK_ST_META_H
#define SCK_ST_META_H

#include <stddef.h>

#include "shardckpt.h"

#define ST_FORMAT_KEY "format"
#define ST_FORMAT_PT "pt"
#define ST_JSON_KEYS "shardckpt.json_keys"

/* The __metadata__ text of value `v` under `key`: a string value is its own bytes (*is_json = 0),
 * anything else its compact JSON (*is_json = 1).  *text (NUL-terminated, *n bytes) is owned by the
 * caller.  Errors: SCK_ERR_INVALID_ARG (key ST_JSON_KEYS, or a "format" value that is not a
 * string), SCK_ERR_NOMEM (naming the key). */
int st_meta_text(const sck_value *v, const char *key, char **text, size_t *n, int *is_json);

/* Sets md[key] = text (a string value, n bytes) and, when is_json, appends key to the list `json`.
 * Errors: SCK_ERR_NOMEM. */
int st_meta_put(sck_value *md, sck_value *json, const char *key, const char *text, size_t n, int is_json);

/* Adds md[ST_JSON_KEYS], the JSON array of the keys in `json`, unless it is empty.  Errors: SCK_ERR_NOMEM. */
int st_meta_finish(sck_value *md, const sck_value *json);

/* The whole __metadata__ dict of strings for dict `values` (may be NULL): st_meta_text of each,
 * then st_meta_finish.  *md is owned by the caller.  Errors: as st_meta_text. */
int st_meta_from_values(const sck_value *values, sck_value **md);

/* Adds the values that one file's __metadata__ (`metadata`, a dict of strings; NULL: none) holds to
 * dict `out`; keys already in `out` win.  Keys ST_JSON_KEYS lists are decoded from JSON ({"__bytes__":
 * hex} a bytes value), every other string is kept as it is, "format": "pt" is skipped.
 * Errors: SCK_ERR_FORMAT (naming `what` and the key: ST_JSON_KEYS is not a JSON array of keys the
 * metadata holds, or a key it lists does not hold JSON), SCK_ERR_NOMEM. */
int st_meta_values(const sck_value *metadata, const char *what, sck_value *out);

#endif
