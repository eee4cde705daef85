package tlsconf

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/testutil"
)

// guardServer serves s on 127.0.0.1: each connection completes its
// handshake, then echoes what it reads until the peer or the guard closes
// it.
func guardServer(t *testing.T, s *Settings) string {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := s.Listener(raw)
	done := make(chan struct{})
	t.Cleanup(func() { testutil.CloseT(t, ln); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }() // the test looks at the client's end
				_, _ = io.Copy(c, c)             // until closed: the error says which end closed
			}()
		}
	}()
	return raw.Addr().String()
}

func settings(t *testing.T, f Files) *Settings {
	t.Helper()
	s, err := NewSettings(f)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func dialSettings(s *Settings, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := s.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	// TLS 1.3: the server checks the client's certificate after the
	// client's handshake returns; an echo proves it was accepted.
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	if _, err := c.Write([]byte("x")); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return c, nil
}

// TestRevokedRefusedAndClosed: once a client certificate's serial is on
// the server's deny-list, its open connection is closed and a new one is
// refused; another certificate is still served; taking it off the list
// admits it again. Fails without the check in Guard.admit (the new
// connection is served) or without SetDenied's closing (the open one
// still echoes).
func TestRevokedRefusedAndClosed(t *testing.T) {
	p := newPKI(t, "cluster")
	srv := settings(t, p.files("meta-1", RoleMeta, "127.0.0.1"))
	addr := guardServer(t, srv)
	dn := settings(t, p.files("dn-1", RoleDatanode))
	other := settings(t, p.files("dn-2", RoleDatanode))
	open, err := dialSettings(dn, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = open.Close() }() // closed by the server
	serial := SerialOf(dn.Leaf())
	if n := srv.Guard().SetDenied(1, []string{serial}); n != 1 {
		t.Fatalf("SetDenied closed %d connections, want 1", n)
	}
	if err := open.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if _, werr := open.Write([]byte("y")); werr == nil {
		if _, err := io.ReadFull(open, b[:]); err == nil {
			t.Fatal("the revoked certificate's open connection still echoes")
		}
	}
	if c, err := dialSettings(dn, addr); err == nil {
		_ = c.Close()
		t.Fatal("a revoked certificate was served")
	}
	c, err := dialSettings(other, addr)
	if err != nil {
		t.Fatalf("another certificate after a revocation: %v", err)
	}
	testutil.CloseT(t, c)
	// The client end refuses a revoked server too.
	if dn.Guard().SetDenied(1, []string{SerialOf(srv.Leaf())}); true {
		if c, err := dialSettings(other, addr); err != nil {
			t.Fatalf("a client whose list is empty: %v", err)
		} else {
			testutil.CloseT(t, c)
		}
		if _, err := dialSettings(dn, addr); !errors.Is(err, ErrRevoked) {
			t.Fatalf("dialing a revoked server: %v, want ErrRevoked", err)
		}
	}
	srv.Guard().SetDenied(2, nil)
	dn.Guard().SetDenied(2, nil)
	if c, err := dialSettings(dn, addr); err != nil {
		t.Fatalf("after the deny-list emptied: %v", err)
	} else {
		testutil.CloseT(t, c)
	}
}

// expiredPair writes a pair of p's CA whose validity ended a minute ago.
func (p *pki) expiredPair(name string, role Role) Files {
	p.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		p.t.Fatal(err)
	}
	u, _ := url.Parse(roleURIPrefix + string(role))
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(-time.Minute), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, URIs: []*url.URL{u},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca.Cert, key.Public(), p.ca.key)
	if err != nil {
		p.t.Fatal(err)
	}
	k, err := encodeKey(key)
	if err != nil {
		p.t.Fatal(err)
	}
	cp, kp, err := WritePair(p.dir, name, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), k)
	if err != nil {
		p.t.Fatal(err)
	}
	return Files{Cert: cp, Key: kp, CA: filepath.Join(p.dir, CACertFile)}
}

// TestExpiredRefused: an expired client certificate is refused by a
// server, an expired server certificate by a client.
func TestExpiredRefused(t *testing.T) {
	p := newPKI(t, "cluster")
	addr := guardServer(t, settings(t, p.files("meta-1", RoleMeta, "127.0.0.1")))
	if c, err := dialSettings(settings(t, p.expiredPair("dn-old", RoleDatanode)), addr); err == nil {
		_ = c.Close()
		t.Fatal("an expired client certificate was served")
	}
	old := guardServer(t, settings(t, p.expiredPair("meta-old", RoleMeta)))
	if c, err := dialSettings(settings(t, p.files("admin", RoleAdmin)), old); err == nil {
		_ = c.Close()
		t.Fatal("a client accepted an expired server certificate")
	}
}

// TestPinnedRole: a client pinned to the meta role refuses a server that
// presents a datanode's certificate for the address it dials (one a join
// could have yielded), and accepts a meta server. Fails without the role
// check in Guard.verifyConn.
func TestPinnedRole(t *testing.T) {
	p := newPKI(t, "cluster")
	fake := guardServer(t, settings(t, p.files("dn-1", RoleDatanode, "127.0.0.1")))
	real := guardServer(t, settings(t, p.files("meta-1", RoleMeta, "127.0.0.1")))
	cli := settings(t, p.files("app", RoleClient))
	if c, err := dialSettings(cli.Pin(RoleMeta), fake); !errors.Is(err, ErrWrongRole) {
		if err == nil {
			_ = c.Close()
		}
		t.Fatalf("a client of the meta service met a datanode certificate: %v, want ErrWrongRole", err)
	}
	c, err := dialSettings(cli.Pin(RoleMeta), real)
	if err != nil {
		t.Fatalf("the meta server: %v", err)
	}
	testutil.CloseT(t, c)
	if c, err := dialSettings(cli.PinDatanode(), real); err == nil {
		_ = c.Close()
		t.Fatal("the data path accepted a meta certificate")
	}
	c, err = dialSettings(cli, fake) // unpinned: any role
	if err != nil {
		t.Fatal(err)
	}
	testutil.CloseT(t, c)
}
