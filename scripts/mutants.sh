#!/usr/bin/env bash
# Mutation testing of the parser and the receive heart (not in CI): every
# mutant cargo-mutants makes of the files below must be caught by the fast
# tests: the lib's unit tests, plus the EAL-free property tests
# (app/tests/parse_props.rs) when parse/ is mutated. The build copies target/
# (--copy-target) so each mutant is an incremental build.
#
#   scripts/mutants.sh                    parse/, receive/ (all but sync, testkit, tests)
#   scripts/mutants.sh app/src/receive/stage.rs   only these files
#
# MUTANTS_TIMEOUT: seconds per mutant's test run (default 60; a mutant that
# makes a test spin is a "timeout", which counts as caught). MUTANTS_JOBS:
# parallel builds (default 1). Results in mutants.out/ (caught.txt,
# missed.txt, timeout.txt, unviable.txt). Run it nice'd on a shared machine.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo-mutants >/dev/null 2>&1; then
  echo "mutants: cargo-mutants is missing: installing it from crates.io (cargo install --locked cargo-mutants)"
  cargo install --locked cargo-mutants
fi
files=("$@")
if [ ${#files[@]} = 0 ]; then
  files=(app/src/parse/*.rs app/src/receive/stage.rs app/src/receive/mod.rs
    app/src/receive/admission.rs app/src/receive/drain.rs app/src/receive/accounting.rs)
fi
args=()
# The test targets go to every cargo call (-C), the build's `cargo test
# --no-run` too: built alone, a mutant takes seconds instead of the ~40 s
# that building every test target and example took.
tests=(-C --lib)
for f in "${files[@]}"; do
  args+=(--file "$f")
  case "$f" in app/src/parse/*) tests=(-C --lib -C --test=parse_props) ;; esac
done
rc=0
# --exclude-re: helpers inside test modules are not product code.
cargo mutants --package udpdemux "${args[@]}" --exclude-re 'tests::' \
  --timeout "${MUTANTS_TIMEOUT:-60}" --jobs "${MUTANTS_JOBS:-1}" --copy-target=true \
  "${tests[@]}" || rc=$?
# cargo-mutants exits 2 when mutants were missed, 3 on timeouts.
echo
echo "mutants: $(date -u '+%Y-%m-%d %H:%M') UTC, ${files[*]}"
for k in caught missed timeout unviable; do
  printf '%s: %s\n' "$k" "$(wc -l <mutants.out/$k.txt 2>/dev/null || echo 0)"
done
if [ -s mutants.out/missed.txt ]; then
  echo "missed:"
  sed 's/^/  /' mutants.out/missed.txt
fi
exit "$rc"
