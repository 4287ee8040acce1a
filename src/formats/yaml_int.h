/*
 * yaml_int.h - shared by yaml.c (libyaml events into cJSON) and
 * yaml_scalar.c (plain scalar resolution). Private to src/formats.
 */
#ifndef CKPT_YAML_INT_H
#define CKPT_YAML_INT_H

#include <stddef.h>

struct cJSON;

/* j, or abort through ckpt_die_oom when cJSON could not allocate it. */
struct cJSON *ckpt_yaml_jcheck(struct cJSON *j);
/* The node a plain scalar s[0..n) stands for (PyYAML's resolver). */
struct cJSON *ckpt_yaml_resolve_plain(const char *s, size_t n);

#endif
