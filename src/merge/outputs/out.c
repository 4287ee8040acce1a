/*
 * outputs/out.c - where the outputs of an unshard go: a local directory
 * (outputs/local_dir.c) or a prefix of object storage (outputs/object_store.c), picked by DEST.
 */
#include <string.h>

#include "ckpt/storage.h"
#include "ckpt/util.h"
#include "merge/job.h"
#include "merge/outputs/outputs.h"

int uns_out_open(struct ujob *j, const char *dest, struct ckpt_err *err)
{
    struct ckpt_storage *st = j->o->dest_storage;
    /* A local storage's keys are paths. */
    if (st)
        return ckpt_storage_is_local(st) ? uns_outlocal_open(j, dest, err)
                                         : uns_outobj_open(j, dest, err);
    struct ckpt_loc loc;
    if (ckpt_loc_parse(&loc, dest, err) != 0)
        return -1;
    int remote = loc.scheme != CKPT_SCHEME_LOCAL;
    ckpt_loc_release(&loc);
    return remote ? uns_outobj_open(j, dest, err)
                  : uns_outlocal_open(j, dest, err);
}

void uns_out_reader(struct ujob *j, struct ufile *f, struct usrc *s)
{
    memset(s, 0, sizeof(*s));
    s->size = f->size;
    s->fd = -1;
    if (!j->dst.out->remote) {
        s->name = f->tmp;
        s->fd = f->fd;
        return;
    }
    uns_outobj_reader(j, f, s);
}
