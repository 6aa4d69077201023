package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// The mount(8) helper. For `mount -t fuse.ctxfs STORE ROOT -o OPTIONS`,
// and so for the fstab line `STORE ROOT fuse.ctxfs OPTIONS 0 0`, mount(8)
// looks for /sbin/mount.fuse.ctxfs before the generic /sbin/mount.fuse and
// runs it as `mount.fuse.ctxfs STORE ROOT [-sfnv] [-o OPTIONS]`. That is
// this binary under that name (the symlink `make install` makes): it
// starts the server in the background, as `ctxfs mount --root ROOT --store
// STORE -o OPTIONS` does, and returns once both mounts answer.
//
// It is ctxfs itself, not a shell script, so that its options go through
// the very code of `ctxfs mount -o` and no path or option is ever split
// or expanded by a shell. Without it, mount(8) would fall back to
// mount.fuse3, which runs `ctxfs STORE ROOT -o …`: no ctxfs command.
const helperName = "mount.fuse.ctxfs"

// isMountHelper reports whether the binary was started as the helper.
func isMountHelper(argv0 string) bool { return filepath.Base(argv0) == helperName }

// The helper's exit statuses are mount(8)'s, which it passes on.
const (
	helperUsage   = 1  // incorrect invocation or permissions
	helperFailure = 32 // mount failure
)

// helperPath is the search path of a helper that mount(8) started with
// none: where fusermount3 (for a user's mount) and the like live.
const helperPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// mountHelperMain is the helper: SPEC is the store (the word ctxfs or
// none for the default store), DIR the root. -s (sloppy) ignores unknown
// options, -f (fake) checks the options and mounts nothing, -n (no mtab)
// changes nothing (the kernel keeps the list), -v says what is mounted.
func mountHelperMain(args []string) int {
	c := &mountConfig{}
	f := pflag.NewFlagSet(helperName, pflag.ContinueOnError)
	f.SetOutput(io.Discard)
	c.addFlags(f)
	sloppy := f.BoolP("sloppy", "s", false, "")
	fake := f.BoolP("fake", "f", false, "")
	f.BoolP("no-mtab", "n", false, "")
	verbose := f.BoolP("verbose", "v", false, "")
	namespace := f.StringP("namespace", "N", "", "")
	fstype := f.StringP("type", "t", "", "")
	err := f.Parse(args)
	switch {
	case err != nil:
	case f.NArg() != 2:
		err = usageError("want STORE and ROOT")
	case *namespace != "":
		err = usageError("-N: mounting in another mount namespace is not supported; run mount inside it")
	case *fstype != "" && *fstype != "fuse.ctxfs":
		err = usageError(fmt.Sprintf("-t %s: this helper mounts fuse.ctxfs", *fstype))
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "ctxfs: %s: %v\nusage: %s STORE ROOT [-sfnv] [-o OPTIONS]  (STORE may be the word ctxfs: the default store)\n", helperName, err, helperName)
		return helperUsage
	}
	c.root = f.Arg(1)
	if spec := f.Arg(0); spec != "ctxfs" && spec != "none" {
		c.store = spec
	}
	if os.Getenv("PATH") == "" {
		os.Setenv("PATH", helperPath)
	}
	if err := c.resolve(f, *sloppy); err != nil {
		return helperFailed(err)
	}
	c.quiet = !*verbose
	if *verbose {
		fmt.Fprintf(os.Stderr, "ctxfs: mounting %s/home and %s/shared, store %s\n", c.root, c.root, c.store)
	}
	if *fake {
		return 0
	}
	return helperFailed(c.start())
}

// helperFailed prints err as ctxfs: … and returns mount(8)'s status for
// it (0 for none).
func helperFailed(err error) int {
	if err == nil {
		return 0
	}
	fmt.Fprintf(os.Stderr, "ctxfs: %v\n", err)
	var usage usageError
	if errors.As(err, &usage) {
		return helperUsage
	}
	return helperFailure
}

// ignoredOptions change nothing for ctxfs: they hold already (nosuid and
// nodev, which FUSE mounts always have; allow_other, which a root server
// always sets; default_permissions, which ctxfs always sets) or they are
// for mount(8) and fstab, not for the filesystem. Kept sorted: the
// refusal of an unknown option lists them.
var ignoredOptions = []string{
	"_netdev", "allow_other", "auto", "default_permissions", "defaults", "group", "noauto",
	"nodev", "nofail", "nosuid", "nouser", "owner", "rw", "user", "users",
}

// optionFlags are the options that set the mount flag of the same name.
var optionFlags = []string{"gc-idle", "log-level", "log-file", "log-format"}

// applyOptions applies -o lists to the mount flags f. An option that sets
// a flag also given as a flag, or twice, is refused (they could disagree);
// so are ro and every option ctxfs does not know, unless sloppy.
func applyOptions(lists []string, f *pflag.FlagSet, sloppy bool) error {
	var items []string
	for _, l := range lists {
		items = append(items, strings.Split(l, ",")...)
	}
	// mount(8) adds noexec (with nosuid and nodev) to user mounts.
	userMount := slices.Contains(items, "user") || slices.Contains(items, "users")
	set := map[string]bool{}
	for _, item := range items {
		name, value, hasValue := strings.Cut(item, "=")
		switch {
		case item == "", strings.HasPrefix(name, "x-"), name == "comment":
		case slices.Contains(ignoredOptions, name) && !hasValue:
			if name == "allow_other" && os.Geteuid() != 0 {
				return usageError("-o allow_other: a server run by a user serves that user alone; mount as root to serve every user")
			}
		case name == "noexec" && userMount && !hasValue:
		case name == "ro":
			return usageError("-o ro: ctxfs has no read-only mode (every send is recorded in the store, through the sockets too); leave ro out")
		case slices.Contains(optionFlags, name) && hasValue:
			if set[name] {
				return usageError(fmt.Sprintf("-o %s: given twice", name))
			}
			if f.Changed(name) {
				return usageError(fmt.Sprintf("-o %s: --%s is given too", name, name))
			}
			if err := f.Set(name, value); err != nil {
				return usageError(fmt.Sprintf("-o %s: %v", item, err))
			}
			set[name] = true
		case sloppy:
		default:
			return usageError(fmt.Sprintf("-o %s: not an option of ctxfs; it takes %s, and accepts %s (they change nothing)",
				item, strings.Join(withSuffix(optionFlags, "=…"), ", "), strings.Join(ignoredOptions, ", ")))
		}
	}
	return nil
}

func withSuffix(names []string, suffix string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = n + suffix
	}
	return out
}
