package doctor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/client"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/internal/mountinfo"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/proto"
)

const Help = `Checks what ctx and ctxfs need, and prints one line per check: ok, or the
problem and its fix. The mount root exists; home and shared are ctxfs mounts
that answer; each definition is valid and its socket answers; each coding-agent CLI
agent's executable is there and its --version (run as you, with a HOME of
its own, within 15 s) is not older than the version ctxfs maps; /dev/fuse is
there and usable by the server's uid (the mount root's owner when none runs); whether /etc/fuse.conf has user_allow_other (a note: ctxfs
never needs it, a server that is not root serves its own user alone); the store ($CTXFS_STORE, else the default) and the directories above it
can be changed by no one but the server. --json: one object per check
(check, ok, problem, fix, note). Exit 0 when all is well, 1 when a problem
is found.
`

// doctorProbe bounds each probe of something that may hang: a stat of a
// mount whose server stopped answering, a ping of a socket.
const doctorProbe = 2 * time.Second

// Paths the doctor reads: the host's, in one place.
const (
	fuseDevice = "/dev/fuse"
	fuseConf   = "/etc/fuse.conf"
)

// finding is the outcome of one check.
type finding struct {
	Check   string `json:"check"`
	OK      bool   `json:"ok"`
	Problem string `json:"problem,omitempty"`
	Fix     string `json:"fix,omitempty"`
	Note    string `json:"note,omitempty"`
}

// doctor holds what the checks learn from one another.
type doctor struct {
	e     *clienv.Env
	root  string
	found []finding
	// serverUid is the uid of the server of the home mount, -1 when no
	// ctxfs mount was found there.
	serverUid int
	mountsOK  bool // both mounts are ctxfs and answer
}

func (d *doctor) ok(check, note string) {
	d.found = append(d.found, finding{Check: check, OK: true, Note: note})
}

func (d *doctor) problem(check, problem, fix string) {
	d.found = append(d.found, finding{Check: check, Problem: problem, Fix: fix})
}

func Run(e *clienv.Env, p *clienv.Parsed) int {
	d := &doctor{e: e, root: abi.RootFromEnv(e.Getenv), serverUid: -1}
	d.checkRoot()
	d.checkMounts()
	d.checkRootOwners()
	d.checkDefinitions()
	d.checkCLIs()
	d.checkDevice()
	d.checkAllowOther()
	d.checkStore()
	problems := d.report(e.Stdout, p.On("json"))
	if problems > 0 {
		return clienv.ExitFailed
	}
	return clienv.ExitOK
}

// report prints the findings and returns how many are problems.
func (d *doctor) report(w io.Writer, asJSON bool) int {
	problems := 0
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, f := range d.found {
		if !f.OK {
			problems++
		}
		switch {
		case asJSON:
			enc.Encode(f)
		case f.OK && f.Note != "":
			fmt.Fprintf(w, "ok: %s (%s)\n", f.Check, f.Note)
		case f.OK:
			fmt.Fprintf(w, "ok: %s\n", f.Check)
		default:
			fmt.Fprintf(w, "problem: %s: %s\n  fix: %s\n", f.Check, f.Problem, f.Fix)
		}
	}
	if !asJSON {
		if problems == 0 {
			fmt.Fprintln(w, "no problems found")
		} else {
			fmt.Fprintf(w, "%d problem(s) found\n", problems)
		}
	}
	return problems
}

// mountCmd is the command that mounts this root.
func (d *doctor) mountCmd() string { return "ctxfs mount --root " + d.root }

// restartCmd stops the server of this root and starts it again.
func (d *doctor) restartCmd() string { return "ctxfs umount --root " + d.root + "; " + d.mountCmd() }

func (d *doctor) checkRoot() {
	check := "mount root " + d.root
	st, err := os.Stat(d.root)
	switch {
	case err == nil && st.IsDir():
		d.ok(check, "")
	case err == nil:
		d.problem(check, "not a directory", "remove it, or set CTX_ROOT to the mount root in use")
	case errors.Is(err, fs.ErrNotExist):
		d.problem(check, "does not exist", "start the server: "+d.mountCmd()+" (or set CTX_ROOT to the mount root in use)")
	default:
		d.problem(check, errText(err), "make it reachable for your uid (chmod 0755 on it and the directories above it)")
	}
}

// checkRootOwners checks, as ctxfs mount does before it serves, that no
// one besides root and the server's uid can change the mount root, its
// agent/ and model/ directories, or a directory above them.
func (d *doctor) checkRootOwners() {
	check := "owners of " + d.root
	owner := d.serverUid
	if owner < 0 {
		owner = d.e.Uid // no server: you are the one who would start it
	}
	err := storefs.CheckRoot(d.root, uint32(owner))
	var open *storefs.OpenToOthersError
	var link *storefs.SymlinkError
	switch {
	case err == nil:
		d.ok(check, "only root and the server can change them")
	case errors.As(err, &open):
		d.problem(check, open.Problem(), open.Fix())
	case errors.As(err, &link):
		d.problem(check, link.Error(), "give the server the real directory (ctxfs mount --root DIR), or replace the symlink "+link.Link+" by a directory")
	default:
		d.problem(check, errText(err), "make the mount root and the directories above it reachable (chmod 0755)")
	}
}

// checkMounts checks home and shared: a ctxfs mount each, whose server
// answers a stat within doctorProbe.
func (d *doctor) checkMounts() {
	mounts, err := mountinfo.Read()
	if err != nil {
		d.problem("mounts", "cannot read /proc/self/mountinfo: "+errText(err), "mount /proc")
		return
	}
	real := d.root
	if r, err := filepath.EvalSymlinks(d.root); err == nil {
		real = r // mountinfo lists real paths
	}
	d.mountsOK = true
	for _, top := range []string{"home", "shared"} {
		if !d.checkMount(mounts, filepath.Join(real, top)) {
			d.mountsOK = false
		}
	}
}

func (d *doctor) checkMount(mounts []mountinfo.Mount, dir string) bool {
	check := "mount " + dir
	m, ok := mountinfo.Top(mounts, dir)
	switch {
	case !ok:
		d.problem(check, "not mounted: the server is not running", "start it: "+d.mountCmd())
		return false
	case m.FSType != mountinfo.FSTypeCtxfs:
		d.problem(check, fmt.Sprintf("a %s mount, not ctxfs", m.FSType), "unmount it (umount "+dir+"), then "+d.mountCmd())
		return false
	}
	uid, hasUid := m.UserID()
	if hasUid && strings.HasSuffix(dir, "/home") {
		d.serverUid = uid
	}
	err, done := within(doctorProbe, func() error { _, err := os.Stat(dir); return err })
	switch {
	case !done:
		d.problem(check, fmt.Sprintf("its server does not answer within %v (hung)", doctorProbe),
			"stop the server (ctxfs umount --root "+d.root+", or umount -l "+dir+"), then "+d.mountCmd())
		return false
	case errors.Is(err, syscall.ENOTCONN) || errors.Is(err, syscall.ECONNABORTED):
		d.problem(check, "its server is gone (ENOTCONN): a stale mount", "start the server again: "+d.mountCmd()+" (it cleans the stale mount first)")
		return false
	}
	note := "ctxfs"
	if hasUid {
		note = fmt.Sprintf("ctxfs, server uid %d", uid)
	}
	d.ok(check, note)
	return true
}

// within runs f and waits for it at most limit; done is false when it did
// not return in time (it is left to finish, or hang, on its own).
func within(limit time.Duration, f func() error) (err error, done bool) {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	select {
	case err := <-ch:
		return err, true
	case <-time.After(limit):
		return nil, false
	}
}

// checkDefinitions checks each definition with the server's loader, and
// its socket with a ping.
func (d *doctor) checkDefinitions() {
	defs, err := definitions(d.root)
	if err != nil {
		d.problem("definitions", "cannot list "+filepath.Join(d.root, "agent")+" and "+filepath.Join(d.root, "model")+": "+errText(err),
			"make them readable directories (chmod 0755)")
		return
	}
	for _, def := range defs {
		check := "definition " + def.Kind + " " + def.Name
		if def.State == "ok" {
			d.ok(check, "")
		} else {
			d.problem(check, "invalid: "+def.Error, "correct or remove the file it names (ctx agent list shows every definition's state)")
		}
	}
	if !d.mountsOK && !anyListens(defs) {
		// One cause, said once: a server that is not running listens on
		// no socket (those a stopped server left refuse connections).
		d.problem("sockets", fmt.Sprintf("none of the %d definitions has a socket that answers: the server is not running", len(defs)), "start it: "+d.mountCmd())
		return
	}
	d.checkSockets(defs)
}

// checkSockets checks that each definition has a socket that answers,
// and that no socket is left whose definition is gone. A definition made
// or removed a moment ago is given client.SocketWait for the server to
// catch up (it does so at once, but the doctor may be run right after a
// mkdir or an rm).
func (d *doctor) checkSockets(defs []definition) {
	stray := socketsWithoutDefinition(d.root)
	if d.mountsOK {
		stray = awaitSockets(d.root, defs, stray)
	}
	for _, def := range defs {
		d.checkSocket(def)
	}
	for _, p := range stray {
		d.checkStraySocket(p)
	}
}

// awaitSockets waits at most client.SocketWait, polling, until every
// definition has its socket (setting defs[i].Socket) and no socket is left
// without its definition; it returns the sockets still without one.
func awaitSockets(root string, defs []definition, stray []string) []string {
	deadline := time.Now().Add(client.SocketWait)
	for {
		waiting := len(stray) > 0
		for i := range defs {
			if !defs[i].Socket {
				defs[i].Socket = clienv.IsSocket(defs[i].path)
				waiting = waiting || !defs[i].Socket
			}
		}
		if !waiting || time.Now().After(deadline) {
			return stray
		}
		time.Sleep(50 * time.Millisecond)
		stray = socketsWithoutDefinition(root)
	}
}

// socketsWithoutDefinition lists the sockets under root whose
// definition is not there.
func socketsWithoutDefinition(root string) []string {
	var stray []string
	for _, sock := range def.UndefinedSockets(root) {
		stray = append(stray, sock.Path)
	}
	return stray
}

// checkStraySocket reports a socket whose definition is gone. The server
// removes such a socket as soon as the definition goes, so one that stays
// was left by a server that stopped, or is one it still serves (a bug:
// a restart clears it).
func (d *doctor) checkStraySocket(p string) {
	check := "socket " + p
	problem := "no definition: " + strings.TrimSuffix(p, abi.SocketSuffix) + abi.DefinitionSuffix + " does not exist"
	err, done := within(doctorProbe, func() error {
		c, err := client.Dial(context.Background(), p)
		if err == nil {
			c.Close()
		}
		return err
	})
	if done && err == nil {
		d.problem(check, problem+", yet a server listens there", "restart the server ("+d.restartCmd()+")")
		return
	}
	d.problem(check, problem+": left behind by a server that stopped", "rm "+p)
}

// anyListens reports whether something listens on a definition's socket.
func anyListens(defs []definition) bool {
	for _, def := range defs {
		if !def.Socket {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), doctorProbe)
		c, err := client.Dial(ctx, def.path)
		cancel()
		if err == nil {
			c.Close()
			return true
		}
	}
	return false
}

func (d *doctor) checkSocket(def definition) {
	check := "socket " + def.path
	if !def.Socket {
		d.missingSocket(check, def)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), doctorProbe)
	defer cancel()
	frames, err := client.Call(ctx, def.path, proto.NewObject("op", proto.OpPing))
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		d.problem(check, "refuses connections: left by a server that stopped", "start the server: "+d.mountCmd())
	case ctx.Err() != nil:
		d.problem(check, fmt.Sprintf("no answer to ping within %v", doctorProbe), "restart the server ("+d.restartCmd()+")")
	case err != nil:
		d.problem(check, errText(err), "restart the server ("+d.restartCmd()+")")
	case len(frames) != 1 || frames[0].Type() != proto.FramePong:
		d.problem(check, "answers ping with something other than pong: not a ctxfs server", "stop what listens there, then "+d.mountCmd())
	default:
		d.ok(check, "answers ping")
	}
}

// missingSocket reports a definition without its socket: something else
// in its way, no server, or a server that did not make it (after
// client.SocketWait).
func (d *doctor) missingSocket(check string, def definition) {
	_, err := os.Lstat(def.path)
	switch {
	case err == nil:
		d.problem(check, "missing: something that is not a socket is in its way", "remove it (rm -r "+def.path+"); the server then makes the socket")
	case !d.mountsOK:
		d.problem(check, "missing", "start the server: "+d.mountCmd())
	default:
		d.problem(check, fmt.Sprintf("missing: the server made none within %v of the definition (it makes one at once)", client.SocketWait),
			"its log says why (ctxfs mount --log-file, or journalctl -u ctxfs); restart it to try again ("+d.restartCmd()+")")
	}
}

// checkDevice: a server needs /dev/fuse, a character device it can open
// for reading and writing.
func (d *doctor) checkDevice() {
	check := fuseDevice
	st, err := os.Stat(fuseDevice)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		d.problem(check, "missing", "load the fuse module (modprobe fuse); in a container, pass the device (docker run --device /dev/fuse)")
		return
	case err != nil:
		d.problem(check, errText(err), "make /dev/fuse reachable")
		return
	case st.Mode()&fs.ModeCharDevice == 0:
		d.problem(check, "not a character device", "remove it and load the fuse module (modprobe fuse), which makes the device")
		return
	}
	f, err := os.OpenFile(fuseDevice, os.O_RDWR, 0)
	if err == nil {
		f.Close()
		d.ok(check, "")
		return
	}
	cannot := fmt.Sprintf("uid %d cannot open it: %s", d.e.Uid, errText(err))
	if server, why := d.deviceUser(); server != d.e.Uid {
		// Only the server opens the device: your access does not matter.
		d.ok(check, cannot+"; not needed: "+why)
		return
	}
	d.problem(check, cannot,
		"run the server as root, or give users the device's usual mode: chmod 0666 /dev/fuse (in a container, also allow the device: --device /dev/fuse)")
}

// deviceUser is the uid that opens /dev/fuse, and why it is that one: the
// running server's; without one, the owner of the mount root, which ctxfs
// mount requires to be root or the server's uid (an admin's root is
// root's); without a root, the caller, who would start the server.
func (d *doctor) deviceUser() (int, string) {
	var st syscall.Stat_t
	switch {
	case d.serverUid == 0:
		return 0, "the server runs as root"
	case d.serverUid > 0:
		return d.serverUid, fmt.Sprintf("the server runs as uid %d", d.serverUid)
	case syscall.Stat(d.root, &st) == nil && st.Uid == 0:
		return 0, "the server is run by root (" + d.root + " is root's)"
	case syscall.Stat(d.root, &st) == nil:
		return int(st.Uid), fmt.Sprintf("the server is run by uid %d (%s is theirs)", st.Uid, d.root)
	}
	return d.e.Uid, ""
}

// checkAllowOther says whether /etc/fuse.conf has user_allow_other, which
// FUSE servers that are not root need to let other uids use their mounts.
// ctxfs does not: as root it mounts with allow_other itself, and as another
// user it serves that user alone (ctxfs mount refuses allow_other there), so
// this is a note, never a problem.
func (d *doctor) checkAllowOther() {
	check := fuseConf + " user_allow_other"
	uid := d.serverUid
	if uid < 0 {
		uid = d.e.Uid // no server: you are the one who would start it
	}
	if uid == 0 {
		d.ok(check, "not needed: the server runs as root")
		return
	}
	f, err := os.Open(fuseConf)
	if err == nil {
		defer f.Close()
		if allowsOther(f) {
			d.ok(check, "")
			return
		}
	}
	d.ok(check, fmt.Sprintf("not set; not needed: a server run by uid %d serves that user alone", uid))
}

// allowsOther reports whether a fuse.conf sets user_allow_other: the word
// alone on a line, outside comments.
func allowsOther(r io.Reader) bool {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if strings.TrimSpace(line) == "user_allow_other" {
			return true
		}
	}
	return false
}

// checkStore checks that only the server's uid can change the store: the
// store directory and what is at its top, and every directory above it.
// Symlinks are never followed below the store's own path.
func (d *doctor) checkStore() {
	store, owner := d.storePath()
	check := "store " + store
	real, err := filepath.EvalSymlinks(store) // as the server resolves it
	switch {
	case errors.Is(err, fs.ErrNotExist):
		d.ok(check, "not there: the server makes it at its first mount; with --store elsewhere, set CTXFS_STORE to check that one")
		return
	case err != nil:
		d.ok(check, "not checked: "+errText(err)+" (run ctx doctor as root)")
		return
	}
	before := len(d.found)
	d.checkStoreEntry(check, real, real, owner)
	for dir := filepath.Dir(real); ; dir = filepath.Dir(dir) {
		d.checkStoreParent(check, dir, owner)
		if dir == "/" {
			break
		}
	}
	note := d.checkStoreTop(check, real, owner)
	if len(d.found) == before {
		d.ok(check, note)
	}
	d.checkStoreWays(real, owner)
	d.checkStorePermissions(real)
}

// checkStorePermissions: a store on a FUSE filesystem (a MooseFS or
// GlusterFS client) is private only if the kernel checks its modes
// (default_permissions); without it the filesystem's daemon decides, and
// MooseFS's let other users look inside a 0700 store (docs/moosefs.md).
func (d *doctor) checkStorePermissions(store string) {
	check := "store permissions"
	ms, err := mountinfo.Read()
	if err != nil {
		d.ok(check, "not read: "+errText(err))
		return
	}
	m, ok := mountinfo.Holding(ms, store)
	switch {
	case !ok || !m.IsFUSE():
		d.ok(check, "checked by the kernel")
	case m.Has("default_permissions"):
		d.ok(check, m.FSType+" mounted default_permissions: checked by the kernel")
	default:
		d.problem(check, fmt.Sprintf("the store is on %s at %s, mounted without default_permissions: the kernel leaves permission checks to that filesystem's daemon, and other users may look inside the store", m.FSType, m.Dir),
			"mount that filesystem with -o default_permissions (for MooseFS: mfsmount -o default_permissions)")
	}
}

// checkStoreWays says which ways the store's filesystem makes the store
// use (storefs.Ways: renameat2's flags or their portable ways), as the
// server recorded them at its last mount (doctor never writes to probe);
// the record is the server's alone, so only its uid or root reads it.
func (d *doctor) checkStoreWays(store string, owner int) {
	check := "store ways"
	if os.Geteuid() != owner && os.Geteuid() != 0 {
		d.ok(check, "not read: run ctx doctor as the store's owner or root")
		return
	}
	r, err := storefs.Open(store)
	if err != nil {
		d.ok(check, "not read: "+errText(err))
		return
	}
	defer r.Close()
	ways, err := r.RecordedWays()
	switch {
	case err != nil:
		d.ok(check, "not read: "+errText(err))
	case ways == "":
		d.ok(check, "not known yet: the server records them when it mounts")
	default:
		d.ok(check, ways)
	}
}

// storePath is the store to check and the uid that must own it:
// $CTXFS_STORE or the default of SPEC section 1 for the server's uid (the
// mount's, else the caller's).
func (d *doctor) storePath() (string, int) {
	owner := d.serverUid
	if owner < 0 {
		owner = d.e.Uid
	}
	return abi.DefaultStore(owner, d.e.Getenv), owner
}

// checkStoreEntry checks the store directory or an entry at its top:
// owned by owner, and writable by no one else.
func (d *doctor) checkStoreEntry(check, store, path string, owner int) {
	st, err := os.Lstat(path)
	if err != nil {
		d.problem(check, path+": "+errText(err), "check the store: ctxfs fsck --store "+store)
		return
	}
	sys := st.Sys().(*syscall.Stat_t)
	isStore := path == store
	switch {
	case isStore && !st.IsDir():
		d.problem(check, path+" is not a directory", "move it away and give the server a store directory (--store)")
	case int(sys.Uid) != owner:
		d.problem(check, fmt.Sprintf("%s belongs to uid %d, not to the server's uid %d: that user can change the store behind the server", path, sys.Uid, owner),
			fmt.Sprintf("chown %d %s, then check the store: ctxfs fsck --store %s", owner, path, store))
	case st.Mode().Type() != fs.ModeSymlink && st.Mode().Perm()&0o022 != 0:
		fix := "chmod go-w " + path
		if isStore {
			fix = "chmod 0700 " + path + " (the store is the server's alone)"
		}
		d.problem(check, fmt.Sprintf("%s is writable by %s (mode %04o)", path, writers(st.Mode()), st.Mode().Perm()), fix)
	}
}

// checkStoreParent checks a directory above the store, as the server does
// before it opens the store: root's or the server's, and writable by no
// one else unless sticky (as /tmp is: no one may move another's entry).
func (d *doctor) checkStoreParent(check, dir string, owner int) {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		d.problem(check, dir+": "+errText(err), "make the directories above the store reachable")
		return
	}
	if who := storefs.OtherWriter(&st, uint32(owner)); who != "" {
		d.problem(check, fmt.Sprintf("%s, above the store, can be changed by %s, who could replace the store", dir, who),
			"chown root "+dir+" && chmod go-w "+dir+", or keep the store below directories only root can change (as "+abi.RootStore+" is)")
	}
}

// checkStoreTop checks the entries at the store's top; it returns a note
// when it cannot read them (a store is its server's alone: 0700).
func (d *doctor) checkStoreTop(check, store string, owner int) string {
	ents, err := os.ReadDir(store)
	if err != nil {
		return "its entries not checked: " + errText(err) + " (run ctx doctor as root)"
	}
	for _, ent := range ents {
		d.checkStoreEntry(check, store, filepath.Join(store, ent.Name()), owner)
	}
	return ""
}

// writers names who besides the owner may write, from a mode.
func writers(m fs.FileMode) string {
	switch {
	case m&0o022 == 0o022:
		return "its group and every user"
	case m&0o002 != 0:
		return "every user"
	}
	return "its group"
}

// errText is an error's errno name and text, for a finding.
func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return abi.ErrnoName(abi.Errno(err)) + ": " + err.Error()
}
