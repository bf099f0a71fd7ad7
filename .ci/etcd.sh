#!/usr/bin/env bash
# CI for the cluster extension, etcd/, a module of its own (the root's
# go vet ./... and go test ./... do not enter it). Run from the repository
# root, on a machine with Go (1.26+) and the Go module proxy: etcd-server
# (Debian's, for the three-member cluster tests) when missing, gofmt, go vet,
# staticcheck, the benchmarks once, and the tests with the race detector,
# whose summary it prints. ETCD_CROSS_VET=1 also vets for darwin and windows
# (each compiles etcd's whole dependency graph again: minutes on a cold
# build cache, so it is not done by default).
set -euo pipefail
cd "$(dirname "$0")/../etcd"

STATICCHECK=honnef.co/go/tools/cmd/staticcheck@v0.8.2

step() { printf '\n=== etcd: %s\n' "$*"; }
# A step that stops the script says which command stopped it.
trap 'echo "etcd.sh: line $LINENO: \"$BASH_COMMAND\" exited $?" >&2' ERR

# The cluster tests run real etcd members: Debian's etcd-server, installed
# here when missing (idempotent; without apt-get they are skipped, saying so).
step "etcd server binary for the cluster tests"
if ! command -v etcd >/dev/null 2>&1; then
	if command -v apt-get >/dev/null 2>&1; then
		sudo=""
		[ "$(id -u)" = 0 ] || sudo=sudo
		export DEBIAN_FRONTEND=noninteractive
		$sudo apt-get install -y etcd-server || { $sudo apt-get update && $sudo apt-get install -y etcd-server; }
	else
		echo "no etcd binary and no apt-get: TestClusterFaults will be skipped"
	fi
fi
# Not "etcd --version | head -1": under pipefail, head closing the pipe
# before etcd's last line is written ends etcd with SIGPIPE, and the script.
if command -v etcd >/dev/null 2>&1; then
	version=$(etcd --version)
	printf '%s\n' "${version%%$'\n'*}"
fi

step "gofmt"
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
	echo "gofmt needed on:"; echo "$unformatted"; exit 1
fi

step "go vet"
go vet ./...
if [ "${ETCD_CROSS_VET:-}" = 1 ]; then
	step "go vet (darwin, windows)"
	GOOS=darwin go vet ./...
	GOOS=windows go vet ./...
fi

step "staticcheck"
go run "$STATICCHECK" ./...

step "benchmarks run once (not a timed check; figures: see docs/benchmarks.md)"
benchlog=$(mktemp)
log=$(mktemp)
trap 'rm -f "$benchlog" "$log"' EXIT
if go test -run '^$' -bench . -benchtime 1x ./... >"$benchlog" 2>&1; then
	grep -E '^Benchmark' "$benchlog" || true
else
	cat "$benchlog"; echo "etcd benchmarks: failed"; exit 1
fi

step "tests (go test -race -count=1 ./...)"
set +e
go test -race -count=1 ./... 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
passed=$(grep -c '^ok ' "$log" || true)
failed=$(grep -c $'^FAIL\t' "$log" || true) # one line per package: 'FAIL<tab>pkg'
echo "etcd test summary: $passed packages passed, $failed failed"
exit "$status"
