/*
 * sngan_model.c - the SN-GAN model's descriptor (replicator/model.h): its train, eval, sample and
 * bench commands (sngan_{train,eval,sample,bench}_command.c), its trainer callbacks and how a
 * run of it is known. The command's registry lists it in one line (cli/registry.c). A file of
 * its own, so the commands it names never call back into the file that names them.
 */
#include "models/sngan/sngan_command.h"

const rp_model_desc rp_sngan_model = {
    .name = "sngan",
    .summary = "a class-conditional SN-GAN",
    .trainer = rp_sngan_trainer_model,
    .owns_config = sngan_config_is_gan,
    .train = sngan_train_main,
    .eval = sngan_eval_main,
    .sample = sngan_sample_main,
    .bench = sngan_bench_main,
    .onnx = sngan_onnx_export,
};
