/* main.c - the replicator command: dispatches to a subcommand. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "registry.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: replicator <command> [options]\n"
            "\n"
            "commands:\n"
            "  train   train a model (default: ResNet-20 on Fashion-MNIST; `train sngan`: a GAN)\n"
            "  eval    test accuracy of a saved run; a GAN run's sample scores\n"
            "  sample  a trained GAN's samples as a PNG grid or IDX files\n"
            "  export  a run's parameters as a safetensors file (bf16 or f32), or its network as\n"
            "          an ONNX model\n"
            "  bench   training throughput of a model on synthetic data\n"
            "  plan    each worker's memory and each step's communication for train's options,\n"
            "          predicted before anything trains\n"
            "  info    print the build, the engines and the environment\n"
            "  trace   merge per-rank trace files (`trace merge OUT IN...`)\n"
            "  checkpoint  a run's checkpoint made whole, resharded, or described\n"
            "\n"
            "models (replicator train MODEL; cli/registry.c):\n");
    for (const rp_model_desc *const *m = rp_cli_models(); *m; m++)
        fprintf(f, "  %-9s %s\n", (*m)->name, (*m)->summary);
    fprintf(f, "\n"
               "`replicator <command> --help` describes each command's options.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "train")) return rp_cli_train(argc - 1, argv + 1);
    if (!strcmp(argv[1], "eval")) return rp_cli_eval(argc - 1, argv + 1);
    if (!strcmp(argv[1], "sample")) return rp_cli_sample(argc - 1, argv + 1);
    if (!strcmp(argv[1], "export")) return rp_cli_export(argc - 1, argv + 1);
    if (!strcmp(argv[1], "info")) return rp_cli_info(argc - 1, argv + 1);
    if (!strcmp(argv[1], "bench")) return rp_cli_bench(argc - 1, argv + 1);
    if (!strcmp(argv[1], "trace")) return rp_cli_trace(argc - 1, argv + 1);
    if (!strcmp(argv[1], "plan")) return rp_cli_plan(argc - 1, argv + 1);
    if (!strcmp(argv[1], "checkpoint")) return rp_cli_checkpoint(argc - 1, argv + 1);
    if (!strcmp(argv[1], "--version")) {
        printf("replicator %s\n", RP_VERSION);
        return 0;
    }
    fprintf(stderr, "replicator: unknown command \"%s\"\n\n", argv[1]);
    usage(stderr);
    return 2;
}
