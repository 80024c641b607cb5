/*
 * sngan.h - a class-conditional SN-GAN (Miyato et al. 2018; Miyato and
 * Koyama 2018), the authors' 32x32 design (pfnet-research/sngan_projection:
 * gen_models/resnet_32.py, dis_models/snresnet_32.py, updater.py), trained by
 * the shared trainer on the public API only.
 *
 * Generator: z ~ N(0, I) [z_dim] -> linear to (h/8) x (w/8) x ch_g -> three
 * up-blocks [CBN -> ReLU -> nearest 2x -> conv3x3 -> CBN -> ReLU -> conv3x3]
 * + [2x -> conv1x1] -> BN -> ReLU -> conv3x3 (ch_g -> c) -> tanh. CBN is the
 * categorical conditional batch norm (per-class gamma, beta); every batch
 * norm is cross-replica in training. Glorot-uniform weights, gain sqrt(2) on
 * the residual convolutions, 1 on the shortcuts, the linear and the output
 * convolution; biases zero; BN eps 2e-5 and momentum 0.1 (Chainer's).
 * Discriminator (every weight spectrally normalised, one power iteration per
 * training forward): OptimizedBlock(c -> ch_d) [conv3x3 -> ReLU -> conv3x3 ->
 * avgpool2] + [avgpool2 -> conv1x1]; Block(down) [ReLU -> conv3x3 -> ReLU ->
 * conv3x3 -> avgpool2] + [conv1x1 -> avgpool2]; two Blocks at 8x8 with the
 * identity shortcut; ReLU; a SUM over H and W; then
 * SNLinear(ch_d -> 1, no bias)(h) + <SNEmbed(y), h> (the projection).
 * (A 1x1 convolution commutes with nearest upsampling and with average
 * pooling, so both shortcuts run the convolution on the smaller image:
 * the same function, a quarter of the work.)
 *
 * One trainer step is one generator iteration, in updater.py's order: one
 * generator step (g_batch fakes with uniform labels, the discriminator frozen),
 * then n_dis discriminator steps, each on a fresh real batch of d_batch images
 * with their labels and d_batch fakes (the generator frozen: no gradient
 * reaches it), real and fake in one forward so that the power iteration runs
 * once per step. Losses: hinge. Adam (beta1, beta2) per network. The trainer
 * is used in steps-only mode (rp_trainer_config.steps = iterations) with the
 * linear schedule; see rp_sngan_trainer_config_apply().
 *
 * Random numbers depend only on the seed and the global step: the labels and
 * z of sample j of a phase's global batch are a function of (seed, step,
 * phase, j), and the real batches come from the loader at position step *
 * n_dis + i; so N replicas with B/N each draw the same global batches as one
 * replica with B, and a resumed run continues bit for bit.
 *
 * The checkpoint holds "gen/<name>" (parameters and batch-norm running
 * statistics), "dis/<name>" (parameters and the spectral norms' u vectors),
 * "optim_g/..." and "optim_d/..." (each Adam's moments and step count), plus
 * the trainer's "train/position".
 *
 *     rp_sngan_config sc = rp_sngan_config_default();
 *     rp_sngan *gan;
 *     rp_sngan_create(&gan, &sc);                       // loads the dataset
 *     rp_trainer_config tc = rp_trainer_config_default();
 *     tc.run_dir = "runs/gan";
 *     rp_sngan_trainer_config_apply(&sc, &tc);          // lr, schedule, scalars
 *     tc.steps = 5000;                                  // generator iterations
 *     rp_trainer_create(&t, &tc, rp_sngan_trainer_model(), gan);
 *     rp_sngan_set_run_dir(gan, rp_trainer_run_dir(t)); // samples.png there
 *     rp_trainer_run(t);
 *     rp_trainer_destroy(t);
 *     rp_sngan_destroy(gan);
 *
 * Gradient accumulation (accum > 1): each step's global batch is split into
 * accum micro-batches per replica whose gradients add up before the one
 * update (each micro-batch's loss is scaled by 1/accum). The generator's batch
 * norms then normalise each micro-batch with its own statistics (across the
 * replicas' shares of that micro-batch) and update their running statistics
 * once per micro-batch: a batch of B in k micro-batches is not the same step
 * as one batch of B. The discriminator has no batch norm; its u vectors are
 * restored before each micro-batch after the first, so they advance once per
 * step and every micro-batch sees the same W / sigma.
 *
 * Thread-safety: an rp_sngan is shared by the replicas of one trainer, which
 * only read it (rp_sngan_set_run_dir between runs). A generator handle is used
 * by one thread at a time.
 */
#ifndef RP_MODELS_SNGAN_H
#define RP_MODELS_SNGAN_H

#include "replicator/replicator.h"

typedef struct rp_sngan_config {
    int ch_g, ch_d;       /* widths (default 32, 32) */
    int z_dim;            /* 128 */
    int classes;          /* from the dataset (10); rp_sngan_create sets it */
    int h, w, c;          /* 32, 32, 1 (Fashion-MNIST padded) or 3 (CIFAR-10); c is set from the
                             dataset by rp_sngan_create; h and w multiples of 8, at least the
                             dataset's (smaller images are padded with background, -1) */
    int d_batch, g_batch; /* global batches: 64 (real; as many fakes), 128 */
    int accum; /* gradient accumulation: each step's batch in `accum` micro-batches (1) */
    int n_dis; /* 5 */
    float lr_g, lr_d, beta1, beta2; /* 2e-4, 2e-4, 0.0, 0.9; the trainer's lr schedule
                                       (linear to 0) scales both: lr_x * at->lr / lr_g (the
                                       trainer's peak rate must be lr_g, see
                                       rp_sngan_trainer_config_apply) */
    char dataset[32];               /* fashion-mnist | mnist | cifar10 */
    char data_dir[4096]; /* "": $RP_DATA_DIR or Debian's Fashion-MNIST directory (fashion-mnist
                            only; mnist and cifar10 need one); up to PATH_MAX */
    int64_t limit;       /* the first N training images (0: all) */
    uint64_t seed;       /* initial weights, z, labels, the real batches' order */
    int64_t
        sample_every; /* write samples.png (and samples-<iter>.png) every K iterations (0: never) */
    /* Under a bf16 run (the tape's policy computes in bf16), what stays f32 (docs/precision.md):
       keep_f32 "none" (default; "" too), "g" (the generator computes and stores in f32) or "d" (the
       discriminator); activations "f32" (default: bf16 compute, f32 storage; bf16 storage
       cost the default run 0.2 of FD, docs/sngan.md) or "bf16" (and "", as older runs). */
    char keep_f32[8];
    char activations[8];
} rp_sngan_config;

/*
 * The tape policy one network runs with under the run's policy `run`: the run's, in f32 for
 * the network cfg->keep_f32 names ('g' or 'd'), its activations in f32 if cfg->activations
 * says so.
 */
rp_precision_policy rp_sngan_net_policy(rp_precision_policy run, const rp_sngan_config *cfg,
                                        char net);

/* The defaults above (Fashion-MNIST from the default directory, seed 0, sample_every 0). */
rp_sngan_config rp_sngan_config_default(void);

/*
 * Checks a configuration (what rp_sngan_create and rp_sngan_generator_create
 * check): RP_ERR_INVALID naming the first bad field. `classes` and `c` must
 * be >= 1 here (rp_sngan_create fills them in before it checks).
 */
rp_status rp_sngan_config_check(const rp_sngan_config *cfg);

/* The trainer's ctx: the dataset, the configuration, the run directory, the eval hook's data. */
typedef struct rp_sngan rp_sngan;

/*
 * Loads cfg->dataset's training split from cfg->data_dir and checks the
 * configuration; the copy held takes `classes` and `c` from the dataset.
 * Errors: the dataset's (a missing or corrupt file, named), RP_ERR_INVALID
 * (a bad field, named; a dataset larger than h x w; fewer images than one
 * d_batch), RP_ERR_NOMEM. On error *g is NULL.
 */
rp_status rp_sngan_create(rp_sngan **g, const rp_sngan_config *cfg);
/* Frees it (NULL is ignored). Destroy the trainer using it first. */
void rp_sngan_destroy(rp_sngan *g);
/* The configuration in use (classes and c from the dataset); owned by g. */
const rp_sngan_config *rp_sngan_get_config(const rp_sngan *g);
/* The training set (owned by g). */
const rp_dataset *rp_sngan_dataset(const rp_sngan *g);

/*
 * The run directory where samples are written (copied; NULL: none, the
 * default). Main thread, between runs. Errors: RP_ERR_INVALID (g NULL, a
 * path over 511 bytes).
 */
rp_status rp_sngan_set_run_dir(rp_sngan *g, const char *dir);

/*
 * What the trainer's evaluation callbacks use (sngan_eval.h's rp_sngan_eval,
 * borrowed; NULL, the default: the evaluation does nothing). Main thread,
 * between runs.
 */
void rp_sngan_set_eval(rp_sngan *g, void *eval);
void *rp_sngan_get_eval(const rp_sngan *g);

/*
 * Fills the trainer fields the GAN needs: lr = cfg->lr_g (the schedule's
 * peak; the discriminator's rate is lr_d / lr_g times it), schedule
 * RP_SCHED_LINEAR, batch = 1 and rate unit "it/s" (the rate shown is
 * generator iterations per second; "iterations_per_s" in metrics.jsonl),
 * shown_scalars "d_loss,g_loss". The caller sets steps, run_dir and the rest.
 */
void rp_sngan_trainer_config_apply(const rp_sngan_config *cfg, rp_trainer_config *tc);

/*
 * The trainer's callbacks (static; ctx: an rp_sngan). Scalars, in order:
 * "d_loss" (the hinge loss, mean over the n_dis steps), "g_loss",
 * "d_real" and "d_fake" (mean discriminator outputs on real images and on
 * fakes over the n_dis steps). Sync regime only (RP_ERR_UNSUPPORTED in
 * async: the two networks train in turns and the batch norms are
 * cross-replica). d_batch and g_batch must divide by replicas x accum
 * (RP_ERR_INVALID at build).
 */
const rp_trainer_model *rp_sngan_trainer_model(void);

/*
 * The two phases of a trainer step, for studying them one at a time (the
 * trainer's train_step is rp_sngan_step_g then rp_sngan_step_d for i = 0 ..
 * n_dis-1). Every replica, inside a run, on the state build made; `at`
 * gives the global step (keying the random numbers) and the schedule's rate.
 * step_g trains the generator on g_batch fakes with the discriminator frozen
 * (its u vectors do advance: a training forward); step_d trains the
 * discriminator on real batch `i` of the step and as many fakes, the
 * generator frozen (its batch-norm running statistics do advance: the fakes
 * are made in training mode, as the authors'). Each resets the replica's
 * tape. scalars (may be NULL) receive: step_g [0] = g_loss; step_d [0] =
 * d_loss, [1] = d_real, [2] = d_fake (this replica's means). Errors: a
 * non-finite loss (RP_ERR_NUMERIC, naming the step), the ops' and the
 * optimizers' errors.
 */
rp_status rp_sngan_step_g(rp_replica *rep, rp_sngan *g, void *state, const rp_trainer_at *at,
                          double *scalars);
rp_status rp_sngan_step_d(rp_replica *rep, rp_sngan *g, void *state, const rp_trainer_at *at, int i,
                          double *scalars);

/*
 * The generator alone, for sampling and evaluation outside training.
 * create builds it from cfg (ch_g, z_dim, classes, h, w, c, seed: the same
 * initial values as training's); bn_comm: cross-replica statistics for a
 * training forward (NULL: this process's batch; evaluation never
 * communicates). Errors: RP_ERR_INVALID (a bad field), RP_ERR_NOMEM.
 */
typedef struct rp_sngan_generator rp_sngan_generator;
rp_status rp_sngan_generator_create(rp_sngan_generator **g, const rp_sngan_config *cfg,
                                    rp_comm *bn_comm);
void rp_sngan_generator_destroy(rp_sngan_generator *g);
/* Its parameters and buffers (owned by g). */
rp_params *rp_sngan_generator_params(rp_sngan_generator *g);
/*
 * Loads "gen/..." tensors from a checkpoint written by training (all or
 * nothing). Errors: RP_ERR_SHAPE naming missing or mismatched tensors (a
 * checkpoint of another width or no GAN at all), RP_ERR_INVALID.
 */
rp_status rp_sngan_generator_load(rp_sngan_generator *g, const rp_checkpoint *ck);
/*
 * images [n,h,w,c] in [-1,1] (evaluation mode: running BN statistics), for
 * z [n,z_dim], labels [n] (each in [0, classes)). Uses tape t for the
 * activations with recording off, and resets it before returning (so pass a
 * tape holding nothing you still need; memory grows with n: call it in
 * chunks). Errors: RP_ERR_INVALID (NULL, n < 1, a label out of range, named),
 * the ops' errors.
 */
rp_status rp_sngan_generate(rp_sngan_generator *g, rp_tape *t, const float *z,
                            const int32_t *labels, int n, float *images);
/* The generator of a replica's training state (rp_trainer_state()); NULL for NULL. */
rp_sngan_generator *rp_sngan_state_generator(void *state);
/* The discriminator's parameters and buffers of a replica's training state; NULL for NULL. */
rp_params *rp_sngan_state_discriminator_params(void *state);
/* The two optimizers of a replica's training state (either pointer may be NULL). */
void rp_sngan_state_optimizers(void *state, rp_optimizer **opt_g, rp_optimizer **opt_d);

/*
 * The fixed latent vectors of the sample grid: column j's z [z_dim] (j in
 * [0, 10)), a function of cfg->seed only, written into z[10 * z_dim].
 */
void rp_sngan_sample_z(const rp_sngan_config *cfg, float *z);

/*
 * Writes the sample grid PNG to `path`: one row per class, 10 columns of
 * the fixed z's (rp_sngan_sample_z), generated in evaluation mode, [-1,1]
 * mapped to 0..255, 2 pixels of white between tiles. Uses tape t (reset).
 * Errors: those of rp_sngan_generate and rp_image_grid_write_png (naming the path).
 */
rp_status rp_sngan_write_samples(rp_sngan_generator *g, rp_tape *t, const char *path);

#endif
