/*
 * ops_spectral.c - spectral normalisation of a weight (Miyato et al. 2018):
 * one power-iteration step estimates the largest singular value sigma of the
 * weight viewed as a matrix, and the op returns W / sigma.
 *
 * The iteration (the sn_power kernel) runs in double so that sigma does not
 * depend on the order of float rounding more than it must, and it is serial
 * and deterministic: every replica holding the same W and u computes bitwise
 * the same u', so the buffer u stays identical across replicas without being
 * synchronised.
 */
#include <math.h>

#include "tape_internal.h"

rp_tensor *rp_spectral_normalize(rp_tape *t, rp_tensor *w, rp_tensor *u, bool update_u,
                                 float *sigma_out)
{
    TAPE_F32_IN(t, w);
    TAPE_F32_IN(t, u);
    char sw[64], su[64];
    if (w->ndim < 1) {
        RP_ERROR(RP_ERR_SHAPE, "rp_spectral_normalize: weight %s needs at least 1 dimension",
                 rp_shape_str(w, sw, sizeof sw));
        return NULL;
    }
    int64_t rows = w->shape[0], cols = w->numel / rows;
    if (u->numel != rows) {
        RP_ERROR(RP_ERR_SHAPE,
                 "rp_spectral_normalize: u %s has %lld elements; weight %s needs %lld (its rows)",
                 rp_shape_str(u, su, sizeof su), (long long)u->numel,
                 rp_shape_str(w, sw, sizeof sw), (long long)rows);
        return NULL;
    }
    /* u' [rows] then v [cols]; kept for backward (arena, until the reset). */
    double *uv = rp_arena_alloc(t->store, (size_t)(rows + cols) * sizeof(double));
    rp_tensor *y = tape_tensor(t, w->ndim, w->shape);
    if (!uv || !y) return NULL;
    double *un = uv, *v = uv + rows;
    double sigma = t->k->sn_power(un, v, w->data, u->data, rows, cols);
    if (!isfinite(sigma) || !(sigma > 0)) {
        RP_ERROR(RP_ERR_NUMERIC,
                 "rp_spectral_normalize: sigma of weight %s (\"%s\") is %g; the weight is zero "
                 "or not finite",
                 rp_shape_str(w, sw, sizeof sw), w->name, sigma);
        return NULL;
    }
    t->k->sn_fwd(y->data, update_u ? u->data : NULL, un, w->data, sigma, rows, cols);
    if (sigma_out) *sigma_out = (float)sigma;

    if (tape_needs_grad(t, &w, 1)) {
        tape_node *node = tape_record(t, RP_OP_SPECTRAL_NORM, y, &w, 1);
        RP_PROPAGATE_NULL(node);
        node->saved = uv;
        node->saved_bytes = (size_t)(rows + cols) * sizeof(double);
        node->a.sn.rows = rows;
        node->a.sn.cols = cols;
        node->a.sn.sigma = sigma;
    }
    return y;
}
