/* st_meta.c - safetensors __metadata__ strings <-> values: strings kept exactly, other values as
 * JSON text named in ST_JSON_KEYS (see st_meta.h). */
#include "format/st_meta.h"

#include <stdlib.h>
#include <string.h>

#include "base/json.h"

int st_meta_text(const sck_value *v, const char *key, char **text, size_t *n, int *is_json) {
    *text = NULL;
    *n = 0;
    if (!strcmp(key, ST_JSON_KEYS))
        return sck_err(SCK_ERR_INVALID_ARG, "safetensors: the key '%s' is reserved in __metadata__ (it names the JSON values)",
                       ST_JSON_KEYS);
    *is_json = sck_value_kind_of(v) != SCK_VAL_STRING;
    if (*is_json && !strcmp(key, ST_FORMAT_KEY))
        return sck_err(SCK_ERR_INVALID_ARG,
                       "safetensors: the key '%s' is reserved in __metadata__ for the format tag (\"pt\"): its value must be a string",
                       ST_FORMAT_KEY);
    if (*is_json) {
        *text = sck_value_to_json(v);
        if (*text) *n = strlen(*text);
    } else {
        const char *s = sck_value_get_string(v, n);
        if ((*text = malloc(*n + 1))) {
            memcpy(*text, s, *n);
            (*text)[*n] = 0;
        }
    }
    return *text ? SCK_OK : sck_err(SCK_ERR_NOMEM, "'%s': out of memory for its __metadata__ text", key);
}

int st_meta_put(sck_value *md, sck_value *json, const char *key, const char *text, size_t n, int is_json) {
    if (sck_value_dict_set(md, key, sck_value_string_n(text, n)) ||
        (is_json && sck_value_list_append(json, sck_value_string(key))))
        return sck_err(SCK_ERR_NOMEM, "'%s': out of memory building __metadata__", key);
    return SCK_OK;
}

int st_meta_finish(sck_value *md, const sck_value *json) {
    if (!sck_value_len(json)) return SCK_OK;
    char *js = sck_value_to_json(json);
    int rc = js ? sck_value_dict_set(md, ST_JSON_KEYS, sck_value_string(js)) : SCK_ERR_NOMEM;
    free(js);
    return rc ? sck_err(SCK_ERR_NOMEM, "out of memory building __metadata__") : SCK_OK;
}

int st_meta_from_values(const sck_value *values, sck_value **out) {
    *out = NULL;
    sck_value *md = sck_value_dict(), *json = sck_value_list();
    int rc = md && json ? SCK_OK : sck_err(SCK_ERR_NOMEM, "out of memory building __metadata__");
    for (size_t i = 0; i < sck_value_len(values) && !rc; i++) {
        const char *key = sck_value_key_at(values, i);
        char *text;
        size_t n;
        int is_json;
        rc = st_meta_text(sck_value_at(values, i), key, &text, &n, &is_json);
        if (!rc) rc = st_meta_put(md, json, key, text, n, is_json);
        free(text);
    }
    if (!rc) rc = st_meta_finish(md, json);
    sck_value_free(json);
    if (rc) {
        sck_value_free(md);
        return rc;
    }
    *out = md;
    return SCK_OK;
}

/* The keys ST_JSON_KEYS lists (a new list, possibly empty), each checked to be in `metadata`. */
static int json_keys(const sck_value *metadata, const char *what, sck_value **out) {
    const sck_value *s = sck_value_dict_get(metadata, ST_JSON_KEYS);
    size_t n;
    const char *text = sck_value_get_string(s, &n);
    if (!s) return (*out = sck_value_list()) ? SCK_OK : sck_err(SCK_ERR_NOMEM, "%s: out of memory", what);
    int rc = sck_json_parse(text, n, SCK_JSON_NO_BYTES, out);
    if (rc == SCK_ERR_NOMEM) return sck_err_wrap(rc, "%s: __metadata__ key '%s'", what, ST_JSON_KEYS);
    if (rc || sck_value_kind_of(*out) != SCK_VAL_LIST) {
        sck_value_free(*out);
        *out = NULL;
        return sck_err(SCK_ERR_FORMAT, "%s: __metadata__ key '%s' is not a JSON array of keys: %.200s", what, ST_JSON_KEYS,
                       text);
    }
    for (size_t i = 0; i < sck_value_len(*out) && !rc; i++) {
        const sck_value *k = sck_value_at(*out, i);
        const char *key = sck_value_get_string(k, NULL);
        if (sck_value_kind_of(k) != SCK_VAL_STRING || !sck_value_dict_get(metadata, key) || !strcmp(key, ST_JSON_KEYS) ||
            !strcmp(key, ST_FORMAT_KEY))
            rc = sck_err(SCK_ERR_FORMAT, "%s: __metadata__ key '%s' item %zu is not another key of __metadata__", what,
                         ST_JSON_KEYS, i);
    }
    if (rc) {
        sck_value_free(*out);
        *out = NULL;
    }
    return rc;
}

static int listed(const sck_value *json, const char *key) {
    for (size_t i = 0; i < sck_value_len(json); i++)
        if (!strcmp(sck_value_get_string(sck_value_at(json, i), NULL), key)) return 1;
    return 0;
}

int st_meta_values(const sck_value *metadata, const char *what, sck_value *out) {
    if (!metadata) return SCK_OK;
    sck_value *json;
    int rc = json_keys(metadata, what, &json);
    for (size_t i = 0; i < sck_value_len(metadata) && !rc; i++) {
        const char *key = sck_value_key_at(metadata, i);
        const sck_value *s = sck_value_at(metadata, i);
        size_t n;
        const char *text = sck_value_get_string(s, &n);
        if (!strcmp(key, ST_JSON_KEYS) || sck_value_dict_get(out, key)) continue;
        if (!strcmp(key, ST_FORMAT_KEY) && n == strlen(ST_FORMAT_PT) && !memcmp(text, ST_FORMAT_PT, n)) continue;
        sck_value *v = NULL;
        if (!listed(json, key)) v = sck_value_clone(s);
        else if ((rc = sck_json_parse(text, n, 0, &v))) {
            rc = sck_err_wrap(rc == SCK_ERR_NOMEM ? rc : SCK_ERR_FORMAT, "%s: __metadata__ key '%s' (listed in '%s')", what,
                              key, ST_JSON_KEYS);
            break;
        }
        if (!v || sck_value_dict_set(out, key, v)) rc = sck_err(SCK_ERR_NOMEM, "%s: out of memory", what);
    }
    sck_value_free(json);
    return rc;
}
