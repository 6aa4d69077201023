package mountlife

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// DevFuse is the FUSE device.
const DevFuse = "/dev/fuse"

// fusermount mounts and unmounts for a user (fuse3's setuid helper).
const fusermount = "fusermount3"

// CanMount says, before anything starts, what this process lacks to
// mount and how to get it. Root mounts directly and needs only the
// device. Another user mounts through fusermount3 (fuse3), which opens
// /dev/fuse as that user: so the user needs both, with read and write
// access to the device.
func CanMount() error {
	var problems []string
	st, err := os.Stat(DevFuse)
	switch {
	case errors.Is(err, iofs.ErrNotExist):
		problems = append(problems, DevFuse+" does not exist: load the FUSE module (modprobe fuse); in a container, pass the device in (docker run --device /dev/fuse)")
	case err != nil:
		problems = append(problems, err.Error())
	}
	uid := os.Geteuid()
	if uid != 0 {
		if _, err := exec.LookPath(fusermount); err != nil {
			problems = append(problems, "fusermount3 not found in $PATH: install fuse3 (apt install fuse3, dnf install fuse3)")
		}
		if st != nil && unix.Access(DevFuse, unix.R_OK|unix.W_OK) != nil {
			problems = append(problems, devFuseAccess(st, uid))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	if uid != 0 {
		problems = append(problems, "or mount as root")
	}
	return fmt.Errorf("uid %d cannot mount FUSE: %s", uid, strings.Join(problems, "; "))
}

// devFuseAccess is the fix for a user who may not open /dev/fuse: the
// mode distributions ship, or a group.
func devFuseAccess(st os.FileInfo, uid int) string {
	owner, group := "?", "?"
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		owner, group = strconv.Itoa(int(sys.Uid)), strconv.Itoa(int(sys.Gid))
		if u, err := user.LookupId(owner); err == nil {
			owner = u.Username
		}
		if g, err := user.LookupGroupId(group); err == nil {
			group = g.Name
		}
	}
	return fmt.Sprintf("%s is %s %s:%s, which uid %d may not read and write (fusermount3 opens it as the user): "+
		"as root, chmod 0666 %s (the mode most distributions ship; a udev rule KERNEL==\"fuse\", MODE=\"0666\" keeps it), "+
		"or chgrp fuse %s && chmod 0660 %s and add the user to the group fuse",
		DevFuse, lsMode(st.Mode()), owner, group, uid, DevFuse, DevFuse, DevFuse)
}

// lsMode writes a mode as ls -l does (crw-rw-rw-), not as Go does
// (Dcrw-rw-rw-).
func lsMode(m iofs.FileMode) string {
	kind := "-"
	switch {
	case m&iofs.ModeCharDevice != 0:
		kind = "c"
	case m&iofs.ModeDevice != 0:
		kind = "b"
	case m.IsDir():
		kind = "d"
	}
	return kind + m.Perm().String()[1:]
}
