/*
 * classifier_options.h - the image classifiers' run options (classifier_options.c): the option
 * table of `replicator train [resnet20|resnet18|resnet50|mlp]` (parser, help, JSON, resume
 * rules), the options' JSON stored in every checkpoint (so a run can be resumed, evaluated or
 * used as SN-GAN's judge from its directory alone), how they map onto the classifier
 * (classifier.h), and the strict reading of a stored configuration that the SN-GAN command
 * shares. Written against the public headers and this folder's; the commands that use them
 * are classifier_command.h's.
 */
#ifndef RP_MODELS_CLASSIFIER_OPTIONS_H
#define RP_MODELS_CLASSIFIER_OPTIONS_H

#include <limits.h>

#include "models/classifier/classifier.h"
#include "replicator/replicator.h"

/* The size of a path option's buffer: any path the system accepts (PATH_MAX counts the NUL). */
#define CLI_PATH_MAX PATH_MAX

typedef struct train_opts {
    char model[32];   /* mlp | resnet20 | resnet18 | resnet50 */
    char dataset[32]; /* fashion-mnist | mnist | cifar10 | synthetic */
    char data_dir[CLI_PATH_MAX];
    char out_dir[CLI_PATH_MAX];
    int epochs;
    int batch;
    float lr;
    float momentum;
    float weight_decay;
    bool nesterov;
    char schedule[16]; /* cosine | constant */
    int warmup_epochs;
    uint64_t seed;
    int threads;  /* kernel threads in all (0: all cores) */
    int replicas; /* data-parallel replicas (threads of this process; under MPI, of each rank) */
    bool replicas_given; /* --replicas on this command line (under MPI the saved count is the job's)
                          */
    char backend[8];     /* auto | threads | mpi: where the replicas run (not saved) */
    double comm_timeout; /* seconds (0: the environment's default; not saved) */
    int threads_per_replica; /* 0: threads / replicas */
    char regime[8];          /* sync | async */
    int hsdp; /* --hsdp G: ZeRO sharded in groups of G replicas, replicated across them (0: off;
                 implies --zero 1 when --zero is not given; a layout: not saved) */
    bool keep_gathered; /* --keep-gathered: ZeRO-3's units kept from forward to the update */
    bool prefetch;      /* --prefetch: ZeRO-3's next unit gathered while this one computes */
    int zero; /* --zero [1|2|3]: 0 off; ZeRO-1, each replica keeps 1/N of the optimizer state;
                 ZeRO-2, of the reduced gradients too; ZeRO-3, of the values too (sync; a
                 layout like --replicas: bitwise the same run, so not saved) */
    char precision[8];   /* --precision f32|bf16: the replicas' compute policy (tensor.h); saved,
                            and a resumed run may change it */
    rp_dtype grad_dtype; /* --grad-dtype f32 | bf16: the gradients on the wire (sync; saved, may
                            change on resume) */
    int model_parallel;  /* --model-parallel W: workers (pipeline stages) per replica; 1: none */
    int tensor_parallel; /* --tensor-parallel T: workers splitting each stage's blocks; 1: none */
    char pipeline[8];    /* --pipeline gpipe | 1f1b: the schedule over the stages */
    int micro_batches;   /* --micro-batches M: of each replica's batch (1: the whole batch) */
    int sync_groups; /* --sync-groups G: G groups in sync inside, async between them (0, 1: off) */
    int ps;          /* async: parameter servers (in-process shards, or the last ranks under MPI) */
    int staleness;   /* async: the staleness bound, -1 unbounded */
    int slow_replica; /* --slow R:F: replica R sleeps (F-1) x its step time each step (-1: none; not
                         saved) */
    float slow_factor;
    int hidden[RP_MLP_MAX_LAYERS];
    int n_hidden;
    bool augment;
    int pad;
    int64_t limit;           /* first N training samples (0: all) */
    int image_size;          /* pad images to N x N (0: as stored) */
    rp_folder_config folder; /* --dataset folder: decoding and augmentation (image_size unused:
                                the crop side is image_size, 224 when 0; threads not saved) */
    int64_t max_steps;       /* stop (and checkpoint) after this global step (0: no limit) */
    bool quiet;
    bool no_checkpoint;
    int checkpoint_shards;   /* --checkpoint-shards N: each checkpoint as N shards + an index
                                (0: one whole file); not saved */
    bool background_save;    /* --background-save: checkpoints written on a background thread;
                                not saved */
    bool per_worker_save;    /* --checkpoint-per-worker: each worker writes its own shard; not
                                saved */
    bool force;              /* --out may hold an earlier run's checkpoint: overwrite it */
    bool out_given;          /* --out was on the command line (else runs/MODEL, made unique) */
    const char *tensorboard; /* --tensorboard DIR (argv's), or NULL; not saved */
    const char *trace;       /* --trace FILE (argv's), or NULL; not saved */
    bool plan_check; /* --plan-check: print the plan, compare it with the first steps (not saved) */
    const char *resume;     /* --resume DIR (argv's), or NULL */
    rp_options_given given; /* the options this command line gave (train_opts_table's rows) */
} train_opts;

/* The table the options come from (replicator/options.h): parser, help, JSON, resume rules. */
const rp_option *train_opts_table(void);

/* Defaults for a model: what `replicator train MODEL` runs with no options. */
void train_opts_default(train_opts *o, const char *model);

/*
 * Parses argv (argv[0] is the command name). Returns 0 with *o filled, 1
 * after --help was printed, 2 on a bad option (a message was printed).
 * *resume gets --resume's directory or NULL.
 */
int train_opts_parse(int argc, char **argv, train_opts *o, const char **resume);

/*
 * Reading a run's stored configuration (a parsed JSON object) key by key, as strictly as the
 * command line. The first key that is missing, of another type or out of range is kept, so the
 * error names it and its value: `"ch_g" is 5000, outside [1, 4096]`. Each read returns false
 * once a read has failed, so a chain of reads stops at the first bad key.
 */
struct cJSON;
typedef struct train_config_reader {
    const struct cJSON *json;
    char bad[256]; /* what the first failed read found ("" while none has failed) */
} train_config_reader;
/* A number in [lo, hi] under `key`. */
bool train_config_num(train_config_reader *r, const char *key, double lo, double hi, double *out);
/* A string under `key` that fits dst[size] whole (never cut: a cut path names another place). */
bool train_config_str(train_config_reader *r, const char *key, char *dst, size_t size);
bool train_config_bool(train_config_reader *r, const char *key, bool *dst);
/* Refuses key's value for `why` ("must be below 1"); returns false. */
bool train_config_refuse(train_config_reader *r, const char *key, const char *why);
/* RP_ERR_FORMAT: "<what> is incomplete or invalid: <the bad key and its value>". */
rp_status train_config_error(const train_config_reader *r, const char *what);

/*
 * The options as a JSON object text (caller frees with free()), and back. Errors of
 * train_opts_from_json: RP_ERR_FORMAT naming the first key missing or out of range, and its
 * value.
 */
char *train_opts_to_json(const train_opts *o);
rp_status train_opts_from_json(train_opts *o, const char *json);

/* The classifier's share of the options. */
void train_opts_classifier(const train_opts *o, rp_classifier_config *c);

#endif
