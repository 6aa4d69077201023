package main

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/mountlife"
	"github.com/ctxfs/ctxfs/session/layout"
)

func newSpaceCommand() *cobra.Command {
	space := &cobra.Command{
		Use:     "space",
		Short:   "Manage shared spaces (space add)",
		Long:    "Space groups the commands on shared spaces: ROOT/shared/NAME, sessions a group of users share.",
		Example: `  ctxfs space add team --group developers`,
		Args:    unknownSubcommand,
		RunE:    missingSubcommand,
	}
	space.SuggestionsMinimumDistance = 2
	space.AddCommand(newSpaceAddCommand())
	return space
}

// newSpaceAddCommand is `ctxfs space add NAME [--group G] [--root DIR |
// --store DIR]`. With --store it works on that store directly (whether or
// not a server serves it); otherwise it works through the mount at --root
// (default $CTX_ROOT or /ctx), so it always reaches the store that the
// server there uses. Naming both is a usage error: they could disagree.
func newSpaceAddCommand() *cobra.Command {
	var group, store, root string
	cmd := &cobra.Command{
		Use:   "add NAME",
		Short: "Create the shared space NAME, for a group",
		Long: `Add creates the shared space NAME (ROOT/shared/NAME), setgid, readable and
writable by its group. Without --store it works through the mount at --root,
as root would by hand (mkdir, then chgrp), so that it reaches the store the
server there uses; it fails when nothing serves that root. With --store it
works on that store directly, served or not. --root and --store together
are refused.`,
		Example: `  ctxfs space add team --group developers
  ctxfs space add team --group 1234 --store /var/lib/ctxfs`,
		Args: exactArgs(1, "the name of the space"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("store") && cmd.Flags().Changed("root") {
				return usageError("space add: give --root (through the mount) or --store (the store itself), not both")
			}
			name, gid := args[0], -1
			if !abi.ValidName(name) {
				return usageError(fmt.Sprintf("space add: invalid space name %q", name))
			}
			var err error
			if group != "" {
				if gid, err = lookupGroup(group); err != nil {
					return err
				}
			}
			if cmd.Flags().Changed("store") {
				err = addSpaceInStore(store, name, gid)
			} else {
				dir, aerr := absOr(root, defaultRoot())
				if aerr != nil {
					return aerr
				}
				err = addSpaceThroughMount(dir, name, gid)
			}
			if err != nil {
				return err
			}
			fmt.Printf("ctxfs: space %s added\n", name)
			return nil
		},
	}
	cmd.Flags().StringVar(&group, "group", "", "the `GROUP` (name or number) whose members share the space")
	cmd.Flags().StringVar(&root, "root", "", "work through the mount at this root `DIR` (default $CTX_ROOT, else /ctx)")
	cmd.Flags().StringVar(&store, "store", "", "work on the store in this `DIR` directly")
	cmd.MarkFlagDirname("root")
	cmd.MarkFlagDirname("store")
	return cmd
}

// addSpaceInStore makes the space in the store itself.
func addSpaceInStore(store, name string, gid int) error {
	store, err := filepath.Abs(store)
	if err != nil {
		return err
	}
	root, err := layout.OpenStore(store)
	if err != nil {
		return err
	}
	defer root.Close()
	return layout.AddSpace(root, name, gid, 0o770|os.ModeSetgid)
}

// addSpaceThroughMount makes the space as root would by hand (SPEC 2):
// mkdir <root>/shared/NAME, then its group.
func addSpaceThroughMount(root, name string, gid int) error {
	shared := filepath.Join(root, "shared")
	if !mountlife.IsFUSEMount(shared) {
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
