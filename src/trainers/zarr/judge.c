/*
 * zarr/judge.c - zarr v2 pytree checkpoints: .zattrs write_completed.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/util.h"
#include "trainers/judge.h"
#include "trainers/trainer.h"

int zarr_judge(const struct judge_view *v, struct ckpt_checkpoint *c,
               struct ckpt_err *err)
{
    if (!judge_get(v, ".zattrs"))
        return judge_set_why(c, "%s", ".zattrs missing (write_completed "
                                      "not set)");
    cJSON *j;
    if (judge_json(v, ".zattrs", &j, err) != 0)
        return -1;
    cJSON *w = cJSON_GetObjectItemCaseSensitive(j, "write_completed");
    if (!cJSON_IsTrue(w))
        judge_set_why(c, "%s", "write_completed is not true in .zattrs");
    cJSON_Delete(j);
    return 0;
}

int zarr_recognise(const struct judge_view *v)
{
    return judge_get(v, ".zgroup") != NULL;
}
