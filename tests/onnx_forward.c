/*
 * onnx_forward.c - our forward pass of a run's network on given inputs, for tests/cli_onnx.sh to
 * compare with OpenCV's run of the exported ONNX model. The run is loaded as the command loads
 * it (eval, sample: the stored configuration, the checkpoint's tensors) and run in evaluation
 * mode through the models' public calls; inputs and outputs are raw little-endian f32 files in
 * our own layouts (NHWC images), so the ONNX side's layout (NCHW) is the test's to convert.
 *
 *   onnx_forward RUN classifier IMAGES.f32 LOGITS.f32   images [N,h,w,c] of pixel / 255,
 *                                                      normalised here with the run's mean/std
 *   onnx_forward RUN sngan Z.f32 LABELS.i32 IMAGES.f32  z [N,z_dim], labels [N] (int32) ->
 *                                                      images [N,h,w,c]
 *   onnx_forward RUN d4pg OBS.f32 ACTIONS.f32          the target policy, no noise
 *
 * Prints one line: the output's shape. Exit 1 with the error on failure, 2 on bad usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/d4pg/d4pg_command.h"
#include "models/classifier/classifier.h"
#include "models/sngan/sngan_command.h"
#include "models/classifier/classifier_command.h"
#include "models/classifier/classifier_options.h"

/* The whole file as a block (free() it), its size in *bytes. */
static void *read_file(const char *path, long *bytes)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *bytes = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc((size_t)*bytes + 1);
    if (buf && fread(buf, 1, (size_t)*bytes, f) != (size_t)*bytes) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

static rp_status write_file(const char *path, const float *v, int64_t n)
{
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(v, sizeof *v, (size_t)n, f) == (size_t)n;
    if (f && fclose(f) != 0) ok = false;
    return ok ? RP_OK : RP_ERROR(RP_ERR_IO, "cannot write %s", path);
}

static rp_status classifier(const char *run, const rp_checkpoint *ck, const char *config,
                            const char *in_path, const char *out_path)
{
    rp_status status = RP_OK;
    rp_dataset *train = NULL, *test = NULL;
    rp_classifier_net net = {0};
    rp_tape *tape = NULL;
    float *x = NULL, *logits = NULL;
    train_opts o;
    rp_classifier_config cc;
    float mean[RP_LOADER_MAX_CHANNELS], std[RP_LOADER_MAX_CHANNELS];
    RP_TRY(classifier_run_data(config, &o, &cc, &train, &test, mean, std));
    RP_TRY(rp_classifier_net_create(&net, &cc, train->h, train->w, train->c, train->num_classes,
                                    NULL));
    RP_TRY(rp_checkpoint_read_params(ck, rp_classifier_net_params(&net), "param/"));
    long bytes = 0;
    x = read_file(in_path, &bytes);
    int c = train->c, per = train->h * train->w * c;
    if (!x || bytes <= 0 || bytes % ((long)per * 4) != 0) {
        status = RP_ERROR(RP_ERR_IO, "%s: not a whole number of %d-value images", in_path, per);
        goto cleanup;
    }
    int n = (int)(bytes / ((long)per * 4));
    /* The loader's normalisation: (pixel / 255 - mean) / std per channel, in float. */
    for (int64_t i = 0; i < (int64_t)n * per; i++)
        x[i] = (x[i] - mean[i % c]) / std[i % c];
    RP_TRY(rp_tape_create(&tape, 0));
    rp_tape_set_recording(tape, false);
    rp_tensor *in = rp_tensor_from(tape, 4, (int[]){n, train->h, train->w, c}, x);
    rp_tensor *y = rp_classifier_net_forward(tape, &net, in, false);
    if (!y) {
        status = rp_last_status();
        goto cleanup;
    }
    logits = malloc((size_t)y->numel * sizeof *logits);
    RP_TRY(rp_tensor_read(y, logits, y->numel));
    RP_TRY(write_file(out_path, logits, y->numel));
    printf("%s: logits [%d, %d]\n", run, n, (int)y->shape[1]);
cleanup:
    free(logits);
    free(x);
    rp_tape_destroy(tape);
    rp_classifier_net_destroy(&net);
    rp_dataset_destroy(test);
    rp_dataset_destroy(train);
    return status;
}

static rp_status sngan(const char *run, const char *z_path, const char *labels_path,
                       const char *out_path)
{
    rp_status status = RP_OK;
    rp_sngan_generator *g = NULL;
    rp_tape *tape = NULL;
    float *z = NULL, *images = NULL;
    int32_t *labels = NULL;
    sngan_opts o;
    RP_TRY(sngan_run_load(run, &o, &g));
    long zb = 0, lb = 0;
    z = read_file(z_path, &zb);
    labels = read_file(labels_path, &lb);
    int n = (int)(lb / 4);
    if (!z || !labels || n < 1 || zb != (long)n * o.g.z_dim * 4) {
        status = RP_ERROR(RP_ERR_IO, "%s and %s: not n latent vectors of %d and n labels", z_path,
                          labels_path, o.g.z_dim);
        goto cleanup;
    }
    int64_t numel = (int64_t)n * o.g.h * o.g.w * o.g.c;
    images = malloc((size_t)numel * sizeof *images);
    RP_TRY(rp_tape_create(&tape, 0));
    RP_TRY(rp_sngan_generate(g, tape, z, labels, n, images));
    RP_TRY(write_file(out_path, images, numel));
    printf("%s: images [%d, %d, %d, %d]\n", run, n, o.g.h, o.g.w, o.g.c);
cleanup:
    free(images);
    free(labels);
    free(z);
    rp_tape_destroy(tape);
    rp_sngan_generator_destroy(g);
    return status;
}

static rp_status d4pg(const char *run, const rp_checkpoint *ck, const char *config,
                      const char *in_path, const char *out_path)
{
    rp_status status = RP_OK;
    rp_d4pg_job *job = NULL;
    rp_d4pg_policy *policy = NULL;
    rp_tape *tape = NULL;
    float *obs = NULL, *act = NULL;
    d4pg_opts o;
    RP_TRY(d4pg_opts_from_json(&o, config));
    RP_TRY(rp_d4pg_job_create(&job, &o.j, ck));
    const rp_d4pg_config *agent = &rp_d4pg_job_get_config(job)->agent;
    RP_TRY(rp_d4pg_policy_create(&policy, agent));
    RP_TRY(rp_checkpoint_read_params(ck, rp_d4pg_policy_params(policy), "d4pg/target_policy/"));
    long bytes = 0;
    obs = read_file(in_path, &bytes);
    int n = (int)(bytes / (4L * agent->obs_dim));
    if (!obs || n < 1 || bytes != 4L * n * agent->obs_dim) {
        status = RP_ERROR(RP_ERR_IO, "%s: not a whole number of %d-value observations", in_path,
                          agent->obs_dim);
        goto cleanup;
    }
    act = malloc((size_t)n * agent->act_dim * sizeof *act);
    RP_TRY(rp_tape_create(&tape, 0));
    RP_TRY(rp_d4pg_policy_act(policy, tape, obs, n, 0.0f, NULL, act));
    RP_TRY(write_file(out_path, act, (int64_t)n * agent->act_dim));
    printf("%s: actions [%d, %d]\n", run, n, agent->act_dim);
cleanup:
    free(act);
    free(obs);
    rp_tape_destroy(tape);
    rp_d4pg_policy_destroy(policy);
    rp_d4pg_job_destroy(job);
    return status;
}

int main(int argc, char **argv)
{
    if (argc < 5 || (!strcmp(argv[2], "sngan") && argc < 6)) {
        fprintf(stderr, "usage: onnx_forward RUN classifier|d4pg IN.f32 OUT.f32\n"
                        "       onnx_forward RUN sngan Z.f32 LABELS.i32 OUT.f32\n");
        return 2;
    }
    rp_kernels_set_threads(1);
    rp_checkpoint *ck = NULL;
    const char *config;
    rp_status status = rp_trainer_load_run(argv[1], &ck, &config);
    if (status == RP_OK) {
        if (!strcmp(argv[2], "classifier"))
            status = classifier(argv[1], ck, config, argv[3], argv[4]);
        else if (!strcmp(argv[2], "sngan"))
            status = sngan(argv[1], argv[3], argv[4], argv[5]);
        else if (!strcmp(argv[2], "d4pg"))
            status = d4pg(argv[1], ck, config, argv[3], argv[4]);
        else
            status = RP_ERROR(RP_ERR_INVALID, "unknown model kind %s", argv[2]);
    }
    rp_checkpoint_destroy(ck);
    if (status != RP_OK) {
        fprintf(stderr, "onnx_forward: %s\n", rp_last_error());
        return 1;
    }
    return 0;
}
