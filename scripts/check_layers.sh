#!/usr/bin/env bash
# The layering rule of docs/architecture.md, checked: each folder of src/ (and tools/) includes only
# the folders listed for it here. Prints every include that breaks it and exits 1; exits 0 when none.
set -u
cd "$(dirname "$0")/.."
declare -A allowed=(
    [base]=""
    [tensor]="base"
    [ops]="base ops/cpu ops/cuda"
    [ops/cpu]="base ops"
    [ops/cuda]="base ops"
    [model]="base tensor ops"
    [optim]="base tensor ops ops/cuda model"
    [data]="base"
    [io]="base tensor data model"
    [train]="base tensor ops model optim data io dist"
    [dist]="base"
    [super]="base"
    [bench]="base tensor ops ops/cuda model optim data io train dist"
    [tools]="base tensor ops model optim data io train dist bench super"
)
bad=0
while IFS= read -r f; do
    dir=$(dirname "$f")
    dir=${dir#src/}
    [ -n "${allowed[$dir]+set}" ] || { echo "$f: folder $dir has no layer in scripts/check_layers.sh"; bad=1; continue; }
    while IFS= read -r inc; do
        to=$(dirname "$inc")
        [ "$to" = "." ] || [ "$to" = "$dir" ] && continue
        case " ${allowed[$dir]} " in *" $to "*) ;; *) echo "$f includes $inc: $dir may not use $to"; bad=1 ;; esac
    done < <(grep -ho '^#include "[^"]*"' "$f" | sed 's/#include "//; s/"$//')
done < <(find src tools -name '*.c' -o -name '*.h' -o -name '*.cu' | sort)
exit $bad
