/*
 * netrc_fuzz - the netrc reader that finds the W&B API key
 * (ckpt_netrc_password in src/wandb/auth.c): machine / default / login /
 * account / password / macdef tokens, quoting and backslashes.
 *
 * Input: the netrc text (up to the first NUL).
 * Properties: never crashes, never reads past the text, never leaks; the
 * password found for a machine is one of the file's tokens, so it is no
 * longer than the text; asking twice gives the same answer.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wandb/wandb_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    static const char *const hosts[] = { "api.wandb.ai", "localhost:8080",
                                         "" };
    for (size_t i = 0; i < sizeof(hosts) / sizeof(hosts[0]); i++) {
        char *a = ckpt_netrc_password(text, hosts[i]);
        char *b = ckpt_netrc_password(text, hosts[i]);
        if (!a != !b || (a && strcmp(a, b)) || (a && strlen(a) > size))
            __builtin_trap();
        free(a);
        free(b);
    }
    free(text);
    return 0;
}
