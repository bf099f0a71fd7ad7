#!/usr/bin/env bash
# The API check: apidiff (golang.org/x/exp/cmd/apidiff, pinned below)
# compares the exported API of the root package, package daemon and the etcd
# module's package at the baseline commit with this tree's, and fails on an
# incompatible change that .ci/apidiff-accepted.txt does not list with its
# reason. Compatible changes (additions) pass and are printed. An accepted
# break that no longer shows is reported, so the list can be pruned when the
# baseline moves (after a release: APIDIFF_BASE, the commit the next
# release's users start from).
#
#   bash .ci/apidiff.sh            # run from anywhere in a clone with its history
set -euo pipefail
cd "$(dirname "$0")/.."

APIDIFF=golang.org/x/exp/cmd/apidiff@v0.0.0-20261113113407-e3970619a1a4
base=${APIDIFF_BASE:-c009845}
accepted=.ci/apidiff-accepted.txt
root=github.com/runnerstate/runnerstate
say() { printf 'apidiff: %s\n' "$*"; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
GOBIN="$work/bin" go install "$APIDIFF"
git cat-file -e "$base^{commit}" 2>/dev/null || { say "no commit $base in this clone (a shallow clone?)"; exit 1; }
mkdir "$work/old"
git archive "$base" | tar -x -C "$work/old"

# package, and its module's directory relative to the tree's top
packages=("$root ." "$root/daemon ." "$root/etcd etcd")
status=0
: >"$work/seen"
for entry in "${packages[@]}"; do
	pkg=${entry% *} moddir=${entry#* }
	(cd "$work/old/$moddir" && "$work/bin/apidiff" -w "$work/old.exp" "$pkg")
	(cd "$moddir" && "$work/bin/apidiff" -w "$work/new.exp" "$pkg")
	"$work/bin/apidiff" "$work/old.exp" "$work/new.exp" >"$work/diff"
	# apidiff prints "Incompatible changes:" then "- <change>" lines, then
	# "Compatible changes:" and its own.
	section=""
	while IFS= read -r line; do
		case "$line" in
		"Incompatible changes:") section=incompatible; continue ;;
		"Compatible changes:") section=compatible; continue ;;
		"- "*) change=${line#- } ;;
		*) continue ;;
		esac
		if [ "$section" = compatible ]; then
			say "$pkg: compatible: $change"
			continue
		fi
		reason=""
		while IFS= read -r a; do
			case "$a" in "$pkg $change -- "?*) reason=${a#"$pkg $change -- "}; break ;; esac
		done <"$accepted"
		if [ -n "$reason" ]; then
			say "$pkg: accepted break: $change ($reason)"
			printf '%s %s\n' "$pkg" "$change" >>"$work/seen"
		else
			say "FAIL: $pkg: incompatible change since $base: $change (list it in $accepted with its reason, or keep the API)"
			status=1
		fi
	done <"$work/diff"
done
while IFS= read -r a; do
	case "$a" in "#"* | "") continue ;; esac
	grep -qxF -- "${a%% -- *}" "$work/seen" || say "note: $accepted lists a break apidiff no longer shows: ${a%% -- *}"
done <"$accepted"
[ "$status" -eq 0 ] && say "ok: no incompatible change since $base outside $accepted"
exit "$status"
