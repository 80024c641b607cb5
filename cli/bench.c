/* bench.c - `replicator bench`: placeholder dispatch, filled in below. */
#include <stdio.h>

#include "cli.h"

int rp_cli_bench(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "replicator bench: see bench/ programs\n");
    return 2;
}
