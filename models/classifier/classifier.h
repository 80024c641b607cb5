/*
 * classifier.h - an image classifier (an MLP or a ResNet) trained by the
 * shared trainer (replicator/trainer.h): the first user of the trainer, on
 * the public API only. `replicator train` and `replicator eval` are this
 * model plus option parsing.
 *
 *     rp_classifier_config cc = ...;              // model, data, optimizer
 *     rp_classifier *clf;
 *     rp_classifier_create(&clf, &cc);            // loads the datasets
 *     rp_trainer_create(&t, &tcfg, rp_classifier_trainer_model(), clf);
 *     rp_trainer_run(t);
 *     ... clf->last_accuracy, clf->best_accuracy ...
 *     rp_trainer_destroy(t);
 *     rp_classifier_destroy(clf);
 *
 * A checkpoint holds the parameters and buffers under "param/" and the
 * optimizer's state under "optim/" (plus the trainer's "train/position").
 */
#ifndef RP_MODELS_CLASSIFIER_H
#define RP_MODELS_CLASSIFIER_H

#include "models/mlp/mlp.h"
#include "models/resnet/resnet.h"
#include "replicator/replicator.h"

typedef struct rp_classifier_config {
    char model[32];      /* mlp | resnet20 | resnet18 | resnet50 */
    char dataset[32];    /* fashion-mnist | mnist | cifar10 | synthetic | folder */
    char data_dir[4096]; /* any path the system takes (PATH_MAX) */
    int batch;           /* the global batch */
    float momentum, weight_decay;
    bool nesterov;
    uint64_t seed;                 /* initial weights and the loader's shuffle */
    int hidden[RP_MLP_MAX_LAYERS]; /* mlp hidden widths */
    int n_hidden;
    bool augment; /* random crop (pad) and flip */
    int pad;
    int64_t limit;  /* the first N training samples (0: all) */
    int image_size; /* images padded to image_size x image_size, centred (0: as stored); for
                       dataset "folder" the side of the crops made (0: folder.image_size) */
    /* dataset "folder" (data_dir "DIR", "list:DIR" or "tar:DIR"): how the image files are
       decoded and augmented (rp_folder_config; all zero: rp_folder_config_default()) */
    rp_folder_config folder;
    /*
     * A replica that spans several workers on the pipe axis (the runtime's mesh: rp_role.pipe)
     * holds one stage of the ResNet each (logical devices, rp_resnet_partition) and trains
     * with this schedule over micro_batches micro-batches of its batch (rp_pipeline_run):
     * RP_PIPE_GPIPE with 1 micro-batch is TF-Replicator's plain model parallelism. Unused on a
     * replica of one worker.
     */
    rp_pipe_schedule schedule;
    int micro_batches; /* 0 or 1: the whole per-replica batch at once */
} rp_classifier_config;

/* true if `model` names a classifier this file builds. */
bool rp_classifier_known_model(const char *model);

/* The network: an MLP or a ResNet behind one face, or one stage of a ResNet. */
typedef struct rp_classifier_net {
    rp_mlp *mlp;
    rp_resnet *resnet;
    int stage, stages; /* this stage of the network cut into `stages` (1: the whole network) */
} rp_classifier_net;

/* Where one worker's part of the network sits. */
typedef struct rp_classifier_place {
    rp_comm *bn_comm; /* cross-replica batch norm over its members, or NULL */
    int stage;        /* this worker's stage ... */
    int stages;       /* ... of the network cut into `stages` (0 or 1: the whole network) */
    rp_comm *tp_comm; /* tensor parallelism over its members (rp_resnet_config.tp_comm; the
                         model axis), or NULL */
} rp_classifier_place;

/*
 * Builds stage place->stage of cfg->model's network cut into place->stages
 * stages of balanced cost (rp_resnet_partition) for h x w x c images: its
 * parameters only, each with the whole network's initial value. Stage 0
 * takes the images, the last stage returns the logits, the others an
 * activation (rp_classifier_net_forward). With place->tp_comm of T > 1
 * members every convolution block is split over them (tensor parallelism,
 * rp_resnet_config.tp_comm). Errors: RP_ERR_UNSUPPORTED (an MLP cut into
 * stages or split by tensor parallelism: only the ResNets are), RP_ERR_INVALID (a stage
 * outside [0, stages), more stages than the network has units), those of
 * rp_mlp_create/rp_resnet_create.
 */
rp_status rp_classifier_net_create_part(rp_classifier_net *net, const rp_classifier_config *cfg,
                                        int h, int w, int c, int classes,
                                        const rp_classifier_place *place);

/*
 * Builds the network of cfg->model for h x w x c images and `classes`, from
 * cfg->seed. bn_comm: cross-replica batch norm for ResNets over its members
 * (rp_resnet_config.bn_comm; NULL: per-replica statistics). Errors: those of
 * rp_mlp_create/rp_resnet_create.
 */
rp_status rp_classifier_net_create(rp_classifier_net *net, const rp_classifier_config *cfg, int h,
                                   int w, int c, int classes, rp_comm *bn_comm);
void rp_classifier_net_destroy(rp_classifier_net *net);
rp_params *rp_classifier_net_params(const rp_classifier_net *net);
rp_tensor *rp_classifier_net_forward(rp_tape *t, const rp_classifier_net *net, rp_tensor *x,
                                     bool training);

/* Loads the "train" or "test" split of cfg->dataset from cfg->data_dir, padded to cfg->image_size.
 */
rp_status rp_classifier_load_dataset(rp_dataset **ds, const rp_classifier_config *cfg,
                                     const char *split);
/*
 * Loads both splits (rp_classifier_load_dataset) and checks that their images have one shape: a
 * network built for the train images cannot score test images of another size, and finding out
 * at the first evaluation loses an epoch. Errors: the loads'; RP_ERR_SHAPE naming both splits and
 * their shapes; then *train and *test are NULL.
 */
rp_status rp_classifier_load_splits(rp_dataset **train, rp_dataset **test,
                                    const rp_classifier_config *cfg);

/* Test-set loss and accuracy. */
typedef struct rp_classifier_eval {
    double loss, accuracy;
    int64_t samples;
    double loss_sum; /* over samples */
    int64_t correct;
} rp_classifier_eval;

/*
 * Replica `replica` of `replicas` evaluates its share of every test batch
 * (about 256 images per batch in all), in evaluation mode, normalised with
 * mean/std; uses tape t (reset before each batch and at the end).
 */
rp_status rp_classifier_evaluate(rp_tape *t, const rp_classifier_net *net, const rp_dataset *test,
                                 const float *mean, const float *std, int replica, int replicas,
                                 rp_classifier_eval *r);

/*
 * The same for a network cut into stages, one per member of `pipe` (stage i
 * is rank i; the runtime's pipe axis): stage 0 reads the test batches and
 * each stage passes its activations and the labels on to the next
 * (rp_comm_send; a header with the batch's shape first, a batch of 0 ends
 * it); the last stage scores them, and every stage gets its sums (a
 * broadcast from the last). Every member calls it at once. With a pipe of
 * one member it is rp_classifier_evaluate. Errors: the comm's, and those
 * of rp_classifier_evaluate.
 */
rp_status rp_classifier_evaluate_stages(rp_tape *t, const rp_classifier_net *net,
                                        const rp_dataset *test, const float *mean, const float *std,
                                        int replica, int replicas, rp_comm *pipe,
                                        rp_classifier_eval *r);

/*
 * The trainer's context: the datasets and their normalisation, and what
 * the evaluations found. Created by rp_classifier_create(); the trainer's
 * callbacks update the results on the thread driving the trainer.
 */
typedef struct rp_classifier {
    rp_classifier_config cfg;
    rp_dataset *train, *test;
    float mean[RP_LOADER_MAX_CHANNELS], std[RP_LOADER_MAX_CHANNELS];
    double last_loss, last_accuracy; /* the last evaluation (0 before one) */
    double best_accuracy;            /* the best since create */
} rp_classifier;

/*
 * Loads both splits of cfg->dataset and their channel statistics. Errors:
 * the dataset's (a missing or corrupt file, named), RP_ERR_SHAPE for splits
 * whose images differ in size (rp_classifier_load_splits), RP_ERR_UNSUPPORTED for
 * more than RP_LOADER_MAX_CHANNELS channels, RP_ERR_NOMEM.
 */
rp_status rp_classifier_create(rp_classifier **c, const rp_classifier_config *cfg);
void rp_classifier_destroy(rp_classifier *c);

/* The trainer's callbacks for a classifier (static; pass an rp_classifier as their ctx). */
const rp_trainer_model *rp_classifier_trainer_model(void);

/* From a replica's state (rp_trainer_state()): its parameters, and the samples its loader reads per
 * epoch. */
rp_params *rp_classifier_state_params(const void *state);
/* The replica's optimizer (its state bytes: rp_optimizer_state_bytes); NULL for NULL. */
rp_optimizer *rp_classifier_state_optimizer(const void *state);
int64_t rp_classifier_state_samples(const void *state);
/* The replica's pipeline runner when it trains micro-batches or stages (rp_pipeline_tapes,
 * rp_pipeline_live_peak for its activations); NULL otherwise, and for NULL. */
const rp_pipeline *rp_classifier_state_pipeline(const void *state);

#endif
