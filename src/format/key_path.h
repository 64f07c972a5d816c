/* key_path.h - an entry's path in the nested state dict that torch's flattening made its key from:
 * ("optimizer", "state", "fc1.weight", "exp_avg") for "optimizer.state.fc1.weight.exp_avg", list
 * positions as ints.  DCP records it per key in `.metadata`'s planner_data; torch unflattens with it.
 *
 * Encoded form (what models, plans and the wire carry): one record per element,
 *   u8 KP_STR | varint length | bytes      (a dict key)
 *   u8 KP_INDEX | varint index             (a list position)
 * An entry without one has the default path: the key's part before its first dot, then the rest
 * (("model", "layer.weight")), or (key,) for a key without an inner dot, as a Fabric state
 * {"model": {...}, "optimizer": {...}, "step": 5} flattens. */
#ifndef SCK_KEY_PATH_H
#define SCK_KEY_PATH_H

#include "format/pickle.h"
#include "base/util.h"

#define KP_STR 0u
#define KP_INDEX 1u

/* Appends the encoded form of `path` (an sck_value list of strings and non-negative ints) to out,
 * after checking that ".".join(map(str, path)) is `key`, as torch's flattening makes it.
 * Errors: SCK_ERR_INVALID_ARG (not such a list, or another key), SCK_ERR_NOMEM. */
int kp_from_value(const sck_value *path, const char *key, sck_buf *out);
/* Appends the encoded form of planner_data's tuple for `key`.  0 if it is not a tuple of strings and
 * non-negative ints (the caller keeps the default path), 1 if appended, SCK_ERR_NOMEM. */
int kp_from_pickle(const pk_obj *tuple, sck_buf *out);
/* 1 if p[0..n) is a well-formed encoded path of at least one element. */
int kp_valid(const uint8_t *p, size_t n);
/* 1 if the encoded path p (NULL: none) is key's default path. */
int kp_is_default(const uint8_t *p, size_t n, const char *key);
/* Elements of the path (p NULL: key's default). */
size_t kp_count(const uint8_t *p, size_t n, const char *key);
/* The path as a new sck_value list (p NULL: key's default); NULL when out of memory. */
sck_value *kp_to_value(const uint8_t *p, size_t n, const char *key);
/* Writes the path as planner_data's tuple (p NULL: key's default). */
void kp_pickle(pk_writer *w, const uint8_t *p, size_t n, const char *key);

#endif
