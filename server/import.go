package server

import (
	"bufio"
	"bytes"
	"net"

	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session"
	"github.com/ctxfs/ctxfs/session/importer"
	"github.com/ctxfs/ctxfs/session/layout"
)

// serveImport answers an import request (package session/importer): the
// messages follow the request line on the same connection, each line
// within quota.RequestDeadline and at most one request's size; the
// answer is one frame.
func (s *Sockets) serveImport(e *session.Engine, conn net.Conn, w *bufio.Writer, c layout.Caller, t session.Target, req *proto.Request, line []byte, br *bufio.Reader) {
	next := func() ([]byte, error) {
		raw, err := readWithin(conn, br)
		return bytes.TrimSuffix(raw, []byte("\n")), err
	}
	f, err := importer.Serve(e, c, t, bytes.TrimSuffix(line, []byte("\n")), next)
	if err != nil {
		s.refuse(e, conn, w, err, c, t, req)
		return
	}
	writeFrame(conn, w, f)
	flush(conn, w)
}
