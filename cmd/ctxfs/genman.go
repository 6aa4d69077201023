//go:build mangen

package main

import "github.com/ctxfs/ctxfs/internal/mangen"

// With the tag mangen (make man), ctxfs gets the hidden command that
// writes its man pages: go run -tags mangen ./cmd/ctxfs gen-man DIR.
func init() { extraCommands = append(extraCommands, mangen.Command) }
