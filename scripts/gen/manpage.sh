#!/bin/sh
# manpage.sh CKPT GO_MD2MAN VERSION IN.md OUT.1 [COMMAND] - a man page
# from a page of docs/ (the one text; nothing is kept twice), made at
# build time with go-md2man: ckpt-COMMAND(1) from docs/commands/COMMAND.md,
# or ckpt(1) from docs/ckpt.md without COMMAND. The page's title line
# gives way to NAME (the command's summary from `ckpt --help`), its first
# code block is the SYNOPSIS, the rest of the text up to the first "##"
# heading the DESCRIPTION (a "## Synopsis" section is the SYNOPSIS);
# "##" headings become sections (as written), relative links their text.
set -eu
ckpt=$1 md2man=$2 version=$3 in=$4 out=$5 cmd=${6:-}
if [ -n "$cmd" ]; then
    name=ckpt-$cmd
    summary=$("$ckpt" --help | awk -v c="$cmd" '$1 == c && /^    / {
        sub(/^ +[^ ]+ +/, ""); print }')
    also="ckpt(1)"
else
    name=ckpt
    summary="keep the checkpoints of large training runs under control"
    also=$("$ckpt" --help | awk '/^commands:/ { on = 1; next }
        on && /^    [a-z]/ { printf "%sckpt-%s(1)", n++ ? ", " : "", $1 }')
fi
[ -n "$summary" ] || { echo "$0: no summary for '$cmd'" >&2; exit 1; }
upper=$(printf '%s' "$name" | tr 'a-z' 'A-Z')
{
    printf '%% %s 1 "" "ckpt %s" "ckpt manual"\n\n' "$upper" "$version"
    printf '# NAME\n\n%s - %s\n\n' "$name" "$summary"
    sed -E 's/\[([^]]*)\]\([^)h][^)]*\)/\1/g' "$in" | awk '
        # Up to the first "##": the first code block is the synopsis,
        # the rest the description (held until then).
        function flush() {
            if (done) return
            done = 1
            if (syn != "") printf "# SYNOPSIS\n\n%s\n", syn
            printf "# DESCRIPTION\n%s\n", desc
        }
        NR == 1 && /^# / { next }
        /^```/ { fence = !fence }
        !done && !fence && /^## / { flush() }
        !done {
            if (/^```/ && fence && syn == "" && !took) { insyn = 1; took = 1 }
            if (insyn) syn = syn $0 "\n"; else desc = desc "\n" $0
            if (/^```/ && !fence) insyn = 0
            next
        }
        !fence && /^## Synopsis$/ { print "# SYNOPSIS"; next }
        !fence && /^#/ { sub(/^#/, "") }
        { print }
        END { flush() }'
    printf '\n# SEE ALSO\n\n%s\n' "$also"
} | "$md2man" > "$out.tmp"
mv "$out.tmp" "$out"
