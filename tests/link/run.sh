#!/bin/sh
# run.sh - the library's boundary (docs/DESIGN.md "Exported symbols"):
#   exports: every global symbol libshardckpt.so/.a and libshardckpt_mpi.so/.a define is declared in include/*.h
#   (shardckpt_advanced.h, the advanced tier, among them);
#   advanced tier: its header compiles only where SCK_ADVANCED_API is defined;
#   user_symbols: a program defining write_file, plan_build, ... of its own links and runs against the sealed
#   static library and against the shared one.
# usage: sh tests/link/run.sh [BUILD_DIR]   (after `make all mpi`); prints "N passed, N failed".
set -u
cd "$(dirname "$0")/../.." || exit 2
B=${1:-build}
CC=${CC:-cc}
. tests/suite_lib.sh

# Names declared in the public headers: the identifier before each '(' on an SCK_API line.
grep -h '^SCK_API' include/*.h | sed -E 's/\(.*//; s/.*[ *]//' | sort -u > "$tmp/declared"
[ -s "$tmp/declared" ] || bad "no SCK_API declarations found in include/*.h"

check_exports() { # $1 = library, $2 = nm flags
    if [ ! -f "$1" ]; then bad "exports $1: not built"; return; fi
    nm $2 --defined-only "$1" | awk 'NF >= 3 && $2 ~ /^[A-TV-Z]$/ {print $3}' | sort -u > "$tmp/defined"
    extra=$(comm -23 "$tmp/defined" "$tmp/declared" | tr '\n' ' ')
    if [ ! -s "$tmp/defined" ]; then bad "exports $1: defines no global symbol"
    elif [ -n "$extra" ]; then bad "exports $1: not declared in include/*.h: $extra"
    else ok "exports $1: $(wc -l < "$tmp/defined") symbols, all declared in include/*.h"; fi
}
check_exports "$B/libshardckpt.so" -D
check_exports "$B/libshardckpt.a" -g
if command -v "${MPICC:-mpicc}" >/dev/null 2>&1; then
    check_exports "$B/libshardckpt_mpi.so" -D
    check_exports "$B/libshardckpt_mpi.a" -g
fi
if [ -f "$B/libshardckpt_cuda.so" ]; then # built by `make cuda` only where the CUDA toolkit is
    check_exports "$B/libshardckpt_cuda.so" -D
    check_exports "$B/libshardckpt_cuda.a" -g
fi

# The advanced tier is opt-in: its header refuses a program that did not define SCK_ADVANCED_API.
printf '#include "shardckpt_advanced.h"\nint main(void) { return 0; }\n' > "$tmp/adv.c"
if $CC -std=c11 -Iinclude -c -o "$tmp/adv.o" "$tmp/adv.c" > "$tmp/adv.log" 2>&1; then bad "advanced tier: included without SCK_ADVANCED_API"
elif ! grep -q SCK_ADVANCED_API "$tmp/adv.log"; then cat "$tmp/adv.log"; bad "advanced tier: refused, but not naming SCK_ADVANCED_API"
else ok "advanced tier: shardckpt_advanced.h wants SCK_ADVANCED_API"; fi

# The same program linked two ways; each run saves, loads and verifies a checkpoint in a fresh directory.
FLAGS="-std=c11 -Wall -Wextra -Werror -Wmissing-prototypes -Iinclude"
link_and_run() { # $1 = label, rest = link arguments
    label=$1; shift
    mkdir -p "$tmp/$label"
    if ! $CC $FLAGS -o "$tmp/user_symbols_$label" tests/link/user_symbols.c "$@" -lisal -lpthread -lm > "$tmp/$label.log" 2>&1; then
        cat "$tmp/$label.log"; bad "user_symbols ($label): does not link"; return
    fi
    if "$tmp/user_symbols_$label" "$tmp/$label"; then ok "user_symbols ($label)"; else bad "user_symbols ($label): run failed"; fi
}
link_and_run static "$B/libshardckpt.a"
link_and_run shared -L"$B" -Wl,-rpath,"$(cd "$B" && pwd)" -lshardckpt

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
