/* meta_pt.c - Fabric's meta.pt, written and read (see meta_pt.h). */
#include "format/meta_pt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "format/torch_item.h"
#include "format/zip.h"
#include "io/storage.h"

int meta_pt_encode(const sck_value *dict, sck_buf *out) {
    sck_buf pkl;
    sck_buf_init(&pkl);
    int rc = ti_encode_value_pkl(&pkl, dict);
    if (!rc) {
        zip_entry ents[3];
        size_t n;
        ti_entries(ents, &n, &pkl, sck_crc32(0, pkl.data, pkl.len), NULL, 0, 0);
        /* torch.save(obj, ".../meta.pt") names the archive's folder after the file: "meta" */
        rc = zip_build_mem(out, ents, n, "meta", 64);
    }
    sck_buf_free(&pkl);
    return rc ? sck_err(SCK_ERR_NOMEM, "%s: out of memory encoding it", META_PT_NAME) : SCK_OK;
}

int meta_pt_read(const char *dir, sck_value **out) {
    *out = NULL;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, META_PT_NAME);
    struct stat sb;
    if (io_lstat(path, &sb) != 0) {
        if (errno == ENOENT) return SCK_OK;
        return sck_err_errno(SCK_ERR_IO, errno, "%s: cannot stat", path);
    }
    /* a FIFO would block the open, a link could lead out of the checkpoint */
    if (!S_ISREG(sb.st_mode)) return sck_err(SCK_ERR_FORMAT, "%s: not a regular file", path);
    uint8_t *data;
    size_t len;
    int rc = sck_read_file(path, &data, &len);
    if (rc) return rc;
    zip_dir zd;
    const zip_rec *pk;
    rc = ti_archive_pkl(data, len, path, &zd, &pk);
    sck_value *v = NULL;
    if (!rc) rc = ti_decode_plain_value_pkl(data + pk->data_off, (size_t)pk->size, path, &v);
    if (!rc && sck_value_kind_of(v) != SCK_VAL_DICT) rc = sck_err(SCK_ERR_FORMAT, "%s: holds no dict (Fabric saves a dict of its entries)", path);
    zip_dir_free(&zd);
    free(data);
    if (rc) sck_value_free(v);
    else *out = v;
    return rc;
}
