#!/usr/bin/env bash
# Run the portable tests on Windows: cross-compile each package's test binary
# (GOOS=windows GOARCH=amd64 go test -c) and run it under Wine 8 from Debian,
# child processes the tests re-execute included. This is Wine, not Windows:
# what passes here has run on Wine's implementation of the Win32 API.
#
#   bash .ci/windows/run.sh              # every package with test files for windows
#   bash .ci/windows/run.sh ./internal/liveness .
#
# Run from the repository root (it changes there itself). Installs wine64 and
# the mingw-w64 C compiler from Debian's packages when they are missing.
# Prints one go-test-style line per package ("ok  <pkg>  <time>" or "FAIL
# <pkg>", with the verbose log of a failing package before it) and last
# "windows: N passed, N failed", counting packages. Exits non-zero when a
# package fails or does not build.
#
# Environment:
#   RUNNERSTATE_WINE_CACHE      where the Wine prefix is kept between runs
#                               (default ${XDG_CACHE_HOME:-$HOME/.cache}/runnerstate-wine)
#   RUNNERSTATE_WINE_TIMEOUT    -test.timeout per package (default 5m)
set -euo pipefail
cd "$(dirname "$0")/../.."

t0=$SECONDS
say() { printf 'windows: %s\n' "$*"; }

# --- 1. Wine and the mingw-w64 compiler, from Debian --------------------------
# wine64 alone (no recommends) is the loader and libwine: enough for console
# programs, and a fraction of the desktop stack "wine" pulls in.
packages=(wine64 gcc-mingw-w64-x86-64-win32)
find_wine() {
	WINE=$(command -v wine64 || true)
	[ -n "$WINE" ] || { [ -x /usr/lib/wine/wine64 ] && WINE=/usr/lib/wine/wine64; } || true
	WINESERVER=$(command -v wineserver64 || command -v wineserver || true)
	[ -n "$WINESERVER" ] || { [ -x /usr/lib/wine/wineserver64 ] && WINESERVER=/usr/lib/wine/wineserver64; } || true
}
find_wine
if [ -z "$WINE" ] || [ -z "$WINESERVER" ] || ! command -v x86_64-w64-mingw32-gcc >/dev/null; then
	sudo=""
	[ "$(id -u)" = 0 ] || sudo="sudo"
	ti=$SECONDS
	$sudo apt-get update -qq
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		-o DPkg::Lock::Timeout=300 "${packages[@]}" >/dev/null
	say "installed ${packages[*]} in $((SECONDS - ti))s"
	find_wine
fi
[ -n "$WINE" ] && [ -n "$WINESERVER" ] || { echo "windows: wine64 not found after install" >&2; exit 1; }

# --- 2. The shim DLL and a quiet, headless Wine prefix ------------------------
# Headless and quiet: no display, no debug channels, and mscoree/mshtml
# disabled so that creating the prefix never asks to install Mono or Gecko.
unset DISPLAY WAYLAND_DISPLAY
export WINEDEBUG=-all WINEARCH=win64 WINEDLLOVERRIDES="mscoree,mshtml=" GOOS=windows GOARCH=amd64
cache=${RUNNERSTATE_WINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/runnerstate-wine}
mkdir -p "$cache"
work=$(mktemp -d)
cleanup() {
	# Ends the processes of this prefix only (the wineserver and anything a
	# killed test left behind), then the scratch directory.
	[ -n "${WINEPREFIX:-}" ] && "$WINESERVER" -k 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

x86_64-w64-mingw32-gcc -shared -O2 -s -o "$work/bcryptprimitives.dll" .ci/windows/bcryptprimitives.c -ladvapi32

# One prefix per Wine version, kept between runs: creating one takes most of
# a run's fixed cost. The lock is held for the whole run (wine processes
# inherit it), so that one run's wineserver -k never ends another's tests.
export WINEPREFIX="$cache/prefix-$("$WINE" --version | tr -cs 'A-Za-z0-9.' '-' | sed 's/-$//')"
exec 9>"$cache/lock"
flock 9
if [ ! -f "$WINEPREFIX/.ready" ]; then
	tp=$SECONDS
	rm -rf "$cache"/prefix-*
	"$WINE" wineboot --init >"$work/wineboot.log" 2>&1 || true
	"$WINESERVER" -w
	[ -d "$WINEPREFIX/drive_c/windows/system32" ] || { cat "$work/wineboot.log"; echo "windows: wineboot made no prefix" >&2; exit 1; }
	touch "$WINEPREFIX/.ready"
	say "created Wine prefix in $((SECONDS - tp))s"
fi
# The Go runtime loads its system DLLs from system32 only
# (LOAD_LIBRARY_SEARCH_SYSTEM32): beside the .exe the shim is not found.
cp "$work/bcryptprimitives.dll" "$WINEPREFIX/drive_c/windows/system32/"
# What earlier runs' tests left in the kept prefix's %TEMP% goes.
rm -rf "$WINEPREFIX"/drive_c/users/*/Temp/*

# --- 3. Packages, test binaries -----------------------------------------------
if [ $# -gt 0 ]; then
	pkgs=("$@")
else
	mapfile -t pkgs < <(go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./...)
fi
timeout=${RUNNERSTATE_WINE_TIMEOUT:-5m}
passed=0 failed=0 ntests=0 nfail=0 nskip=0

for pkg in "${pkgs[@]}"; do
	ip=$(go list -f '{{.ImportPath}}' "$pkg")
	dir=$(go list -f '{{.Dir}}' "$pkg")
	exe="$work/$(echo "$ip" | tr '/.' '__').test.exe"
	if ! go test -c -o "$exe" "$pkg" >"$work/build.log" 2>&1; then
		cat "$work/build.log"
		echo "FAIL	$ip [build failed]"
		failed=$((failed + 1))
		continue
	fi
	if [ ! -f "$exe" ]; then
		echo "?   	$ip	[no test files]"
		continue
	fi
	# Like go test: run in the package's directory (testdata/), verbose into
	# a log that is shown only when the package fails.
	log="$work/test.log"
	tr=$SECONDS
	set +e
	(cd "$dir" && "$WINE" "$exe" -test.v -test.timeout="$timeout" -test.count=1 </dev/null >"$log" 2>&1)
	status=$?
	set -e
	n=$(grep -cE '^--- (PASS|FAIL)' "$log" || true)
	f=$(grep -cE '^--- FAIL' "$log" || true)
	sk=$(grep -cE '^ *--- SKIP' "$log" || true)
	ntests=$((ntests + n)) nfail=$((nfail + f)) nskip=$((nskip + sk))
	if [ "$status" -eq 0 ]; then
		note="($n tests, $sk tests and subtests skipped)"
		[ "$n" -gt 0 ] || note="[no tests to run]"
		echo "ok  	$ip	$((SECONDS - tr))s	$note"
		passed=$((passed + 1))
	else
		cat "$log"
		echo "FAIL	$ip	$((SECONDS - tr))s	($f of $n tests failed, exit $status)"
		failed=$((failed + 1))
	fi
done

say "$ntests tests ran, $nfail failed ($nskip tests and subtests skipped), in ${#pkgs[@]} packages; $((SECONDS - t0))s in all"
echo "windows: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
