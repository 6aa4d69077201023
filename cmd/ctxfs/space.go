package main

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"

	"github.com/ctxfs/ctxfs/abi"
	ctxfs "github.com/ctxfs/ctxfs/fs"
	"github.com/ctxfs/ctxfs/session"
)

// cmdSpace creates a shared space: `ctxfs space add NAME [--group G]`.
// With --store it works on that store directly (whether or not a server
// serves it); otherwise it works through the mount at --root (default
// $CTX_ROOT or /ctx), so it always reaches the store that the server there
// uses. Naming both is a usage error: they could disagree.
func cmdSpace(args []string) error {
	f, err := parseFlags(args, []string{"group", "store", "root"}, nil)
	if err != nil {
		return err
	}
	if len(f.args) != 2 || f.args[0] != "add" {
		return usageError("usage: ctxfs space add NAME [--group G] [--root DIR | --store DIR]")
	}
	_, hasStore := f.values["store"]
	_, hasRoot := f.values["root"]
	if hasStore && hasRoot {
		return usageError("ctxfs space add: give --root (through the mount) or --store (the store itself), not both")
	}
	name, gid := f.args[1], -1
	if !abi.ValidName(name) {
		return usageError(fmt.Sprintf("ctxfs space add: invalid space name %q", name))
	}
	if g := f.get("group", ""); g != "" {
		if gid, err = lookupGroup(g); err != nil {
			return err
		}
	}
	if hasStore {
		err = addSpaceInStore(f.get("store", ""), name, gid)
	} else {
		root, aerr := f.absFlag("root", defaultRoot())
		if aerr != nil {
			return aerr
		}
		err = addSpaceThroughMount(root, name, gid)
	}
	if err != nil {
		return err
	}
	fmt.Printf("ctxfs: space %s added\n", name)
	return nil
}

// addSpaceInStore makes the space in the store itself.
func addSpaceInStore(store, name string, gid int) error {
	store, err := filepath.Abs(store)
	if err != nil {
		return err
	}
	e, err := session.NewSpaces(store)
	if err != nil {
		return err
	}
	defer e.Close()
	return e.AddSpace(name, gid, 0o770|os.ModeSetgid)
}

// addSpaceThroughMount makes the space as root would by hand (SPEC 2):
// mkdir <root>/shared/NAME, then its group.
func addSpaceThroughMount(root, name string, gid int) error {
	shared := filepath.Join(root, "shared")
	if !ctxfs.IsFUSEMount(shared) {
		return fmt.Errorf("no ctxfs serves %s: start it (ctxfs mount --root %s), or name the store with --store", root, root)
	}
	dir := filepath.Join(shared, name)
	if err := os.Mkdir(dir, 0o770); err != nil {
		return err
	}
	if gid >= 0 {
		return os.Chown(dir, -1, gid)
	}
	return nil
}

// lookupGroup accepts a group name or number.
func lookupGroup(g string) (int, error) {
	if n, err := strconv.Atoi(g); err == nil {
		return n, nil
	}
	grp, err := user.LookupGroup(g)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(grp.Gid)
}
