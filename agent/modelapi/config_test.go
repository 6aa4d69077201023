package modelapi

import (
	"math"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	f := func(v float64) *float64 { return &v }
	good := Config{API: OpenAIChat, Endpoint: "https://api.openai.com/v1", ModelID: "gpt-4o", APIKey: "sk-abc"}
	if err := good.Validate(); err != nil {
		t.Fatalf("%+v: %v", good, err)
	}
	for _, ok := range []func(*Config){
		func(c *Config) { c.API, c.Endpoint = AnthropicMessages, "https://api.anthropic.com" },
		func(c *Config) { c.Endpoint = "http://127.0.0.1:11434/v1" },
		func(c *Config) { c.Endpoint = "http://[::1]:8080/v1/" },
		func(c *Config) { c.APIKey = "" },
		func(c *Config) { c.Temperature = f(2) },
		func(c *Config) { c.Temperature = f(0) },
		func(c *Config) { c.API, c.Temperature = AnthropicMessages, f(1) },
		func(c *Config) { c.MaxTokens, c.Timeout, c.IdleTimeout = 1, time.Second, time.Second },
	} {
		c := good
		ok(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	for field, bad := range map[string]func(*Config){
		"api":                                  func(c *Config) { c.API = "openai" },
		"endpoint":                             func(c *Config) { c.Endpoint = "api.openai.com/v1" },
		"endpoint: scheme \"ftp\"":             func(c *Config) { c.Endpoint = "ftp://example.com" },
		"endpoint: no host":                    func(c *Config) { c.Endpoint = "http:///v1" },
		"endpoint: not a URL":                  func(c *Config) { c.Endpoint = "http://exa mple.com/%zz" },
		"endpoint: must not carry credentials": func(c *Config) { c.Endpoint = "https://user:sk-abc@example.com/v1" },
		"endpoint: https://example.com/v1… must not have a query":             func(c *Config) { c.Endpoint = "https://example.com/v1?key=sk-abc" },
		"endpoint: https://example.com/v1… must not have a query or fragment": func(c *Config) { c.Endpoint = "https://example.com/v1#sk-abc" },
		"model_id":          func(c *Config) { c.ModelID = " " },
		"max_tokens":        func(c *Config) { c.MaxTokens = -1 },
		"temperature: 2.5":  func(c *Config) { c.Temperature = f(2.5) },
		"temperature: -0.1": func(c *Config) { c.Temperature = f(-0.1) },
		"temperature: NaN":  func(c *Config) { c.Temperature = f(math.NaN()) },
		"temperature: 1.5 is out of 0..1 for anthropic": func(c *Config) {
			c.API, c.Endpoint, c.Temperature = AnthropicMessages, "https://x", f(1.5)
		},
		"timeout":      func(c *Config) { c.Timeout = -time.Second },
		"idle timeout": func(c *Config) { c.IdleTimeout = -time.Second },
		"api key":      func(c *Config) { c.APIKey = "sk-abc\r\nX-Evil: 1" },
	} {
		c := good
		bad(&c)
		err := c.Validate()
		testkit.WantErrno(t, "config", err, syscall.EINVAL, field)
		if err != nil && strings.Contains(err.Error(), "sk-abc") {
			t.Errorf("%s: the key is in %q", field, err)
		}
	}
}
