/*
 * sngan_eval.h - judging an SN-GAN's samples with a frozen domain classifier.
 *
 * Inception weights are not available offline, so the judge is the
 * project's own ResNet trained on the GAN's data at the GAN's image size
 * (`replicator train resnet20 --image-size 32`), frozen. It gives:
 *  - class accuracy: the share of class-conditional samples it assigns to
 *    their intended class;
 *  - the Frechet distance between the samples' and the test set's pooled
 *    features (64-d for ResNet-20), and the same on the logits;
 *  - the Inception-Score analogue exp(E_x KL(p(y|x) || p(y))) on its
 *    softmax (at most the number of classes).
 * Samples are quantised to 8 bits first, as a PNG would show them, and
 * normalised like the classifier's training images.
 *
 * Everything a set of images contributes is a sum (rp_sngan_tally), so
 * replicas judge shares of a set and all-reduce their tallies.
 *
 * Thread-safety: a judge is read-only after create; any number of threads
 * may add to their own tallies at once, each with its own tape.
 */
#ifndef RP_MODELS_SNGAN_EVAL_H
#define RP_MODELS_SNGAN_EVAL_H

#include "models/classifier/classifier.h"
#include "models/sngan/sngan.h"
#include "replicator/replicator.h"

#define RP_SNGAN_MAX_CLASSES 100

typedef struct rp_sngan_judge rp_sngan_judge;

/*
 * Builds the judge from a classifier run: its configuration `cc` (a ResNet;
 * image_size as trained) and checkpoint `ck` ("param/" tensors). Loads the
 * train split (its channel statistics normalise the inputs, as in training)
 * and the test split, and computes the test set's reference statistics.
 * Errors: RP_ERR_INVALID (not a ResNet), the dataset's and the
 * checkpoint's errors (a missing or mis-shaped tensor, named), RP_ERR_NOMEM.
 */
rp_status rp_sngan_judge_create(rp_sngan_judge **j, const rp_classifier_config *cc,
                                const rp_checkpoint *ck);
void rp_sngan_judge_destroy(rp_sngan_judge *j);

/* The images the judge takes ([h,w,c]) and its classes. */
void rp_sngan_judge_shape(const rp_sngan_judge *j, int *h, int *w, int *c, int *classes);

/* Sums over a set of images. */
typedef struct rp_sngan_tally {
    int classes;
    double n;                           /* images */
    double labelled, correct;           /* images with an intended class, and those classified so */
    double plogp;                       /* sum over images of sum_y p(y|x) log p(y|x) */
    double p_sum[RP_SNGAN_MAX_CLASSES]; /* sum over images of p(y|x) */
    rp_gauss_sums feat, logit;          /* pooled features and logits */
} rp_sngan_tally;

rp_status rp_sngan_tally_init(rp_sngan_tally *t, const rp_sngan_judge *j);
void rp_sngan_tally_free(rp_sngan_tally *t);

/*
 * Adds n images ([n,h,w,c] floats in [-1,1]) with their intended classes
 * (labels may be NULL: they count for everything but accuracy). Uses
 * `tape` (reset before each chunk and at the end). Errors: RP_ERR_INVALID
 * (a label out of range), the forward's errors.
 */
rp_status rp_sngan_judge_add(const rp_sngan_judge *j, rp_tape *tape, const float *images,
                             const int32_t *labels, int64_t n, rp_sngan_tally *t);

/* All-reduces a tally over `comm` (RP_SUM; every member calls, with tallies of the same judge). */
rp_status rp_sngan_tally_all_reduce(rp_sngan_tally *t, rp_comm *comm);

typedef struct rp_sngan_scores {
    int64_t n;
    double class_accuracy; /* of the labelled images (NaN if none) */
    double fd;             /* pooled features against the test set */
    double fd_logits;      /* logits against the test set */
    double is;             /* the Inception-Score analogue */
} rp_sngan_scores;

/* Scores of a tally (at least 2 images). Errors: RP_ERR_INVALID, RP_ERR_NUMERIC (LAPACK's). */
rp_status rp_sngan_judge_scores(const rp_sngan_judge *j, const rp_sngan_tally *t,
                                rp_sngan_scores *s);

/*
 * What the numbers mean: the scores of real images against the same test
 * statistics - the train split (near the floor), the test split blurred by
 * a 3x3 box filter, and with Gaussian noise (std 0.1 of the pixel range)
 * added. Each set is its first n images (0: as many as the test split
 * holds), like a sample set of n; the whole test split scores FD 0 by
 * construction, its first n near 0.
 */
typedef struct rp_sngan_calibration {
    rp_sngan_scores test, train, blurred, noised;
} rp_sngan_calibration;
rp_status rp_sngan_judge_calibrate(const rp_sngan_judge *j, rp_tape *tape, int64_t n,
                                   rp_sngan_calibration *c);

/*
 * Judges samples first, first+stride, ... (below `total`) of the
 * class-balanced set of `total` samples of generator g: sample s has class
 * s % classes and z drawn from (seed, s) alone, so replicas that take
 * interleaved shares judge exactly the set one process would. g is run in
 * evaluation mode. Errors: as rp_sngan_judge_add and rp_sngan_generate.
 */
rp_status rp_sngan_judge_generator(const rp_sngan_judge *j, rp_sngan_generator *g,
                                   const rp_sngan_config *cfg, rp_tape *tape, uint64_t seed,
                                   int64_t total, int64_t first, int64_t stride, rp_sngan_tally *t);

/* The z of sample s of the evaluation set (z_dim floats), and its class. */
void rp_sngan_eval_z(uint64_t seed, int64_t s, int z_dim, float *z);

/*
 * What the trainer's evaluation needs, set on the model with
 * rp_sngan_set_eval (borrowed): the judge, the size of the evaluation set
 * (>= 10,000 class-balanced samples for the recorded figures), and the last
 * scores the replicas found.
 */
typedef struct rp_sngan_eval {
    rp_sngan_judge *judge; /* NULL: no evaluation */
    int64_t samples;
    rp_sngan_scores last;
    bool have;
} rp_sngan_eval;

/*
 * The trainer's evaluation hooks (rp_trainer_model.evaluate/evaluated): with
 * an rp_sngan_eval with a judge set on g, the replicas judge interleaved
 * shares of the evaluation set and the metrics "fd", "fd_logits",
 * "class_acc" and "is" are reported; without one, nothing is evaluated.
 */
rp_status rp_sngan_eval_replica(rp_replica *rep, rp_sngan *g, void *state);
rp_status rp_sngan_eval_done(rp_sngan *g, const rp_replicator *r, rp_trainer_metrics *m);

#endif
