/*
 * export_onnx.c - the network of a run as an ONNX graph (replicator/onnx.h), for `replicator
 * export --format onnx` and `--layout standard`: the configuration stored in the run's
 * checkpoint says which model it is (the registry's owns_config), and the model's own exporter
 * (its descriptor's onnx hook) builds the graph from the checkpoint's tensors.
 */
#include "export_onnx.h"
#include "registry.h"

rp_status export_onnx_graph(rp_onnx **g, const rp_checkpoint *ck, const char *config, bool online,
                            char *what, size_t what_size)
{
    *g = NULL;
    const rp_model_desc *model = rp_cli_model_of_config(config);
    if (!model) model = rp_cli_models()[0]; /* the default model takes what no other claims */
    if (!model->onnx)
        return RP_ERROR(RP_ERR_UNSUPPORTED, "a %s run has no ONNX export", model->name);
    RP_CHECK(model->onnx(g, ck, config, online, what, what_size));
    rp_status status = rp_onnx_set_meta(*g, "replicator.config", config);
    if (status != RP_OK) {
        rp_onnx_destroy(*g);
        *g = NULL;
    }
    return status;
}
