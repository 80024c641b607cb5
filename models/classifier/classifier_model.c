/*
 * classifier_model.c - the image classifiers' descriptor (replicator/model.h): their train,
 * eval, bench and plan commands, their ONNX export (classifier_*_command.c), their trainer
 * callbacks and how a run of theirs is known. The command's registry lists it first
 * (cli/registry.c). A file of its own, so the commands it names never call back into the file that
 * names them.
 */
#include "models/classifier/classifier_command.h"

/*
 * The image classifiers: the registry's default model, which takes every name no other model
 * claims (`replicator train` alone trains ResNet-20 on Fashion-MNIST).
 */
const rp_model_desc rp_classifier_model = {
    .name = "resnet20",
    .summary = "image classifiers: resnet20 (default), resnet18, resnet50, mlp",
    .trainer = rp_classifier_trainer_model,
    .owns_config = classifier_config_is_classifier,
    .train = train_classifier_main,
    .eval = classifier_eval_main,
    .bench = classifier_bench_main,
    .plan = classifier_plan_main,
    .onnx = classifier_onnx_export,
};
