package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/ctxfs/ctxfs/internal/mountinfo"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// A test's ext4 on a loop device (smallExt4) is detached in t.Cleanup; a
// test binary killed by CI, or panicking on go test's -timeout, runs none,
// and the mount and the device stay. The image's name carries the
// binary's PID, so that the next run can tell the leftovers of a binary
// that ended from a running one's.

// loopImageOfRun matches the image names of loopImageName; its group is
// the PID.
var loopImageOfRun = regexp.MustCompile(`^ctxfs-ext4-([0-9]+)\.img( \(deleted\))?$`)

// loopImageName is the name of this binary's loop images.
func loopImageName() string { return fmt.Sprintf("ctxfs-ext4-%d.img", os.Getpid()) }

// removeDeadLoops unmounts the filesystems of the loop devices whose image
// a test binary that no longer runs made, and detaches them; it returns
// the devices detached. Root only (the devices are root's).
func removeDeadLoops() []string {
	if os.Geteuid() != 0 {
		return nil
	}
	backs, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var detached []string
	for _, back := range backs {
		b, _ := os.ReadFile(back)
		if !testkit.OfEndedRun(loopImageOfRun, filepath.Base(strings.TrimSpace(string(b)))) {
			continue
		}
		sys := filepath.Dir(filepath.Dir(back)) // /sys/block/loopN
		unmountDevice(sys)
		dev := "/dev/" + filepath.Base(sys)
		if exec.Command("losetup", "-d", dev).Run() == nil {
			detached = append(detached, dev)
		}
	}
	return detached
}

// unmountDevice detaches every mount of the block device sys (a
// /sys/block directory) in this mount namespace.
func unmountDevice(sys string) {
	b, _ := os.ReadFile(filepath.Join(sys, "dev")) // MAJOR:MINOR
	var dev [2]uint64
	if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "%d:%d", &dev[0], &dev[1]); err != nil {
		return
	}
	mounts, _ := mountinfo.Read()
	for _, m := range mounts {
		if m.Dev == dev {
			exec.Command("umount", "-l", m.Dir).Run()
		}
	}
}
