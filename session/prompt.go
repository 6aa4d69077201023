package session

import (
	"strings"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent"
	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/agent/modelapi"
	"github.com/ctxfs/ctxfs/agent/prompt"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/sealedlog"
	"github.com/ctxfs/ctxfs/session/summary"
)

// maxConversation bounds how much of messages.jsonl a model API run is
// given, from its end: about the largest context windows offered (1M
// tokens), and a run must not make the server hold a whole long history
// (times the quota of runs, this is what a uid can make the server hold).
const maxConversation = 4 << 20

// prompt is a model API run's request (SPEC 10, 18; prompt.Memos.New): the
// merged AGENTS.md rules then meta.json's rule as the system prompt, the
// session's conversation from messages.jsonl after the summary's cursor
// (newest first, up to what the window holds), and context/summary.md
// read and written as the run's uid (session/summary). The request is
// the run's uid's and the session's (modelapi.Owner): what the provider
// keeps of it serves this session's next requests only.
func (rn *run) prompt(rules string) *prompt.Prompt {
	return rn.s.promptAs(rules, layout.Caller{Uid: rn.spec.Uid, Gid: rn.spec.Gid}, rn.spec.Def.Limits().Prompt())
}

func (s *sess) promptAs(rules string, c layout.Caller, budget int) *prompt.Prompt {
	system := rules
	if rule := s.metaString("rule"); rule != "" {
		system = strings.TrimLeft(system+"\n\n"+rule, "\n")
	}
	owner := modelapi.Owner{Uid: c.Uid, Conversation: s.ref.Key()}
	if s.rel == "" { // a temp session keeps no context/
		return s.e.prompts.NewFrom(owner, system, s.msgs, maxConversation, nil, budget)
	}
	rel := s.file(abi.DirContext + "/summary.md")
	p := s.e.prompts.NewFrom(owner, system, s.msgs, maxConversation, summary.Read(s.e.FreeTree(), c, rel), budget)
	p.Keep = func(b []byte) error { return summary.Write(s.e.FreeTree(), c, rel, b) }
	return p
}

// windowSpec is what an op on a session's window (status, compact) needs
// of a run of defn: newRun's uid (the home's owner, the caller in a space)
// and the prompt it would get now, with the agent's own AGENTS.md.
func (s *sess) windowSpec(c layout.Caller, loc *location, defn *def.Definition) agent.Spec {
	if loc.scope == abi.ScopePrivate {
		c = layout.Caller{Uid: uint32(loc.own.Uid), Gid: uint32(loc.own.Gid)}
	}
	p := s.promptAs(strings.TrimRight(defn.AgentsMD, "\n"), c, defn.Limits().Prompt())
	env := map[string]string{"CTX_AGENT": loc.ref.Owner, "CTX_SESSION": loc.ref.Name, "CTX_SCOPE": loc.scope, "PATH": "/usr/local/bin:/usr/bin:/bin"}
	return agent.Spec{Session: loc.ref.Name, Scope: loc.scope, Def: defn, Uid: c.Uid, Gid: c.Gid, Groups: spaceGroup(c, loc), Env: env, Prompt: p}
}

// conversationLog is the last maxConversation bytes of messages.jsonl,
// from the first whole line: a line cut by that bound is left out.
func (s *sess) conversationLog() []byte { return s.logTail(s.msgs) }

// logTail is the last maxConversation bytes of a log, from the first whole
// line.
func (s *sess) logTail(log *sealedlog.Log) []byte {
	b, _ := log.Tail(maxConversation)
	return b
}
