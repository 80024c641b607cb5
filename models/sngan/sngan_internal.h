/*
 * sngan_internal.h - what the SN-GAN's files share: the two networks' layers
 * and training forwards, the dataset context.
 */
#ifndef RP_MODELS_SNGAN_INTERNAL_H
#define RP_MODELS_SNGAN_INTERNAL_H

#include "models/sngan/sngan.h"

/* One generator up-block (resblocks.py Block with upsample). */
typedef struct sngan_gblock {
    rp_cond_batchnorm_layer b1, b2;
    rp_conv2d_layer c1, c2; /* 3x3, gain sqrt(2) */
    rp_conv2d_layer sc;     /* 1x1, gain 1 */
} sngan_gblock;

struct rp_sngan_generator {
    rp_sngan_config cfg;
    rp_params *params;
    rp_linear_layer l1; /* z_dim -> bh*bw*ch_g */
    sngan_gblock blocks[3];
    rp_batchnorm_layer b5;
    rp_conv2d_layer c5; /* ch_g -> c, 3x3 */
    int bh, bw;         /* the bottom resolution: h/8, w/8 */
};

/* z [n,z_dim] -> images [n,h,w,c] (tanh). training: batch statistics (cross-replica), updating the
 * running ones. */
rp_tensor *sngan_generator_forward(rp_tape *t, const rp_sngan_generator *g, rp_tensor *z,
                                   const int32_t *labels, bool training);

/* One discriminator residual block (dis_models/resblocks.py). */
typedef struct sngan_dblock {
    rp_sn_conv2d_layer c1, c2; /* 3x3, gain sqrt(2) */
    rp_sn_conv2d_layer sc;     /* 1x1, gain 1 (blocks with a learnable shortcut) */
    bool learnable_sc, downsample, optimized;
} sngan_dblock;

typedef struct sngan_discriminator {
    rp_params *params;
    sngan_dblock blocks[4];
    rp_sn_linear_layer l5;     /* ch_d -> 1, no bias */
    rp_sn_embedding_layer l_y; /* [classes, ch_d] */
    int ch, classes;
    rp_sngan_config cfg; /* its precision overrides (keep_f32, activations) */
} sngan_discriminator;

rp_status sngan_discriminator_create(sngan_discriminator *d, const rp_sngan_config *cfg);
void sngan_discriminator_destroy(sngan_discriminator *d);
/* x [n,h,w,c], labels [n] -> [n,1]. training: the power iterations write u back. */
rp_tensor *sngan_discriminator_forward(rp_tape *t, const sngan_discriminator *d, rp_tensor *x,
                                       const int32_t *labels, bool training);

/*
 * A ReLU whose output only convolutions read (through an upsampling in G): stored in bf16 when
 * the tape's policy multiplies convolutions in bf16, since they would round it the same way
 * (rp_relu_to: the same values, without the f32 output and the pass that narrowed it).
 */
rp_tensor *sngan_relu_into_conv(rp_tape *t, rp_tensor *x);

struct rp_sngan {
    rp_sngan_config cfg;
    rp_dataset *train;
    char run_dir[4096]; /* "" : no samples written; up to PATH_MAX */
    void *eval;         /* sngan_eval.h's rp_sngan_eval (borrowed), NULL: no evaluation */
};

/* What each replica holds in training (the trainer's state; sngan_trainer.c builds it). */
typedef struct sngan_replica_state {
    rp_sngan_generator *gen;
    sngan_discriminator dis;
    rp_optimizer *opt_g, *opt_d;
    rp_loader *loader;
    int64_t loader_spe;    /* the loader's global batches per epoch */
    int replica, replicas; /* on the data axis */
    int d_local, g_local;  /* this replica's shares of d_batch and g_batch */
    int64_t pixels;        /* h * w * c of one (padded) image */
    float *real;           /* [d_local, h, w, c]: the real batch, padded, in [-1, 1] */
    int32_t *real_y;       /* [d_local] */
    float *z;              /* [max micro-batch, z_dim] */
    int32_t *y;            /* [2 * max micro-batch]: the discriminator's labels (real then fake) */
    float *u_saved;        /* the discriminator's buffers (its u vectors) at the start of a phase */
    int64_t u_numel;
} sngan_replica_state;

/* The seed of each network's parameter list (different streams for G and D). */
uint64_t sngan_seed(const rp_sngan_config *cfg, const char *what);

#endif
