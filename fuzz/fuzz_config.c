/*
 * fuzz_config.c - libFuzzer target for the run configurations a user controls: the JSON text a
 * checkpoint carries as "replicator.config" metadata, which `replicator train --resume`, `eval`
 * and `sample` read back to rebuild a classifier run (train_opts_from_json), an SN-GAN run
 * (sngan_config_is_gan, sngan_opts_from_json) or a D4PG run (d4pg_config_is_d4pg,
 * d4pg_opts_from_json). These parsers live in the model folders
 * (models/classifier, models/sngan, models/d4pg), from the models' library.
 *
 * The input is the text (a NUL ends it early, as it would in the metadata string); only what a
 * checkpoint can hold as metadata (valid UTF-8) is parsed. Each parser sees it. Checked besides
 * memory safety: an error says something; a configuration one parser accepts is a fixed point of
 * writing and reading back (to_json, from_json, to_json gives the same text), so a run that resumed
 * once resumes again, and its text is one a checkpoint can store (valid UTF-8:
 * rp_checkpoint_set_meta); the model sniffers agree with the parsers (an SN-GAN configuration is
 * not taken for a D4PG one).
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "models/d4pg/d4pg_command.h"
#include "models/sngan/sngan_command.h"
#include "models/classifier/classifier_options.h"
#include "fuzz_common.h"
#include "replicator/io.h"

/* True if a checkpoint can hold the text as its "replicator.config", as every run stores it. */
static bool storable(const char *text)
{
    static rp_checkpoint *ck;
    if (!ck && rp_checkpoint_create(&ck) != RP_OK) return false;
    return rp_checkpoint_set_meta(ck, "replicator.config", text) == RP_OK;
}

/* Asserts that writing the options and reading them back is a fixed point. */
#define CHECK_ROUNDTRIP(type, to_json, from_json, opts)                                            \
    do {                                                                                           \
        char *first = to_json(opts);                                                               \
        FUZZ_EXPECT(first != NULL, #to_json " failed");                                            \
        FUZZ_EXPECT(storable(first), "a checkpoint cannot store %s", first);                       \
        static type again;                                                                         \
        FUZZ_EXPECT(from_json(&again, first) == RP_OK, #from_json " refused %s", first);           \
        char *second = to_json(&again);                                                            \
        FUZZ_EXPECT(second && !strcmp(first, second), #from_json " of %s wrote %s", first,         \
                    second ? second : "nothing");                                                  \
        free(second);                                                                              \
        free(first);                                                                               \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static train_opts t;
    static sngan_opts g;
    static d4pg_opts d;
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    /* The configuration comes from a checkpoint, whose metadata is valid UTF-8. */
    if (!storable(text)) {
        free(text);
        return 0;
    }

    bool is_gan = sngan_config_is_gan(text);
    bool is_d4pg = d4pg_config_is_d4pg(text);
    FUZZ_EXPECT(!(is_gan && is_d4pg), "both an SN-GAN and a D4PG configuration");

    if (train_opts_from_json(&t, text) == RP_OK)
        CHECK_ROUNDTRIP(train_opts, train_opts_to_json, train_opts_from_json, &t);
    else
        FUZZ_EXPECT(rp_last_error()[0] != '\0', "train_opts_from_json: no message");

    rp_status s = sngan_opts_from_json(&g, text);
    if (s == RP_OK) {
        FUZZ_EXPECT(is_gan, "sngan_opts_from_json accepted what sngan_config_is_gan did not");
        CHECK_ROUNDTRIP(sngan_opts, sngan_opts_to_json, sngan_opts_from_json, &g);
    } else {
        FUZZ_EXPECT(rp_last_error()[0] != '\0', "sngan_opts_from_json: no message");
    }

    s = d4pg_opts_from_json(&d, text);
    if (s == RP_OK)
        CHECK_ROUNDTRIP(d4pg_opts, d4pg_opts_to_json, d4pg_opts_from_json, &d);
    else
        FUZZ_EXPECT(rp_last_error()[0] != '\0', "d4pg_opts_from_json: no message");

    free(text);
    return 0;
}
