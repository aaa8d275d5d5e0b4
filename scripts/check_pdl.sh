#!/usr/bin/env bash
# The rule of src/ops/cuda/launch.h, checked: in every source that launches kernels by zy_launch
# (programmatic dependent launch), each __global__ function's first statement is zy_pdl_begin(),
# and no kernel there is launched by <<<>>> (one way to launch). Prints what breaks it and exits 1.
set -u
cd "$(dirname "$0")/.."
bad=0
for f in $(grep -rl --include='*.cu' --include='*.h' 'zy_launch(' src | grep -v 'src/ops/cuda/launch.h'); do
    if grep -n '<<<' "$f" | grep -v '^\s*[0-9]*:\s*/\?\*' >/dev/null; then
        grep -n '<<<' "$f" | sed "s|^|$f:|; s|$|: launched by <<<>>> beside zy_launch|"
        bad=1
    fi
    # the body of each __global__ function: the first '{' at parenthesis depth 0 after it, then the
    # first statement must be zy_pdl_begin();
    awk -v f="$f" '
        /__global__/ { want = 1; depth = 0; line = NR }
        want {
            n = split($0, ch, "")
            for (i = 1; i <= n; i++) {
                if (ch[i] == "(") depth++
                else if (ch[i] == ")") depth--
                else if (ch[i] == ";" && depth == 0 && !body) { want = 0; break }
                else if (ch[i] == "{" && depth == 0 && !body) { body = 1; rest = substr($0, i + 1); break }
            }
            if (body) {
                if (rest ~ /[^ \t]/) first = rest; else { getline; first = $0 }
                if (first !~ /^[ \t]*zy_pdl_begin\(\);/) { print f ":" line ": a kernel launched by zy_launch must start with zy_pdl_begin();"; bad = 1 }
                want = 0; body = 0
            }
        }
        END { exit bad }' "$f" || bad=1
done
exit $bad
