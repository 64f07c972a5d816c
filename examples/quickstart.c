/* quickstart.c - save a sharded tensor from 4 ranks (threads), load it back on 2 ranks with another split. */
#include <shardckpt.h>
#include <stdio.h>

static float full[8][6];                       /* the global [8, 6] tensor, for checking */

static int save(sck_comm *comm, void *dir) {
    int r = sck_comm_rank(comm);               /* rank r holds rows 2r, 2r+1 */
    int64_t shape[2] = {8, 6}, off[2] = {2 * r, 0}, size[2] = {2, 6};
    sck_state *st = sck_state_new();
    sck_state_add_box(st, "model.w", SCK_F32, 2, shape, off, size, &full[2 * r][0]);
    sck_state_add_value(st, "other.step", sck_value_int(100));
    int rc = sck_save(comm, (const char *)dir, st, NULL);    /* collective: writes dir/.metadata + __r_0.distcp */
    sck_state_free(st);
    return rc;
}

static int load(sck_comm *comm, void *dir) {
    int r = sck_comm_rank(comm);               /* now rank r wants columns 3r .. 3r+2 */
    float part[8][3];
    int64_t shape[2] = {8, 6}, off[2] = {0, 3 * r}, size[2] = {8, 3};
    sck_state *st = sck_state_new();
    sck_state_add_box(st, "model.w", SCK_F32, 2, shape, off, size, part);
    sck_state_add_value(st, "other.step", NULL); /* request it */
    int rc = sck_load(comm, (const char *)dir, st, NULL);
    if (rc == 0 && r == 1)
        printf("rank 1: w[7][5] = %g, step = %lld\n", part[7][2],
               (long long)sck_value_get_int(sck_state_value(st, "other.step")));
    sck_state_free(st);
    return rc;
}

static char default_dir[] = "quickstart_ckpt";

int main(int argc, char **argv) {
    char *dir = argc > 1 ? argv[1] : default_dir; /* also valid C++: no literal as char * */
    for (int i = 0; i < 48; i++) full[i / 6][i % 6] = (float)i;
    if (sck_threads_run(4, save, dir) || sck_threads_run(2, load, dir)) {
        fprintf(stderr, "error: %s\n", sck_last_error());
        return 1;
    }
    return 0;
}
