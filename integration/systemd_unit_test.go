package integration

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// unitFile is the unit the project ships.
const unitFile = "../contrib/systemd/ctxfs.service"

// unitSettings reads the unit's active Key=Value lines.
func unitSettings(t *testing.T) map[string][]string {
	t.Helper()
	f, err := os.Open(unitFile)
	testkit.Must(t, err)
	defer f.Close()
	settings := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			settings[k] = append(settings[k], v)
		}
	}
	return settings
}

// The unit is Type=notify around `ctxfs mount --foreground`, stops with
// `ctxfs umount`, restarts on failure, and sets nothing that would give
// the service a mount namespace of its own (its FUSE mounts would be
// invisible to users) or cut it off /dev/fuse.
func TestSystemdUnitShape(t *testing.T) {
	s := unitSettings(t)
	want := map[string]string{
		"Type":      "notify",
		"ExecStart": "/usr/local/bin/ctxfs mount --foreground",
		"ExecStop":  "-/usr/local/bin/ctxfs umount",
		"Restart":   "on-failure",
	}
	for k, v := range want {
		if len(s[k]) != 1 || s[k][0] != v {
			t.Errorf("%s=%v, want %s", k, s[k], v)
		}
	}
	for _, k := range []string{"ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices", "PrivateMounts",
		"ReadOnlyPaths", "ReadWritePaths", "InaccessiblePaths", "TemporaryFileSystem", "BindPaths", "BindReadOnlyPaths",
		"ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups", "ProtectProc",
		"ProcSubset", "MountAPIVFS", "RootDirectory", "RootImage", "DeviceAllow", "DevicePolicy", "ProtectClock",
		"PrivateUsers", "DynamicUser", "User"} {
		if v, ok := s[k]; ok {
			t.Errorf("%s=%v: would hide the mounts from users or the server from /dev/fuse", k, v)
		}
	}
}

// systemd-analyze verify accepts the unit (every key known, the command
// executable) when this machine has it; the binary path is pointed at the
// ctxfs under test, which is not installed.
func TestSystemdUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("no systemd-analyze")
	}
	unit, err := os.ReadFile(unitFile)
	testkit.Must(t, err)
	verify := func(text string) (string, error) {
		dir := t.TempDir()
		p := filepath.Join(dir, "ctxfs.service")
		testkit.Must(t, os.WriteFile(p, []byte(strings.ReplaceAll(text, "/usr/local/bin/ctxfs", ctxfsBin)), 0o644))
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		// --man=no: the Documentation= man page is not installed here.
		out, err := exec.CommandContext(ctx, analyze, "verify", "--man=no", p).CombinedOutput()
		return string(out), err
	}
	if out, err := verify(string(unit)); err != nil || out != "" {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	// The check has teeth: a key systemd does not know is reported.
	if out, _ := verify(strings.Replace(string(unit), "[Service]\n", "[Service]\nRestartt=always\n", 1)); !strings.Contains(out, "Restartt") {
		t.Fatalf("systemd-analyze verify did not report an unknown key: %q", out)
	}
}
