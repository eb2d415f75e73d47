/* weft-ckpt: offline work on checkpoints.
 *
 *   weft-ckpt inspect DIR          a sharded save: step, layout, files and
 *                                  each tensor's slices
 *   weft-ckpt consolidate DIR OUT  the save as one file (the one-process
 *                                  layout; --resume and --inspect read it)
 *
 * consolidate holds the whole model and optimiser state in memory, as a
 * one-process run would. */
#include "weft.h"

#include <stdio.h>
#include <string.h>

static int usage(void)
{
    fprintf(stderr, "usage: weft-ckpt inspect DIR\n"
                    "       weft-ckpt consolidate DIR OUT\n");
    return 2;
}

int main(int argc, char **argv)
{
    int rc;
    if (argc == 3 && strcmp(argv[1], "inspect") == 0) {
        if ((rc = weft_ckpt_shard_list(argv[2], stdout)) != 0) {
            fprintf(stderr, "weft-ckpt: cannot read %s: %s\n", argv[2], weft_strerror(rc));
            return 1;
        }
        return 0;
    }
    if (argc != 4 || strcmp(argv[1], "consolidate") != 0)
        return usage();
    weft_ckpt *c;
    if ((rc = weft_ckpt_load(&c, argv[2])) != 0) {
        fprintf(stderr, "weft-ckpt: cannot load %s: %s\n", argv[2], weft_strerror(rc));
        return 1;
    }
    rc = weft_ckpt_save(c, argv[3]);
    weft_ckpt_free(c);
    if (rc != 0) {
        fprintf(stderr, "weft-ckpt: cannot write %s: %s\n", argv[3], weft_strerror(rc));
        return 1;
    }
    return 0;
}
