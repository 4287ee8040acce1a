/*
 * ckpt/yaml.h - the block-style YAML that PyYAML, OmegaConf and wandb
 * write (config.yaml, OLMo's metadata.yaml), parsed into cJSON.
 */
#ifndef CKPT_YAML_H
#define CKPT_YAML_H

#include <stddef.h>

#include "ckpt/err.h"

struct cJSON;

/*
 * Parse the first document of text into a cJSON tree (*out, caller
 * deletes). Handles block mappings and sequences (also indentless ones),
 * flow collections over several lines, plain, quoted and block scalars,
 * comments, anchors/aliases and the common tags. Plain scalars resolve as
 * PyYAML's YAML 1.1 resolver does (yes/no are booleans, 1e-4 is a float as
 * in OmegaConf). name prefixes messages: "config.yaml:12: bad indentation".
 */
int ckpt_yaml_parse(const char *text, size_t len, const char *name,
                    struct cJSON **out, struct ckpt_err *err);

#endif
