/*
 * d4pg_model.c - the D4PG model's descriptor (replicator/model.h): its train and eval commands
 * (d4pg_train_command.c, d4pg_eval_command.c), its trainer callbacks and how a run of it is
 * known. The command's registry lists it in one line (cli/registry.c). A file of its own, so
 * the commands it names never call back into the file that names them.
 */
#include "models/d4pg/d4pg_command.h"

const rp_model_desc rp_d4pg_model = {
    .name = "d4pg",
    .summary = "D4PG with distributed actors on a MuJoCo control task",
    .trainer = rp_d4pg_trainer_model,
    .owns_config = d4pg_config_is_d4pg,
    .train = d4pg_train_main,
    .eval = d4pg_eval_main,
    .onnx = d4pg_onnx_export,
};
