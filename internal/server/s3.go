package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spindle-store/spindle/internal/credapi"
	"github.com/spindle-store/spindle/internal/meta"
	"github.com/spindle-store/spindle/internal/s3gw"
	"github.com/spindle-store/spindle/internal/tlsconf"
	"github.com/spindle-store/spindle/internal/vfs"
)

// S3Config configures the server's S3 gateway.
type S3Config struct {
	// Listen is the gateway's address (s3gw.DefaultListen); "off" runs
	// no gateway.
	Listen string
	Region string
	Domain string
	// AccessKey and SecretKey are the first (root) user's; when both are
	// empty they are read from Dir/s3-credentials.json, generated and
	// written there (0600) at the first start.
	AccessKey, SecretKey string
}

// RootUser is the meta service's user of the server's S3 root user.
const RootUser = "root"

// S3Off is the S3Config.Listen that runs no gateway.
const S3Off = "off"

// s3CredentialsFile holds the generated root user, under Dir.
const s3CredentialsFile = "s3-credentials.json"

type s3Credentials struct {
	AccessKey string `json:"access_key"`
	SecretKey string `json:"secret_key"`
}

// s3Root returns the root user's keys: the configured ones, else those of
// Dir/s3-credentials.json, else new ones written there (0600). generated
// says the file was written now.
func s3Root(dir string, c S3Config) (access, secret string, generated bool, err error) {
	if c.AccessKey != "" || c.SecretKey != "" {
		if c.AccessKey == "" || c.SecretKey == "" {
			return "", "", false, errors.New("server: --s3-access-key and --s3-secret-key go together")
		}
		return c.AccessKey, c.SecretKey, false, nil
	}
	path := filepath.Join(dir, s3CredentialsFile)
	b, err := os.ReadFile(path)
	if err == nil {
		var cr s3Credentials
		if err := json.Unmarshal(b, &cr); err != nil || cr.AccessKey == "" || cr.SecretKey == "" {
			return "", "", false, fmt.Errorf("server: %s: not S3 credentials (%v)", path, err)
		}
		return cr.AccessKey, cr.SecretKey, false, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", "", false, fmt.Errorf("server: %w", err)
	}
	access, secret = meta.GenerateKeys()
	b, _ = json.MarshalIndent(s3Credentials{AccessKey: access, SecretKey: secret}, "", "  ")
	if err := vfs.WriteFileAtomicPerm(vfs.Default, path, append(b, '\n'), 0o600); err != nil {
		return "", "", false, fmt.Errorf("server: %w", err)
	}
	return access, secret, true, nil
}

// s3Listen is the gateway's address.
func (s *Server) s3Listen() string {
	if s.cfg.S3.Listen == "" {
		return s3gw.DefaultListen
	}
	return s.cfg.S3.Listen
}

// startS3 starts the gateway (unless off) in a goroutine; the returned
// channel gets its outcome once ctx ends or it fails.
func (s *Server) startS3(ctx context.Context) (<-chan error, error) {
	c := s.cfg.S3
	if c.Listen == S3Off {
		return nil, nil
	}
	access, secret, generated, err := s3Root(s.cfg.Dir, c)
	if err != nil {
		return nil, err
	}
	// The root user is also the meta service's user "root", so that a
	// separate `spindle s3` finds its secret by its access key and admin
	// user ls lists it: its keys are set, replacing an earlier start's
	// (a changed root key leaves no user of the old one behind).
	if _, err := credapi.SetUserKeys(ctx, s.client, RootUser, credapi.SetKeys{AccessKey: access, SecretKey: secret}); err != nil {
		return nil, fmt.Errorf("server: registering the S3 root user: %w", err)
	}
	listen := s.s3Listen()
	if generated {
		fmt.Fprintf(os.Stderr, "spindle server: S3 root user generated: access key %s, secret in %s (0600)\n",
			access, filepath.Join(s.cfg.Dir, s3CredentialsFile))
	}
	gcfg := s3gw.Config{Meta: s.MetaAddr(), Listen: listen, Region: c.Region, Domain: c.Domain,
		AccessKey: access, SecretKey: secret, Logger: s.cfg.Logger}
	if !s.cfg.Insecure {
		if gcfg.TLS, err = s.pki.Settings(tlsconf.RoleS3); err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
		f := s.pki.Files(tlsconf.RoleS3)
		gcfg.CertFile, gcfg.KeyFile = f.Cert, f.Key
	}
	done := make(chan error, 1)
	go func() {
		done <- s3gw.Run(ctx, gcfg)
	}()
	if s.cfg.Insecure {
		fmt.Fprintf(os.Stderr, "spindle server: S3 gateway at http://%s (access key %s)\n", listen, access)
	} else {
		fmt.Fprintf(os.Stderr, "spindle server: S3 gateway at https://%s (access key %s; CA bundle %s: aws --ca-bundle, AWS_CA_BUNDLE)\n", listen, access, s.pki.CA)
	}
	return done, nil
}
