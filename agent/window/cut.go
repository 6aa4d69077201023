package window

import (
	"github.com/ctxfs/ctxfs/agent/modelapi"
)

// Cut is where a conversation is cut so that what is kept fits: the
// index of the first turn kept, turns before it being compacted. fixed
// is what the prompt holds besides the turns (system, tools, the
// summary's room); the kept turns must fit target with it, else (a long
// newest exchange) hard. A cut falls only before a user or an assistant
// turn — never before a tool result, which would part it from its call —
// and at a user turn when one fits. It keeps at least the newest turn
// group; ok is false when even that cannot fit hard (E2BIG for the run).
// A conversation that fits target whole is cut at 0.
func Cut(turns []modelapi.Turn, fixed, target, hard int) (start int, ok bool) {
	suffix := make([]int, len(turns)+1) // suffix[i]: tokens of turns[i:]
	for i := len(turns) - 1; i >= 0; i-- {
		suffix[i] = suffix[i+1] + TurnTokens(turns[i])
	}
	for _, bound := range []int{target, hard} {
		for _, userOnly := range []bool{true, false} {
			if i, found := firstFit(turns, suffix, fixed, bound, userOnly); found {
				return i, true
			}
		}
	}
	return len(turns), false
}

// firstFit is the first cut point (a user turn, or with userOnly false
// any turn but a tool result) from which the rest fits bound.
func firstFit(turns []modelapi.Turn, suffix []int, fixed, bound int, userOnly bool) (int, bool) {
	if fixed+suffix[0] <= bound {
		return 0, true
	}
	for i := 1; i < len(turns); i++ {
		r := turns[i].Role
		if r == modelapi.RoleTool || userOnly && r != modelapi.RoleUser {
			continue
		}
		if fixed+suffix[i] <= bound {
			return i, true
		}
	}
	return 0, false
}
