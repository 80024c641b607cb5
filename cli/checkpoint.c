/*
 * checkpoint.c - `replicator checkpoint consolidate|reshard|info RUN`: a
 * run's checkpoint made whole, split into another number of shards, or
 * described (replicator/io.h, "sharded checkpoints"; docs/training.md).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: replicator checkpoint consolidate RUN_DIR [OUT.safetensors]\n"
            "       replicator checkpoint reshard RUN_DIR --layout shards=N|whole\n"
            "       replicator checkpoint info RUN_DIR\n"
            "\n"
            "consolidate  reads RUN_DIR's checkpoint (sharded: checkpoint.index.json and\n"
            "             checkpoint.shards/; or whole) and writes it as one safetensors file,\n"
            "             byte for byte what a whole-file save of the same state writes;\n"
            "             OUT defaults to RUN_DIR/checkpoint.safetensors (then the run resumes\n"
            "             from it: the newer of the two kinds is the one loaded)\n"
            "reshard      rewrites the checkpoint offline: --layout shards=N splits every\n"
            "             tensor evenly over N shard files (a new generation, published\n"
            "             atomically; from a sharded checkpoint one output shard is in memory at\n"
            "             a time); --layout whole writes checkpoint.safetensors and removes the\n"
            "             shards. Any layout resumes any run: the trainer reads tensors by name\n"
            "info         the index: generation, layout, shards, position, tensors and pieces\n");
}

static void join(char *buf, size_t size, const char *dir, const char *name)
{
    snprintf(buf, size, "%s/%s", dir, name);
}

static int fail(const char *what)
{
    fprintf(stderr, "replicator checkpoint %s: error: %s\n", what, rp_last_error());
    return 1;
}

static bool is_sharded(const char *run)
{
    char index[4200];
    join(index, sizeof index, run, "checkpoint.index.json");
    return access(index, F_OK) == 0;
}

static int consolidate(const char *run, const char *out)
{
    char path[4200];
    if (!out) {
        join(path, sizeof path, run, "checkpoint.safetensors");
        out = path;
    }
    rp_checkpoint *ck = NULL;
    if (rp_trainer_load_checkpoint(&ck, run) != RP_OK) return fail("consolidate");
    rp_status status = rp_checkpoint_save(ck, out);
    int n = rp_checkpoint_count(ck);
    rp_checkpoint_destroy(ck);
    if (status != RP_OK) return fail("consolidate");
    printf("wrote %s: %d tensors, whole\n", out, n);
    return 0;
}

static int reshard(const char *run, const char *layout)
{
    char base[4200], whole[4200];
    join(base, sizeof base, run, "checkpoint");
    join(whole, sizeof whole, run, "checkpoint.safetensors");
    if (!strcmp(layout, "whole")) {
        if (consolidate(run, whole) != 0) return 1;
        if (rp_checkpoint_remove_sharded(base) != RP_OK) return fail("reshard");
        return 0;
    }
    char *end = NULL;
    long n = strncmp(layout, "shards=", 7) == 0 ? strtol(layout + 7, &end, 10) : 0;
    if (!end || *end || n < 1 || n > RP_CHECKPOINT_SHARDS_MAX) {
        fprintf(stderr,
                "replicator checkpoint reshard: --layout \"%s\": shards=N (N in 1..%d) or whole\n",
                layout, RP_CHECKPOINT_SHARDS_MAX);
        return 2;
    }
    if (is_sharded(run)) {
        if (rp_checkpoint_reshard(base, (int)n) != RP_OK) return fail("reshard");
    } else {
        /* A whole file: split it, publish, then the whole file goes. */
        rp_checkpoint *ck = NULL;
        if (rp_trainer_load_checkpoint(&ck, run) != RP_OK) return fail("reshard");
        int64_t g = rp_checkpoint_published_generation(base) + 1;
        rp_status status = RP_OK;
        for (int k = 0; k < n && status == RP_OK; k++)
            status = rp_checkpoint_save_shard(ck, base, g, k, (int)n, (int)n);
        rp_checkpoint_destroy(ck);
        if (status == RP_OK) status = rp_checkpoint_publish(base, g, (int)n, layout);
        if (status != RP_OK) return fail("reshard");
        if (unlink(whole) != 0 && errno != ENOENT) {
            fprintf(stderr, "replicator checkpoint reshard: error: cannot remove %s: %s\n", whole,
                    strerror(errno));
            return 1;
        }
    }
    printf("resharded %s: %s\n", run, layout);
    return 0;
}

static int info(const char *run)
{
    char base[4200];
    join(base, sizeof base, run, "checkpoint");
    if (!is_sharded(run)) {
        rp_checkpoint *ck = NULL;
        if (rp_trainer_load_checkpoint(&ck, run) != RP_OK) return fail("info");
        printf("%s: a whole checkpoint (checkpoint.safetensors), %d tensors\n", run,
               rp_checkpoint_count(ck));
        rp_checkpoint_destroy(ck);
        return 0;
    }
    rp_checkpoint_index *ix = NULL;
    if (rp_checkpoint_index_open(&ix, base) != RP_OK) return fail("info");
    printf("%s: a sharded checkpoint, generation %lld, %d shards, layout \"%s\", %d tensors\n", run,
           (long long)rp_checkpoint_index_generation(ix), rp_checkpoint_index_shards(ix),
           rp_checkpoint_index_layout(ix), rp_checkpoint_index_count(ix));
    int64_t pos[3];
    if (rp_checkpoint_index_read(ix, "train/position", 0, 3, pos) == RP_OK)
        printf("position: epoch %lld, step %lld, global step %lld\n", (long long)pos[0],
               (long long)pos[1], (long long)pos[2]);
    rp_checkpoint_index_close(ix);
    return 0;
}

int rp_cli_checkpoint(int argc, char **argv)
{
    const char *verb = NULL, *run = NULL, *out = NULL, *layout = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--layout")) {
            if (i + 1 >= argc) {
                fprintf(stderr,
                        "replicator checkpoint: --layout needs a value (shards=N, whole)\n");
                return 2;
            }
            layout = argv[++i];
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "replicator checkpoint: unknown option %s (see --help)\n", a);
            return 2;
        } else if (!verb) {
            verb = a;
        } else if (!run) {
            run = a;
        } else if (!out) {
            out = a;
        } else {
            fprintf(stderr, "replicator checkpoint: unexpected argument \"%s\"\n", a);
            return 2;
        }
    }
    bool known =
        verb && (!strcmp(verb, "consolidate") || !strcmp(verb, "reshard") || !strcmp(verb, "info"));
    if (!known || !run) {
        if (verb && !known) fprintf(stderr, "replicator checkpoint: unknown action \"%s\"\n", verb);
        usage(stderr);
        return 2;
    }
    if (!strcmp(verb, "consolidate")) {
        if (layout) {
            fprintf(stderr, "replicator checkpoint consolidate: --layout is reshard's\n");
            return 2;
        }
        return consolidate(run, out);
    }
    if (out) {
        fprintf(stderr, "replicator checkpoint %s: unexpected argument \"%s\"\n", verb, out);
        return 2;
    }
    if (!strcmp(verb, "info")) return info(run);
    if (!layout) {
        fprintf(stderr, "replicator checkpoint reshard: --layout shards=N or whole is needed\n");
        return 2;
    }
    return reshard(run, layout);
}
