/*
 * yaml_fuzz - the YAML reader (libyaml's parser and src/formats/yaml.c's
 * tree building) on arbitrary bytes: config.yaml files come from run
 * directories nobody vetted.
 * Property: never crashes, never leaks, bounded work (alias expansion and
 * nesting are capped).
 */
#include <cjson/cJSON.h>
#include <stdint.h>

#include "wandb/wandb_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cJSON *j = NULL;
    struct ckpt_err err;
    if (ckpt_yaml_parse((const char *)data, size, "fuzz.yaml", &j, &err) == 0)
        cJSON_Delete(j);
    return 0;
}
