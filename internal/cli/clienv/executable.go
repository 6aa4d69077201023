package clienv

import (
	"path/filepath"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
)

// OthersCanChange refuses (EACCES) an executable that anyone besides root
// and owner could replace: the file, or a directory above it. `ctx agent
// add` refuses to name it; `ctx doctor` names it and never runs it.
func OthersCanChange(real string, owner uint32) error {
	for p := real; ; p = filepath.Dir(p) {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			return abi.Errorf(abi.Errno(err), "", "%s: %v", p, err)
		}
		sticky := st.Mode&syscall.S_ISVTX != 0 && p != real
		if st.Uid != 0 && st.Uid != owner || st.Mode&0o022 != 0 && !sticky {
			return abi.Errorf(syscall.EACCES, "", "%s can be changed by another user than root (owner uid %d, mode %04o): every user's runs would run what is put there; install the CLI where only root can write", p, st.Uid, st.Mode&0o7777)
		}
		if p == "/" {
			return nil
		}
	}
}
