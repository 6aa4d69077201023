package sealedlog

import (
	"path"
	"strings"

	"github.com/ctxfs/ctxfs/internal/storefs"
)

// PendingValue is the last change of one value file that a running
// writer's journal holds: the writer serves it from memory, and writes the
// file only when it checkpoints (journal_value.go).
type PendingValue struct {
	Data    []byte // the file's content; nil when Removed
	Removed bool
}

// PendingValues reads the journal in dir and changes nothing: the last
// change of each value file whose path starts with under, as the journal's
// records that count hold it (a fenced-off writer's do not), by store
// path. A reader of the store beside its writer (a follower host) lays
// these over the store's files to see the values the writer serves. A
// record that cannot be read is left out (the file then shows its older
// value); the journal's damage is fsck's and the writer's to report.
func PendingValues(root *storefs.Root, dir, under string) (map[string]PendingValue, error) {
	rp, _, err := scanJournal(root, dir, nil)
	if err != nil {
		return nil, err
	}
	defer rp.closeFiles()
	out := map[string]PendingValue{}
	for _, v := range rp.vorder {
		if !strings.HasPrefix(v.rel, under) || path.Clean(v.rel) != v.rel {
			continue
		}
		if v.remove {
			out[v.rel] = PendingValue{Removed: true}
			continue
		}
		b := make([]byte, v.w.n)
		if _, err := rp.files[v.w.gen].ReadAt(b, v.w.pos); err != nil {
			continue
		}
		if _, data, ok := decodeValue(b); ok {
			out[v.rel] = PendingValue{Data: data}
		}
	}
	return out, nil
}
