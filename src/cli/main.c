/*
 * main.c - the ckpt command: a table of subcommands, git style.
 * `ckpt help CMD` is `ckpt CMD --help`.
 */
#include <curl/curl.h>
#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ckpt/interrupt.h"
#include "ckpt/text.h"

/* Commands that write: SIGINT, SIGTERM and SIGHUP stop them cleanly
 * (ckpt/interrupt.h), and they exit 128 + the signal. The others die of
 * the signal as any reader does. */
#define CMD_STOPS 1u

struct cmd_struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
    unsigned flags;
    const char *aliases[3];  /* other names, as aws-cli, rclone and
                                s5cmd users type them */
};

static const struct cmd_struct commands[] = {
    { "clean", cmd_clean, "delete runs that never produced a checkpoint",
      CMD_STOPS, { NULL } },
    { "cp", cmd_upload, "copy files, trees and archive contents between "
      "locations (also: upload, copy)", CMD_STOPS, { "upload", "copy" } },
    { "du", cmd_du, "runs by size, each with its verdict and what clean "
      "would free (ls --summary --by-run)", 0, { NULL } },
    { "ls", cmd_ls, "list runs and their checkpoints", 0, { NULL } },
    { "map-wandb", cmd_map_wandb, "find each run's W&B run path", 0,
      { NULL } },
    { "process", cmd_process, "judge, unshard, upload, verify and delete "
      "each run (cron- and worker-safe)", CMD_STOPS, { NULL } },
    { "unshard", cmd_unshard, "merge checkpoint shards into whole tensors",
      CMD_STOPS, { NULL } },
};

/* Names users of other tools try that ckpt gives another meaning: the
 * hint says which command does the job, or why there is none. */
static const char *const other_tools[][2] = {
    { "sync", "rclone's sync (and aws s3 sync --delete) deletes at DEST "
      "what the source lacks; ckpt never deletes at DEST (it may hold the "
      "only copy): 'ckpt cp SRC DEST' copies, skipping what is there" },
    { "rm", "'ckpt clean RUN' deletes runs proven bad" },
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f)
{
    fprintf(f, "usage: ckpt [--version] [--help] <command> [<args>]\n\n"
               "commands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(f, "    %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n'ckpt help <command>' or 'ckpt <command> --help' shows a "
               "command's options.\n");
}

static const struct cmd_struct *find(const char *name)
{
    for (size_t i = 0; i < NCOMMANDS; i++) {
        if (!strcmp(commands[i].name, name))
            return &commands[i];
        for (const char *const *a = commands[i].aliases; *a; a++)
            if (!strcmp(*a, name))
                return &commands[i];
    }
    return NULL;
}

/* The name is an argument: any bytes, printed escaped. Then, as git
 * does, the commands nearest it by edit distance, or what another
 * tool's name for it is here. */
static int not_a_command(const char *name, const char *hint)
{
    char *e = ckpt_escape(name);
    fprintf(stderr, "ckpt: '%s' is not a ckpt command%s\n", e, hint);
    free(e);
    for (size_t i = 0; i < sizeof(other_tools) / sizeof(other_tools[0]);
         i++)
        if (!strcmp(name, other_tools[i][0])) {
            fprintf(stderr, "hint: %s\n", other_tools[i][1]);
            return EXIT_USAGE;
        }
    const char *names[NCOMMANDS * 3];
    size_t n = 0;
    for (size_t i = 0; i < NCOMMANDS; i++) {
        names[n++] = commands[i].name;
        for (const char *const *a = commands[i].aliases; *a; a++)
            names[n++] = *a;
    }
    cli_did_you_mean("command", name, names, n);
    return EXIT_USAGE;
}

int main(int argc, char **argv)
{
    /* Names in archives and objects are UTF-8: with a UTF-8 ctype,
     * libarchive passes them through instead of converting each one. */
    if (!setlocale(LC_CTYPE, "C.UTF-8"))
        setlocale(LC_CTYPE, "");
    /* A closed pipe (ckpt ls | head) must not kill us mid-delete. */
    signal(SIGPIPE, SIG_IGN);
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *name = argv[1];
    if (!strcmp(name, "--help") || !strcmp(name, "-h")) {
        usage(stdout);
        return EXIT_OK;
    }
    if (!strcmp(name, "--version") || !strcmp(name, "version")) {
        printf("ckpt %s\n", CKPT_VERSION);
        return EXIT_OK;
    }
    if (!strcmp(name, "help")) {
        if (argc < 3) {
            usage(stdout);
            return EXIT_OK;
        }
        const struct cmd_struct *c = find(argv[2]);
        if (!c || !c->fn)
            return not_a_command(argv[2], "");
        char *av[] = { (char *)c->name, "--help", NULL };
        return c->fn(2, av);
    }
    const struct cmd_struct *c = find(name);
    if (!c || !c->fn)
        return not_a_command(name, ". See 'ckpt --help'.");
    /* Once, before any thread exists (curl_global_init is not
     * thread-safe). */
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (c->flags & CMD_STOPS)
        ckpt_interrupt_catch();
    int rc = c->fn(argc - 1, argv + 1);
    int sig = ckpt_interrupted();
    if (sig) {
        /* Everything in flight was stopped, its temporaries removed and
         * its leases released; what is left is what a rerun does. */
        cli_notef("interrupted: rerun to resume (%s)",
                  sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM"
                  : "SIGHUP");
        rc = 128 + sig;
    }
    curl_global_cleanup();
    if (fflush(stdout) != 0 && rc == EXIT_OK)
        rc = EXIT_FAILED;
    return rc;
}
