/*
 * ckpt/yaml.h - the YAML that PyYAML, OmegaConf and wandb write
 * (config.yaml, OLMo's metadata.yaml), parsed into cJSON.
 */
#ifndef CKPT_YAML_H
#define CKPT_YAML_H

#include <stddef.h>

#include "ckpt/err.h"

struct cJSON;

/*
 * Parse the first document of text into a cJSON tree (*out, caller
 * deletes), with libyaml: all of YAML 1.1's syntax; anchors/aliases are
 * copied; tags !!str, !!int, !!float, !!bool and !!null are honoured, others
 * ignored; keys keep their text. Plain scalars resolve as PyYAML's YAML 1.1
 * resolver does (yes/no are booleans, 1e-4 is a float as in OmegaConf).
 * Refused (CKPT_EFORMAT): syntax errors, collections as keys, more than 200
 * levels, 500,000 nodes or 32 MiB of text (alias copies included). name
 * prefixes messages: "config.yaml:3: did not find expected key (while
 * parsing a block mapping at line 1)".
 */
int ckpt_yaml_parse(const char *text, size_t len, const char *name,
                    struct cJSON **out, struct ckpt_err *err);

#endif
