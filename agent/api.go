package agent

import "github.com/ctxfs/ctxfs/agent/modelapi"

// apiConfig is the definition's API settings with the key read now and
// the definition's timeout applied.
func apiConfig(s Spec) (modelapi.Config, error) {
	cfg := s.Def.API.Config
	key, err := s.Def.API.Key()
	if err != nil {
		return cfg, err
	}
	cfg.APIKey = key
	if s.Def.Timeout > 0 {
		cfg.Timeout = s.Def.Timeout
	}
	return cfg, nil
}
