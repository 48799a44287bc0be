package config

import (
	"fmt"
	"net/url"
	"slices"
)

// Agent is the model gateway agent runs use. The gateway URL is the operator's: users pick a
// model (among Models, when the list is not empty), never where the box's model calls go.
type Agent struct {
	// Provider is the gateway's wire protocol: openai (chat completions), openai-responses
	// (responses) or anthropic (messages).
	Provider string `yaml:"provider" env:"COCOONBOX_AGENT_PROVIDER"`
	// BaseURL is the gateway's URL as the provider's client takes it, e.g.
	// https://api.openai.com/v1 or https://api.anthropic.com.
	BaseURL string `yaml:"base_url" env:"COCOONBOX_AGENT_BASE_URL"`
	// Model is the model of a run that does not name one; empty makes the model required.
	Model string `yaml:"model" env:"COCOONBOX_AGENT_MODEL"`
	// Models are the models runs may use; empty allows any the gateway knows.
	Models []string `yaml:"models" env:"COCOONBOX_AGENT_MODELS"`
	// KeySecret names the vault secret, in the vault of the run's starter, holding the gateway
	// key; empty sends no key (a gateway that authenticates otherwise).
	KeySecret string `yaml:"key_secret" env:"COCOONBOX_AGENT_KEY_SECRET"`
	// MaxSteps bounds a run; 0 is the workflow's default (50).
	MaxSteps int `yaml:"max_steps" env:"COCOONBOX_AGENT_MAX_STEPS"`
	// FallbackModels are tried in order when a step's model still fails with an error worth
	// another try (overloaded, 5xx) after the agent's retries; each must be among Models when
	// those are set.
	FallbackModels []string `yaml:"fallback_models" env:"COCOONBOX_AGENT_FALLBACK_MODELS"`
	// Prices are what the gateway charges per model, which turn the usage ledger's tokens into
	// a cost (`cocoonbox usage`); a model without a price costs 0.
	Prices map[string]Price `yaml:"prices"`
}

// Price is a model's price in US dollars per million tokens.
type Price struct {
	Input float64 `yaml:"input"`
	// CachedInput is the price of the prompt tokens the provider's cache served; 0 is Input.
	CachedInput float64 `yaml:"cached_input"`
	Output      float64 `yaml:"output"`
}

// Cost is the price of a model's tokens in US dollars, input including cached.
func (p Price) Cost(input, cached, output int64) float64 {
	cachedPrice := p.CachedInput
	if cachedPrice == 0 {
		cachedPrice = p.Input
	}
	return (float64(input-cached)*p.Input + float64(cached)*cachedPrice + float64(output)*p.Output) / 1e6
}

// DefaultAgent is the gateway of a configuration without an agent section: OpenAI's API with the
// key in each user's OPENAI_API_KEY vault secret. A section given in part takes none of it.
func DefaultAgent() Agent {
	return Agent{Provider: "openai", BaseURL: "https://api.openai.com/v1", Model: "gpt-4.1", KeySecret: "OPENAI_API_KEY"}
}

// unset reports whether no file or variable set any of the section.
func (a *Agent) unset() bool {
	return a.Provider == "" && a.BaseURL == "" && a.Model == "" && len(a.Models) == 0 && a.KeySecret == "" && a.MaxSteps == 0 &&
		len(a.Prices) == 0 && len(a.FallbackModels) == 0
}

// fill gives a section nobody set the defaults (DefaultAgent); a section set in part keeps only
// what was set.
func (a *Agent) fill() {
	if a.unset() {
		*a = DefaultAgent()
	}
}

// Validate checks the agent section and names the first bad field. An unset section (no agent
// runs on this server) is valid; one set in part needs its provider and base URL.
func (a *Agent) Validate() error {
	if a.unset() {
		return nil
	}
	if a.Provider != "openai" && a.Provider != "anthropic" && a.Provider != "openai-responses" {
		return fmt.Errorf("config agent.provider: must be openai, openai-responses or anthropic, got %q", a.Provider)
	}
	u, err := url.Parse(a.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("config agent.base_url: must be an http or https URL, got %q", a.BaseURL)
	}
	if a.Model != "" && len(a.Models) > 0 && !slices.Contains(a.Models, a.Model) {
		return fmt.Errorf("config agent.model: %q is not among agent.models", a.Model)
	}
	if a.MaxSteps < 0 {
		return fmt.Errorf("config agent.max_steps: must not be negative, got %d", a.MaxSteps)
	}
	for _, m := range a.FallbackModels {
		if len(a.Models) > 0 && !slices.Contains(a.Models, m) {
			return fmt.Errorf("config agent.fallback_models: %q is not among agent.models", m)
		}
	}
	for model, p := range a.Prices {
		if p.Input < 0 || p.CachedInput < 0 || p.Output < 0 {
			return fmt.Errorf("config agent.prices.%s: prices must not be negative, got %+v", model, p)
		}
	}
	return nil
}
