package tlsconf

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spindle-store/spindle/internal/vfs"
)

// LocalDir is the directory under a server's --dir that holds the PKI
// EnsureLocal makes: the CA in LocalDir/ca, one pair per role in LocalDir.
const LocalDir = "tls"

// Local is the PKI of one machine's `spindle server`: a CA and a
// certificate per role, all under one directory.
type Local struct {
	Dir string // DIR/tls
	// Validity is the lifetime of the certificates it issues (0:
	// DefaultCertValidity).
	Validity time.Duration
	// CA is the CA certificate's path (the S3 clients' CA bundle too).
	CA string
}

// localRoles are the pairs EnsureLocal keeps: the embedded processes'
// and the local operator's (the CLI's client certificate is an admin's:
// on one machine the user who started the server administers it).
var localRoles = []Role{RoleMeta, RoleDatanode, RoleS3, RoleAdmin}

// LocalName is the certificate name EnsureLocal gives a role.
func LocalName(r Role) string { return "local-" + string(r) }

// EnsureLocal makes (first start) or checks (later starts) the PKI of a
// server rooted at dir: a CA in dir/tls/ca and a certificate per role in
// dir/tls, keys 0600. A certificate that does not cover every one of hosts
// (addresses the server listens on or is dialled at) is issued again by
// the same CA; the CA is never replaced.
func EnsureLocal(dir string, hosts []string) (Local, error) {
	return EnsureLocalValidity(dir, hosts, 0)
}

// EnsureLocalValidity is EnsureLocal issuing certificates valid validity
// (0: DefaultCertValidity). A certificate past its renewal point
// (RenewDue) is issued again too: a server stopped longer than that
// starts with fresh certificates.
func EnsureLocalValidity(dir string, hosts []string, validity time.Duration) (Local, error) {
	l := Local{Dir: filepath.Join(dir, LocalDir), Validity: validity}
	caDir := filepath.Join(l.Dir, "ca")
	l.CA = filepath.Join(caDir, CACertFile)
	ca, err := LoadCA(caDir)
	if err != nil {
		if _, serr := os.Stat(l.CA); serr == nil {
			return l, err // a CA that does not load is an operator's problem, never replaced
		}
		if ca, err = CreateCA(caDir, "spindle-local-ca", 0); err != nil {
			return l, err
		}
	}
	for _, r := range localRoles {
		name := LocalName(r)
		f := l.Files(r)
		if pairCovers(f, ca, hosts) {
			continue
		}
		c, k, err := ca.Issue(IssueRequest{Name: name, Role: r, Hosts: hosts, Validity: validity})
		if err != nil {
			return l, err
		}
		if _, _, err := WritePair(l.Dir, name, c, k); err != nil {
			return l, err
		}
	}
	return l, nil
}

// MetaMemberName is the certificate name of a local server's meta member
// id: each has a pair of its own (EnsureMembers), bound to its ID
// (MemberOf) so that its peers accept its raft messages only.
func MetaMemberName(id int) string { return fmt.Sprintf("%s-%d", LocalName(RoleMeta), id) }

// MemberOf is the meta member ID a certificate name binds: the number
// after the last '-' of "meta-ID" or "local-meta-ID"; ok false for any
// other name.
func MemberOf(name string) (id uint64, ok bool) {
	i := strings.LastIndexByte(name, '-')
	if i < 0 || (name[:i] != "meta" && name[:i] != LocalName(RoleMeta)) {
		return 0, false
	}
	id, err := strconv.ParseUint(name[i+1:], 10, 64)
	return id, err == nil && id > 0
}

// DatanodeName is the certificate name of a local server's datanode
// member i (1-based): each has a pair of its own (EnsureDatanodes), so
// that the meta service binds each datanode to its own certificate and
// its pipeline peers tell them apart.
func DatanodeName(i int) string { return fmt.Sprintf("%s-%d", LocalName(RoleDatanode), i) }

// EnsureDatanodes makes (or, when it does not cover hosts, issues again)
// the pairs of datanode members 1..n (DatanodeName), with the CA of l,
// and returns their files in member order.
func (l Local) EnsureDatanodes(n int, hosts []string) ([]Files, error) {
	return l.EnsureMembers(RoleDatanode, n, hosts)
}

// EnsureMembers makes (or issues again) the pairs of members 1..n of role
// r (datanodes: DatanodeName; meta members: MetaMemberName).
func (l Local) EnsureMembers(r Role, n int, hosts []string) ([]Files, error) {
	ca, err := LoadCA(filepath.Join(l.Dir, "ca"))
	if err != nil {
		return nil, err
	}
	out := make([]Files, 0, n)
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("%s-%d", LocalName(r), i)
		f := l.named(name)
		if !pairCovers(f, ca, hosts) {
			c, k, err := ca.Issue(IssueRequest{Name: name, Role: r, Hosts: hosts, Validity: l.Validity})
			if err != nil {
				return nil, err
			}
			if _, _, err := WritePair(l.Dir, name, c, k); err != nil {
				return nil, err
			}
		}
		out = append(out, f)
	}
	return out, nil
}

// named are the files of the pair called name.
func (l Local) named(name string) Files {
	return Files{Cert: filepath.Join(l.Dir, name+".crt"), Key: filepath.Join(l.Dir, name+".key"), CA: l.CA}
}

// Files are the certificate, key and CA of role r.
func (l Local) Files(r Role) Files { return l.named(LocalName(r)) }

// Settings loads role r's mutual TLS settings.
func (l Local) Settings(r Role) (*Settings, error) { return NewSettings(l.Files(r)) }

// pairCovers says f's certificate exists, was issued by ca, has its key,
// and is valid for every host.
func pairCovers(f Files, ca *CA, hosts []string) bool {
	if _, err := os.Stat(f.Key); err != nil {
		return false
	}
	b, err := readPEM(f.Cert)
	if err != nil {
		return false
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return false
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil || cert.CheckSignatureFrom(ca.Cert) != nil || RenewDue(cert, time.Now()) {
		return false
	}
	for _, h := range hosts {
		if cert.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

// ClientProfile is what a local `spindle server` tells the command line
// about itself, written where the CLI looks for it (ClientProfileDir), one
// file per meta address: the CLI given --meta ADDR (default
// 127.0.0.1:9860) finds how to reach ADDR without more flags.
type ClientProfile struct {
	Meta     string `json:"meta"`
	Insecure bool   `json:"insecure,omitempty"`
	Cert     string `json:"tls_cert,omitempty"`
	Key      string `json:"tls_key,omitempty"`
	CA       string `json:"tls_ca,omitempty"`
	// S3Endpoint and S3CABundle are for S3 clients (aws --endpoint-url
	// … --ca-bundle …).
	S3Endpoint string `json:"s3_endpoint,omitempty"`
	S3CABundle string `json:"s3_ca_bundle,omitempty"`
}

// ClientProfileEnv overrides ClientProfileDir (tests, several users).
const ClientProfileEnv = "SPINDLE_CLIENT_CONFIG_DIR"

// ClientProfileDir is where client profiles live: $SPINDLE_CLIENT_CONFIG_DIR,
// else the user's configuration directory's spindle/clients
// (~/.config/spindle/clients).
func ClientProfileDir() (string, error) {
	if d := os.Getenv(ClientProfileEnv); d != "" {
		return d, nil
	}
	d, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("tlsconf: no directory for client profiles (set %s): %w", ClientProfileEnv, err)
	}
	return filepath.Join(d, "spindle", "clients"), nil
}

func profilePath(dir, addr string) string {
	r := strings.NewReplacer(":", "_", "/", "_", "[", "", "]", "")
	return filepath.Join(dir, r.Replace(addr)+".json")
}

// WriteClientProfile writes p (0600) under ClientProfileDir for each of
// addrs (every meta member's address), replacing older ones; it returns
// the first file's path.
func WriteClientProfile(p ClientProfile, addrs []string) (string, error) {
	dir, err := ClientProfileDir()
	if err != nil {
		return "", err
	}
	if err := vfs.MkdirAllDurable(vfs.Default, dir); err != nil {
		return "", fmt.Errorf("tlsconf: %w", err)
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return "", err
	}
	first := ""
	for _, a := range addrs {
		path := profilePath(dir, a)
		if err := vfs.WriteFileAtomicPerm(vfs.Default, path, append(b, '\n'), 0o600); err != nil {
			return "", fmt.Errorf("tlsconf: %w", err)
		}
		if first == "" {
			first = path
		}
	}
	return first, nil
}

// LoadClientProfile reads the profile a local server wrote for addr;
// found is false when there is none.
func LoadClientProfile(addr string) (p ClientProfile, path string, found bool, err error) {
	dir, err := ClientProfileDir()
	if err != nil {
		return p, "", false, err
	}
	path = profilePath(dir, addr)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return p, path, false, nil
	}
	if err != nil {
		return p, path, false, fmt.Errorf("tlsconf: client profile: %w", err)
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return p, path, false, fmt.Errorf("tlsconf: client profile %s: %w", path, err)
	}
	return p, path, true, nil
}
