/* test_special_files.c - files that are not regular files where a checkpoint's files should be: a
 * FIFO in place of .metadata or of a data file is refused at once (it never blocks an open), and a
 * .metadata that is a symbolic link (to a file outside the directory) is refused like data files are;
 * a safetensors file reached through a link (the Hugging Face cache's layout) still opens. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_fixture.h"
#include "harness.h"

static void copy_file(const char *from, const char *to) {
    size_t n;
    unsigned char *p = fx_read(from, &n);
    if (p) fx_write(to, p, n);
    free(p);
}

TEST(fifo_in_place_of_metadata_or_data_file_is_refused_without_blocking) {
    char dir[4096], p[4200];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    REQUIRE_OK(fx_save(dir, 2, 0, 0, NULL, NULL));
    alarm(20); /* a blocked open fails the run instead of hanging it */
    snprintf(p, sizeof p, "%s/__1_0.distcp", dir);
    REQUIRE(unlink(p) == 0 && mkfifo(p, 0644) == 0);
    CHECK(fx_load_version(dir, 0) == -1);
    CHECK(strstr(sck_last_error(), "__1_0.distcp") && strstr(sck_last_error(), "not a regular file"));
    sck_ckpt *ck = NULL;
    snprintf(p, sizeof p, "%s/.metadata", dir);
    REQUIRE(unlink(p) == 0 && mkfifo(p, 0644) == 0);
    snprintf(p, sizeof p, "%s/.metadata.sck", dir);
    unlink(p);
    CHECK_ERR(sck_ckpt_open(dir, &ck), SCK_ERR_IO, "not a regular file");
    CHECK(ck == NULL);
    alarm(0);
}

TEST(metadata_symlink_out_of_the_directory_is_refused) {
    char dir[4096], meta[4200], outside[4200], side[4200];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    REQUIRE_OK(fx_save(dir, 2, 0, 0, NULL, NULL));
    snprintf(meta, sizeof meta, "%s/.metadata", dir);
    snprintf(outside, sizeof outside, "%s/elsewhere.metadata", th_tmpdir());
    snprintf(side, sizeof side, "%s/.metadata.sck", dir);
    copy_file(meta, outside);
    REQUIRE(unlink(meta) == 0 && symlink(outside, meta) == 0);
    sck_ckpt *ck = NULL;
    /* with the model cache beside it too: the cache is not taken for a linked .metadata */
    CHECK_ERR(sck_ckpt_open(dir, &ck), SCK_ERR_FORMAT, "symbolic link");
    unlink(side);
    CHECK_ERR(sck_ckpt_open(dir, &ck), SCK_ERR_FORMAT, "symbolic link");
    CHECK(fx_load_version(dir, 0) == -1 && strstr(sck_last_error(), "symbolic link"));
}

TEST(safetensors_through_a_link_still_opens) {
    char st[4200], link_[4200];
    /* a full file, as the Hugging Face cache keeps it: snapshots/<rev>/model.safetensors -> a blob */
    snprintf(st, sizeof st, "%s/blob", th_tmpdir());
    snprintf(link_, sizeof link_, "%s/model.safetensors", th_tmpdir());
    float w[6] = {1, 2, 3, 4, 5, 6}, back[6] = {0};
    int64_t shape[2] = {2, 3}, zero[2] = {0, 0};
    sck_state *s = sck_state_new();
    REQUIRE(s);
    CHECK_OK(sck_state_add_replicated(s, "w", SCK_F32, 2, shape, w));
    sck_full_opts o;
    memset(&o, 0, sizeof o);
    o.format = SCK_FULL_SAFETENSORS;
    CHECK_OK(sck_save_full(NULL, st, s, &o));
    sck_state_free(s);
    REQUIRE(symlink(st, link_) == 0);
    sck_ckpt *ck = NULL;
    REQUIRE_OK(sck_ckpt_open(link_, &ck));
    CHECK(sck_ckpt_count(ck) == 1);
    CHECK_OK(sck_ckpt_read_box(ck, 0, zero, shape, back));
    CHECK(!memcmp(w, back, sizeof w));
    sck_ckpt_close(ck);
}

/* A message naming a path of thousands of bytes keeps its reason: the path loses its middle. */
TEST(huge_path_in_a_message_is_cut_not_the_reason) {
    char dir[4096];
    int n = snprintf(dir, sizeof dir, "%s", th_tmpdir());
    while (n < 3200) n += snprintf(dir + n, sizeof dir - (size_t)n, "/%0200d", n);
    sck_ckpt *ck = NULL;
    CHECK_ERR(sck_ckpt_open(dir, &ck), SCK_ERR_IO, "cannot open checkpoint: No such file or directory");
    const char *m = sck_last_error();
    CHECK(strlen(m) < 1024 && strstr(m, "...") != NULL && !strncmp(m, th_tmpdir(), 8));
}
