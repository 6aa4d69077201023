package def

// Restore is what a restore run puts back (SPEC 17, ctx agent restore):
// the engine sets it on a copy of the agent's definition; nil for every
// definition read from disk. A restore resumed after a restart has no
// Steps: its calls are the ones its history left unanswered.
type Restore struct {
	Steps []RestoreStep
}

// RestoreStep is one file as it was before: its content, or its absence.
type RestoreStep struct {
	Path    string
	Absent  bool
	Content []byte
}
