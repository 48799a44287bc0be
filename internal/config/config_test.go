package config_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/config"
)

func TestDevDefaults(t *testing.T) {
	c, err := config.LoadDev("", config.MapEnv(map[string]string{"HOME": "/home/ann"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Home != "/home/ann/.local/share/cocoonbox" {
		t.Errorf("home = %q", c.Home)
	}
	if c.CLIConfig != "/home/ann/.config/cocoonbox/config.yaml" {
		t.Errorf("cli config = %q", c.CLIConfig)
	}
	for name, addr := range map[string]string{"listen": c.Listen, "temporal": c.TemporalListen, "ui": c.TemporalUIListen, "s3": c.S3Listen, "engine": c.EngineListen} {
		if !strings.HasPrefix(addr, "127.0.0.1:") {
			t.Errorf("%s listens on %q by default, want loopback", name, addr)
		}
	}
	if c.Temporal.Address != "" || c.Postgres.URL != "" || c.S3.Endpoint != "" {
		t.Errorf("external services configured by default: %+v %+v %+v", c.Temporal, c.Postgres, c.S3)
	}
	if c.Temporal.Namespace != "default" || c.S3.Bucket != "cocoonbox" || !c.S3.PathStyle {
		t.Errorf("defaults: %+v %+v", c.Temporal, c.S3)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
}

func TestXDGDirs(t *testing.T) {
	c, err := config.LoadDev("", config.MapEnv(map[string]string{"HOME": "/h", "XDG_DATA_HOME": "/d", "XDG_CONFIG_HOME": "/c"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Home != "/d/cocoonbox" || c.CLIConfig != "/c/cocoonbox/config.yaml" {
		t.Fatalf("home %q cli %q", c.Home, c.CLIConfig)
	}
}

func TestPrecedenceFileThenEnv(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cocoonbox.yaml")
	writeFile(t, path, "home: /srv/cb\nlisten: 127.0.0.1:9000\npostgres:\n  url: postgres://file\ns3:\n  endpoint: http://file:9000\n  bucket: snaps\n")
	env := config.MapEnv(map[string]string{
		"HOME":                    "/root",
		"COCOONBOX_DATABASE_URL":  "postgres://env",
		"TEMPORAL_ADDRESS":        "temporal.example:7233",
		"TEMPORAL_TLS":            "true",
		"COCOONBOX_S3_PATH_STYLE": "false",
	})
	c, err := config.LoadDev(path, env)
	if err != nil {
		t.Fatal(err)
	}
	if c.Home != "/srv/cb" || c.Listen != "127.0.0.1:9000" {
		t.Errorf("file values not applied: %+v", c)
	}
	if c.Postgres.URL != "postgres://env" {
		t.Errorf("environment must win over the file: %q", c.Postgres.URL)
	}
	if c.Temporal.Address != "temporal.example:7233" || !c.Temporal.TLS {
		t.Errorf("temporal env: %+v", c.Temporal)
	}
	if c.S3.Endpoint != "http://file:9000" || c.S3.Bucket != "snaps" || c.S3.PathStyle {
		t.Errorf("s3: %+v", c.S3)
	}
}

func TestAgentGateway(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cocoonbox.yaml")
	writeFile(t, path, "agent:\n  provider: anthropic\n  base_url: https://gw.example/anthropic\n  models: [claude-a, claude-b]\n  model: claude-a\n")
	c, err := config.Load(path, config.MapEnv(map[string]string{
		"HOME": "/root", "COCOONBOX_AGENT_MODELS": " claude-a, claude-c ,", "COCOONBOX_AGENT_KEY_SECRET": "GW_KEY",
	}), config.DefaultAPI(config.MapEnv(nil)))
	if err != nil {
		t.Fatal(err)
	}
	want := config.Agent{Provider: "anthropic", BaseURL: "https://gw.example/anthropic", Model: "claude-a",
		Models: []string{"claude-a", "claude-c"}, KeySecret: "GW_KEY"}
	if !reflect.DeepEqual(c.Agent, want) {
		t.Errorf("agent: got %+v, want %+v", c.Agent, want)
	}
	// No section: the default gateway, valid.
	d, err := config.LoadDev("", config.MapEnv(map[string]string{"HOME": "/root"}))
	if err != nil || !reflect.DeepEqual(d.Agent, config.DefaultAgent()) || d.Validate() != nil {
		t.Errorf("without an agent section: %+v, %v", d.Agent, err)
	}
	// A section in part keeps nothing of the default's: no OpenAI model or key secret on an
	// anthropic gateway.
	writeFile(t, path, "agent:\n  provider: anthropic\n  base_url: https://gw.example\n")
	d, err = config.LoadDev(path, config.MapEnv(map[string]string{"HOME": "/root"}))
	if err != nil || d.Agent.Model != "" || d.Agent.KeySecret != "" || d.Validate() != nil {
		t.Errorf("a partial agent section: %+v, %v", d.Agent, err)
	}
	writeFile(t, path, "agent:\n  models: [claude-x]\n")
	if d, err = config.LoadDev(path, config.MapEnv(map[string]string{"HOME": "/root"})); err != nil {
		t.Fatal(err)
	}
	if err := d.Validate(); err == nil || !strings.Contains(err.Error(), "config agent.provider") {
		t.Errorf("a section without its provider: %v", err)
	}
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, file string
		env        map[string]string
		want       string
	}{
		{"malformed yaml", "listen: [oops\n", nil, "cocoonbox.yaml: line"},
		{"unknown key", "lsten: 127.0.0.1:1\n", nil, `field lsten not found`},
		{"wrong type", "listen:\n  a: b\n", nil, "cannot unmarshal"},
		{"bad env bool", "", map[string]string{"TEMPORAL_TLS": "maybe"}, `environment TEMPORAL_TLS: not a boolean: "maybe"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "cocoonbox.yaml")
			writeFile(t, path, tc.file)
			env := map[string]string{"HOME": "/root"}
			for k, v := range tc.env {
				env[k] = v
			}
			_, err := config.LoadDev(path, config.MapEnv(env))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error spans lines: %q", err)
			}
		})
	}
	if _, err := config.LoadDev(filepath.Join(dir, "missing.yaml"), config.MapEnv(nil)); err == nil || !strings.Contains(err.Error(), "missing.yaml: no such file or directory") {
		t.Fatalf("missing file: %v", err)
	}
}

func TestValidate(t *testing.T) {
	base := config.DefaultDev(config.MapEnv(map[string]string{"HOME": "/root"}))
	base.Agent = config.DefaultAgent()
	cases := []struct {
		name   string
		mutate func(*config.Dev)
		want   string
	}{
		{"relative home", func(c *config.Dev) { c.Home = "data" }, "config home: must be an absolute path"},
		{"bad listen", func(c *config.Dev) { c.Listen = "8420" }, "config listen: want host:port"},
		{"bad port", func(c *config.Dev) { c.S3Listen = "127.0.0.1:99999" }, "config s3_listen: bad port"},
		{"no host", func(c *config.Dev) { c.TemporalListen = ":7233" }, "config temporal_listen: give a host"},
		{"log level", func(c *config.Dev) { c.LogLevel = "loud" }, "config log_level"},
		{"bucket", func(c *config.Dev) { c.S3.Endpoint = "http://x"; c.S3.Bucket = "" }, "config s3.bucket"},
		{"engine runtime", func(c *config.Dev) { c.EngineRuntime = "docker" }, "config engine_runtime: must be auto, gvisor or process"},
		{"engine listen", func(c *config.Dev) { c.EngineListen = "x" }, "config engine_listen"},
		{"agent provider", func(c *config.Dev) { c.Agent.Provider = "gemini" }, "config agent.provider: must be openai, openai-responses or anthropic"},
		{"agent base url", func(c *config.Dev) { c.Agent.BaseURL = "gateway:8080" }, "config agent.base_url: must be an http or https URL"},
		{"agent model", func(c *config.Dev) { c.Agent.Models = []string{"a", "b"} }, `config agent.model: "gpt-4.1" is not among agent.models`},
		{"agent steps", func(c *config.Dev) { c.Agent.MaxSteps = -1 }, "config agent.max_steps"},
		{"agent price", func(c *config.Dev) { c.Agent.Prices = map[string]config.Price{"gpt-x": {Output: -1}} }, "config agent.prices.gpt-x: prices must not be negative"},
		{"quota", func(c *config.Dev) { c.Quota.Runs = -1 }, "config quota.runs_per_user: must be 0 (no limit) or more, got -1"},
		{"preview scheme", func(c *config.Dev) { c.PreviewDomain = "https://preview.example.com" }, "config preview_domain: want a host name"},
		{"preview port", func(c *config.Dev) { c.PreviewDomain = "localhost:0" }, "config preview_domain: \"localhost:0\" has a bad port"},
		{"preview label", func(c *config.Dev) { c.PreviewDomain = "pre_view.example.com" }, "config preview_domain: want a host name"},
	}
	for _, tc := range cases {
		c := base
		tc.mutate(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestTemporalListenOffLoopbackNeedsAuth: the embedded Temporal may listen off loopback only
// with its mutual TLS on; without auth a caller there could start any workflow.
func TestTemporalListenOffLoopbackNeedsAuth(t *testing.T) {
	base := config.DefaultDev(config.MapEnv(map[string]string{"HOME": "/root"}))
	for _, tc := range []struct {
		listen   string
		insecure bool
		want     string // "" validates
	}{
		{"0.0.0.0:7233", false, ""},
		{"127.0.0.1:7233", true, ""},
		{"localhost:7233", true, ""},
		{"[::1]:7233", true, ""},
		{"0.0.0.0:7233", true, "config temporal_listen: 0.0.0.0:7233 is off loopback, where temporal_insecure (no auth) is refused"},
		{"192.0.2.7:7233", true, "config temporal_listen: 192.0.2.7:7233 is off loopback"},
	} {
		c := base
		c.TemporalListen, c.TemporalInsecure = tc.listen, tc.insecure
		err := c.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("temporal_listen %s, temporal_insecure %v: err = %v, want %q", tc.listen, tc.insecure, err, tc.want)
		}
	}
	// An external Temporal makes temporal_listen moot.
	c := base
	c.TemporalListen, c.TemporalInsecure, c.Temporal.Address = "0.0.0.0:7233", true, "temporal.example:7233"
	if err := c.Validate(); err != nil {
		t.Errorf("external temporal: %v", err)
	}
	env := config.MapEnv(map[string]string{"HOME": "/root", "COCOONBOX_TEMPORAL_INSECURE": "true"})
	if c, err := config.LoadDev("", env); err != nil || !c.TemporalInsecure {
		t.Errorf("COCOONBOX_TEMPORAL_INSECURE: %v, %v", c.TemporalInsecure, err)
	}
}

func TestCLIRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "config.yaml")
	if err := config.WriteCLI(path, config.CLI{Endpoint: "http://127.0.0.1:8420", Token: "cbx_secret"}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("cli config mode %v, want 0600: it holds a token", fi.Mode().Perm())
	}
	c, err := config.LoadCLI(path, config.MapEnv(map[string]string{"COCOONBOX_ENDPOINT": "http://other:1"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Token != "cbx_secret" || c.Endpoint != "http://other:1" {
		t.Fatalf("got %+v", c)
	}
	c, err = config.LoadCLI(filepath.Join(t.TempDir(), "none.yaml"), config.MapEnv(nil))
	if err != nil || c != (config.CLI{}) {
		t.Fatalf("missing cli config: %+v %v", c, err)
	}
}

func TestOtherRoleDefaults(t *testing.T) {
	env := config.MapEnv(map[string]string{"HOME": "/root"})
	if a := config.DefaultAPI(env); a.Listen != config.DefaultAPIListen || a.Temporal.Address == "" {
		t.Errorf("api: %+v", a)
	}
	if w := config.DefaultWorker(env); w.S3.Bucket == "" || w.Temporal.Namespace == "" || w.Template != "desktop" || w.HealthListen != "127.0.0.1:8422" ||
		w.KeyringPath() != "/root/.local/share/cocoonbox/keys/master.key" {
		t.Errorf("worker: %+v", w)
	}
	e := config.DefaultEngine(env)
	if !strings.HasPrefix(e.Listen, "127.0.0.1:") || e.Runtime != "auto" || e.MaxSandboxes != 0 {
		t.Errorf("engine: %+v", e)
	}
	e.RootToken = "secret"
	if err := e.Validate(); err != nil {
		t.Errorf("engine defaults: %v", err)
	}
	e.Runtime = "docker"
	if err := e.Validate(); err == nil || !strings.Contains(err.Error(), "config runtime") {
		t.Errorf("engine runtime docker: got %v", err)
	}
	e, err := config.Load("", config.MapEnv(map[string]string{"HOME": "/root", "COCOONBOX_ENGINE_RUNTIME": "process"}), config.DefaultEngine(env))
	if err != nil || e.Runtime != "process" {
		t.Errorf("engine runtime from env: %+v %v", e, err)
	}
}

// TestEngineNeedsRootToken: the engine refuses to start without a root token, which would leave
// its node endpoints (claim, list, exec through any sandbox's relay) open to whoever reaches
// them.
func TestEngineNeedsRootToken(t *testing.T) {
	e := config.DefaultEngine(config.MapEnv(map[string]string{"HOME": "/root"}))
	for _, listen := range []string{"127.0.0.1:7777", "0.0.0.0:7777", "[::]:7777", "10.1.2.3:7777"} {
		e.Listen = listen
		if err := e.Validate(); err == nil || !strings.Contains(err.Error(), "config root_token: is required") {
			t.Errorf("no root token on %s: %v", listen, err)
		}
	}
}

// TestEngineInsecureOptions: running without a token is allowed on loopback only, and the
// process runtime only with the no-isolation key; each refusal names its key.
func TestEngineInsecureOptions(t *testing.T) {
	base := config.DefaultEngine(config.MapEnv(map[string]string{"HOME": "/root"}))
	cases := []struct {
		name   string
		mutate func(*config.Engine)
		want   string // "" when valid
	}{
		{"no token on loopback", func(c *config.Engine) { c.InsecureNoToken = true }, ""},
		{"no token on localhost", func(c *config.Engine) { c.InsecureNoToken = true; c.Listen = "localhost:7777" }, ""},
		{"no token on ::1", func(c *config.Engine) { c.InsecureNoToken = true; c.Listen = "[::1]:7777" }, ""},
		{"no token on all interfaces", func(c *config.Engine) { c.InsecureNoToken = true; c.Listen = "0.0.0.0:7777" },
			`config insecure_no_token: only on a loopback listen address, got "0.0.0.0:7777"`},
		{"no token on a LAN address", func(c *config.Engine) { c.InsecureNoToken = true; c.Listen = "192.168.1.5:7777" },
			"config insecure_no_token: only on a loopback"},
		{"token and no token", func(c *config.Engine) { c.InsecureNoToken = true; c.RootToken = "x" }, "config insecure_no_token: a root token is set too"},
		{"process without the opt-in", func(c *config.Engine) { c.RootToken = "x"; c.Runtime = "process" },
			"config runtime: process runs boxes on the host kernel with no sandbox; set insecure_no_isolation"},
		{"process with the opt-in", func(c *config.Engine) { c.RootToken = "x"; c.Runtime = "process"; c.InsecureNoIsolation = true }, ""},
		{"the opt-in without process", func(c *config.Engine) { c.RootToken = "x"; c.InsecureNoIsolation = true },
			`config insecure_no_isolation: applies only to runtime process, got "auto"`},
		{"negative max sandboxes", func(c *config.Engine) { c.RootToken = "x"; c.MaxSandboxes = -1 }, "config max_sandboxes: must not be negative"},
		{"negative overcommit", func(c *config.Engine) { c.RootToken = "x"; c.MemoryOvercommit = -1 }, "config memory_overcommit: must be between 0 and 100"},
		{"a box disk too small for a filesystem", func(c *config.Engine) { c.RootToken = "x"; c.BoxDiskMB = 8 }, "config box_disk_mb: a box's disk must be at least 16 MiB"},
		{"a box disk of its own size", func(c *config.Engine) { c.RootToken = "x"; c.BoxDiskMB = 4096 }, ""},
	}
	for _, tc := range cases {
		c := base
		tc.mutate(&c)
		err := c.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
	dev := config.DefaultDev(config.MapEnv(map[string]string{"HOME": "/root"}))
	dev.Agent = config.DefaultAgent()
	dev.EngineRuntime = "process"
	if err := dev.Validate(); err == nil || !strings.Contains(err.Error(), "config engine_runtime: process runs boxes on the host kernel") {
		t.Errorf("dev process without the opt-in: %v", err)
	}
	dev.EngineInsecureNoIsolation = true
	if err := dev.Validate(); err != nil {
		t.Errorf("dev process with the opt-in: %v", err)
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestWorkerConfig(t *testing.T) {
	env := config.MapEnv(map[string]string{
		"HOME": "/root", "COCOONBOX_DATABASE_URL": "postgres://db/cocoonbox",
		"COCOONBOX_SANDBOXD_URL": "http://127.0.0.1:7777", "COCOONBOX_KEYRING": "/etc/cocoonbox/master.key",
		"COCOONBOX_BOX_TEMPLATE": "desktop",
	})
	base, err := config.Load("", env, config.DefaultWorker(env))
	if err != nil {
		t.Fatal(err)
	}
	if err := base.Validate(); err != nil {
		t.Fatalf("worker from the environment: %v", err)
	}
	if base.KeyringPath() != "/etc/cocoonbox/master.key" || base.Template != "desktop" {
		t.Fatalf("worker from the environment: %+v", base)
	}
	if d, err := config.LoadDev("", config.MapEnv(map[string]string{"HOME": "/root", "COCOONBOX_DEV_NO_WORKER": "true"})); err != nil || !d.NoWorker {
		t.Fatalf("dev without a worker: %+v, %v", d, err)
	}
	cases := []struct {
		name   string
		mutate func(*config.Worker)
		want   string
	}{
		{"no sandbox url", func(c *config.Worker) { c.Sandbox.URL = "" }, "config sandbox.url: is required (COCOONBOX_SANDBOXD_URL)"},
		{"no database", func(c *config.Worker) { c.Postgres.URL = "" }, "config postgres.url: is required"},
		{"no temporal", func(c *config.Worker) { c.Temporal.Address = "" }, "config temporal.address: is required"},
		{"relative keyring", func(c *config.Worker) { c.Keyring = "master.key" }, "config keyring: must be an absolute path"},
		{"no template", func(c *config.Worker) { c.Template = "" }, "config template: is required"},
		{"health port", func(c *config.Worker) { c.HealthListen = "8422" }, "config health_listen: want host:port"},
		{"log level", func(c *config.Worker) { c.LogLevel = "loud" }, "config log_level"},
		{"node id", func(c *config.Worker) { c.Node = "Node A" }, "config node: must be a lowercase letter or digit"},
		{"node dead after", func(c *config.Worker) { c.NodeDeadAfter = -time.Second }, "config node_dead_after: must be from 0 (a minute) to 5m0s, got -1s"},
		{"node dead after long", func(c *config.Worker) { c.NodeDeadAfter = 6 * time.Minute }, "config node_dead_after: must be from 0 (a minute) to 5m0s, got 6m0s"},
	}
	for _, tc := range cases {
		c := base
		tc.mutate(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestExampleConfig: the documented example is a valid dev configuration.
func TestExampleConfig(t *testing.T) {
	c, err := config.LoadDev("../../deploy/cocoonbox.example.yaml", config.MapEnv(map[string]string{"HOME": "/root"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Agent.Provider != "openai" || c.Agent.KeySecret != "OPENAI_API_KEY" {
		t.Errorf("agent section: %+v", c.Agent)
	}
}

// TestQuotaDefaults checks that every role serving users has per-user limits unless an operator
// says otherwise, and that the file and the environment set them.
func TestQuotaDefaults(t *testing.T) {
	env := config.MapEnv(map[string]string{"HOME": "/root"})
	want := config.Quota{Boxes: 10, VCPUs: 24, MemoryMB: 32768, Runs: 4, Execs: 16, Streams: 32}
	if d, a := config.DefaultDev(env), config.DefaultAPI(env); d.Quota != want || a.Quota != want {
		t.Fatalf("default quotas: dev %+v, api %+v; want %+v", d.Quota, a.Quota, want)
	}
	path := filepath.Join(t.TempDir(), "api.yaml")
	if err := os.WriteFile(path, []byte("quota:\n  boxes_per_user: 3\n  streams_per_user: 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := config.Load(path, config.MapEnv(map[string]string{"HOME": "/root", "COCOONBOX_QUOTA_RUNS": "1"}), config.DefaultAPI(env))
	if err != nil {
		t.Fatal(err)
	}
	want.Boxes, want.Streams, want.Runs = 3, 0, 1
	if a.Quota != want {
		t.Fatalf("quota from file and environment: %+v, want %+v", a.Quota, want)
	}
	a.Postgres.URL, a.Sandbox.URL, a.Quota.VCPUs = "postgres://db", "http://engine", -2
	if err := a.Validate(); err == nil || !strings.Contains(err.Error(), "config quota.vcpus_per_user") {
		t.Fatalf("negative quota: %v", err)
	}
}

// TestBoxPolicyConfig: box_policy reads durations and a durable that may be false, and refuses
// negative values naming the field.
func TestBoxPolicyConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	env := config.MapEnv(map[string]string{"HOME": dir})
	write("home: " + filepath.Join(dir, "h") + "\nbox_policy:\n  idle: 0s\n  durable: false\n  snapshot_every: 2h\n  keep: 9\n  lease_idle: 5m\n")
	c, err := config.LoadDev(path, env)
	if err != nil {
		t.Fatal(err)
	}
	p := c.BoxPolicy
	if p.Idle == nil || *p.Idle != 0 || p.Durable == nil || *p.Durable || p.SnapshotEvery == nil || *p.SnapshotEvery != 2*time.Hour ||
		p.Keep != 9 || p.LeaseIdle != 5*time.Minute {
		t.Fatalf("box_policy read as %+v", p)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	write("home: " + filepath.Join(dir, "h") + "\nbox_policy:\n  snapshot_every: -1m\n")
	c, err = config.LoadDev(path, env)
	if err == nil {
		err = c.Validate()
	}
	if err == nil || !strings.Contains(err.Error(), "box_policy.snapshot_every") {
		t.Fatalf("a negative snapshot_every: %v", err)
	}
}
