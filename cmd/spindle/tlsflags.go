package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/spindle-store/spindle/internal/cli"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// tlsFlags are --tls-cert, --tls-key, --tls-ca and --insecure: the one
// place where a command's flags become its TLS settings (tlsconf.Settings),
// which every listener and dialer of the process then uses.
//
// A process that serves (meta, datanode, s3) needs the three files or
// --insecure; a client (put, get, admin, ...) takes, in this order, the
// flags (or their environment variables SPINDLE_TLS_CERT, SPINDLE_TLS_KEY,
// SPINDLE_TLS_CA, config.go), else the client profile a local `spindle server` wrote
// for the meta address (tlsconf.LoadClientProfile), else refuses. A
// client's key is its credential (an admin certificate may administer
// the cluster): it must not be readable by group or others (0600).
type tlsFlags struct {
	cert, key, ca string
	insecure      bool
}

func (t *tlsFlags) add(f *pflag.FlagSet) {
	f.StringVar(&t.cert, tlsconf.FlagCert, "", "this process's certificate (PEM; spindle cert issue), for mutual TLS 1.3; re-read when it changes; its role decides what the process may do (admin: administration)")
	f.StringVar(&t.key, tlsconf.FlagKey, "", "the certificate's private key (PEM, 0600: a client refuses a key others may read)")
	f.StringVar(&t.ca, tlsconf.FlagCA, "", "the cluster CA's certificate (ca.crt) that verifies every peer")
	f.BoolVar(&t.insecure, tlsconf.FlagInsecure, false, "plaintext connections, no TLS: anyone who reaches a port can use it")
}

func (t *tlsFlags) files() tlsconf.Files { return tlsconf.Files{Cert: t.cert, Key: t.key, CA: t.ca} }

// explicit returns the settings the flags give; given says whether they
// gave any (--insecure, or the three files).
func (t *tlsFlags) explicit() (s *tlsconf.Settings, given bool, err error) {
	f := t.files()
	some := f.Cert != "" || f.Key != "" || f.CA != ""
	switch {
	case t.insecure && some:
		return nil, true, cli.UsageErr(errors.New("--insecure with --tls-cert/--tls-key/--tls-ca: choose one"))
	case t.insecure:
		return nil, true, nil
	case !some:
		return nil, false, nil
	case f.Cert == "" || f.Key == "" || f.CA == "":
		return nil, true, cli.UsageErr(errors.New("--tls-cert, --tls-key and --tls-ca go together"))
	}
	s, err = tlsconf.NewSettings(f)
	if err != nil {
		return nil, true, cli.UsageErr(err)
	}
	return s, true, nil
}

// server is the settings of a process that serves (what: its name, for
// the error): the three files or --insecure, nothing else.
func (t *tlsFlags) server(what string) (*tlsconf.Settings, error) {
	s, given, err := t.explicit()
	if err != nil {
		return nil, err
	}
	if !given {
		return nil, cli.UsageErr(fmt.Errorf("%s: connections are mutual TLS: give --tls-cert, --tls-key and --tls-ca (spindle cert init|issue, see docs/OPERATIONS.md), or --insecure for plaintext", what))
	}
	if !s.Enabled() {
		slog.Warn(what + " running with --insecure: plaintext connections, no TLS")
	}
	return s, nil
}

// client is the settings of a client of the meta service at meta (one
// address or a comma-separated list).
func (t *tlsFlags) client(meta string) (*tlsconf.Settings, error) {
	if f := t.files(); f.Key != "" && !t.insecure {
		if err := tlsconf.CheckKeyPrivate(f.Key); err != nil {
			return nil, cli.UsageErr(err)
		}
	}
	s, given, err := t.explicit()
	if err != nil || given {
		return s, err
	}
	if err := metaapi.CheckAddrs(meta); err != nil {
		return nil, cli.UsageErr(fmt.Errorf("--meta: %w", err))
	}
	addrs := metaapi.SplitAddrs(meta)
	p, path, found, err := tlsconf.LoadClientProfile(addrs[0])
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, cli.UsageErr(fmt.Errorf("no TLS settings for the meta service at %s: give --tls-cert, --tls-key and --tls-ca, or --insecure for a plaintext cluster (a local spindle server writes them to %s)", addrs[0], path))
	}
	if p.Insecure {
		return nil, nil
	}
	if err := tlsconf.CheckKeyPrivate(p.Key); err != nil {
		return nil, fmt.Errorf("client profile %s: %w", path, err)
	}
	s, err = tlsconf.NewSettings(tlsconf.Files{Cert: p.Cert, Key: p.Key, CA: p.CA})
	if err != nil {
		return nil, fmt.Errorf("client profile %s (written by spindle server; remove it if that server is gone): %w", path, err)
	}
	cli.RenewProfile(s, meta) // a certificate past 2/3 of its lifetime renewed (issue 33)
	return s, nil
}

// readAdminToken reads the admin bearer token of a plaintext (--insecure)
// cluster from path: a file only its owner may read (0600), holding at
// least minAdminTokenBytes printable bytes (surrounding space trimmed).
func readAdminToken(path string) (string, error) {
	if err := tlsconf.CheckKeyPrivate(path); err != nil {
		return "", cli.UsageErr(fmt.Errorf("--admin-token-file: %w", err))
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", cli.UsageErr(fmt.Errorf("--admin-token-file: %w", err))
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < minAdminTokenBytes || strings.ContainsAny(tok, " \t\r\n") {
		return "", cli.UsageErr(fmt.Errorf("--admin-token-file %s: want one token of at least %d characters without spaces", path, minAdminTokenBytes))
	}
	return tok, nil
}

// minAdminTokenBytes is the shortest admin token accepted.
const minAdminTokenBytes = 16

// adminTokenHelp is --admin-token-file's help (meta service and clients).
const adminTokenHelp = "file (0600) holding the admin bearer token of a plaintext (--insecure) cluster: the meta service then requires it for administration and deletions; ignored with TLS (the admin credential is an admin certificate)"

// certValidityHelp is --cert-validity's help (server, meta).
const certValidityHelp = "lifetime of the certificates issued (joins, renewals; spindle server: its own too); every process renews its own at 2/3 of it"
