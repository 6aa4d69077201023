package provider

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ctxfs/ctxfs/agent/modelapi"
)

// testOwner is the conversation the tests' requests are of, unless they
// say otherwise.
var testOwner = modelapi.Owner{Uid: 1000, Conversation: "home/1000/agent/coder/session/s"}

// wiresWith are both APIs writing bodies with memo m.
func wiresWith(m *settledMemo) []struct {
	name string
	wire wire
	// fresh is the body written afresh, without the memo.
	fresh func(modelapi.Config, modelapi.Request, offered) ([]byte, error)
} {
	return []struct {
		name  string
		wire  wire
		fresh func(modelapi.Config, modelapi.Request, offered) ([]byte, error)
	}{
		{"openai", openAI{memo: m}, func(c modelapi.Config, r modelapi.Request, o offered) ([]byte, error) {
			req, err := openAI{}.request(c, r, o)
			if err != nil {
				return nil, err
			}
			return req.marshal(0)
		}},
		{"anthropic", anthropic{memo: m}, func(c modelapi.Config, r modelapi.Request, o offered) ([]byte, error) {
			req, err := anthropic{}.request(c, r, o)
			if err != nil {
				return nil, err
			}
			return req.marshal(0)
		}},
	}
}

// asFresh checks that w writes req's body as it is written afresh, or
// fails with the same error.
func asFresh(t *testing.T, w wire, fresh func(modelapi.Config, modelapi.Request, offered) ([]byte, error), cfg modelapi.Config, req modelapi.Request, o offered) {
	t.Helper()
	want, wantErr := fresh(cfg, req, o)
	got, gotErr := w.body(cfg, req, o)
	if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || !bytes.Equal(got, want) {
		t.Fatalf("%T, %d turns %+v:\nwith the settled turns %s (%v)\nafresh %s (%v)", w, len(req.Turns), req.Turns, got, gotErr, want, wantErr)
	}
}

// randomTurns is a conversation of n turns of every kind a history has:
// user and assistant texts (empty, with trailing white space), calls of
// offered tools and others, with ids that repeat and ids Anthropic
// refuses, their results in and out of order, loose and failed results,
// and now and then a role no API knows.
func randomTurns(r *rand.Rand, n int) []modelapi.Turn {
	texts := []string{"", "hello", "done  \n", " ", "line \"two\"\n<b>&"}
	names := []string{"ls", "f", "gone"}
	ids := []string{"c1", "c2", "c3", "bad id", ""}
	var turns []modelapi.Turn
	for len(turns) < n {
		switch k := r.IntN(20); {
		case k < 7:
			turns = append(turns, modelapi.Turn{Role: modelapi.RoleUser, Text: texts[r.IntN(len(texts))]})
		case k < 13:
			turns = append(turns, modelapi.Turn{Role: modelapi.RoleAssistant, Text: texts[r.IntN(len(texts))]})
		case k < 18:
			a := modelapi.Turn{Role: modelapi.RoleAssistant, Text: texts[r.IntN(len(texts))]}
			for range 1 + r.IntN(3) {
				a.ToolCalls = append(a.ToolCalls, modelapi.ToolCall{ID: ids[r.IntN(len(ids))], Name: names[r.IntN(len(names))], Arguments: `{"a":1}`})
			}
			turns = append(turns, a)
			for range r.IntN(4) {
				turns = append(turns, modelapi.Turn{Role: modelapi.RoleTool, ToolCallID: ids[r.IntN(len(ids))], ToolName: names[r.IntN(len(names))],
					Text: texts[r.IntN(len(texts))], IsError: r.IntN(4) == 0})
			}
		case k < 19:
			turns = append(turns, modelapi.Turn{Role: modelapi.RoleTool, ToolCallID: ids[r.IntN(len(ids))], Text: "loose"})
		default:
			turns = append(turns, modelapi.Turn{Role: "system", Text: "not a turn's role"})
		}
	}
	return turns[:n]
}

// TestSettledAsFresh: a body written from the settled turns of earlier
// bodies is the body written afresh, byte for byte (and fails as it
// does), for every prefix of random conversations sent in order (as a
// session's calls grow it) and out of order, with the system prompt and
// the tools changed between calls, and with a turn of the settled
// prefix, or the one after it, edited.
func TestSettledAsFresh(t *testing.T) {
	tools := offer(t, "ls", "f")
	fewer, other := offer(t, "ls"), offer(t, "ls", "gone")
	for seed := range uint64(150) {
		r := rand.New(rand.NewPCG(seed, 26))
		turns := randomTurns(r, 40)
		memo := &settledMemo{max: 64, maxBytes: 32 << 20}
		for _, w := range wiresWith(memo) {
			cfg := modelapi.Config{ModelID: "m", MaxTokens: 10}
			for n := 1; n <= len(turns); n++ { // in order
				asFresh(t, w.wire, w.fresh, cfg, modelapi.Request{System: "s", Turns: turns[:n], Owner: testOwner}, tools)
			}
			for range 40 { // out of order, and with what the prefix is written for changed
				req := modelapi.Request{System: []string{"s", "", "other"}[r.IntN(3)], Turns: turns[:1+r.IntN(len(turns))],
					Owner: []modelapi.Owner{testOwner, testOwner, {Uid: 1001, Conversation: testOwner.Conversation}, {}}[r.IntN(4)]}
				o := []offered{tools, fewer, other, {}}[r.IntN(4)]
				asFresh(t, w.wire, w.fresh, cfg, req, o)
			}
			edited := slices.Clone(turns)
			for i := range edited { // each turn edited in its turn: its text, or made a result of the call before
				was := edited[i]
				edited[i].Text += "!"
				asFresh(t, w.wire, w.fresh, cfg, modelapi.Request{System: "s", Turns: edited, Owner: testOwner}, tools)
				if i > 0 && len(edited[i-1].ToolCalls) > 0 {
					c := edited[i-1].ToolCalls[0]
					edited[i] = modelapi.Turn{Role: modelapi.RoleTool, ToolCallID: c.ID, ToolName: c.Name, Text: "answer"}
					asFresh(t, w.wire, w.fresh, cfg, modelapi.Request{System: "s", Turns: edited, Owner: testOwner}, tools)
				}
				edited[i] = was
			}
		}
	}
}

// TestSettledKept: a growing conversation's settled turns are kept and
// used: the memo holds the conversation up to its last assistant turn
// before a user's, and the next body takes that entry and writes only
// the turns after it.
func TestSettledKept(t *testing.T) {
	req := longRequest(101) // user, assistant, …, user
	memo := &settledMemo{max: 64, maxBytes: 32 << 20}
	w := openAI{memo: memo}
	if _, err := w.body(modelapi.Config{ModelID: "m"}, req, offered{}); err != nil {
		t.Fatal(err)
	}
	if len(memo.entries) != 1 || len(memo.entries[0].turns) != 100 {
		t.Fatalf("after a body of 101 turns the memo holds %d entries (the first of %d turns), want one of 100", len(memo.entries), len(memo.entries[0].turns))
	}
	kept := memo.entries[0]
	req.Turns = append(req.Turns, modelapi.Turn{Role: modelapi.RoleAssistant, Text: "a"}, modelapi.Turn{Role: modelapi.RoleUser, Text: "u"})
	if e := memo.take(req.Owner, modelapi.OpenAIChat, req.System, offered{}, req.Turns); e != kept {
		t.Fatalf("the next body's turns did not find the entry kept")
	} else {
		memo.put(e)
	}
	if _, err := w.body(modelapi.Config{ModelID: "m"}, req, offered{}); err != nil {
		t.Fatal(err)
	}
	if len(memo.entries) != 1 || memo.entries[0] != kept || len(kept.turns) != 102 {
		t.Fatalf("the entry was not extended in place: %d entries", len(memo.entries))
	}
	req.Turns[50].Text = "changed"
	if e := memo.take(req.Owner, modelapi.OpenAIChat, req.System, offered{}, req.Turns); e != nil {
		t.Fatal("an entry was taken for turns that differ from its own")
	}
}

// TestSettledBounds: the memo keeps at most its count of conversations
// and its bytes, dropping the least recently used, and keeps nothing of
// a conversation larger than a uid's share of its bytes.
func TestSettledBounds(t *testing.T) {
	memo := &settledMemo{max: 3, maxBytes: 64 << 10}
	w := anthropic{memo: memo}
	for i := range 5 {
		req := longRequest(21)
		req.Turns[0].Text = fmt.Sprint("conversation ", i)
		req.Owner.Uid = uint32(i) // each its own uid's: the bound of all, not a uid's share
		if _, err := w.body(modelapi.Config{ModelID: "m"}, req, offered{}); err != nil {
			t.Fatal(err)
		}
	}
	if len(memo.entries) != 3 || memo.entries[0].turns[0].Text != "conversation 2" {
		t.Fatalf("after 5 conversations with room for 3 the memo holds %d, the oldest %q", len(memo.entries), memo.entries[0].turns[0].Text)
	}
	big := longRequest(161) // within the bound, more than a uid's share (checked below)
	big.Owner.Uid = 99
	if n := heldOf(t, big); n <= memo.maxBytes/uidByteShare || n > memo.maxBytes {
		t.Fatalf("the big conversation's entry holds %d bytes, not between a share (%d) and the bound (%d)", n, memo.maxBytes/uidByteShare, memo.maxBytes)
	}
	if _, err := w.body(modelapi.Config{ModelID: "m"}, big, offered{}); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, n := range memo.bytes {
		total += n
	}
	if len(memo.entries) != 3 || total > memo.maxBytes {
		t.Fatalf("a conversation over the byte bound changed the memo: %d entries, %d bytes", len(memo.entries), total)
	}
}

// TestSettledKeepsTheLongest: the longest conversation a prompt reads
// (4 MiB of messages.jsonl; here 4 MiB of turns' text, in 4,096 turns and
// in 40,960, their turn structures the larger share) is kept by a memo of
// settledBodies' bounds.
func TestSettledKeepsTheLongest(t *testing.T) {
	for _, n := range []int{4096, 40960} {
		req := modelapi.Request{System: "s", Owner: testOwner}
		text := strings.Repeat("w", 4<<20/n)
		for i := range n {
			req.Turns = append(req.Turns, modelapi.Turn{Role: []string{modelapi.RoleUser, modelapi.RoleAssistant}[i%2], Text: text})
		}
		memo := &settledMemo{max: settledBodies.max, maxBytes: settledBodies.maxBytes}
		if _, err := (openAI{memo: memo}).body(modelapi.Config{ModelID: "m"}, req, offered{}); err != nil {
			t.Fatal(err)
		}
		if len(memo.entries) != 1 {
			t.Errorf("%d turns of 4 MiB: not kept (a uid's share is %d bytes)", n, memo.maxBytes/uidByteShare)
		}
	}
}

// heldOf is what the entry of req's settled turns holds, written alone.
func heldOf(t *testing.T, req modelapi.Request) int {
	memo := &settledMemo{max: 1, maxBytes: 1 << 30}
	if _, err := (openAI{memo: memo}).body(modelapi.Config{ModelID: "m"}, req, offered{}); err != nil || len(memo.entries) != 1 {
		t.Fatalf("no entry kept (%v)", err)
	}
	return memo.bytes[0]
}

// TestSettledOwnersApart: an entry serves only its own conversation: the
// same turns sent for another uid, for another conversation of the same
// uid, or with no owner neither take it nor change it (and are written
// as afresh); what a request without a conversation settles (no owner, or
// a compaction's: its uid alone) is not kept; and a
// uid's conversations push out that uid's own entries beyond its share,
// never another uid's.
func TestSettledOwnersApart(t *testing.T) {
	memo := &settledMemo{max: 8, maxBytes: 1 << 20}
	ws := wiresWith(memo)
	req := longRequest(101)
	if _, err := ws[0].wire.body(modelapi.Config{ModelID: "m"}, req, offered{}); err != nil {
		t.Fatal(err)
	}
	kept := memo.entries[0]
	grown := modelapi.Request{System: req.System, Turns: append(slices.Clone(req.Turns), modelapi.Turn{Role: modelapi.RoleAssistant, Text: "a"}, modelapi.Turn{Role: modelapi.RoleUser, Text: "u"})}
	for _, o := range []modelapi.Owner{{Uid: 1001, Conversation: testOwner.Conversation}, {Uid: testOwner.Uid, Conversation: "home/1000/agent/coder/session/t"}, {}, {Uid: testOwner.Uid}} {
		grown.Owner = o
		before := memo.compared
		asFresh(t, ws[0].wire, ws[0].fresh, modelapi.Config{ModelID: "m"}, grown, offered{})
		if memo.compared != before || len(kept.turns) != 100 || memo.entries[0] != kept {
			t.Fatalf("owner %+v: the entry of %+v was compared or changed", o, testOwner)
		}
	}
	if len(memo.entries) != 3 {
		t.Fatalf("the memo holds %d entries, want 3: the first owner's and the two others' (nothing of the requests without a conversation: no owner, a compaction's)", len(memo.entries))
	}
	for i := range 10 {
		r := longRequest(21)
		r.Owner = modelapi.Owner{Uid: 7, Conversation: fmt.Sprint("home/7/agent/coder/session/", i)}
		if _, err := ws[1].wire.body(modelapi.Config{ModelID: "m"}, r, offered{}); err != nil {
			t.Fatal(err)
		}
	}
	mine := 0
	for _, e := range memo.entries {
		if e.owner.Uid == 7 {
			mine++
		}
	}
	if mine != memo.max/uidShare || memo.entries[0] != kept {
		t.Fatalf("after 10 conversations of one uid it holds %d entries (want its share, %d), and the first entry is %s", mine, memo.max/uidShare,
			map[bool]string{true: "kept", false: "gone"}[memo.entries[0] == kept])
	}
}

// TestSettledComparesBounded: a memo full of conversations that match a
// body's last settled turn and differ only just before it costs the body
// at most maxCompares whole comparisons, and the body is still right.
func TestSettledComparesBounded(t *testing.T) {
	memo := &settledMemo{max: 64, maxBytes: 32 << 20}
	w := openAI{memo: memo}
	base := longRequest(201)
	for i := range 20 {
		req := modelapi.Request{System: base.System, Turns: slices.Clone(base.Turns), Owner: base.Owner}
		req.Turns[198].Text = fmt.Sprint("differs ", i)
		if _, err := w.body(modelapi.Config{ModelID: "m"}, req, offered{}); err != nil {
			t.Fatal(err)
		}
	}
	before := memo.compared
	asFresh(t, w, func(c modelapi.Config, r modelapi.Request, o offered) ([]byte, error) {
		req, err := openAI{}.request(c, r, o)
		if err != nil {
			return nil, err
		}
		return req.marshal(0)
	}, modelapi.Config{ModelID: "m"}, base, offered{})
	if n := memo.compared - before; n > maxCompares {
		t.Fatalf("one body compared %d entries in full, more than %d", n, maxCompares)
	}
}

// TestSettledConcurrent: bodies written at once from one memo, of
// conversations that share their first turns and of the same one, are
// each the body written afresh (go test -race checks that no two touch
// one entry at once).
func TestSettledConcurrent(t *testing.T) {
	memo := &settledMemo{max: 8, maxBytes: 1 << 20}
	base := longRequest(41)
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			turns := slices.Clone(base.Turns)
			if g%2 == 1 {
				turns[30].Text = fmt.Sprint("goroutine ", g)
			}
			for _, w := range wiresWith(memo) {
				for n := 1; n <= len(turns); n++ {
					req := modelapi.Request{System: base.System, Turns: turns[:n], Owner: testOwner}
					want, _ := w.fresh(modelapi.Config{ModelID: "m"}, req, offered{})
					if got, err := w.wire.body(modelapi.Config{ModelID: "m"}, req, offered{}); err != nil || !bytes.Equal(got, want) {
						errs <- fmt.Sprintf("goroutine %d, %s, %d turns: other body (%v)", g, w.name, n, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
