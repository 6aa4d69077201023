package memo

import (
	"fmt"
	"testing"
)

// TestMemoKeepsNoOldValue: a read of the store that raced with a change
// is served but not kept, so the next Value reads the new one; values over
// the budget are dropped, least recently used first.
func TestMemoKeepsNoOldValue(t *testing.T) {
	var m Memo
	old := Value{Data: []byte("old\n")}
	v, _ := m.Get("s/state", func() (Value, error) {
		m.Forget("s/state") // the change lands while the old value is read
		return old, nil
	})
	if string(v.Data) != "old\n" {
		t.Fatalf("the racing read was not served: %q", v.Data)
	}
	v, _ = m.Get("s/state", func() (Value, error) { return Value{Data: []byte("new\n")}, nil })
	if string(v.Data) != "new\n" {
		t.Fatalf("a read that raced with a change was kept: %q", v.Data)
	}
	v, _ = m.Get("s/state", func() (Value, error) { t.Fatal("not kept"); return Value{}, nil })
	if string(v.Data) != "new\n" {
		t.Fatalf("kept %q", v.Data)
	}
	m.Forget("s") // the session directory: everything in it
	if _, ok := m.dirs["s/"]; ok {
		t.Fatalf("forget of the directory kept its files")
	}

	big := make([]byte, 1<<20)
	for i := 0; i < memoBudget/len(big)+8; i++ {
		m.Get(fmt.Sprintf("d%d/meta.json", i), func() (Value, error) { return Value{Data: big}, nil })
	}
	if m.bytes > memoBudget {
		t.Fatalf("memo holds %d bytes, budget %d", m.bytes, memoBudget)
	}
	if _, ok := m.dirs["d0/"]; ok {
		t.Fatalf("the least recently used value stayed over the budget")
	}
}
