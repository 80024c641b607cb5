/* mlp.c - the multi-layer perceptron, on the public API only. */
#include <stdio.h>

#include "models/mlp/mlp.h"

rp_status rp_mlp_create(rp_mlp **out, int in, const int *hidden, int n_hidden, int classes,
                        uint64_t seed)
{
    if (!out || in < 1 || classes < 1 || n_hidden < 0 || n_hidden + 1 > RP_MLP_MAX_LAYERS)
        return RP_ERROR(RP_ERR_INVALID, "rp_mlp_create: in %d, %d hidden layers, %d classes", in,
                        n_hidden, classes);
    rp_status status = RP_OK;
    rp_mlp *m = rp_calloc(sizeof *m);
    if (!m) return rp_last_status();
    RP_TRY(rp_params_create(&m->params));
    int width = in;
    for (int i = 0; i <= n_hidden; i++) {
        int next = i < n_hidden ? hidden[i] : classes;
        char name[16];
        snprintf(name, sizeof name, "fc%d", i);
        RP_TRY(
            rp_linear_layer_init(&m->layers[i], m->params, name, width, next, true, i < n_hidden));
        width = next;
    }
    m->n_layers = n_hidden + 1;
    RP_TRY(rp_params_finalize(m->params, seed));
    *out = m;
    return RP_OK;
cleanup:
    rp_mlp_destroy(m);
    return status;
}

void rp_mlp_destroy(rp_mlp *m)
{
    if (!m) return;
    rp_params_destroy(m->params);
    rp_free(m);
}

rp_tensor *rp_mlp_forward(rp_tape *t, const rp_mlp *m, rp_tensor *x)
{
    if (x && x->ndim != 2) x = rp_flatten(t, x);
    for (int i = 0; i < m->n_layers; i++) {
        x = rp_linear_layer_forward(t, &m->layers[i], x);
        if (i + 1 < m->n_layers) x = rp_relu(t, x);
    }
    return x;
}
