package session

import (
	"strings"

	"github.com/ctxfs/ctxfs/abi"
)

// writeSnapshots replaces the session's AGENTS.md and SKILLS.md before a
// run (SPEC section 10): the agent's global rules, then every AGENTS.md
// from the chroot root down to the cwd; and the skills' metadata. They are
// observability only; a snapshot that cannot be written does not fail the
// run. It returns the merged rules (also for a temp session, which keeps
// no snapshot): a model API run's system prompt starts with them.
func (e *Engine) writeSnapshots(rn *run) (rules string) {
	s := rn.s
	def := rn.spec.Def
	var parts []string
	if def.AgentsMD != "" {
		parts = append(parts, strings.TrimRight(def.AgentsMD, "\n"))
	}
	if rn.spec.Dir != "/" && s.ref.Kind == abi.KindAgent {
		parts = append(parts, e.chrootRules(s.ref.Container.ChrootRel(rn.spec.Uid), rn.spec.Env["CTX_CWD"])...)
	}
	rules = strings.Join(parts, "\n\n")
	if s.rel == "" {
		return rules
	}
	var skills strings.Builder
	for _, sk := range def.Skills {
		skills.WriteString("- name: " + sk.Name + "\n  description: " + sk.Description + "\n  path: " + sk.Path + "\n")
	}
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	if rules != "" {
		s.writeFileLocked(abi.FileAgentsMD, rules+"\n")
	}
	if skills.Len() > 0 {
		s.writeFileLocked(abi.FileSkillsMD, skills.String())
	}
	return rules
}

// chrootRules reads AGENTS.md in the chroot root (rootRel, in the store)
// and in each directory down to cwd, outermost first. The tree belongs to
// the agent's user and the server may be root, so every read goes through
// the store's door: a symlink anywhere on the way is not followed (that
// directory's rules are left out) and each read is bounded.
func (e *Engine) chrootRules(rootRel, cwd string) []string {
	var rules []string
	dir := rootRel
	read := func() {
		if b, err := e.root.ReadFile(dir+"/"+abi.FileAgentsMD, maxRulesBytes); err == nil {
			rules = append(rules, strings.TrimRight(string(b), "\n"))
		}
	}
	read()
	for _, part := range strings.Split(strings.Trim(cwd, "/"), "/") {
		if part == "" || part == "." {
			continue
		}
		dir += "/" + part
		read()
	}
	return rules
}

// maxRulesBytes bounds each AGENTS.md read into a snapshot.
const maxRulesBytes = 1 << 20
