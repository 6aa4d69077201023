package children

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/agent"
	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/reply"
)

// TestAttenuate: a child keeps the tools of its own definition that its
// parent has too, in its own order, on a copy, and asks for approvals
// when its parent does; an unjailed child of a jailed parent is EACCES;
// a run with no parent keeps its definition.
func TestAttenuate(t *testing.T) {
	b := New(func(string, string) bool { return false })
	parent := &def.Definition{Tools: []string{"fs.read", "agent.create", "shell.exec"}}
	b.family(Parent{Run: "p", Def: parent})
	own := &def.Definition{Name: "sub", Tools: []string{"shell.exec", "fs.write", "fs.read"}}
	got, err := b.Attenuate("p", own)
	if err != nil || len(got.Tools) != 2 || got.Tools[0] != "shell.exec" || got.Tools[1] != "fs.read" {
		t.Fatalf("attenuated %v, %v", got, err)
	}
	if len(own.Tools) != 3 {
		t.Fatalf("the definition itself changed: %v", own.Tools)
	}
	if same, _ := b.Attenuate("", own); same != own {
		t.Fatalf("a run without a parent got another definition")
	}
	parent.Approval, own.Approval = def.ApprovalAsk, def.ApprovalAuto
	if got, _ := b.Attenuate("p", own); got.Approval != def.ApprovalAsk || own.Approval != def.ApprovalAuto {
		t.Fatalf("a child of a parent that asks: approval %q (its own definition: %q)", got.Approval, own.Approval)
	}
	parent.Isolation = def.IsolationChroot
	if _, err := b.Attenuate("p", own); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("an unjailed child of a jailed parent: %v", err)
	}
	if _, err := b.Attenuate("gone", own); !errors.Is(err, syscall.ECANCELED) {
		t.Fatalf("a child of an ended parent: %v", err)
	}
}

// TestGate: at most MaxRunning children of one parent hold a place; the
// next waits until one is given back, or until its context ends.
func TestGate(t *testing.T) {
	b := New(func(string, string) bool { return false })
	b.family(Parent{Run: "p", Def: &def.Definition{}})
	var releases []func()
	for i := 0; i < MaxRunning; i++ {
		r, ok := b.Wait(context.Background(), "p", "c")
		if !ok {
			t.Fatal("a place was refused")
		}
		releases = append(releases, r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, ok := b.Wait(ctx, "p", "c"); ok {
		t.Fatal("a fourth child ran")
	}
	got := make(chan bool, 1)
	go func() { _, ok := b.Wait(context.Background(), "p", "c"); got <- ok }()
	releases[0]()
	if !<-got {
		t.Fatal("the fourth did not get the place given back")
	}
}

// TestGrandchildRefused: a child run whose definition does not allow
// children cannot create one, and nothing is started.
func TestGrandchildRefused(t *testing.T) {
	b := New(func(string, string) bool { return false })
	started := false
	p := Parent{Run: "c", Def: &def.Definition{}, IsChild: true}
	p.Start = func(string, *proto.Request) (*reply.Reply, error) { started = true; return nil, nil }
	if _, err := b.Create(p, agent.CreateRequest{Agent: "x", Input: "y", Life: agent.LifeOwned}); !errors.Is(err, syscall.EACCES) || started {
		t.Fatalf("grandchild: %v, started %v", err, started)
	}
}

// TestChildUsageSaturates: a child's usage frames with huge counts are
// clamped and summed without wrapping to a negative total.
func TestChildUsageSaturates(t *testing.T) {
	c := &Child{}
	for range 3 {
		c.addUsage(proto.NewObject("type", proto.FrameUsage, "model", "m", "input_tokens", int64(1<<62), "output_tokens", int64(-1)))
	}
	if len(c.usage) != 1 || c.usage[0].in != 3*proto.MaxTokens || c.usage[0].out != 0 {
		t.Fatalf("usage %+v", c.usage[0])
	}
	for range 2000 {
		c.addUsage(proto.NewObject("type", proto.FrameUsage, "model", "m", "input_tokens", int64(proto.MaxTokens)))
	}
	if c.usage[0].in < 0 {
		t.Fatalf("input total %d: wrapped", c.usage[0].in)
	}
}
