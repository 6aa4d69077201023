package clienv

import (
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
)

// OthersCanChange refuses (EACCES) an executable that anyone besides root
// and owner could replace: the file, or a directory above it (a sticky
// directory root or owner holds is fine). The rule is storefs's, the one
// the server holds a definition's way to, so the two cannot drift. `ctx
// agent add` refuses to name it; `ctx doctor` names it and never runs it.
func OthersCanChange(real string, owner uint32) error {
	for p := real; ; p = filepath.Dir(p) {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			return abi.Errorf(abi.Errno(err), "", "%s: %v", p, err)
		}
		who := storefs.OtherWriter(&st, owner)
		if p == real {
			who = storefs.AnyOtherWriter(&st, owner)
		}
		if who != "" {
			return abi.Errorf(unix.EACCES, "", "%s can be changed by another user than root (by %s; owner uid %d, mode %04o): every user's runs would run what is put there; install the CLI where only root can write", p, who, st.Uid, st.Mode&0o7777)
		}
		if p == "/" {
			return nil
		}
	}
}
