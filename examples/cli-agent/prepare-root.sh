#!/usr/bin/env bash
# prepare-root.sh [--root R] --cli CLI [--bin BIN] UID AGENT
#
# Fills the chroot of a coding-agent CLI agent (SPEC 16, isolation chroot)
# for UID, R/home/UID/agent/AGENT/root/, through the ctxfs mount, from the
# CLI's installed npm package:
#   - the libraries its executable links against, at their host paths
#     (ldd: the dynamic loader, libc, libm, …; none for a static binary);
#   - etc/ssl/certs/ca-certificates.crt, for an https endpoint;
#   - tmp/ (mode 1777) and home/agent/ (UID's, 0700: HOME in the jail);
#   - bin/ with the static busybox (shell-agent/prepare-root.sh), the shell
#     the CLIs run their tools with, and proc/ (0555), where the jail
#     mounts its own /proc (Codex and Claude Code read /proc/self/exe).
# The executable itself is not copied: the server binds R/agent/AGENT (the
# link ctx agent add made) into the jail as the program.
#
# CLI is claude-code, codex or opencode. BIN is the executable (default:
# what R/agent/AGENT links to, else the CLI's program in PATH). Codex's
# npm program is a node launcher: its native, static binary is used and
# named (give that to ctx agent add --path). Gemini CLI is a node bundle and
# is not prepared here: run it with isolation none.
#
# Run it as root (it makes root/, then runs the rest as UID: what it
# writes in a user's tree it writes with the user's rights), or as UID
# itself. Running it again changes nothing.
set -euo pipefail
export LC_ALL=C

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
USAGE="[--root R] --cli CLI [--bin BIN] UID AGENT"
# shellcheck source=../lib/options.sh
. "$here/../lib/options.sh"
cli= bin=
script_option() {
	case $1 in
	--cli | --bin)
		[ $# -ge 2 ] || usage
		[ "$1" = --cli ] && cli=$2 || bin=$2
		taken=2
		;;
	esac
}
parse_options "$@"
[ ${#args[@]} -eq 2 ] || usage
uid=${args[0]} agent=${args[1]}
check_uid_agent "$uid" "$agent"

case $cli in
claude-code) program=claude ;;
codex | opencode) program=$cli ;;
gemini) die "Gemini CLI is a node bundle (node and its bundle/ would have to be in the jail): run it with isolation none" ;;
*) die "--cli must be claude-code, codex or opencode, not '$cli'" ;;
esac
become_uid "$uid" "$agent" "$@"
need_mount

if [ -z "$bin" ]; then
	if [ -e "$root/agent/$agent" ]; then
		bin=$root/agent/$agent
	else
		bin=$(type -P -- "$program") || die "$program: not found in PATH (install it, or give --bin)"
	fi
fi
real=$(readlink -f -- "$bin") || die "$bin: cannot resolve it"
[ -f "$real" ] && [ -x "$real" ] || die "$real is not an executable file"
if [ "$cli" = codex ] && [[ $real == *.js ]]; then
	native=$(dirname "$real")/../../codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex
	[ -x "$native" ] || die "$real is Codex's node launcher, and its native binary $native is not there"
	real=$(readlink -f -- "$native")
	echo "$bin is Codex's node launcher; its native binary is $real: ctx agent add $agent --cli codex --path $real --isolation chroot --force"
fi

dest=$root/home/$uid/agent/$agent/root

# put FILE at its own path under dest, by a rename, unless it is there
copy_in() {
	local to=$dest$1 tmp
	if cmp -s "$1" "$to"; then
		return
	fi
	mkdir -p "$(dirname "$to")"
	tmp=$(dirname "$to")/.prepare-root.new
	rm -f "$tmp"
	cp -L "$1" "$tmp"
	chmod "$(stat -Lc %a "$1")" "$tmp"
	mv -f "$tmp" "$to"
	echo "copied $1"
}

# The libraries, as ldd names them: absolute paths only (not linux-vdso).
libs=$(ldd "$real" 2>/dev/null | grep -o '/[^ ]*' || true)
if [ -z "$libs" ]; then
	echo "$real is statically linked: no libraries needed"
fi
for lib in $libs; do
	copy_in "$lib"
done

certs=/etc/ssl/certs/ca-certificates.crt
if [ -f "$certs" ]; then
	copy_in "$certs"
else
	echo "warning: $certs is missing (apt-get install ca-certificates): an https endpoint will not verify" >&2
fi

"$here/../shell-agent/prepare-root.sh" --root "$root" "$uid" "$agent" >/dev/null
mkdir -p "$dest/home/agent"
chmod 0700 "$dest/home/agent"
echo "$dest: $(wc -w <<<"$libs") libraries, certificates, bin/ (busybox), tmp/, proc/, home/agent/ for $cli ($real)"
