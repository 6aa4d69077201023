package def

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/modelapi"
)

// API is a model definition's built-in model API (SPEC 10): the
// provider's settings, and where its key is found when a run needs it.
// The key itself is never kept in a Definition: definitions are shown in
// errors and logs, and a key is read only to be put in a request header.
type API struct {
	Config modelapi.Config // everything but the key
	KeySource
}

// KeySource is where a definition's key is read when a run needs it
// (api_key_env or api_key_file): a model API's, or a CLI agent's.
type KeySource struct {
	KeyEnv  string // a variable of the server's environment, "" if none
	KeyFile string // an absolute path of a root-owned file, "" if none
}

// maxKeyFile bounds what is read of an api_key_file.
const maxKeyFile = 64 << 10

// apiFiles are the control files of a model API, besides api itself.
var apiFiles = []string{"endpoint", "model_id", "api_key_env", "api_key_file", "max_tokens", "temperature"}

// readAPI reads a model definition's api and the files that go with it;
// each invalid value is EINVAL naming its file. Without an api file the
// definition names no API, and the other files are ignored.
func (d *Definition) readAPI() error {
	if d.Kind != abi.KindModel {
		return nil
	}
	kind, ok, err := d.oneLine("api")
	if !ok || err != nil {
		return err
	}
	if d.Program != "" {
		return d.invalid("api", "the model also has a program, %s: it is answered by one or the other", d.Program)
	}
	v, err := d.oneLines(apiFiles)
	if err != nil {
		return err
	}
	a := &API{Config: modelapi.Config{API: kind, Endpoint: v["endpoint"], ModelID: v["model_id"]}, KeySource: KeySource{v["api_key_env"], v["api_key_file"]}}
	if err := d.apiNumbers(a, v); err != nil {
		return err
	}
	if err := d.checkKeySource(a.KeySource); err != nil {
		return err
	}
	if err := a.Config.Validate(); err != nil {
		field, _, _ := strings.Cut(err.(*abi.Error).Msg, ":")
		return d.invalid(strings.ReplaceAll(field, " ", "_"), "%s", err.(*abi.Error).Msg)
	}
	d.API = a
	return nil
}

// oneLines reads the one-line control files named, "" for those absent.
func (d *Definition) oneLines(files []string) (map[string]string, error) {
	v := map[string]string{}
	for _, f := range files {
		var err error
		if v[f], _, err = d.oneLine(f); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// apiNumbers reads max_tokens and temperature.
func (d *Definition) apiNumbers(a *API, v map[string]string) error {
	if s := v["max_tokens"]; s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return d.invalid("max_tokens", "%q is not a positive number", s)
		}
		a.Config.MaxTokens = n
	}
	if s := v["temperature"]; s != "" {
		t, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return d.invalid("temperature", "%q is not a number", s)
		}
		a.Config.Temperature = &t
	}
	return nil
}

// checkKeySource checks where the key comes from: at most one source, a
// variable name, or an absolute path.
func (d *Definition) checkKeySource(a KeySource) error {
	switch {
	case a.KeyEnv != "" && a.KeyFile != "":
		return d.invalid("api_key_file", "api_key_env and api_key_file are exclusive")
	case a.KeyEnv != "" && !validEnvKey(a.KeyEnv):
		return d.invalid("api_key_env", "%q is not a variable name", a.KeyEnv)
	case a.KeyFile != "" && !filepath.IsAbs(a.KeyFile):
		return d.invalid("api_key_file", "%q is not an absolute path", a.KeyFile)
	}
	return nil
}

// Key reads the API key from its source at the moment a run needs it:
// "" when the definition names none. A file must be a regular file owned
// by root that no one else may write, in directories only root may
// change (its key decides where a user's conversation goes); a variable
// must be set. Errors never quote a key.
func (a KeySource) Key() (string, error) {
	if a.KeyEnv != "" {
		k, ok := os.LookupEnv(a.KeyEnv)
		if !ok || k == "" {
			return "", abi.Errorf(syscall.ENOKEY, "run", "api_key_env names %s, which the server's environment does not set", a.KeyEnv)
		}
		return k, nil
	}
	if a.KeyFile == "" {
		return "", nil
	}
	// The directories on its way must be root's alone too: whoever may
	// write one could put there a link to another directory, and the key
	// would be whatever root-only file of that name it holds.
	if err := linksOwnedByServer(a.KeyFile, "", nil); err != nil {
		return "", abi.Errorf(abi.Errno(err), "run", "api_key_file %s: %s", a.KeyFile, abi.Message(err))
	}
	f, err := os.OpenFile(a.KeyFile, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return "", abi.Errorf(abi.Errno(err), "run", "api_key_file %s: %v", a.KeyFile, errors.Unwrap(err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", abi.Wrap("run", err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	if !st.Mode().IsRegular() || sys.Uid != 0 || st.Mode().Perm()&0o022 != 0 {
		return "", abi.Errorf(syscall.EACCES, "run", "api_key_file %s must be a regular file owned by root and writable by root alone", a.KeyFile)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile))
	if err != nil {
		return "", abi.Wrap("run", err)
	}
	return strings.TrimSpace(string(b)), nil
}
