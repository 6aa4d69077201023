package main

import (
	"fmt"
	"os"
	"os/user"
	"strconv"

	"github.com/ctxfs/ctxfs/session"
)

// cmdSpace creates a shared space: `ctxfs space add NAME --group G`. It
// works on the store directly, so it works whether or not a server runs.
func cmdSpace(args []string) error {
	f, err := parseFlags(args, []string{"group", "store", "root"}, nil)
	if err != nil {
		return err
	}
	if len(f.args) != 2 || f.args[0] != "add" {
		return usageError("usage: ctxfs space add NAME [--group G]")
	}
	gid := -1
	if g := f.get("group", ""); g != "" {
		if gid, err = lookupGroup(g); err != nil {
			return err
		}
	}
	store, err := f.absFlag("store", defaultStore())
	if err != nil {
		return err
	}
	e, err := session.NewSpaces(store)
	if err != nil {
		return err
	}
	defer e.Close()
	if err := e.AddSpace(f.args[1], gid, 0o770|os.ModeSetgid); err != nil {
		return err
	}
	fmt.Printf("ctxfs: space %s added\n", f.args[1])
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
