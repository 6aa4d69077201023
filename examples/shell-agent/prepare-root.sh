#!/usr/bin/env bash
# prepare-root.sh [--root R] UID AGENT
#
# Fills the chroot of AGENT for UID, R/home/UID/agent/AGENT/root/, through
# the ctxfs mount: bin/busybox (a copy of the static /bin/busybox of
# Debian's busybox-static), one symlink in bin/ per busybox applet, and
# tmp/ (mode 1777). Run it as root (root may make any uid's home through
# the mount), or as UID itself. Running it again changes nothing; files of
# your own already in bin/ are left alone.
#
# R defaults to $CTX_ROOT, else /ctx. BUSYBOX names another static busybox.
set -euo pipefail
export LC_ALL=C

usage() {
	echo "usage: prepare-root.sh [--root R] UID AGENT" >&2
	exit 2
}
die() {
	echo "prepare-root.sh: $*" >&2
	exit 1
}

root=${CTX_ROOT:-/ctx}
while [ $# -gt 0 ]; do
	case $1 in
	--root)
		[ $# -ge 2 ] || usage
		root=$2
		shift 2
		;;
	--root=*)
		root=${1#--root=}
		shift
		;;
	-h | --help) usage ;;
	--)
		shift
		break
		;;
	-*)
		echo "prepare-root.sh: unknown option $1 (a name may not start with -)" >&2
		usage
		;;
	*) break ;;
	esac
done
[ $# -eq 2 ] || usage
uid=$1 agent=$2

[[ $uid =~ ^[0-9]+$ ]] || die "UID must be a number, not '$uid'"
# the ABI's name rule (SPEC 3, abi.ValidName)
if ! [[ $agent =~ ^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$ ]] || [[ $agent == *.sock || $agent == *.d ]]; then
	die "'$agent' is not a valid agent name ([A-Za-z0-9][A-Za-z0-9._+-]{0,63}, not ending in .sock or .d)"
fi
me=$(id -u)
if [ "$me" != 0 ] && [ "$me" != "$uid" ]; then
	die "run me as root, or as uid $uid (you are uid $me)"
fi

busybox=${BUSYBOX:-/bin/busybox}
if [ ! -x "$busybox" ]; then
	die "$busybox is missing: install busybox-static (apt-get install busybox-static)"
fi
# The chroot has no libraries: a dynamically linked busybox (Debian's
# plain busybox package) would not start there.
if command -v ldd >/dev/null && ldd "$busybox" >/dev/null 2>&1; then
	die "$busybox is dynamically linked and cannot run in a chroot: install busybox-static (apt-get install busybox-static)"
fi

# Only through the mount: a directory under an unmounted R/home would be a
# plain host directory the server never serves.
if ! mountpoint -q "$root/home"; then
	die "nothing is mounted at $root/home: start the server first (ctxfs mount --root $root)"
fi

dest=$root/home/$uid/agent/$agent/root
mkdir -p "$dest/bin" "$dest/tmp"
chmod 1777 "$dest/tmp"

if cmp -s "$busybox" "$dest/bin/busybox"; then
	echo "$dest/bin/busybox is up to date"
else
	tmp=$dest/bin/.busybox.new
	rm -f "$tmp"
	cp "$busybox" "$tmp"
	chmod 0755 "$tmp"
	mv -f "$tmp" "$dest/bin/busybox"
	echo "copied $busybox to $dest/bin/busybox"
fi

made=0 kept=0
for applet in $("$busybox" --list); do
	case $applet in busybox | */* | . | ..) continue ;; esac
	link=$dest/bin/$applet
	if [ -L "$link" ] && [ "$(readlink "$link")" = busybox ]; then
		continue
	fi
	if [ -e "$link" ] || [ -L "$link" ]; then
		kept=$((kept + 1))
		echo "left your own $link as it is"
		continue
	fi
	ln -s busybox "$link"
	made=$((made + 1))
done
echo "$dest: bin/ ($made new applet links, $(find "$dest/bin" -maxdepth 1 -type l | wc -l) in all, $kept of yours kept), tmp/"
