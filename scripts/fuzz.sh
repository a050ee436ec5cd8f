#!/usr/bin/env bash
# Runs every Go fuzz target of the module for a bounded time each:
#   scripts/fuzz.sh [FUZZTIME]     (default 30s; any go test -fuzztime value)
# make fuzz runs it on the throwaway Postgres of scripts/pg.sh, which the
# targets in e2e and server/gateway need. A failing input is written under
# testdata/fuzz/<FuzzName>/ of its package; commit it with the fix, and it
# stays in the seed corpus that make test runs.
set -euo pipefail
fuzztime=${1:-30s}
go=${GO:-go}
cd "$(dirname "$0")/.."

# go test -list prints a package's matching names, then "ok  <package> ...".
targets=()
names=()
while read -r first second _; do
	case $first in
	Fuzz*) names+=("$first") ;;
	ok)
		for n in "${names[@]}"; do targets+=("$second $n"); done
		names=()
		;;
	esac
done < <($go test -list '^Fuzz' ./...)

if [ ${#targets[@]} -eq 0 ]; then
	echo "fuzz: no fuzz targets found" >&2
	exit 1
fi
for t in "${targets[@]}"; do
	read -r pkg name <<<"$t"
	echo "fuzz: $name ($pkg) for $fuzztime"
	$go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$pkg"
done
