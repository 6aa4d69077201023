package session

import (
	"path"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/layout"
)

// Imported is a session made whole elsewhere (ctx agent import, SPEC 16;
// package session/importer builds it from a request): the engine judges
// only what every session's files must be, and writes it in one step.
type Imported struct {
	UUID     string        // the session's name and its index/by-uuid key
	Cwd      string        // the session's cwd file
	Meta     *proto.Object // fields of meta.json beyond client and scope
	Latest   string        // latest.md
	Messages []byte        // messages.jsonl, whole lines
	Events   []byte        // events.jsonl, whole lines
}

// CreateImported makes im as a new private session of agent t in uid's
// home: every line judged as an appended one (EINVAL), the session's
// directory and both logs made in a hidden directory and renamed into
// place, so that a refusal or a crash leaves nothing. Only root may name
// another uid (EACCES). A uuid already in the home's index/by-uuid, or a
// session of that name, is EEXIST, nothing written. The by-uuid entry is
// written after the rename: a crash between the two leaves the session
// without it (a later import of the uuid is still EEXIST: the name is
// taken); an error after the rename is returned once the index names the
// session.
func (e *Engine) CreateImported(c layout.Caller, uid uint32, t Target, im *Imported) error {
	if c.Uid != 0 && uid != c.Uid {
		return abi.Errorf(syscall.EACCES, "import", "only root imports into another uid's home")
	}
	ct := layout.Container{Kind: t.Kind, Owner: t.Owner, Home: layout.PrivateHome(uid)}
	if t.Kind != abi.KindAgent || !ct.Valid() || !abi.ValidUUID(im.UUID) || !abi.ValidSessionName(im.UUID) {
		return abi.Errorf(syscall.EINVAL, "import", "an import names an agent and a session uuid")
	}
	if err := abi.CheckCwd(im.Cwd); err != nil {
		return err
	}
	if err := e.EnsureHome(uid); err != nil {
		return err
	}
	r := layout.Ref{Container: ct, Name: im.UUID}
	if err := e.checkNotImported(r); err != nil {
		return err
	}
	start := filled{cwd: im.Cwd, latest: im.Latest, meta: im.Meta, entry: true,
		logs: map[string][]byte{abi.FileMessages: im.Messages, abi.FileEvents: im.Events}}
	own := layout.PrivateOwner(uid, storefs.PrimaryGid(uid))
	// The agent's root/, as a mkdir of the agent makes it: the client
	// keeps the CLI's file under its home/agent for the resume. Made
	// before the session, so that its failure (a full disk) leaves no
	// session the index does not name, which a second import of the uuid
	// would find taken (EEXIST). It makes the agent when the home has
	// none of that name: one of the home's agents (makeAgent), and
	// nothing is made when the home has no room for the session either
	// (roomFor), nor when its history has no room for the session's
	// bytes: judged first, they left the agent made by a refused import.
	if err := e.historyRoom(ct.Home, createdSize(ct.Home, start)); err != nil {
		return &abi.Error{Op: "import", Path: r.Name, Errno: abi.Errno(err), Msg: abi.Message(err)}
	}
	held, err := e.roomFor(r, 2) // the session and its by-uuid entry
	if err != nil {
		return err
	}
	defer held.give() // what createFilled did not take
	start.held = held
	rootRel := ct.ChrootRel(uid)
	mk := func() error { return layout.MkdirAll(e.root, rootRel, own) }
	if err = e.makeAgent(ct.Home, path.Dir(rootRel), mk); err != nil {
		return err
	}
	// The session and its by-uuid entry are charged to the names bound
	// together, before anything is made (start.entry): the entry refused
	// EDQUOT once the session was made left a session no entry names.
	made, err := e.createFilled(r, own, start)
	if !made {
		return err
	}
	// In place, even if its directory's sync failed after the rename: the
	// index names it, and the error is still the import's.
	x, xerr := e.Index(ct)
	if xerr != nil {
		return xerr
	}
	x.Add(r.Name)
	if uerr := x.SetEntryReserved(abi.IndexByUUID, im.UUID, r.Name); err == nil {
		err = uerr
	}
	e.changed(ct.Rel())
	e.cfg.Log.Info("import", "agent", t.Owner, "session", r.Name, "home", ct.Home, "uid", c.Uid, "bytes", len(im.Messages))
	return err
}

// checkNotImported is EEXIST when r's uuid is in its container's by-uuid
// index or names a session there. A container not made yet holds
// neither, and is not made for the question.
func (e *Engine) checkNotImported(r layout.Ref) error {
	if !e.isDir(r.Container.Rel()) {
		return nil
	}
	x, err := e.Index(r.Container)
	if err != nil {
		return err
	}
	if name, err := x.Lookup(abi.IndexByUUID, r.Name); err == nil || e.sessionExists(r) {
		if name == "" {
			name = r.Name
		}
		return &abi.Error{Op: "import", Path: r.Name, Errno: syscall.EEXIST, Msg: "already imported, as session " + name}
	}
	return nil
}
