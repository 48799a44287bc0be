package devstack

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/membership/static"
	"go.temporal.io/server/common/primitives"
)

const (
	loopback    = "127.0.0.1"
	clusterName = "active"
	// numHistoryShards is fixed at the first start (the server keeps the persisted value),
	// so it is a constant here. One shard suits one SQLite writer.
	numHistoryShards = 1
)

// servicePorts are the gRPC ports of the four services one process runs. Only the frontend
// is meant for clients; the others are loopback ports the services use among themselves.
type servicePorts struct {
	frontend, history, matching, worker int
}

// reservation holds listeners on the ports picked for a start. Holding them until just before
// the server binds keeps two picks from landing on the same port; the window between release
// and the server's bind is covered by fatalHandler turning the bind failure into an error.
type reservation []net.Listener

// release closes every listener held. A pointer receiver, so `defer res.release()` sees the
// listeners reserved after the defer: with a value receiver it closed the empty slice it was
// deferred with, and the listeners, unreferenced, were closed whenever the GC finalized them.
func (r *reservation) release() {
	for _, l := range *r {
		_ = l.Close()
	}
	*r = nil
}

// reserve listens on host:port (port 0 picks a free one) and returns the port.
func (r *reservation) reserve(what, host string, port int) (int, error) {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return 0, listenError(what, addr, err)
	}
	*r = append(*r, l)
	return l.Addr().(*net.TCPAddr).Port, nil
}

// listenError names the listener and keeps only the OS reason ("address already in use"),
// which is all a user needs to act on.
func listenError(what, addr string, err error) error {
	var se *os.SyscallError
	if errors.As(err, &se) {
		err = se.Err
	}
	return fmt.Errorf("%s: listen %s: %w", what, addr, err)
}

// bindIP turns TemporalOptions.Host into the IP the frontend binds, and the address clients
// and the other services dial, which differs when binding all interfaces.
func bindIP(host string) (bind, dial string, err error) {
	if host == "localhost" {
		return loopback, loopback, nil
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return "", "", fmt.Errorf("temporal frontend: host %q is not an IP address", host)
	}
	switch {
	case ip.IsUnspecified() && ip.To4() != nil:
		return ip.String(), loopback, nil
	case ip.IsUnspecified():
		return ip.String(), "::1", nil
	}
	return ip.String(), ip.String(), nil
}

// isLoopback reports whether host (an IP or "localhost") is reachable from this machine only.
func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || ip != nil && ip.IsLoopback()
}

// serverConfig is the static configuration of the embedded server: SQLite persistence, no
// archival, no metrics or pprof listeners, and services bound where ports says.
func serverConfig(dbPath, frontendBind, frontendAddr string, ports servicePorts) *config.Config {
	rpc := func(port int, ip string) config.Service {
		return config.Service{RPC: config.RPC{GRPCPort: port, BindOnIP: ip}}
	}
	return &config.Config{
		Global: config.Global{
			Membership: config.Membership{MaxJoinDuration: 30 * time.Second, BroadcastAddress: loopback},
		},
		Persistence: config.Persistence{
			DefaultStore:     "sqlite",
			VisibilityStore:  "sqlite-visibility",
			NumHistoryShards: numHistoryShards,
			DataStores: map[string]config.DataStore{
				"sqlite":            {SQL: sqliteConfig(dbPath)},
				"sqlite-visibility": {SQL: sqliteConfig(dbPath)},
			},
		},
		ClusterMetadata: &cluster.Config{
			EnableGlobalNamespace:    false,
			FailoverVersionIncrement: 10,
			MasterClusterName:        clusterName,
			CurrentClusterName:       clusterName,
			ClusterInformation: map[string]cluster.ClusterInformation{
				clusterName: {Enabled: true, InitialFailoverVersion: 1, RPCAddress: frontendAddr},
			},
		},
		DCRedirectionPolicy: config.DCRedirectionPolicy{Policy: "noop"},
		Services: map[string]config.Service{
			string(primitives.FrontendService): rpc(ports.frontend, frontendBind),
			string(primitives.HistoryService):  rpc(ports.history, loopback),
			string(primitives.MatchingService): rpc(ports.matching, loopback),
			string(primitives.WorkerService):   rpc(ports.worker, loopback),
		},
	}
}

// staticHosts replaces gossip membership: every service is this process, so there is nothing
// to discover, and ringpop would want four more ports and a join delay.
func staticHosts(frontendAddr string, ports servicePorts) map[primitives.ServiceName]static.Hosts {
	local := func(port int) static.Hosts {
		return static.SingleLocalHost(net.JoinHostPort(loopback, strconv.Itoa(port)))
	}
	return map[primitives.ServiceName]static.Hosts{
		primitives.FrontendService: static.SingleLocalHost(frontendAddr),
		primitives.HistoryService:  local(ports.history),
		primitives.MatchingService: local(ports.matching),
		primitives.WorkerService:   local(ports.worker),
	}
}

// dynamicConfig holds the few settings a dev server wants unlike production. It is a memory
// client because one of them changes once the server is up (see searchAttributesSettled).
func dynamicConfig() *dynamicconfig.MemoryClient {
	dc := dynamicconfig.NewMemoryClient()
	// Search attributes registered at start are visible at once, instead of after the
	// namespace registry's next refresh: each service reads the namespace from its store on
	// every use of a search attribute, under one lock, until searchAttributesSettled.
	dc.OverrideSetting(dynamicconfig.ForceSearchAttributesCacheRefreshOnRead, true)
	// An activity scheduled by a workflow task goes back in the answer to that task when
	// the worker polls its queue (the SDK asks for it), skipping a trip through matching:
	// every agent step is one.
	dc.OverrideSetting(dynamicconfig.EnableActivityEagerExecution, true)
	// Each service reads the namespaces again this often (2 s by default; a few rows of
	// SQLite), so search attributes added at start reach them soon.
	dc.OverrideSetting(dynamicconfig.NamespaceCacheRefreshInterval, namespaceRefresh)
	return dc
}

// namespaceRefresh is how often the services read the namespaces; namespaceRefreshes is how
// long after registering search attributes every service has read them again, many times over.
const (
	namespaceRefresh   = 250 * time.Millisecond
	namespaceRefreshes = 16 * namespaceRefresh
)

// searchAttributesSettled ends the reads of the namespace from the store on every use of a
// search attribute (each start, upsert and visibility record paid one, serialized under one
// lock: a box workflow's update took several milliseconds longer). When the start added search
// attributes, that waits until the registries have refreshed; the start does not.
func (t *Temporal) searchAttributesSettled(added bool) {
	settle := func() { t.dc.OverrideSetting(dynamicconfig.ForceSearchAttributesCacheRefreshOnRead, false) }
	if !added {
		settle()
		return
	}
	t.settling = time.AfterFunc(namespaceRefreshes, settle)
}
