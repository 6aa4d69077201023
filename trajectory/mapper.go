package trajectory

import "github.com/ctxfs/ctxfs/proto"

// pendingCall is a tool call that has not found its step yet.
type pendingCall struct {
	id   string
	call ToolCall
	ts   string // when it was made: the timestamp of a step made for it
}

// usage is a usage frame's counts.
type usage struct {
	model              string
	prompt, completion *int64
}

// runState is what a run still has to place: tool calls waiting for their
// results, and usage waiting for an agent step.
type runState struct {
	calls []pendingCall
	usage *usage
}

func (rs *runState) pendingIndex(id string) int {
	for i, c := range rs.calls {
		if c.id == id {
			return i
		}
	}
	return -1
}

// mapper turns the two logs into steps (see the package comment) and hands
// each finished step to emit, in order.
type mapper struct {
	events *lineReader
	emit   func(*Step) error
	cur    *Step // the step being built
	runs   map[string]*runState
	order  []string // runs with a state, oldest first: a stable flush order
	thread proto.ThreadUsage
}

func newMapper(events *lineReader, emit func(*Step) error) *mapper {
	return &mapper{events: events, emit: emit, runs: map[string]*runState{}}
}

// run reads messages to the end, consulting events as it goes.
func (m *mapper) run(messages *lineReader) error {
	for {
		msg, err := messages.next()
		if err != nil {
			return err
		}
		if msg == nil {
			break
		}
		if err := m.catchUp(msg); err != nil {
			return err
		}
		if err := m.message(msg); err != nil {
			return err
		}
	}
	return m.finish()
}

// catchUp consumes the events recorded before msg: up to and including its
// twin (the frame the server recorded with it, SPEC 6), and never one
// stamped after it. A line without a timestamp cannot be placed in time and
// consumes nothing.
func (m *mapper) catchUp(msg *logLine) error {
	if msg.at.IsZero() {
		return nil
	}
	for {
		e, err := m.events.peek()
		if err != nil || e == nil {
			return err
		}
		twin := isTwin(msg, e)
		if !twin && !e.at.IsZero() && e.at.After(msg.at) {
			return nil
		}
		m.events.next()
		if err := m.event(e); err != nil || twin {
			return err
		}
	}
}

// isTwin reports whether event e is the events.jsonl record of the
// messages.jsonl line msg.
func isTwin(msg, e *logLine) bool {
	if e.run != msg.run || e.ts != msg.ts {
		return false
	}
	switch msg.role {
	case "user":
		return e.typ == "start"
	case "assistant":
		return e.typ == "message"
	case "tool":
		return e.typ == "tool_result"
	}
	return false
}

// finish consumes the rest of events, places what the runs left, and
// closes the last step.
func (m *mapper) finish() error {
	for {
		e, err := m.events.next()
		if err != nil {
			return err
		}
		if e == nil {
			break
		}
		if err := m.event(e); err != nil {
			return err
		}
	}
	for len(m.order) > 0 { // runs never done: still active, or cut short
		if err := m.endRun(m.order[0]); err != nil {
			return err
		}
	}
	return m.close()
}

// event handles one events.jsonl line. Messages and tool results there are
// copies of messages.jsonl lines and are not used again.
func (m *mapper) event(e *logLine) error {
	switch e.typ {
	case "tool_call":
		m.toolCallFrame(e)
	case "usage":
		m.usage(e)
	case "done":
		return m.endRun(e.run)
	}
	return nil
}

// message handles one messages.jsonl line.
func (m *mapper) message(l *logLine) error {
	switch l.role {
	case "user", "system":
		s := newStep(l.role, l.run, l.ts)
		s.Message = l.text
		return m.open(s, nil)
	case "assistant":
		return m.assistant(l)
	case "tool":
		return m.toolMessage(l)
	}
	return nil // a role ATIF has no step for
}

// open closes the current step and makes s the current one.
func (m *mapper) open(s *Step, rs *runState) error {
	if err := m.close(); err != nil {
		return err
	}
	m.cur = s
	if rs != nil && rs.usage != nil && s.Source == SourceAgent {
		s.addUsage(rs.usage)
		rs.usage = nil
	}
	return nil
}

// close hands the current step on.
func (m *mapper) close() error {
	s := m.cur
	m.cur = nil
	if s == nil {
		return nil
	}
	return m.emit(s)
}

func (m *mapper) state(run string) *runState {
	rs := m.runs[run]
	if rs == nil {
		rs = &runState{}
		m.runs[run] = rs
		m.order = append(m.order, run)
	}
	return rs
}
