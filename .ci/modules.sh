#!/usr/bin/env bash
# The modules as a user outside this repository builds them. A file-based
# module proxy made from this clone (internal/modproxy, golang.org/x/mod/zip)
# serves the root module at the version etcd/go.mod requires (a
# pseudo-version: the module as that commit of this repository's history
# has it) and the etcd module as this tree has it. Then, in an empty module
# outside the repository, with that proxy first and nothing replaced:
# "go get github.com/runnerstate/runnerstate/etcd@<version>" alone, a check
# that it brought the root at the required version, and a program on both
# modules (.ci/modules/main.go) built and run: the daemon story, and the etcd
# module's Takeover against an embedded etcd. It fails when etcd/go.mod's
# require names a version no proxy can serve (v0.0.0), or one the etcd
# module does not build against (bump it: see docs/testing.md).
#
# Run from anywhere in a clone with its history (a shallow clone lacks the
# commit the require names). Other modules come through the Go module cache
# ($(go env GOMODCACHE)/cache/download) before $(go env GOPROXY): nothing
# the cache holds is fetched again. The proxy's two modules go to a module
# cache of the step's own, so no copy of them outlives it; -trimpath lets
# the build cache serve the dependencies compiled before.
set -euo pipefail
cd "$(dirname "$0")/.."

root=github.com/runnerstate/runnerstate
say() { printf 'modules: %s\n' "$*"; }
# The go command's "go: downloading" lines, from the two local proxies, left out.
quiet() {
	set +e
	"$@" 2>&1 | grep -v '^go: downloading'
	local rc=${PIPESTATUS[0]}
	set -e
	return "$rc"
}
t0=$SECONDS

work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
go build -o "$work/modproxy" ./internal/modproxy

want=$(cd etcd && go list -m -f '{{.Version}}' "$root")
etcdv=$("$work/modproxy" -pseudo HEAD)
say "etcd/go.mod requires $root $want; the etcd module is served as $etcdv (this tree)"
status=0
if ! "$work/modproxy" -out "$work/proxy" -module "$root" -version "$want"; then
	say "no proxy can serve $root $want (etcd/go.mod's require): the go get below fails as a user's would"
	status=1
fi
"$work/modproxy" -out "$work/proxy" -module "$root/etcd" -version "$etcdv" -dir etcd

cache=$(go env GOMODCACHE)
export GOPROXY="file://$work/proxy,file://$cache/cache/download,$(go env GOPROXY)"
export GOMODCACHE="$work/modcache" GOSUMDB=off GOFLAGS="-mod=mod -trimpath" GOTOOLCHAIN=local GOWORK=off
mkdir "$work/user"
cd "$work/user"
go mod init example.com/user >/dev/null 2>&1
if ! go get "$root/etcd@$etcdv" >"$work/get.log" 2>&1; then
	grep -v '^go: downloading' "$work/get.log" || true
	say "FAIL: go get $root/etcd@$etcdv"
	exit 1
fi
got=$(go list -m -f '{{.Version}}' "$root")
if [ "$got" != "$want" ]; then
	say "FAIL: go get brought $root $got, not the $want etcd/go.mod requires"
	exit 1
fi
say "go get $root/etcd@$etcdv brought $root $got"
cp "$OLDPWD/.ci/modules/main.go" .
quiet go vet .
quiet go build -o user .
./user daemon "$work/daemon"
./user etcd "$work/etcd"
say "ok in $((SECONDS - t0)) s"
exit "$status"
