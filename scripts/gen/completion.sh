#!/bin/sh
# completion.sh CKPT > ckpt.bash - the bash completion of ckpt, made at
# build time from the binary's own help (`ckpt --help` for the commands,
# `ckpt CMD --help` for each command's options and global options), so it
# never drifts from --help (tests/integration/install.py checks it does
# not). Options that take an argument (a word after them in --help)
# complete file names; others complete nothing after them.
set -eu
ckpt=$1
cmds=$("$ckpt" --help | awk '/^commands:/ { on = 1; next }
    on && /^    [a-z]/ { print $1 } on && /^$/ { on = 0 }' | tr '\n' ' ' |
    sed 's/ $//')
# Every option of a command's help: NAME for the words, NAME= for those
# that take an argument.
opts() {
    "$ckpt" "$1" --help | awk '
        # An option line is "    %-28s %s" of "[-X, ]--NAME[ ARG]" (the
        # exact padding tells it from a description line that starts
        # with an option name).
        match($0, /^    (-[A-Za-z], )?--[a-z0-9-]+( [A-Za-z0-9|_.\/-]+)?/) {
            spec = substr($0, 5, RLENGTH - 4)
            rest = substr($0, RLENGTH + 1)
            pad = 29 - length(spec)
            if (pad < 1) pad = 1
            if (substr(rest, 1, pad) != sprintf("%*s", pad, "") ||
                substr(rest, pad + 1, 1) == " ")
                next
            n = split(spec, w, /[ ,]+/)
            arg = w[n] !~ /^-/
            for (i = 1; i <= n; i++)
                if (w[i] ~ /^-/) printf "%s%s ", w[i], arg ? "=" : ""
        }'
}
cat <<HEAD
# bash completion for ckpt: commands, and each command's options as its
# --help lists them. Generated at build time by scripts/gen/completion.sh
# from \`ckpt --help\`; do not edit.
_ckpt()
{
    local cur=\${COMP_WORDS[COMP_CWORD]} prev=\${COMP_WORDS[COMP_CWORD-1]}
    local cmds="$cmds" words args opt
    if [ "\$COMP_CWORD" -eq 1 ]; then
        COMPREPLY=(\$(compgen -W "\$cmds help --help --version" -- "\$cur"))
        return
    fi
    case \${COMP_WORDS[1]} in
HEAD
for c in $cmds; do
    all=$(opts "$c")
    words=$(printf '%s' "$all" | sed 's/=//g')
    args=$(printf '%s ' $all | tr ' ' '\n' | sed -n 's/=$//p' | tr '\n' ' ')
    # Other names of the command: "(also: upload, copy)" ending its
    # summary in --help.
    names=$("$ckpt" --help | awk -v c="$c" '$1 == c && /^    / &&
        match($0, /\(also: [^)]*\)$/) {
            s = substr($0, RSTART + 7, RLENGTH - 8); gsub(/, /, "|", s)
            printf "|%s", s }')
    printf '    %s%s)\n        words="%s"\n        args=" %s" ;;\n' \
        "$c" "$names" "${words% }" "$args"
done
cat <<'TAIL'
    help)
        COMPREPLY=($(compgen -W "$cmds" -- "$cur"))
        return ;;
    *)
        COMPREPLY=($(compgen -f -- "$cur"))
        return ;;
    esac
    # The word after an option that takes one: a file name or a value.
    for opt in $args; do
        if [ "$prev" = "$opt" ]; then
            COMPREPLY=($(compgen -f -- "$cur"))
            return
        fi
    done
    if [ "${cur#-}" != "$cur" ]; then
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
    else
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}
complete -o filenames -o bashdefault -F _ckpt ckpt
TAIL
