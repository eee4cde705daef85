package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/spindle-store/spindle/internal/cli"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// joinCluster is `spindle datanode --join-token`: when the certificate
// --tls-cert names does not exist yet, the datanode makes a key and a
// certificate request, sends them with the token to the meta service
// (verified by --tls-ca; no client certificate: tlsconf.JoinALPN), and
// writes the datanode certificate it gets and its key (0600) to
// --tls-cert and --tls-key. A certificate already there: nothing to do
// (the token is not used). hostAddr is the address others dial the
// datanode at (--advertise-addr, else --listen): its host goes in the
// certificate.
func joinCluster(ctx context.Context, meta, token string, tf *tlsFlags, hostAddr string) error {
	f := tf.files()
	if tf.insecure || f.Cert == "" || f.Key == "" || f.CA == "" {
		return cli.UsageErr(errors.New("--join-token needs --tls-ca (the cluster CA's certificate) and --tls-cert, --tls-key (where the certificate it gets is written)"))
	}
	if meta == "" {
		return cli.UsageErr(errors.New("--join-token needs --meta"))
	}
	if _, err := os.Stat(f.Cert); err == nil {
		slog.Info("--join-token: the certificate exists already; the token is not used", "cert", f.Cert)
		return nil
	}
	host := hostAddr
	if h, _, err := net.SplitHostPort(hostAddr); err == nil {
		host = h
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return cli.UsageErr(fmt.Errorf("--join-token: the certificate needs the address others dial this datanode at: give --advertise-addr (listening on %q)", hostAddr))
	}
	csr, keyPEM, err := tlsconf.NewKeyRequest()
	if err != nil {
		return err
	}
	addr := metaapi.SplitAddrs(meta)[0]
	resp, err := metaapi.Join(ctx, addr, f.CA, metaapi.JoinRequest{Token: token, CSR: string(csr), Hosts: []string{host}})
	if err != nil {
		return fmt.Errorf("joining the cluster at %s: %w", addr, err)
	}
	if err := tlsconf.WriteCertKey(f, []byte(resp.Cert), keyPEM); err != nil {
		return err
	}
	slog.Info("joined the cluster: certificate written", "name", resp.Name, "cert", f.Cert, "key", f.Key)
	return nil
}
