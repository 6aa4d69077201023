// Package mountinfo reads the kernel's table of mounts
// (/proc/self/mountinfo): what the server's stale-mount cleaning and
// watchdog, and `ctx doctor`, need to know of a mount.
package mountinfo

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// FSTypeCtxfs is what the kernel lists as the type of a ctxfs mount.
const FSTypeCtxfs = "fuse.ctxfs"

// Mount is one line of mountinfo.
type Mount struct {
	ID     uint64    // the kernel's mount id, as /proc/PID/fdinfo/N's mnt_id names it
	Dir    string    // mount point, unescaped
	Dev    [2]uint64 // major, minor: for FUSE, the connection's device
	FSType string    // "fuse.ctxfs", "fuse", "ext4", …
	Source string    // unescaped
	Super  []string  // super block options: "rw", "user_id=0", …
}

// Read lists the mounts of this process's mount namespace, in the
// kernel's order: of two mounts at one directory, the later is on top.
func Read() ([]Mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(f)
}

// Parse reads mountinfo lines:
//
//	id parent major:minor root mountpoint options [optional...] - fstype source super
//
// Lines of another shape are skipped.
func Parse(r io.Reader) ([]Mount, error) {
	var ms []Mount
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if m, ok := parseLine(sc.Text()); ok {
			ms = append(ms, m)
		}
	}
	return ms, sc.Err()
}

func parseLine(line string) (m Mount, ok bool) {
	fields := strings.Fields(line)
	sep := -1
	for i, f := range fields {
		if f == "-" {
			sep = i
			break
		}
	}
	if sep < 5 || sep+3 >= len(fields) {
		return m, false
	}
	if _, err := fmt.Sscanf(fields[2], "%d:%d", &m.Dev[0], &m.Dev[1]); err != nil {
		return m, false
	}
	id, err := strconv.ParseUint(fields[0], 10, 64)
	if err != nil {
		return m, false
	}
	m.ID = id
	m.Dir = unescape(fields[4])
	m.FSType = fields[sep+1]
	m.Source = unescape(fields[sep+2])
	m.Super = strings.Split(fields[sep+3], ",")
	return m, true
}

// Top returns the topmost mount at dir (the last one listed there).
func Top(ms []Mount, dir string) (Mount, bool) {
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].Dir == dir {
			return ms[i], true
		}
	}
	return Mount{}, false
}

// Holding returns the topmost mount that holds path (an absolute path
// without symlinks): the one at the deepest directory of path's.
func Holding(ms []Mount, path string) (Mount, bool) {
	best, found := Mount{}, false
	for _, m := range ms { // in order: a later mount at a directory is on top
		if (path == m.Dir || m.Dir == "/" || strings.HasPrefix(path, m.Dir+"/")) && (!found || len(m.Dir) >= len(best.Dir)) {
			best, found = m, true
		}
	}
	return best, found
}

// Has reports whether m's super block options include opt.
func (m Mount) Has(opt string) bool {
	for _, o := range m.Super {
		if o == opt {
			return true
		}
	}
	return false
}

// IsFUSE reports whether m is a FUSE mount ("fuse" or "fuse.NAME").
func (m Mount) IsFUSE() bool {
	return m.FSType == "fuse" || strings.HasPrefix(m.FSType, "fuse.")
}

// UserID is the uid that made a FUSE mount (its user_id option): the uid
// its server runs as.
func (m Mount) UserID() (int, bool) {
	for _, o := range m.Super {
		if v, ok := strings.CutPrefix(o, "user_id="); ok {
			n, err := strconv.Atoi(v)
			return n, err == nil
		}
	}
	return 0, false
}

// unescape undoes mountinfo's \ooo escapes (\040 for a space; tabs,
// newlines and backslashes in paths likewise).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
