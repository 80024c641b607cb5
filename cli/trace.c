/* trace.c - `replicator trace merge OUT IN...`: one trace file from per-rank ones. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void trace_usage(FILE *f)
{
    fprintf(f,
            "usage: replicator trace merge OUT IN...\n"
            "\n"
            "Merges trace files written per MPI rank (FILE.rank<N>.json, from --trace FILE when\n"
            "the ranks do not share a directory) into OUT, one Chrome trace-event JSON file for\n"
            "ui.perfetto.dev. Their timestamps already share rank 0's clock (docs/tracing.md).\n");
}

int rp_cli_trace(int argc, char **argv)
{
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        trace_usage(stdout);
        return 0;
    }
    if (argc < 4 || strcmp(argv[1], "merge") != 0) {
        trace_usage(stderr);
        return 2;
    }
    for (int i = 2; i < argc; i++)
        if (!strncmp(argv[i], "--", 2)) {
            fprintf(stderr, "replicator trace merge: unknown option %s\n", argv[i]);
            return 2;
        }
    if (rp_trace_merge(argv[2], (const char *const *)(argv + 3), argc - 3) != RP_OK) {
        fprintf(stderr, "replicator trace merge: error: %s\n", rp_last_error());
        return 1;
    }
    return 0;
}
