// Package config fills one configuration struct per role (dev, api, worker, engine, CLI) from
// defaults, a YAML file, the environment and flags, in that order of precedence. It is the only
// package that reads the environment, so every other package takes its settings as values and
// tests can construct them directly.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/loomhand/cocoonbox"
)

// Lookup finds an environment variable; os.LookupEnv in production, a map in tests.
type Lookup func(key string) (string, bool)

// Env returns the process environment as a Lookup.
func Env() Lookup { return os.LookupEnv }

// MapEnv returns a Lookup over m, for tests.
func MapEnv(m map[string]string) Lookup {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// Default listen addresses. Everything binds to loopback unless configured otherwise.
const (
	DefaultAPIListen        = "127.0.0.1:8420"
	DefaultS3Listen         = "127.0.0.1:8421"
	DefaultTemporalListen   = "127.0.0.1:7233"
	DefaultTemporalUIListen = "127.0.0.1:8233"
	DefaultEngineListen     = "127.0.0.1:7777"
	// DefaultWorkerHealthListen serves a worker's /healthz and /metrics, loopback only: they
	// need no token (see config Worker.HealthListen).
	DefaultWorkerHealthListen = "127.0.0.1:8422"
	DefaultBoxTemplate        = "desktop" // the image boxes are claimed from: XFCE, Xvnc, chromium
	DefaultNamespace          = "default"
	DefaultBucket             = "cocoonbox"
	DefaultRegion             = "us-east-1"
)

// Temporal says how to reach a Temporal cluster. The environment variable names are the Temporal
// SDK's environment configuration, so a shell set up for the temporal CLI works unchanged.
type Temporal struct {
	Address       string `yaml:"address" env:"TEMPORAL_ADDRESS"`
	Namespace     string `yaml:"namespace" env:"TEMPORAL_NAMESPACE"`
	APIKey        string `yaml:"api_key" env:"TEMPORAL_API_KEY"`
	TLS           bool   `yaml:"tls" env:"TEMPORAL_TLS"`
	TLSCertPath   string `yaml:"tls_client_cert_path" env:"TEMPORAL_TLS_CLIENT_CERT_PATH"`
	TLSKeyPath    string `yaml:"tls_client_key_path" env:"TEMPORAL_TLS_CLIENT_KEY_PATH"`
	TLSCAPath     string `yaml:"tls_server_ca_cert_path" env:"TEMPORAL_TLS_SERVER_CA_CERT_PATH"`
	TLSServerName string `yaml:"tls_server_name" env:"TEMPORAL_TLS_SERVER_NAME"`
}

// Postgres says where the database is. An empty URL in dev means the managed cluster.
type Postgres struct {
	URL string `yaml:"url" env:"COCOONBOX_DATABASE_URL"`
}

// S3 says where snapshot objects go. An empty endpoint in dev means the embedded S3 server.
type S3 struct {
	Endpoint  string `yaml:"endpoint" env:"COCOONBOX_S3_ENDPOINT"`
	Region    string `yaml:"region" env:"COCOONBOX_S3_REGION"`
	Bucket    string `yaml:"bucket" env:"COCOONBOX_S3_BUCKET"`
	AccessKey string `yaml:"access_key" env:"COCOONBOX_S3_ACCESS_KEY"`
	SecretKey string `yaml:"secret_key" env:"COCOONBOX_S3_SECRET_KEY"`
	PathStyle bool   `yaml:"path_style" env:"COCOONBOX_S3_PATH_STYLE"`
}

// Network is how the local engine gives boxes on the egress lane a NIC: the uplink their traffic
// leaves through (NATed, under each box's egress policy), the addresses they get and the
// resolvers they use. An empty Uplink gives no box a network (the none lane only).
type Network struct {
	// Uplink is the interface box traffic leaves through: a name, "auto" for the interface of
	// the host's default route, or "none" (or empty) for no network. `cocoonbox dev` takes empty
	// as auto.
	Uplink string `yaml:"uplink" env:"COCOONBOX_ENGINE_NETWORK_UPLINK"`
	// UplinkNetns names (as `ip netns` does) a namespace that holds Uplink and routes for the
	// boxes; empty is the host's own, which then forwards IPv4.
	UplinkNetns string `yaml:"uplink_netns" env:"COCOONBOX_ENGINE_NETWORK_UPLINK_NETNS"`
	// Pool is the IPv4 CIDR box addresses come from, a /30 each; empty means 10.88.0.0/16.
	Pool string `yaml:"pool" env:"COCOONBOX_ENGINE_NETWORK_POOL"`
	// DNS are the resolvers boxes use, comma-separated IPv4 addresses; empty means the host's
	// /etc/resolv.conf nameservers that a box can reach (not loopback).
	DNS string `yaml:"dns" env:"COCOONBOX_ENGINE_NETWORK_DNS"`
}

// Validate names the first malformed setting; key prefixes the names.
func (n Network) Validate(key string) error {
	if n.Uplink == "" || n.Uplink == "none" {
		if n.UplinkNetns != "" || n.Pool != "" || n.DNS != "" {
			return fmt.Errorf("config %s.uplink: is required when the other network settings are set", key)
		}
		return nil
	}
	if n.Pool != "" {
		p, err := netip.ParsePrefix(n.Pool)
		if err != nil || !p.Addr().Is4() || p.Bits() > 30 {
			return fmt.Errorf("config %s.pool: want an IPv4 CIDR of /30 or wider, got %q", key, n.Pool)
		}
	}
	for d := range strings.SplitSeq(n.DNS, ",") {
		if d = strings.TrimSpace(d); d == "" {
			continue
		}
		if a, err := netip.ParseAddr(d); err != nil || !a.Is4() {
			return fmt.Errorf("config %s.dns: want IPv4 addresses separated by commas, got %q", key, d)
		}
	}
	return nil
}

// Sandbox says where the sandbox engine (sandboxd API) is.
type Sandbox struct {
	URL   string `yaml:"url" env:"COCOONBOX_SANDBOXD_URL"`
	Token string `yaml:"token" env:"COCOONBOX_SANDBOXD_TOKEN"`
}

// Dev is the configuration of `cocoonbox dev`: every role in one process tree, with embedded
// Temporal, PostgreSQL and S3 unless an external one is configured.
type Dev struct {
	Home             string `yaml:"home" env:"COCOONBOX_HOME"`
	LogLevel         string `yaml:"log_level" env:"COCOONBOX_LOG_LEVEL"`
	Listen           string `yaml:"listen" env:"COCOONBOX_LISTEN"`
	TemporalListen   string `yaml:"temporal_listen" env:"COCOONBOX_TEMPORAL_LISTEN"`
	TemporalUIListen string `yaml:"temporal_ui_listen" env:"COCOONBOX_TEMPORAL_UI_LISTEN"`
	// TemporalInsecure serves the embedded Temporal without mutual TLS and its UI without login;
	// only with a loopback temporal_listen.
	TemporalInsecure bool   `yaml:"temporal_insecure" env:"COCOONBOX_TEMPORAL_INSECURE"`
	S3Listen         string `yaml:"s3_listen" env:"COCOONBOX_S3_LISTEN"`
	CLIConfig        string `yaml:"cli_config" env:"COCOONBOX_CLI_CONFIG"`
	User             string `yaml:"user" env:"COCOONBOX_DEV_USER"`
	// EngineListen is the local sandbox engine's address (when sandbox.url is empty).
	EngineListen string `yaml:"engine_listen" env:"COCOONBOX_ENGINE_LISTEN"`
	// EngineRuntime runs the local engine's boxes: auto (gvisor, or a startup error), gvisor, or
	// process (no sandbox; only with EngineInsecureNoIsolation).
	EngineRuntime string `yaml:"engine_runtime" env:"COCOONBOX_ENGINE_RUNTIME"`
	// EngineInsecureNoIsolation allows engine_runtime process: boxes on the host kernel.
	EngineInsecureNoIsolation bool `yaml:"engine_insecure_no_isolation" env:"COCOONBOX_ENGINE_INSECURE_NO_ISOLATION"`
	// EngineBoxDiskMB is the local engine's disk quota per box; 0 means each size's own.
	EngineBoxDiskMB int `yaml:"engine_box_disk_mb" env:"COCOONBOX_ENGINE_BOX_DISK_MB"`
	// EngineMemoryOvercommit is the local engine's memory_overcommit (Engine.MemoryOvercommit).
	EngineMemoryOvercommit float64 `yaml:"engine_memory_overcommit" env:"COCOONBOX_ENGINE_MEMORY_OVERCOMMIT"`
	// EngineMaxSandboxes is the local engine's max_sandboxes (Engine.MaxSandboxes); 0 derives
	// it from host memory.
	EngineMaxSandboxes int `yaml:"engine_max_sandboxes" env:"COCOONBOX_ENGINE_MAX_SANDBOXES"`
	// EngineNoDiskExport runs the local engine without disk export, as upstream sandboxd has
	// none: snapshots then go through the in-box agent's State service.
	EngineNoDiskExport bool `yaml:"engine_no_disk_export" env:"COCOONBOX_ENGINE_NO_DISK_EXPORT"`
	// EngineNetwork gives the local engine's boxes on the egress lane a NIC.
	EngineNetwork Network `yaml:"engine_network"`
	// ImageCache is where built box images are found; empty means ~/.cache/cocoonbox/images.
	ImageCache string   `yaml:"image_cache" env:"COCOONBOX_IMAGE_CACHE"`
	Temporal   Temporal `yaml:"temporal"`
	Postgres   Postgres `yaml:"postgres"`
	S3         S3       `yaml:"s3"`
	// Sandbox, when its URL is set, is an external sandboxd used instead of the local engine.
	Sandbox Sandbox `yaml:"sandbox"`
	// Template is the image boxes are claimed from ("desktop"; "base" is the small test image).
	Template string `yaml:"template" env:"COCOONBOX_BOX_TEMPLATE"`
	// Agent is the model gateway of agent runs.
	Agent Agent `yaml:"agent"`
	// Quota bounds what each user may hold and run at once.
	Quota Quota `yaml:"quota"`
	// Recordings is how long runs' desktop recordings are kept.
	Recordings Recordings `yaml:"recordings"`
	// BoxNetwork is the egress policy of a box whose create names none: none or internet.
	BoxNetwork string `yaml:"box_network" env:"COCOONBOX_BOX_NETWORK"`
	// PreviewDomain serves each box port's preview on a host of its own under it (see API);
	// empty is localhost:<the API's port> (browsers resolve every *.localhost to loopback), none
	// turns host previews off.
	PreviewDomain string `yaml:"preview_domain" env:"COCOONBOX_PREVIEW_DOMAIN"`
	// CreateWait bounds how long a box create waits for the engine to hand out a sandbox (its
	// image not built, no capacity), saying what it waits for, before it fails with the reason;
	// 0 is 10 minutes.
	CreateWait time.Duration `yaml:"create_wait" env:"COCOONBOX_CREATE_WAIT"`
	// NodeDeadAfter is how long an engine node's heartbeat may be silent before the stack's
	// worker marks it lost (the stack's own node "local", and any other registered beside it);
	// 0 is a minute, as for serve worker.
	NodeDeadAfter time.Duration `yaml:"node_dead_after" env:"COCOONBOX_NODE_DEAD_AFTER"`
	// BoxPolicy is the default policy of new boxes, under each user's own defaults.
	BoxPolicy BoxPolicy `yaml:"box_policy"`
	// Webhooks is how the stack's worker delivers webhooks.
	Webhooks Webhooks `yaml:"webhooks"`
	// NoWorker starts the stack without its in-process Temporal worker, for tests and for running
	// workers separately (`cocoonbox serve worker`); box operations wait until a worker polls.
	NoWorker bool `yaml:"no_worker" env:"COCOONBOX_DEV_NO_WORKER"`
	// Pools are the local engine's warm pools, set at every start (default: 2 small boxes of the
	// box template); `pools: []` runs none. `cocoonbox admin pools` changes them until the next start.
	Pools []Pool `yaml:"pools"`
}

// Webhooks is how a worker delivers webhooks.
type Webhooks struct {
	// AllowPrivate lets deliveries reach loopback, private and link-local addresses: a receiver
	// on this deployment's own network. Off (the default), a user's URL cannot reach them.
	AllowPrivate bool `yaml:"allow_private" env:"COCOONBOX_WEBHOOKS_ALLOW_PRIVATE"`
	// RetryFirst is the wait before a failed delivery's first retry, doubling to 10 minutes; 0
	// is 10 seconds.
	RetryFirst time.Duration `yaml:"retry_first" env:"COCOONBOX_WEBHOOKS_RETRY_FIRST"`
}

// BoxPolicy is the server's default policy for new boxes; a field left out keeps the built-in
// default (idle 15m, durable, snapshot every 30m, keep 5, lease idle 2m, runs not recorded).
type BoxPolicy struct {
	Idle          *time.Duration `yaml:"idle"` // 0: never hibernate by itself
	Durable       *bool          `yaml:"durable"`
	SnapshotEvery *time.Duration `yaml:"snapshot_every"` // 0: never seal a running box by itself
	Keep          int            `yaml:"keep"`
	LeaseIdle     time.Duration  `yaml:"lease_idle"`
	RecordRuns    bool           `yaml:"record_runs"` // record the desktop of every agent run
}

// validate names the first field of p no box can take.
func (p BoxPolicy) validate() error {
	switch {
	case p.Idle != nil && *p.Idle < 0:
		return fmt.Errorf("config box_policy.idle: must not be negative, got %s", *p.Idle)
	case p.SnapshotEvery != nil && *p.SnapshotEvery < 0:
		return fmt.Errorf("config box_policy.snapshot_every: must not be negative, got %s", *p.SnapshotEvery)
	case p.Keep < 0 || p.Keep > 1000:
		return fmt.Errorf("config box_policy.keep: must be 1 to 1000, got %d", p.Keep)
	case p.LeaseIdle < 0:
		return fmt.Errorf("config box_policy.lease_idle: must not be negative, got %s", p.LeaseIdle)
	}
	return nil
}

// Pool is one warm pool: Warm boxes of Template (empty: the box template) and Size (empty:
// small) booted ahead of creates, on the network lane of box_network.
type Pool struct {
	Template string `yaml:"template"`
	Size     string `yaml:"size"`
	Warm     int    `yaml:"warm"`
}

// MaxPoolWarm bounds one pool: warm boxes cost memory whether or not anyone claims them.
const MaxPoolWarm = 64

// validatePools names the first pool a config cannot take.
func validatePools(pools []Pool) error {
	for i, p := range pools {
		if p.Size != "" && !slices.Contains(cocoonbox.Sizes, cocoonbox.Size(p.Size)) {
			return fmt.Errorf("config pools[%d].size: unknown size %q, want one of %v", i, p.Size, cocoonbox.Sizes)
		}
		if p.Warm < 0 || p.Warm > MaxPoolWarm {
			return fmt.Errorf("config pools[%d].warm: must be 0 to %d, got %d", i, MaxPoolWarm, p.Warm)
		}
	}
	return nil
}

// API is the configuration of `cocoonbox serve api`.
type API struct {
	Home     string   `yaml:"home" env:"COCOONBOX_HOME"`
	LogLevel string   `yaml:"log_level" env:"COCOONBOX_LOG_LEVEL"`
	Listen   string   `yaml:"listen" env:"COCOONBOX_LISTEN"`
	Temporal Temporal `yaml:"temporal"`
	Postgres Postgres `yaml:"postgres"`
	// Sandbox is the engine exec and file calls reach boxes through (after the API's own checks).
	Sandbox Sandbox `yaml:"sandbox"`
	// S3 is the workers' bucket, where the API reads runs' desktop recordings for replay; with no
	// bucket set, replays are refused as not configured.
	S3 S3 `yaml:"s3"`
	// Keyring is the master key file that seals sandbox tokens and vault keys; the same file as
	// the workers'. Empty means <home>/keys/master.key.
	Keyring string `yaml:"keyring" env:"COCOONBOX_KEYRING"`
	// Agent is the model gateway of agent runs.
	Agent Agent `yaml:"agent"`
	// Quota bounds what each user may hold and run at once.
	Quota Quota `yaml:"quota"`
	// BoxNetwork is the egress policy of a box whose create names none: none or internet.
	BoxNetwork string `yaml:"box_network" env:"COCOONBOX_BOX_NETWORK"`
	// MaxDesktopConnections caps one box's open desktop connections on this process; 0 means
	// the API's default (api.DefaultMaxDesktopConns).
	MaxDesktopConnections int `yaml:"max_desktop_connections" env:"COCOONBOX_MAX_DESKTOP_CONNECTIONS"`
	// CreateWait is Dev.CreateWait.
	CreateWait time.Duration `yaml:"create_wait" env:"COCOONBOX_CREATE_WAIT"`
	// BoxPolicy is Dev.BoxPolicy.
	BoxPolicy BoxPolicy `yaml:"box_policy"`
	// PreviewDomain, when set (host or host:port, e.g. preview.example.com with a wildcard DNS
	// record and certificate for *.preview.example.com), serves each box port's preview at
	// p{port}-{box hex}.{domain}, its own origin, which browsers open from the web app.
	PreviewDomain string `yaml:"preview_domain" env:"COCOONBOX_PREVIEW_DOMAIN"`
}

// Validate checks the api configuration and names the first bad field.
func (c *API) Validate() error {
	if err := validateHome(c.Home); err != nil {
		return err
	}
	if err := c.BoxPolicy.validate(); err != nil {
		return err
	}
	if err := validateBoxNetwork(c.BoxNetwork); err != nil {
		return err
	}
	if err := validatePreviewDomain(c.PreviewDomain, false); err != nil {
		return err
	}
	if err := validateLogLevel(c.LogLevel); err != nil {
		return err
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("config listen: %q is not host:port", c.Listen)
	}
	if err := validateServices(c.Temporal, c.Postgres, c.Sandbox, c.Keyring); err != nil {
		return err
	}
	if err := c.Quota.Validate(); err != nil {
		return err
	}
	if c.MaxDesktopConnections < 0 {
		return fmt.Errorf("config max_desktop_connections: %d is negative; 0 means the default", c.MaxDesktopConnections)
	}
	return c.Agent.Validate()
}

// KeyringPath returns the keyring file: Keyring, or <home>/keys/master.key when it is empty.
func (c *API) KeyringPath() string {
	return keyringPath(c.Home, c.Keyring)
}

// Worker is the configuration of `cocoonbox serve worker`.
type Worker struct {
	Home     string   `yaml:"home" env:"COCOONBOX_HOME"`
	LogLevel string   `yaml:"log_level" env:"COCOONBOX_LOG_LEVEL"`
	Temporal Temporal `yaml:"temporal"`
	Postgres Postgres `yaml:"postgres"`
	S3       S3       `yaml:"s3"`
	Sandbox  Sandbox  `yaml:"sandbox"`
	// Keyring is the master key file that seals sandbox tokens; empty means
	// <home>/keys/master.key (see KeyringPath). Every worker and API of one deployment shares it.
	Keyring string `yaml:"keyring" env:"COCOONBOX_KEYRING"`
	// Template is the image boxes are claimed from.
	Template string `yaml:"template" env:"COCOONBOX_BOX_TEMPLATE"`
	// SnapshotUploadMiBps caps each snapshot upload at this many MiB per second, so snapshots do
	// not starve the node's uplink; 0 is no cap.
	SnapshotUploadMiBps int `yaml:"snapshot_upload_mibps" env:"COCOONBOX_SNAPSHOT_UPLOAD_MIBPS"`
	// Webhooks is how this worker delivers webhooks.
	Webhooks Webhooks `yaml:"webhooks"`
	// Agent is the model gateway of agent runs: the worker sends every run's model calls there,
	// with the key from the section's vault secret, whatever a workflow's input says.
	Agent Agent `yaml:"agent"`
	// HealthListen serves /healthz (each dependency's state) and /metrics without a token;
	// keep it on loopback or a network only monitoring reaches. "off" serves neither.
	HealthListen string `yaml:"health_listen" env:"COCOONBOX_WORKER_HEALTH_LISTEN"`
	// Node, when set, is the ID of the engine node this worker runs beside (its sandbox.url):
	// the worker registers the node and keeps its record current (`cocoonbox admin nodes`).
	Node string `yaml:"node" env:"COCOONBOX_NODE"`
	// NodeDeadAfter is how long a node's heartbeat may be silent before the node is marked lost;
	// 0 is nodes.DefaultDeadAfter.
	NodeDeadAfter time.Duration `yaml:"node_dead_after" env:"COCOONBOX_NODE_DEAD_AFTER"`
	// Recordings is how long runs' desktop recordings are kept.
	Recordings Recordings `yaml:"recordings"`
}

// HealthOff is the HealthListen that serves no health endpoint.
const HealthOff = "off"

// Engine is the configuration of `cocoonbox serve engine`.
type Engine struct {
	Home      string `yaml:"home" env:"COCOONBOX_HOME"`
	LogLevel  string `yaml:"log_level" env:"COCOONBOX_LOG_LEVEL"`
	Listen    string `yaml:"listen" env:"COCOONBOX_ENGINE_LISTEN"`
	RootToken string `yaml:"root_token" env:"COCOONBOX_ENGINE_TOKEN"`
	// InsecureNoToken runs the engine without a root token, its node endpoints open to anyone
	// who reaches them; allowed on a loopback listen address only.
	InsecureNoToken bool `yaml:"insecure_no_token" env:"COCOONBOX_ENGINE_INSECURE_NO_TOKEN"`
	// Runtime runs the boxes: gvisor, process, or auto (gvisor, or a startup error saying why).
	Runtime string `yaml:"runtime" env:"COCOONBOX_ENGINE_RUNTIME"`
	// InsecureNoIsolation allows runtime process, which runs boxes on the host kernel with no
	// sandbox, for one user.
	InsecureNoIsolation bool `yaml:"insecure_no_isolation" env:"COCOONBOX_ENGINE_INSECURE_NO_ISOLATION"`
	// MaxSandboxes caps the boxes the engine runs; 0 derives it from host memory (one per 512
	// MiB beyond 1 GiB).
	MaxSandboxes int `yaml:"max_sandboxes" env:"COCOONBOX_ENGINE_MAX_SANDBOXES"`
	// MemoryOvercommit is how many times the host's memory (less 1 GiB) the boxes' sizes may
	// add up to; 0 means 1, no overcommit.
	MemoryOvercommit float64 `yaml:"memory_overcommit" env:"COCOONBOX_ENGINE_MEMORY_OVERCOMMIT"`
	// BoxDiskMB is the disk quota of each box the engine starts; 0 means each size's own (10
	// GiB for small, doubling with each size).
	BoxDiskMB int `yaml:"box_disk_mb" env:"COCOONBOX_ENGINE_BOX_DISK_MB"`
	// Network gives the engine's boxes on the egress lane a NIC.
	Network Network `yaml:"network"`
	// ImageCache is where built box images are found; empty means ~/.cache/cocoonbox/images,
	// the default of image/build.sh, which reads the same variable.
	ImageCache string `yaml:"image_cache" env:"COCOONBOX_IMAGE_CACHE"`
}

// EngineRuntimes are the values Engine.Runtime accepts.
var EngineRuntimes = []string{"auto", "gvisor", "process"}

// CLI is the configuration of the cocoonbox command-line client, kept in
// ~/.config/cocoonbox/config.yaml and written there by `cocoonbox dev`.
type CLI struct {
	Endpoint string `yaml:"endpoint" env:"COCOONBOX_ENDPOINT"`
	Token    string `yaml:"token" env:"COCOONBOX_TOKEN"`
}

// DefaultDev returns the dev configuration before any file, environment or flag applies.
func DefaultDev(env Lookup) Dev {
	return Dev{
		Home:             defaultHome(env),
		LogLevel:         "info",
		Listen:           DefaultAPIListen,
		TemporalListen:   DefaultTemporalListen,
		TemporalUIListen: DefaultTemporalUIListen,
		S3Listen:         DefaultS3Listen,
		CLIConfig:        DefaultCLIConfigPath(env),
		User:             "admin",
		EngineListen:     DefaultEngineListen,
		EngineRuntime:    "auto",
		Template:         DefaultBoxTemplate,
		Temporal:         Temporal{Namespace: DefaultNamespace},
		S3:               S3{Region: DefaultRegion, Bucket: DefaultBucket, PathStyle: true},
		Quota:            DefaultQuota(),
		Recordings:       DefaultRecordings(),
		Pools:            []Pool{{Size: string(cocoonbox.SizeSmall), Warm: 2}},
	}
}

// LoadDev reads the dev configuration: defaults, then the YAML file at path (if path is not
// empty), then the environment. Flags are applied by the caller, then Validate.
func LoadDev(path string, env Lookup) (Dev, error) { return Load(path, env, DefaultDev(env)) }

// MaxNodeDeadAfter bounds node_dead_after. A run whose box was on a node that died goes on once
// the heartbeats mark the node lost and the box comes back elsewhere; the run's step is tried
// for about eight minutes (workflows' stepTries), which a longer silence would outlast.
const MaxNodeDeadAfter = 5 * time.Minute

func validateNodeDeadAfter(d time.Duration) error {
	if d < 0 || d > MaxNodeDeadAfter {
		return fmt.Errorf("config node_dead_after: must be from 0 (a minute) to %s, got %s", MaxNodeDeadAfter, d)
	}
	return nil
}

// Validate checks the dev configuration and names the first bad field.
func (c *Dev) Validate() error {
	if err := validateHome(c.Home); err != nil {
		return err
	}
	if err := validateNodeDeadAfter(c.NodeDeadAfter); err != nil {
		return err
	}
	if c.Template == "" {
		return errors.New("config template: is required (COCOONBOX_BOX_TEMPLATE)")
	}
	if err := validateLogLevel(c.LogLevel); err != nil {
		return err
	}
	for _, f := range []struct{ name, addr string }{
		{"listen", c.Listen}, {"temporal_listen", c.TemporalListen},
		{"temporal_ui_listen", c.TemporalUIListen}, {"s3_listen", c.S3Listen},
		{"engine_listen", c.EngineListen},
	} {
		if err := validateListen(f.name, f.addr); err != nil {
			return err
		}
	}
	if c.User == "" {
		return errors.New("config user: is required")
	}
	if err := validatePools(c.Pools); err != nil {
		return err
	}
	if err := c.BoxPolicy.validate(); err != nil {
		return err
	}
	if host, _, _ := net.SplitHostPort(c.TemporalListen); c.TemporalInsecure && c.Temporal.Address == "" && !isLoopback(host) {
		return fmt.Errorf("config temporal_listen: %s is off loopback, where temporal_insecure (no auth) is refused; "+
			"drop temporal_insecure or listen on 127.0.0.1", c.TemporalListen)
	}
	if !slices.Contains(EngineRuntimes, c.EngineRuntime) {
		return fmt.Errorf("config engine_runtime: must be auto, gvisor or process, got %q", c.EngineRuntime)
	}
	if err := validateNoIsolation("engine_runtime", c.EngineRuntime, "engine_insecure_no_isolation", c.EngineInsecureNoIsolation); err != nil {
		return err
	}
	if err := c.EngineNetwork.Validate("engine_network"); err != nil {
		return err
	}
	if err := validateBoxNetwork(c.BoxNetwork); err != nil {
		return err
	}
	if err := validatePreviewDomain(c.PreviewDomain, true); err != nil {
		return err
	}
	if c.EngineMaxSandboxes < 0 {
		return fmt.Errorf("config engine_max_sandboxes: must not be negative (0 derives it from host memory), got %d", c.EngineMaxSandboxes)
	}
	if err := validateOvercommit("engine_memory_overcommit", c.EngineMemoryOvercommit); err != nil {
		return err
	}
	if err := validateBoxDisk("engine_box_disk_mb", c.EngineBoxDiskMB); err != nil {
		return err
	}
	if c.S3.Endpoint != "" && c.S3.Bucket == "" {
		return errors.New("config s3.bucket: is required with s3.endpoint")
	}
	if err := c.Quota.Validate(); err != nil {
		return err
	}
	return c.Agent.Validate()
}

// DataDir returns the directory of one component's state under Home.
func (c *Dev) DataDir(component string) string { return filepath.Join(c.Home, component) }

// DefaultAPI returns the api role's defaults.
func DefaultAPI(env Lookup) API {
	return API{Home: defaultHome(env), LogLevel: "info", Listen: DefaultAPIListen,
		Temporal: Temporal{Address: DefaultTemporalListen, Namespace: DefaultNamespace}, Quota: DefaultQuota()}
}

// DefaultWorker returns the worker role's defaults.
func DefaultWorker(env Lookup) Worker {
	return Worker{Home: defaultHome(env), LogLevel: "info",
		Temporal: Temporal{Address: DefaultTemporalListen, Namespace: DefaultNamespace},
		S3:       S3{Region: DefaultRegion, Bucket: DefaultBucket, PathStyle: true}, Template: DefaultBoxTemplate,
		HealthListen: DefaultWorkerHealthListen, Recordings: DefaultRecordings()}
}

// KeyringPath returns the keyring file: Keyring, or <home>/keys/master.key when it is empty,
// the same file `cocoonbox dev` uses.
func (c *Worker) KeyringPath() string {
	return keyringPath(c.Home, c.Keyring)
}

// Validate checks the worker configuration and names the first bad field.
func (c *Worker) Validate() error {
	if err := validateHome(c.Home); err != nil {
		return err
	}
	if err := validateLogLevel(c.LogLevel); err != nil {
		return err
	}
	if err := validateServices(c.Temporal, c.Postgres, c.Sandbox, c.Keyring); err != nil {
		return err
	}
	if c.Template == "" {
		return errors.New("config template: is required (COCOONBOX_BOX_TEMPLATE)")
	}
	if c.S3.Bucket == "" {
		return errors.New("config s3.bucket: is required (COCOONBOX_S3_BUCKET)")
	}
	if c.SnapshotUploadMiBps < 0 {
		return fmt.Errorf("config snapshot_upload_mibps: must not be negative, got %d", c.SnapshotUploadMiBps)
	}
	if c.HealthListen != HealthOff {
		if err := validateListen("health_listen", c.HealthListen); err != nil {
			return err
		}
	}
	if c.Node != "" && !nodeIDPattern.MatchString(c.Node) {
		return fmt.Errorf("config node: must be a lowercase letter or digit, then up to 62 lowercase letters, digits, dots or hyphens, got %q", c.Node)
	}
	if err := validateNodeDeadAfter(c.NodeDeadAfter); err != nil {
		return err
	}
	return c.Agent.Validate()
}

// nodeIDPattern is what an engine node's ID looks like (the nodes table checks it too).
var nodeIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{0,62}$`)

// DefaultEngine returns the engine role's defaults.
func DefaultEngine(env Lookup) Engine {
	return Engine{Home: defaultHome(env), LogLevel: "info", Listen: DefaultEngineListen, Runtime: "auto"}
}

// Validate checks the engine configuration and names the first bad field.
func (c *Engine) Validate() error {
	if err := validateHome(c.Home); err != nil {
		return err
	}
	if err := validateLogLevel(c.LogLevel); err != nil {
		return err
	}
	if err := validateListen("listen", c.Listen); err != nil {
		return err
	}
	if !slices.Contains(EngineRuntimes, c.Runtime) {
		return fmt.Errorf("config runtime: must be auto, gvisor or process, got %q", c.Runtime)
	}
	if err := validateNoIsolation("runtime", c.Runtime, "insecure_no_isolation", c.InsecureNoIsolation); err != nil {
		return err
	}
	switch host, _, _ := net.SplitHostPort(c.Listen); {
	case c.RootToken == "" && !c.InsecureNoToken:
		return errors.New("config root_token: is required (COCOONBOX_ENGINE_TOKEN); insecure_no_token " +
			"(--insecure-no-token) runs without one, on a loopback listen address only")
	case c.RootToken != "" && c.InsecureNoToken:
		return errors.New("config insecure_no_token: a root token is set too; drop one of them")
	case c.InsecureNoToken && !isLoopback(host):
		return fmt.Errorf("config insecure_no_token: only on a loopback listen address, got %q", c.Listen)
	}
	if c.MaxSandboxes < 0 {
		return fmt.Errorf("config max_sandboxes: must not be negative (0 derives it from host memory), got %d", c.MaxSandboxes)
	}
	if err := validateOvercommit("memory_overcommit", c.MemoryOvercommit); err != nil {
		return err
	}
	if err := c.Network.Validate("network"); err != nil {
		return err
	}
	return validateBoxDisk("box_disk_mb", c.BoxDiskMB)
}

// validateBoxDisk: a disk quota is 0 (each size's own) or at least what an ext4 filesystem with
// room for files needs.
func validateBoxDisk(key string, mb int) error {
	if mb != 0 && mb < MinBoxDiskMB {
		return fmt.Errorf("config %s: a box's disk must be at least %d MiB (0 means each size's own), got %d", key, MinBoxDiskMB, mb)
	}
	return nil
}

// validatePreviewDomain: a preview domain is a host name of two or more labels (or localhost),
// with an optional port, no scheme or path; the dev stack also takes none.
func validatePreviewDomain(v string, dev bool) error {
	if v == "" || (dev && v == "none") {
		return nil
	}
	if strings.ContainsAny(v, "/@?#") {
		return fmt.Errorf("config preview_domain: want a host name like preview.example.com, no scheme or path, got %q", v)
	}
	host := v
	if h, port, err := net.SplitHostPort(v); err == nil {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("config preview_domain: %q has a bad port", v)
		}
		host = h
	}
	labels := strings.Split(host, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || strings.Trim(strings.ToLower(l), "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
			return fmt.Errorf("config preview_domain: want a host name like preview.example.com (its ports' hosts go under it), got %q", v)
		}
	}
	return nil
}

// validateBoxNetwork: a default network policy is none or internet (an allow-list is a box's
// own, given at its create), or empty for the role's default.
func validateBoxNetwork(v string) error {
	switch v {
	case "", "none", "internet":
		return nil
	}
	return fmt.Errorf("config box_network: want none or internet, got %q", v)
}

// DefaultBoxNetwork is the dev stack's box_network when the file leaves it empty: internet when
// its own engine has an uplink to give boxes, none otherwise (an external engine's lanes are its
// own to say).
func (c *Dev) DefaultBoxNetwork() string {
	if c.BoxNetwork != "" {
		return c.BoxNetwork
	}
	if c.Sandbox.URL == "" && c.EngineNetwork.Uplink != "" && c.EngineNetwork.Uplink != "none" {
		return "internet"
	}
	return "none"
}

// MinBoxDiskMB is the smallest disk quota a box may have.
const MinBoxDiskMB = 16

// validateNoIsolation: the process runtime, which has no sandbox, is chosen only by name and
// with the explicit no-isolation key, and that key means nothing with another runtime.
func validateNoIsolation(runtimeKey, runtime, key string, set bool) error {
	switch {
	case runtime == "process" && !set:
		return fmt.Errorf("config %s: process runs boxes on the host kernel with no sandbox; "+
			"set %s (--insecure-no-isolation) as well to choose it", runtimeKey, key)
	case runtime != "process" && set:
		return fmt.Errorf("config %s: applies only to %s process, got %q", key, runtimeKey, runtime)
	}
	return nil
}

// isLoopback reports whether a listen host reaches this machine only.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Load reads a role's configuration: the given defaults, then the YAML file at path (if path is
// not empty), then the environment. Flags are applied by the caller.
func Load[T any](path string, env Lookup, defaults T) (T, error) {
	c := defaults
	if err := load(path, env, &c); err != nil {
		var zero T
		return zero, err
	}
	if d, ok := any(&c).(sectionDefaulter); ok {
		d.fillSections()
	}
	return c, nil
}

// sectionDefaulter is a role whose sections take their defaults only when the file and the
// environment left them out entirely: a section given in part is not mixed with defaults it
// would contradict (an anthropic gateway keeping OpenAI's model).
type sectionDefaulter interface{ fillSections() }

func (c *Dev) fillSections()    { c.Agent.fill() }
func (c *API) fillSections()    { c.Agent.fill() }
func (c *Worker) fillSections() { c.Agent.fill() }

// LoadCLI reads the CLI configuration from path (missing is fine) and the environment.
func LoadCLI(path string, env Lookup) (CLI, error) {
	var c CLI
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		path = ""
	}
	if err := load(path, env, &c); err != nil {
		return CLI{}, err
	}
	return c, nil
}

// WriteCLI writes c to path with owner-only permissions, since it holds a token.
func WriteCLI(path string, c CLI) error {
	data, err := yaml.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode cli config: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("write cli config: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("write cli config: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write cli config: %w", err)
	}
	return nil
}

// DefaultCLIConfigPath is $XDG_CONFIG_HOME/cocoonbox/config.yaml, else ~/.config/cocoonbox/config.yaml.
func DefaultCLIConfigPath(env Lookup) string {
	if x, ok := env("XDG_CONFIG_HOME"); ok && x != "" {
		return filepath.Join(x, "cocoonbox", "config.yaml")
	}
	return filepath.Join(homeDir(env), ".config", "cocoonbox", "config.yaml")
}

func defaultHome(env Lookup) string {
	if x, ok := env("XDG_DATA_HOME"); ok && x != "" {
		return filepath.Join(x, "cocoonbox")
	}
	return filepath.Join(homeDir(env), ".local", "share", "cocoonbox")
}

func homeDir(env Lookup) string {
	if h, ok := env("HOME"); ok && h != "" {
		return h
	}
	return "/root"
}

// load applies the YAML file at path (if any) and then the environment to dst.
func load(path string, env Lookup, dst any) error {
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("config %s: %w", path, unwrapPathError(err))
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)                                              // a misspelt key is an error, not a silently ignored setting
		if err := dec.Decode(dst); err != nil && !errors.Is(err, io.EOF) { // io.EOF: an empty file
			return fmt.Errorf("config %s: %s", path, yamlMessage(err))
		}
	}
	return applyEnv(reflect.ValueOf(dst).Elem(), env)
}

// yamlMessage turns a YAML error into one line: "line 3: field lsten not found".
func yamlMessage(err error) string {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs := make([]string, len(te.Errors))
		for i, m := range te.Errors {
			msgs[i] = strings.TrimSpace(strings.Replace(m, " in type config.", " in ", 1))
		}
		return strings.Join(msgs, "; ")
	}
	return strings.TrimPrefix(err.Error(), "yaml: ")
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// applyEnv sets every field tagged env:"NAME" whose variable is set and not empty.
func applyEnv(v reflect.Value, env Lookup) error {
	t := v.Type()
	for i := range t.NumField() {
		f, fv := t.Field(i), v.Field(i)
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[time.Duration]() {
			if err := applyEnv(fv, env); err != nil {
				return err
			}
			continue
		}
		name := f.Tag.Get("env")
		if name == "" {
			continue
		}
		raw, ok := env(name)
		if !ok || raw == "" {
			continue
		}
		if err := setField(fv, raw); err != nil {
			return fmt.Errorf("environment %s: %w", name, err)
		}
	}
	return nil
}

func setField(v reflect.Value, raw string) error {
	switch {
	case v.Type() == reflect.TypeFor[time.Duration]():
		d, err := time.ParseDuration(raw)
		if err != nil {
			return fmt.Errorf("not a duration: %q", raw)
		}
		v.SetInt(int64(d))
	case v.Kind() == reflect.String:
		v.SetString(raw)
	case v.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return fmt.Errorf("not a boolean: %q", raw)
		}
		v.SetBool(b)
	case v.Type() == reflect.TypeFor[[]string]():
		var list []string
		for _, s := range strings.Split(raw, ",") {
			if s = strings.TrimSpace(s); s != "" {
				list = append(list, s)
			}
		}
		v.Set(reflect.ValueOf(list))
	case v.Kind() == reflect.Int:
		n, err := strconv.Atoi(raw)
		if err != nil {
			return fmt.Errorf("not an integer: %q", raw)
		}
		v.SetInt(int64(n))
	case v.Kind() == reflect.Float64:
		f, err := strconv.ParseFloat(raw, 64)
		if err != nil {
			return fmt.Errorf("not a number: %q", raw)
		}
		v.SetFloat(f)
	default:
		return fmt.Errorf("unsupported field type %s", v.Type())
	}
	return nil
}

// validateOvercommit checks a memory overcommit ratio: 0 (none) up to 100.
func validateOvercommit(field string, v float64) error {
	if v < 0 || v > 100 {
		return fmt.Errorf("config %s: must be between 0 and 100 (0 means 1, no overcommit), got %g", field, v)
	}
	return nil
}

func validateHome(home string) error {
	if home == "" {
		return errors.New("config home: is required")
	}
	if !filepath.IsAbs(home) {
		return fmt.Errorf("config home: must be an absolute path, got %q", home)
	}
	return nil
}

func validateLogLevel(level string) error {
	switch level {
	case "debug", "info", "warn", "error":
		return nil
	}
	return fmt.Errorf("config log_level: must be debug, info, warn or error, got %q", level)
}

func validateListen(field, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("config %s: want host:port, got %q", field, addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("config %s: bad port in %q", field, addr)
	}
	if host == "" {
		return fmt.Errorf("config %s: give a host (127.0.0.1 for loopback only), got %q", field, addr)
	}
	return nil
}

// validateServices checks what the api and the worker roles both need: the Temporal, PostgreSQL
// and sandboxd they use, and the keyring file they share.
func validateServices(t Temporal, pg Postgres, sb Sandbox, keyring string) error {
	switch {
	case t.Address == "":
		return errors.New("config temporal.address: is required (TEMPORAL_ADDRESS)")
	case pg.URL == "":
		return errors.New("config postgres.url: is required (COCOONBOX_DATABASE_URL)")
	case sb.URL == "":
		return errors.New("config sandbox.url: is required (COCOONBOX_SANDBOXD_URL)")
	case keyring != "" && !filepath.IsAbs(keyring):
		return fmt.Errorf("config keyring: must be an absolute path, got %q", keyring)
	}
	return nil
}

// keyringPath is keyring, or <home>/keys/master.key (the file `cocoonbox dev` uses) when empty.
func keyringPath(home, keyring string) string {
	if keyring != "" {
		return keyring
	}
	return filepath.Join(home, "keys", "master.key")
}
