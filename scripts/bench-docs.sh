#!/usr/bin/env bash
# Put a scripts/bench.sh report (its bench.md) into docs/benchmarks.md: the
# lines between `<!-- bench:begin -->` and `<!-- bench:end -->` (each alone on
# its line, once) are replaced by the report; everything outside them, the
# hand-written notes per goal, stays as it is. scripts/bench.sh calls this
# after a full run whose books balance; it also works on its own:
#
#   bash scripts/bench-docs.sh target/bench/bench.md   # into docs/benchmarks.md
#   bash scripts/bench-docs.sh REPORT DOC
#
# The file is rewritten in place (same owner and mode, also under sudo) and
# only when both markers are found in order; otherwise it is left untouched
# and the script exits 1.
set -euo pipefail
REPORT=${1:?usage: bench-docs.sh REPORT [DOC]}
DOC=${2:-$(dirname "$0")/../docs/benchmarks.md}
BEGIN='<!-- bench:begin -->'
END='<!-- bench:end -->'
err() { echo "bench-docs: $*" >&2; exit 1; }

[ -r "$REPORT" ] || err "$REPORT: cannot read the report"
[ -s "$REPORT" ] || err "$REPORT: empty report"
[ -w "$DOC" ] || err "$DOC: not a writable file"
if grep -qxF -e "$BEGIN" -e "$END" "$REPORT"; then
  err "$REPORT holds a marker line itself"
fi

TMP=$(mktemp)
trap 'rm -f "$TMP"' EXIT
# Exit status 1 unless there is exactly one begin line followed by exactly one
# end line.
if ! awk -v rep="$REPORT" -v b="$BEGIN" -v e="$END" '
  $0 == b { nb++; if (nb > 1 || ne) { bad = 1; exit }
            print
            while ((r = getline line < rep) > 0) print line
            if (r < 0) { bad = 1; exit }
            inside = 1; next }
  $0 == e { ne++; if (!inside) { bad = 1; exit }
            inside = 0; print; next }
  !inside { print }
  END { if (bad || nb != 1 || ne != 1) exit 1 }
' "$DOC" > "$TMP"; then
  err "$DOC: needs one \"$BEGIN\" line and, after it, one \"$END\" line; left unchanged"
fi
cat "$TMP" > "$DOC"
echo "bench-docs: $REPORT written into $DOC (between the bench:begin/bench:end markers)" >&2
