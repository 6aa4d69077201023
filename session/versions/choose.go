package versions

import "fmt"

// Selector names what a restore puts back (SPEC 17): version N's earlier
// state, or each file run R changed as it was before R's first change of
// it; only Path when it is not "".
type Selector struct {
	Version int64 // 0 when a run is named
	Run     string
	Path    string
}

// Choose picks the entries sel names, in the index's order, and the words
// that say what is restored.
func Choose(entries []Entry, sel Selector) (chosen []Entry, what string) {
	what = fmt.Sprintf("restore the files run %s changed, as they were before it", sel.Run)
	if sel.Version > 0 {
		what = fmt.Sprintf("restore version %d", sel.Version)
	}
	if sel.Path != "" {
		what += ": " + sel.Path
	}
	seen := map[string]bool{}
	for _, en := range entries {
		switch {
		case sel.Path != "" && en.Path != sel.Path:
		case sel.Version > 0 && int64(en.V) == sel.Version:
			chosen = append(chosen, en)
		case sel.Version == 0 && en.Run == sel.Run && !seen[en.Path]:
			seen[en.Path] = true // the earliest version of a path in the run: before its first change
			chosen = append(chosen, en)
		}
	}
	return chosen, what
}
