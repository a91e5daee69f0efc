# The project's scripts keep the tools' contract: an unknown argument is a
# usage error in one line, and --help answers (on stdout, exit 0).
expect data-unknown-flag 2 "^scripts/data: unknown argument '--bogus' \(try --help\)$" \
  "$here/../../scripts/data" --bogus
"$here/../../scripts/data" --help > data-help.out 2>&1 && grep -q '^Usage: scripts/data' data-help.out ||
  { echo "FAILED data-help: $(cat data-help.out)" >&2; failures=$((failures + 1)); }
cases=$((cases + 1))
