package provider

import (
	"slices"
	"sync"
	"unsafe"

	"github.com/ctxfs/ctxfs/agent/modelapi"
)

// A session's model calls send its conversation again each time with a
// few turns more, and writing a long conversation's body was most of
// the CPU on the path to its run's first delta (docs/benchmarks.md, "The
// settled turns"). settledBodies keeps, for the conversations written
// last, the message elements of their settled turns, so that a body
// whose turns start with them writes only the turns after.
//
// A prefix of the turns is settled when it ends with an assistant turn
// and the turn after it is a user turn. Its elements are then the same
// whatever follows: plan pairs an assistant turn only with the tool turns
// right after it, Anthropic merges only consecutive turns of one role
// (an assistant turn and a user turn never are), puts its opening before
// the first turn only, and trims only a final assistant message. What
// else they read is kept beside them and must match: the API (its ids'
// rule and format), the system prompt, the offered tools' names (which
// calls go out as calls) and the call ids kept as calls (which no later
// call may be kept as again). TestSettledAsFresh compares every prefix of
// growing and edited conversations with bodies written afresh.
//
// An entry serves only its own conversation (Request.Owner), never
// another with the same turns: a hit is faster than a miss, and a user
// who could time sends of a guessed conversation could otherwise learn
// whether another user's is in memory. TestSettledOwnersApart.

// settled is one conversation's settled turns and their elements.
type settled struct {
	owner       modelapi.Owner
	api, system string
	tools       []string        // the offered tools' names, in order
	turns       []modelapi.Turn // the settled turns: the memo's own copy
	elems       []byte          // their message elements, comma-separated
	used        map[string]bool // the call ids kept as calls in them
	texts       int             // the bytes of the turns' strings and calls
}

// held is about the bytes e keeps alive, for the memo's bound.
func (e *settled) held() int {
	return cap(e.elems) + len(e.system) + len(e.owner.Conversation) + cap(e.turns)*turnBytes + e.texts + 64*len(e.used)
}

// The sizes of a Turn and a ToolCall, their strings aside.
const (
	turnBytes = int(unsafe.Sizeof(modelapi.Turn{}))
	callBytes = int(unsafe.Sizeof(modelapi.ToolCall{}))
)

// settledMemo keeps the settled turns of the conversations written last,
// within a count and a byte bound, of which one uid's entries hold at
// most a share: a user who writes many conversations pushes out their
// own entries, not everyone's. An entry is taken out while a body is
// written from it, so that two writers never share one.
type settledMemo struct {
	mu       sync.Mutex
	entries  []*settled // the least recently used first
	bytes    []int      // held by each entry when it was put
	max      int        // entries at most
	maxBytes int        // bytes held at most
	compared int        // entries compared in full, ever (for the tests)
}

// settledBodies is the memo every body is written with: 64 conversations
// (the runs a server makes at once are far fewer), 32 MiB; a uid's 16
// and 16 MiB.
var settledBodies = settledMemo{max: 64, maxBytes: 32 << 20}

// One uid's entries are at most 1/uidShare of the memo's count and hold
// at most 1/uidByteShare of its bytes: half, so that the longest
// conversation a prompt reads (4 MiB of log, its elements and turns
// about twice that) is still kept.
const (
	uidShare     = 4
	uidByteShare = 2
)

func (o openAI) memoOf() *settledMemo    { return memoOr(o.memo) }
func (a anthropic) memoOf() *settledMemo { return memoOr(a.memo) }

func memoOr(m *settledMemo) *settledMemo {
	if m == nil {
		return &settledBodies
	}
	return m
}

// take removes and returns the most recently used entry of owner's
// whose settled turns are a settled prefix of turns, written for the
// same API, system prompt and tools; nil if there is none. The most
// recent is the one a session's last body kept, or else the one it
// would extend. Entries whose last settled turn and sizes match are
// compared in full, at most maxCompares of them: a user who fills the
// memo with conversations that differ only deep inside cannot make
// every body compare them all.
func (m *settledMemo) take(owner modelapi.Owner, api, system string, tools offered, turns []modelapi.Turn) *settled {
	m.mu.Lock()
	defer m.mu.Unlock()
	compares := 0
	for i := len(m.entries) - 1; i >= 0 && compares < maxCompares; i-- {
		e := m.entries[i]
		if e.owner != owner || !e.mayFit(api, tools, turns) {
			continue
		}
		compares++
		m.compared++
		if e.fits(system, tools, turns) {
			m.entries = slices.Delete(m.entries, i, i+1)
			m.bytes = slices.Delete(m.bytes, i, i+1)
			return e
		}
	}
	return nil
}

// maxCompares bounds the entries a take compares in full.
const maxCompares = 4

// put keeps e as the most recently used entry, then drops the least
// recently used entries of e's uid beyond its share, and the least
// recently used of all beyond the bounds. An entry larger than a uid's
// share of the bytes is not kept.
func (m *settledMemo) put(e *settled) {
	n := e.held()
	if len(e.turns) == 0 || n > m.maxBytes/uidByteShare {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.entries, m.bytes = append(m.entries, e), append(m.bytes, n)
	uid := e.owner.Uid
	m.dropBeyond(func(o *settled) bool { return o.owner.Uid == uid }, max(1, m.max/uidShare), m.maxBytes/uidByteShare)
	m.dropBeyond(func(*settled) bool { return true }, m.max, m.maxBytes)
}

// dropBeyond drops the least recently used of the entries that match
// until those left are at most count and hold at most bytes. Caller
// holds m.mu.
func (m *settledMemo) dropBeyond(match func(*settled) bool, count, bytes int) {
	n, total := 0, 0
	for i, e := range m.entries {
		if match(e) {
			n, total = n+1, total+m.bytes[i]
		}
	}
	for i := 0; i < len(m.entries) && (n > count || total > bytes); {
		if !match(m.entries[i]) {
			i++
			continue
		}
		n, total = n-1, total-m.bytes[i]
		m.entries = slices.Delete(m.entries, i, i+1)
		m.bytes = slices.Delete(m.bytes, i, i+1)
	}
}

// mayFit is fits' cheap part: the API, sizes that allow a settled
// prefix, the user turn after it, and its last turn.
func (e *settled) mayFit(api string, tools offered, turns []modelapi.Turn) bool {
	k := len(e.turns)
	return e.api == api && k > 0 && k < len(turns) && turns[k].Role == modelapi.RoleUser &&
		len(e.tools) == len(tools.tools) && sameTurn(&e.turns[k-1], &turns[k-1])
}

// fits says, of an entry that mayFit, whether its turns are a settled
// prefix of turns in a request of the same system prompt and tools.
func (e *settled) fits(system string, tools offered, turns []modelapi.Turn) bool {
	if e.system != system {
		return false
	}
	for i, t := range tools.tools {
		if e.tools[i] != t.Name {
			return false
		}
	}
	for i := range len(e.turns) - 1 {
		if !sameTurn(&e.turns[i], &turns[i]) {
			return false
		}
	}
	return true
}

func sameTurn(a, b *modelapi.Turn) bool {
	return a.Role == b.Role && a.Text == b.Text && a.ToolCallID == b.ToolCallID &&
		a.ToolName == b.ToolName && a.IsError == b.IsError && slices.Equal(a.ToolCalls, b.ToolCalls)
}

// lastSplit is the end of the longest settled prefix of turns: the last k
// whose turn k-1 is an assistant's and turn k a user's; 0 if none.
func lastSplit(turns []modelapi.Turn) int {
	for k := len(turns) - 1; k > 0; k-- {
		if turns[k].Role == modelapi.RoleUser && turns[k-1].Role == modelapi.RoleAssistant {
			return k
		}
	}
	return 0
}

// elementWriter appends the message elements of planned turns, each after
// a comma unless it is the first of the array: the system prompt's
// first for OpenAI when first, Anthropic's opening when first, its final
// assistant message trimmed when final.
type elementWriter func(w *body, system string, turns []planned, first, final bool)

// settledElements writes req's message elements into w (inside the
// array's brackets), the settled ones copied from m where it holds them
// for req's owner, and keeps the turns settled now in m (nothing of a
// request without an owner's conversation). It returns false, having written
// nothing, when planning or writing fails: the caller writes the body
// afresh, which fails alike with the error a fresh body gives.
func settledElements(m *settledMemo, w *body, api string, req modelapi.Request, tools offered, idOK func(string) bool, write elementWriter) bool {
	var e *settled
	if req.Owner.Conversation != "" {
		e = m.take(req.Owner, api, req.System, tools, req.Turns)
	}
	if e == nil {
		e = &settled{owner: req.Owner, api: api, system: req.System, used: map[string]bool{}}
		for _, t := range tools.tools {
			e.tools = append(e.tools, t.Name)
		}
	}
	k0, k1 := len(e.turns), max(lastSplit(req.Turns), len(e.turns))
	if k1 > k0 {
		mid, err := planFrom(req.Turns[k0:k1], tools, idOK, &callIDs{own: e.used})
		if err != nil {
			return false
		}
		ew := body{b: slices.Grow(e.elems, textSize(modelapi.Request{System: req.System, Turns: req.Turns[k0:k1]}))}
		write(&ew, req.System, mid, k0 == 0, false)
		if ew.err != nil {
			return false
		}
		e.elems = ew.b
		e.appendTurns(req.Turns[k0:k1])
	}
	tail, err := planFrom(req.Turns[k1:], tools, idOK, &callIDs{base: e.used})
	if err != nil {
		return false
	}
	start := len(w.b)
	w.b = slices.Grow(w.b, len(e.elems)+textSize(modelapi.Request{Turns: req.Turns[k1:], Tools: req.Tools}))
	w.b = append(w.b, e.elems...)
	write(w, req.System, tail, k1 == 0, true)
	if w.err != nil {
		w.b, w.err = w.b[:start], nil
		return false
	}
	if req.Owner.Conversation != "" {
		m.put(e)
	}
	return true
}

// appendTurns appends copies of turns to e's, their calls copied too, so
// that the memo holds nothing a caller could change.
func (e *settled) appendTurns(turns []modelapi.Turn) {
	n := len(e.turns)
	e.turns = append(e.turns, turns...)
	for i := range e.turns[n:] {
		t := &e.turns[n+i]
		e.texts += len(t.Text) + len(t.ToolCallID) + len(t.ToolName)
		if len(t.ToolCalls) == 0 {
			continue
		}
		t.ToolCalls = slices.Clone(t.ToolCalls)
		for _, c := range t.ToolCalls {
			e.texts += len(c.ID) + len(c.Name) + len(c.Arguments) + callBytes
		}
	}
}
