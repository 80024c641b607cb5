/*
 * sngan_command.h - the SN-GAN model's commands (sngan_train_command.c, sngan_eval_command.c,
 * sngan_sample_command.c): `replicator train sngan`, `sample` and `eval` on SN-GAN runs, the
 * options (stored in every checkpoint) and the judge (a classifier run, read with the
 * classifier's options: models/classifier/classifier_options.h). Written against the public
 * headers and the model folders'. Also `replicator bench sngan` (sngan_bench_command.c) and the
 * descriptor the command's registry lists (rp_sngan_model, sngan_model.c).
 */
#ifndef RP_MODELS_SNGAN_COMMAND_H
#define RP_MODELS_SNGAN_COMMAND_H

#include "models/classifier/classifier_options.h"
#include "models/sngan/sngan.h"
#include "models/sngan/sngan_eval.h"

/*
 * The default run fits in 30 minutes on 2 cores (docs/sngan.md): the authors'
 * recipe with 3,500 iterations instead of 50,000, and Adam's rate doubled for
 * the short schedule (the library's rp_sngan_config_default keeps theirs).
 */
#define SNGAN_DEFAULT_ITERS 3500
#define SNGAN_DEFAULT_LR    4e-4f

typedef struct sngan_opts {
    rp_sngan_config g;
    int64_t iters;            /* generator iterations (trainer steps) */
    int64_t checkpoint_every; /* iterations (0: only at the end and on a stop) */
    int64_t eval_every;       /* iterations between scores with a judge (0: 4 in the run) */
    int64_t eval_samples;
    int64_t metrics_every;
    int64_t max_steps;
    char judge[CLI_PATH_MAX]; /* a classifier run directory, or "" */
    char out_dir[CLI_PATH_MAX];
    char backend[8];
    char precision[8];     /* --precision f32|bf16 (saved; a resume may change it) */
    int grad_dtype;        /* --grad-dtype: rp_dtype of the gradients on the wire */
    int zero;              /* --zero [1|2|3]: 0 off, ZeRO-1, 2 or 3 (a layout: not saved) */
    int hsdp;              /* --hsdp G: ZeRO in groups of G replicas (implies --zero 1) */
    bool keep_gathered;    /* --keep-gathered: ZeRO-3's units kept from forward to the update */
    bool prefetch;         /* --prefetch: ZeRO-3's next unit gathered while this one computes */
    int checkpoint_shards; /* --checkpoint-shards N (0: one file) */
    bool background_save;  /* --background-save */
    bool per_worker_save;  /* --checkpoint-per-worker */
    double comm_timeout;
    int threads, replicas;
    bool replicas_given, out_given, force, quiet, no_checkpoint;
    const char *tensorboard; /* --tensorboard DIR (argv's), or NULL; not saved */
    const char *trace;       /* --trace FILE (argv's), or NULL; not saved */
    const char *resume;      /* --resume DIR (argv's), or NULL */
    rp_options_given given;  /* the options this command line gave */
} sngan_opts;

void sngan_opts_default(sngan_opts *o);
/* 0: parsed; 1: --help printed; 2: a bad option (printed). */
int sngan_opts_parse(int argc, char **argv, sngan_opts *o, const char **resume);
char *sngan_opts_to_json(const sngan_opts *o);
rp_status sngan_opts_from_json(sngan_opts *o, const char *json);
/* Whether a checkpoint's configuration text is an SN-GAN run's. */
bool sngan_config_is_gan(const char *json);
/* The judge from a classifier run directory. */
rp_status sngan_judge_load(rp_sngan_judge **j, const char *dir);

/*
 * The generator of run `dir` (its checkpoint's "gen/" tensors) and the run's
 * options. Errors: a missing or corrupt checkpoint (named), a run that is
 * not an SN-GAN's (RP_ERR_INVALID, saying what it is).
 */
rp_status sngan_run_load(const char *dir, sngan_opts *o, rp_sngan_generator **g);

/* `replicator train sngan ...`, `replicator eval GAN_RUN ...`, `replicator sample GAN_RUN ...`. */
int sngan_train_main(int argc, char **argv);
/* `replicator export --format onnx` of an SN-GAN run: its generator (the descriptor's hook). */
rp_status sngan_onnx_export(rp_onnx **g, const rp_checkpoint *ck, const char *config, bool online,
                            char *what, size_t what_size);
int sngan_eval_main(int argc, char **argv);
int sngan_sample_main(int argc, char **argv);
/* `replicator bench sngan ...`: milliseconds per iteration on the library's benchmark driver. */
int sngan_bench_main(int argc, char **argv);

/* The descriptor (sngan_model.c): train, eval, sample, bench, the trainer callbacks. */
extern const rp_model_desc rp_sngan_model;

#endif
