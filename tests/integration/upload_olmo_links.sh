#!/usr/bin/env bash
# ctest-cost: 5
# upload_olmo_links.sh - OLMo's `latest` and `latest-unsharded` symbolic
# links in a run (to a checkpoint directory of the same run) are never
# followed, not even with -L (the checkpoint is copied once, under its own
# name), draw no warning, and go with the run under --delete-source, also
# when they dangle. Other links keep their rules.
. "$(dirname "$0")/../support/lib.sh"
export CKPT_STATE_DIR=$T/state
cd "$T" || exit 1
mkrun() {
    rm -rf "$1"
    mkdir -p "$1/step1000" "$1/step1000-unsharded"
    printf 'cfg\n' >"$1/config.yaml"
    printf 'w\n' >"$1/step1000/model.pt"
    printf 'u\n' >"$1/step1000-unsharded/model.pt"
    ln -s step1000 "$1/latest"
    ln -s step1000-unsharded "$1/latest-unsharded"
}
warnings() { grep warning err | sed 's/^[0-9TZ:-]* //' | LC_ALL=C sort; }
run_files="f ./config.yaml 4
f ./step1000-unsharded/model.pt 2
f ./step1000/model.pt 2"

mkrun run
ln -s step1000 run/other
"$CKPT" upload run dst1 2>err
check "default: exit" 0 $?
check "default: only the other link warns" "ckpt: warning: run/other: symbolic link not followed (use --follow-links)" "$(warnings)"
check "default: copied once" "$run_files" "$(tree dst1 | grep '^f')"

"$CKPT" upload -L run dst2 2>err
check "-L: exit" 0 $?
check "-L: no warning" "" "$(warnings)"
check "-L: latest not copied again, other followed" "f ./config.yaml 4
f ./other/model.pt 2
f ./step1000-unsharded/model.pt 2
f ./step1000/model.pt 2" "$(tree dst2 | grep '^f')"

mkrun run
out=$("$CKPT" upload -v --delete-source run dst3 2>err)
check "--delete-source: exit" 0 $?
check "--delete-source: no warning" "" "$(warnings)"
check "--delete-source: the run is gone, links too" "no" "$([ -e run ] || [ -L run ] && echo yes || echo no)"
check "--delete-source: copied once" "$run_files" "$(tree dst3 | grep '^f')"

# Dangling (its checkpoint deleted by `ckpt clean`): still not an error.
mkrun run
rm -rf run/step1000-unsharded
"$CKPT" upload -L --delete-source run dst4 2>err
check "dangling: exit" 0 $?
check "dangling: no warning" "" "$(warnings)"
check "dangling: the run is gone" "no" "$([ -e run ] || [ -L run ] && echo yes || echo no)"

# A link named latest that points out of the run is an ordinary link.
mkrun run
mkdir -p elsewhere && printf 'x\n' >elsewhere/f
rm run/latest && ln -s ../elsewhere run/latest
"$CKPT" upload run dst5 2>err
check "latest out of the run: warned" "ckpt: warning: run/latest: symbolic link not followed (use --follow-links)" "$(warnings)"
"$CKPT" upload -q --delete-source run dst6 2>err
check "latest out of the run: kept" "yes" "$([ -L run/latest ] && echo yes || echo no)"
finish
