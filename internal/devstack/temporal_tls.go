package devstack

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"go.temporal.io/server/common/rpc/encryption"
)

// TemporalServerName is the name the embedded server's certificate is issued for. Clients that
// dial it by another address (its IP off loopback) set it as the TLS server name
// (TEMPORAL_TLS_SERVER_NAME).
const TemporalServerName = "cocoonbox-temporal"

// Certificate lifetimes. The certificates are remade, with a new CA, when one is missing, does
// not check out or has less than certRenewBefore left; clients read them from the data dir.
const (
	certLifetime    = 5 * 365 * 24 * time.Hour
	certRenewBefore = 30 * 24 * time.Hour
)

// Files under <data dir>/tls. The CA's private key is never written: it signs the two
// certificates at creation and is dropped, so nothing on disk can issue another.
const (
	tlsDirName     = "tls"
	caFile         = "ca.pem"
	serverCertFile = "server.pem"
	serverKeyFile  = "server-key.pem"
	clientCertFile = "client.pem"
	clientKeyFile  = "client-key.pem"
)

// serverTLS is the mutual-TLS identity of one embedded server: every one of its gRPC listeners
// (the frontend and the internal history, matching and worker services) accepts only a caller
// with a certificate from the data dir's CA. The server certificate doubles as the services'
// client certificate among themselves; the client certificate is for everything else (the dev
// stack's worker and API, the UI server, operators' tools).
type serverTLS struct {
	dir    string
	pool   *x509.CertPool
	server tls.Certificate
	client tls.Certificate
}

// loadOrCreateTLS reads the certificates in dir, or makes a new CA and both certificates when
// they are missing, do not verify against the CA, or are about to expire.
func loadOrCreateTLS(dir string, now time.Time) (*serverTLS, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create temporal tls dir: %w", err)
	}
	if s, err := loadTLS(dir, now); err == nil {
		return s, nil
	}
	if err := createTLS(dir, now); err != nil {
		return nil, fmt.Errorf("create temporal certificates: %w", err)
	}
	s, err := loadTLS(dir, now)
	if err != nil {
		return nil, fmt.Errorf("load temporal certificates: %w", err)
	}
	return s, nil
}

func loadTLS(dir string, now time.Time) (*serverTLS, error) {
	caPEM, err := os.ReadFile(filepath.Join(dir, caFile))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no CA certificate")
	}
	s := &serverTLS{dir: dir, pool: pool}
	for _, leaf := range []struct {
		dst       *tls.Certificate
		cert, key string
		usage     x509.ExtKeyUsage
	}{
		{&s.server, serverCertFile, serverKeyFile, x509.ExtKeyUsageServerAuth},
		{&s.client, clientCertFile, clientKeyFile, x509.ExtKeyUsageClientAuth},
	} {
		c, err := tls.LoadX509KeyPair(filepath.Join(dir, leaf.cert), filepath.Join(dir, leaf.key))
		if err != nil {
			return nil, err
		}
		if now.Add(certRenewBefore).After(c.Leaf.NotAfter) {
			return nil, fmt.Errorf("%s expires %s", leaf.cert, c.Leaf.NotAfter)
		}
		opts := x509.VerifyOptions{Roots: pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{leaf.usage}}
		if _, err := c.Leaf.Verify(opts); err != nil {
			return nil, fmt.Errorf("%s: %w", leaf.cert, err)
		}
		*leaf.dst = c
	}
	return s, nil
}

// createTLS writes a new CA certificate and, signed by it, the server and client certificates
// with their keys (mode 0600). The CA goes last, so a crash halfway leaves files that fail to
// load and are made again on the next start.
func createTLS(dir string, now time.Time) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTmpl := certTemplate(now, "cocoonbox dev temporal CA")
	caTmpl.IsCA, caTmpl.BasicConstraintsValid = true, true
	caTmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}

	server := certTemplate(now, TemporalServerName)
	server.DNSNames = []string{TemporalServerName, "localhost"}
	server.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	server.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	client := certTemplate(now, "cocoonbox dev temporal client")
	client.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	for _, leaf := range []struct {
		tmpl      *x509.Certificate
		cert, key string
	}{{server, serverCertFile, serverKeyFile}, {client, clientCertFile, clientKeyFile}} {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		leaf.tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, leaf.tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return err
		}
		if err := writePEM(filepath.Join(dir, leaf.key), "PRIVATE KEY", keyDER, 0o600); err != nil {
			return err
		}
		if err := writePEM(filepath.Join(dir, leaf.cert), "CERTIFICATE", der, 0o644); err != nil {
			return err
		}
	}
	return writePEM(filepath.Join(dir, caFile), "CERTIFICATE", caDER, 0o644)
}

func certTemplate(now time.Time, cn string) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-time.Hour), // a clock a little behind still accepts it
		NotAfter:     now.Add(certLifetime),
	}
}

// writePEM replaces path atomically, so a reader never sees half a key.
func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// CAPath, ClientCertPath and ClientKeyPath are the files a client outside this process needs.
func (s *serverTLS) CAPath() string         { return filepath.Join(s.dir, caFile) }
func (s *serverTLS) ClientCertPath() string { return filepath.Join(s.dir, clientCertFile) }
func (s *serverTLS) ClientKeyPath() string  { return filepath.Join(s.dir, clientKeyFile) }

// provider is the server's TLS for all its listeners and for its services' calls to each other
// and to the frontend (the system worker).
func (s *serverTLS) provider() *encryption.FixedTLSConfigProvider {
	return &encryption.FixedTLSConfigProvider{
		InternodeServerConfig: s.listenerConfig(),
		FrontendServerConfig:  s.listenerConfig(),
		InternodeClientConfig: s.dialConfig(s.server),
		FrontendClientConfig:  s.dialConfig(s.server),
	}
}

// clientConfig is the TLS of this process's own calls to the frontend (namespace registration,
// health checks).
func (s *serverTLS) clientConfig() *tls.Config { return s.dialConfig(s.client) }

func (s *serverTLS) listenerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{s.server},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    s.pool,
	}
}

func (s *serverTLS) dialConfig(cert tls.Certificate) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		RootCAs:      s.pool,
		ServerName:   TemporalServerName,
	}
}
