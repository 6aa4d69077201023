package session

import (
	"bytes"
	"strings"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/sealedlog"
)

// maxConversation bounds how much of messages.jsonl a model API run is
// given, from its end: about the largest context windows offered (1M
// tokens), and a run must not make the server hold a whole long history
// (times the quota of runs, this is what a uid can make the server hold).
const maxConversation = 4 << 20

// prompt is a model API run's request (SPEC 10; agent.NewPrompt): the
// merged AGENTS.md rules then meta.json's rule as the system prompt, and
// the session's conversation from messages.jsonl, in order.
func (s *sess) prompt(rules string) *agent.Prompt {
	system := rules
	if rule := s.metaString("rule"); rule != "" {
		system = strings.TrimLeft(system+"\n\n"+rule, "\n")
	}
	return agent.NewPrompt(system, s.conversationLog())
}

// metaString is meta.json's string key, "" when there is none or it
// cannot be read.
func (s *sess) metaString(key string) string {
	obj, err := s.metaObject()
	if err != nil {
		return ""
	}
	return obj.Str(key)
}

// metaObject is the session's meta.json as stored; an error when it
// cannot be read or is not a JSON object. A temp session has none
// (ENOENT).
func (s *sess) metaObject() (*proto.Object, error) {
	if s.rel == "" {
		return nil, syscall.ENOENT
	}
	b, err := s.e.root.ReadFile(s.file(abi.FileMeta), maxRulesBytes)
	if err != nil {
		return nil, err
	}
	return proto.ParseObject(bytes.TrimSpace(b), false)
}

// conversationLog is the last maxConversation bytes of messages.jsonl,
// from the first whole line: a line cut by that bound is left out.
func (s *sess) conversationLog() []byte { return s.logTail(s.msgs) }

// logTail is the last maxConversation bytes of a log, from the first whole
// line.
func (s *sess) logTail(log *sealedlog.Log) []byte {
	size := log.Size()
	off := max(0, size-maxConversation)
	buf := make([]byte, size-off)
	n, _ := log.ReadAt(buf, off)
	buf = buf[:n]
	if off > 0 {
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			buf = buf[i+1:]
		}
	}
	return buf
}
