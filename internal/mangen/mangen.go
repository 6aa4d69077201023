// Package mangen is the hidden command that writes a binary's man pages
// (section 1, one per command, with cobra/doc), for `make man`. A binary
// gets it only when built with the tag mangen, so that the released
// binaries do not carry the generator and its Markdown renderer.
package mangen

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// Name is the hidden command: `BINARY gen-man DIR`.
const Name = "gen-man"

// Command returns the gen-man command for root's tree. source names the
// software in the pages' footer ("ctxfs (devel)").
func Command(root *cobra.Command, source string) *cobra.Command {
	return &cobra.Command{
		Use:    Name + " DIR",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return err
			}
			root.DisableAutoGenTag = true // pages that differ only by date would churn
			header := &doc.GenManHeader{Section: "1", Source: source, Manual: "ctxfs manual"}
			if err := doc.GenManTree(root, header, args[0]); err != nil {
				return fmt.Errorf("gen-man: %w", err)
			}
			return nil
		},
	}
}
