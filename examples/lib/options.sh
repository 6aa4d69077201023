# options.sh: what the example scripts share, sourced by them (bash).
#
# Before sourcing, a script sets USAGE (its synopsis after its name). It
# then calls parse_options "$@", which sets
#   root   the mount root: --root R, else $CTX_ROOT, else /ctx
#   args   the arguments after the options (an array)
# and answers -h/--help with the usage (exit 2). An option of the script's
# own is offered to its function script_option, when it defines one: it is
# called with the remaining arguments and sets taken to how many of them it
# used (0: not its option, which is then an unknown one).

prog=$(basename "$0")
self=$(readlink -f -- "$0")

usage() {
	echo "usage: $prog $USAGE" >&2
	exit 2
}

die() {
	echo "$prog: $*" >&2
	exit 1
}

parse_options() {
	root=${CTX_ROOT:-/ctx}
	while [ $# -gt 0 ]; do
		taken=0
		case $1 in
		--root)
			[ $# -ge 2 ] || usage
			root=$2
			taken=2
			;;
		--root=*)
			root=${1#--root=}
			taken=1
			;;
		-h | --help) usage ;;
		--)
			shift
			break
			;;
		-*)
			if declare -F script_option >/dev/null; then
				script_option "$@"
			fi
			if [ "$taken" = 0 ]; then
				echo "$prog: unknown option $1 (a name may not start with -)" >&2
				usage
			fi
			;;
		*) break ;;
		esac
		shift "$taken"
	done
	args=("$@")
}

# check_uid_agent UID AGENT: UID is a number, AGENT a valid agent name
# (SPEC 3, abi.ValidName), and the caller is root or UID.
check_uid_agent() {
	[[ $1 =~ ^[0-9]+$ ]] || die "UID must be a number, not '$1'"
	if ! [[ $2 =~ ^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$ ]] || [[ $2 == *.sock || $2 == *.d ]]; then
		die "'$2' is not a valid agent name ([A-Za-z0-9][A-Za-z0-9._+-]{0,63}, not ending in .sock or .d)"
	fi
	local me
	me=$(id -u)
	if [ "$me" != 0 ] && [ "$me" != "$1" ]; then
		die "run me as root, or as uid $1 (you are uid $me)"
	fi
}

# need_mount: a ctxfs server serves $root. Only through the mount: a
# directory under an unmounted $root/home would be a plain host directory
# the server never serves.
need_mount() {
	if ! mountpoint -q "$root/home"; then
		die "nothing is mounted at $root/home: start the server first (ctxfs mount --root $root)"
	fi
}

# become_uid UID AGENT ARGS...: run by root for another uid, make that uid's
# AGENT/root/ through the mount (root may; it is the uid's) and run this
# script again, with ARGS, as the uid: what it writes in a user's tree is
# then written with the user's own rights, so a symlink the user left
# there can lead it nowhere the user could not write anyway.
become_uid() {
	local uid=$1 agent=$2
	shift 2
	if [ "$(id -u)" != 0 ] || [ "$uid" = 0 ]; then
		return 0
	fi
	need_mount
	mkdir -p "$root/home/$uid/agent/$agent/root"
	exec setpriv --reuid "$uid" --regid "$uid" --clear-groups -- bash "$self" "$@"
}
