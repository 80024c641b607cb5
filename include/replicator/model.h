/*
 * replicator/model.h - a model's descriptor: everything a host program (the `replicator`
 * command, or a user's own) needs to offer a model by name. A model is one folder in models/
 * that exports one descriptor; the command's registry (cli/registry.c) lists them, one line
 * each, and `replicator train|eval|sample|bench|plan MODEL` dispatch through it.
 *
 * The hooks are commands: they take the command line from the model's name on (argv[0] is the
 * name or, for eval and sample, the subcommand), print what a user should see, and return a
 * process exit status (0 done, 1 a run's error, 2 a bad command line). The registry's first
 * model, its default, also gets what no other model claims, from the subcommand on (argv[0]
 * "train", "plan", "eval" or "bench"). A model leaves NULL what it does not offer. The
 * descriptor is constant data and is never copied by the registry.
 */
#ifndef REPLICATOR_MODEL_H
#define REPLICATOR_MODEL_H

#include "onnx.h"
#include "options.h"
#include "trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef int (*rp_model_command)(int argc, char **argv);

typedef struct rp_model_desc {
    const char *name;         /* `replicator train NAME` */
    const char *summary;      /* one line for the command's help */
    const rp_option *options; /* its training options (NULL: none declared) */
    const rp_trainer_model *(*trainer)(
        void); /* its trainer callbacks (NULL: not a trainer model) */
    /* Whether a run's saved configuration (the checkpoint's "replicator.config") is this model's:
       `eval DIR`, `sample DIR` and `train --resume DIR` find the model of a run with it. */
    bool (*owns_config)(const char *json);
    rp_model_command train;  /* `replicator train NAME ...` */
    rp_model_command eval;   /* `replicator eval DIR ...` of one of its runs */
    rp_model_command sample; /* `replicator sample DIR ...` of one of its runs */
    rp_model_command bench;  /* `replicator bench NAME ...` */
    rp_model_command plan;   /* `replicator plan NAME ...` */
    /* `replicator export RUN --format onnx`: the network of one of its runs as an ONNX graph,
       from the run's checkpoint `ck` and its saved configuration `config` (`online`: a model's
       latest parameters rather than those its actors ran, where it has both); *what gets a
       line naming what it is. Errors leave *g NULL. */
    rp_status (*onnx)(rp_onnx **g, const rp_checkpoint *ck, const char *config, bool online,
                      char *what, size_t what_size);
} rp_model_desc;

#ifdef __cplusplus
}
#endif

#endif
