/*
 * d4pg_command.h - the D4PG model's commands (d4pg_train_command.c, d4pg_eval_command.c):
 * `replicator train d4pg` and `replicator eval` on a D4PG run, their options and the options'
 * JSON (stored in every checkpoint), and the descriptor the command's registry lists
 * (rp_d4pg_model). Written against the public headers and this folder's.
 */
#ifndef RP_MODELS_D4PG_COMMAND_H
#define RP_MODELS_D4PG_COMMAND_H

#include <limits.h>

#include "models/d4pg/d4pg_job.h"
#include "replicator/replicator.h"

typedef struct d4pg_opts {
    rp_d4pg_job_config j;
    int64_t eval_every;       /* env steps */
    int64_t checkpoint_every; /* env steps */
    int64_t metrics_every;    /* learner steps */
    int64_t max_steps;        /* learner steps; 0: none */
    int threads;              /* kernel threads per learner replica; 0: cores / replicas */
    double comm_timeout;
    char backend[16];
    char precision[8];      /* --precision f32|bf16 (saved; a resume may change it) */
    int grad_dtype;         /* --grad-dtype: rp_dtype of the learners' gradients on the wire */
    int checkpoint_shards;  /* --checkpoint-shards N (0: one file) */
    bool background_save;   /* --background-save */
    char out_dir[PATH_MAX]; /* any path the system accepts (PATH_MAX counts the NUL) */
    bool out_given, force, quiet;
    const char *tensorboard; /* --tensorboard DIR (argv's), or NULL; not saved */
    const char *trace;       /* --trace FILE (argv's), or NULL; not saved */
    const char *resume;      /* --resume DIR (argv's), or NULL */
    rp_options_given given;  /* the options this command line gave */
} d4pg_opts;

void d4pg_opts_default(d4pg_opts *o);
/* 0: parsed; 1: --help printed; 2: a bad option (printed). */
int d4pg_opts_parse(int argc, char **argv, d4pg_opts *o, const char **resume);
char *d4pg_opts_to_json(const d4pg_opts *o);
rp_status d4pg_opts_from_json(d4pg_opts *o, const char *json);
/* Whether a checkpoint's configuration is a D4PG run's. */
bool d4pg_config_is_d4pg(const char *json);

/* `replicator train d4pg ...` and `replicator eval D4PG_RUN ...`. */
int d4pg_train_main(int argc, char **argv);
int d4pg_eval_main(int argc, char **argv);
/* `replicator export --format onnx` of a D4PG run: a policy (the descriptor's hook). */
rp_status d4pg_onnx_export(rp_onnx **g, const rp_checkpoint *ck, const char *config, bool online,
                           char *what, size_t what_size);

/* The descriptor (d4pg_model.c): train, eval, the trainer callbacks, owns_config. */
extern const rp_model_desc rp_d4pg_model;

#endif
