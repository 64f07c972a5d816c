# suite_lib.sh - sourced by the shell suites (tests/link/run.sh, tests/install/run.sh), from the repository
# root: the pass/fail counters their closing "N passed, N failed" line reports, ok/bad to count a check, and
# $tmp, a temporary directory removed on exit.
pass=0
fail=0
ok() { echo "ok $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
