package importer

import (
	"encoding/json"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/cli"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session"
	"github.com/ctxfs/ctxfs/session/layout"
)

// Marker is the field every imported line carries, naming the CLI it was
// imported from; an imported line has no "run".
const Marker = "imported"

// Header is the import request line: {"op":"import","from":CLI,
// "uuid":ID,"messages":N} and, optionally, "cwd" (the CLI's working
// directory, as its file says) and "uid" (root only: the home to import
// into).
type Header struct {
	From     string  `json:"from"`
	UUID     string  `json:"uuid"`
	Cwd      string  `json:"cwd"`
	UID      *uint32 `json:"uid"`
	Messages int     `json:"messages"`
}

// ParseHeader reads and checks the request line: EINVAL for a CLI that
// cannot be imported, a uuid of another shape, a bad cwd, no messages;
// EACCES for a uid that is not the caller's, unless the caller is root.
func ParseHeader(c layout.Caller, line []byte) (*Header, uint32, error) {
	var h Header
	if err := json.Unmarshal(line, &h); err != nil {
		return nil, 0, abi.Errorf(syscall.EINVAL, "import", "bad import request: %v", err)
	}
	if h.From != cli.ClaudeCode && h.From != cli.Codex {
		return nil, 0, abi.Errorf(syscall.EINVAL, "import", "cannot import %q sessions (only %s and %s)", h.From, cli.ClaudeCode, cli.Codex)
	}
	if !abi.ValidUUID(h.UUID) {
		return nil, 0, abi.Errorf(syscall.EINVAL, "import", "%q is not a session uuid", h.UUID)
	}
	if h.Cwd != "" {
		if err := abi.CheckCwd(h.Cwd); err != nil {
			return nil, 0, err
		}
	}
	if h.Messages < 1 {
		return nil, 0, abi.Errorf(syscall.EINVAL, "import", "an import holds at least one message")
	}
	uid := c.Uid
	if h.UID != nil {
		uid = *h.UID
	}
	if uid != c.Uid && c.Uid != 0 {
		return nil, 0, abi.Errorf(syscall.EACCES, "import", "only root imports into another uid's home")
	}
	return &h, uid, nil
}

// Serve reads the messages the header announced with next (each a line
// of at most one request's size, or the transport's error), holding their
// bytes against the caller's share of unfinished bytes until the session
// is made or refused, and makes the session. It returns the frame that
// answers the import.
func Serve(e *session.Engine, c layout.Caller, t session.Target, line []byte, next func() ([]byte, error)) (*proto.Object, error) {
	h, uid, err := ParseHeader(c, line)
	if err != nil {
		return nil, err
	}
	partial := e.Limits().Partial
	held := 0
	defer func() { partial.GiveN(c.Uid, held) }()
	var msgs []byte
	latest := ""
	for n := 1; n <= h.Messages; n++ {
		raw, err := next()
		if err != nil {
			return nil, err
		}
		// What is kept: the line, its marker and its uid stamp.
		kept := len(raw) + len(`,"`+Marker+`":"",`) + len(h.From) + len(`"uid":4294967295`)
		if err := partial.TakeN(c.Uid, kept); err != nil {
			return nil, err
		}
		held += kept
		msg, err := message(n, raw, h.From)
		if err != nil {
			return nil, err
		}
		if m := proto.MessageOf(msg); m.Role == "assistant" && m.Text() != "" {
			latest = m.Text() + "\n"
		}
		msgs = append(msgs, msg.Line()...)
	}
	im := &session.Imported{UUID: h.UUID, Cwd: h.Cwd, Latest: latest,
		Meta: proto.NewObject("cli", h.From, "cli_session", h.UUID)}
	if im.Cwd == "" {
		im.Cwd = "/"
	}
	if im.Messages, err = abi.StampWriter(msgs, c.Uid); err != nil {
		return nil, err
	}
	event := proto.NewObject("type", "import", "from", h.From, "uuid", h.UUID, "messages", h.Messages,
		"for_uid", uid, "ts", abi.TS(time.Now()))
	if im.Events, err = abi.StampWriter(event.Line(), c.Uid); err != nil {
		return nil, err
	}
	if err := e.CreateImported(c, uid, t, im); err != nil {
		return nil, err
	}
	return proto.NewObject("type", proto.FrameImported, "session", h.UUID, "uuid", h.UUID, "messages", h.Messages), nil
}

// message judges the n-th message line and marks it imported: one JSON
// object (no duplicate keys) of role user, assistant or tool, without a
// run id or a marker of its own. The logs judge it again as they take it.
func message(n int, raw []byte, from string) (*proto.Object, error) {
	bad := func(what string) error {
		return abi.Errorf(syscall.EINVAL, "import", "message %d: %s", n, what)
	}
	if err := abi.CheckLogLine(raw); err != nil {
		return nil, bad(err.Error())
	}
	msg, err := proto.ParseObject(raw, true)
	if err != nil {
		return nil, bad(err.Error())
	}
	switch {
	case msg.Str("role") != "user" && msg.Str("role") != "assistant" && msg.Str("role") != "tool":
		return nil, bad(`"role" is not user, assistant or tool`)
	case !msg.Has("content"):
		return nil, bad(`no "content"`)
	case msg.Has("run"):
		return nil, bad(`an imported message carries no "run"`)
	case msg.Has(Marker):
		return nil, bad(`"` + Marker + `" is the server's to set`)
	}
	msg.Set(Marker, from)
	return msg, nil
}
