// Package index keeps the session index of one session container (SPEC
// section 9): list, current, by-cwd/, by-hash/, by-uuid/.
package index

// Index is the index of one container. (Being written.)
type Index struct{}
