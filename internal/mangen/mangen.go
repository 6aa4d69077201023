// Package mangen writes the man pages of a cobra command tree. Both
// binaries carry it as a hidden command (`ctx __man DIR`, `ctxfs __man
// DIR`) so that the pages are made from the very tree the binary parses
// with: `make man` runs them. It never runs on its own.
package mangen

import (
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// Command is the hidden `__man DIR` command: one page per command of the
// tree it is added to, NAME.1 and NAME-SUB.1 (ctx.1, ctx-agent-send.1), in
// DIR, which it makes if needed. The date is SOURCE_DATE_EPOCH's when set
// (reproducible builds), else today.
func Command() *cobra.Command {
	return &cobra.Command{
		Use:    "__man DIR",
		Short:  "Write the man pages into DIR",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return Write(cmd.Root(), args[0])
		},
	}
}

// Write writes the pages of root's tree into dir.
func Write(root *cobra.Command, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	header := &doc.GenManHeader{
		Section: "1",
		Source:  "ctxfs",
		Manual:  "ctxfs manual",
	}
	root.DisableAutoGenTag = true
	return doc.GenManTree(root, header, dir)
}
