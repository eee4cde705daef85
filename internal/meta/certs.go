package meta

import (
	"crypto"
	"fmt"
	"net/http"
	"time"

	"github.com/spindle-store/spindle/internal/certapi"
	"github.com/spindle-store/spindle/internal/meta/certreg"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// Certificates (issue 33 item 1): the registry of the certificates this
// service issued (certreg), revocation, the deny-list every server polls
// (certwatch: every PollInterval), and renewal: a caller presenting a
// valid, unrevoked certificate of the cluster CA gets a new one with the
// same name, role and hosts for a new key, valid Config.CertValidity.

// renewalsPerSecond bounds renewals (a token bucket of as many).
const renewalsPerSecond = 50

func (s *Service) routeCerts(route func(pattern, name string, h func(w http.ResponseWriter, r *http.Request) (any, int, error))) {
	route("GET "+certapi.CertsRoute, "certs", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		l, err := s.certs.List()
		return l, http.StatusOK, err
	})
	route("POST "+certapi.RevokeRoute, "revoke_cert", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req certapi.RevokeRequest
		if err := decodeBody(w, r, &req); err != nil {
			return nil, 0, err
		}
		serials, err := s.certs.Revoke(req.Target)
		if err == nil {
			s.Log.Warn("certificate revoked", "target", req.Target, "serials", serials)
		}
		return certapi.RevokeResponse{Serials: serials}, http.StatusOK, err
	})
	route("GET "+certapi.DeniedRoute, "cert_denied", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		l, err := s.certs.Denied()
		return l, http.StatusOK, err
	})
	route("POST "+certapi.RenewRoute, "renew_cert", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req certapi.RenewRequest
		if err := decodeBody(w, r, &req); err != nil {
			return nil, 0, err
		}
		resp, err := s.renew(r, req)
		return resp, http.StatusOK, err
	})
}

// renew issues the caller a certificate like its own for req's key.
func (s *Service) renew(r *http.Request, req certapi.RenewRequest) (certapi.RenewResponse, error) {
	if s.Cfg.JoinCA == nil {
		return certapi.RenewResponse{}, fmt.Errorf("%w: this meta service issues no certificates (it has no CA key: spindle meta --join-ca-dir)", metaapi.ErrInvalid)
	}
	if !s.renewRate.Allow(time.Now()) {
		return certapi.RenewResponse{}, fmt.Errorf("%w: renewals are limited to %d a second: try again", metaapi.ErrBusy, renewalsPerSecond)
	}
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
		return certapi.RenewResponse{}, fmt.Errorf("%w: renewal needs a verified certificate", metaapi.ErrForbidden)
	}
	leaf := r.TLS.VerifiedChains[0][0]
	name, role, err := tlsconf.IdentityOf(leaf)
	if err != nil {
		return certapi.RenewResponse{}, fmt.Errorf("%w: %v", metaapi.ErrForbidden, err)
	}
	if revoked, err := s.certs.IsRevoked(tlsconf.SerialOf(leaf)); err != nil || revoked {
		return certapi.RenewResponse{}, fmt.Errorf("%w: certificate %s is revoked (%v)", metaapi.ErrForbidden, tlsconf.SerialOf(leaf), err)
	}
	pub, err := tlsconf.RequestKey([]byte(req.CSR))
	if err != nil {
		return certapi.RenewResponse{}, fmt.Errorf("%w: renew: %v", metaapi.ErrInvalid, err)
	}
	hosts := append([]string(nil), leaf.DNSNames...)
	for _, ip := range leaf.IPAddresses {
		hosts = append(hosts, ip.String())
	}
	cert, err := s.issue(tlsconf.IssueRequest{Name: name, Role: role, Hosts: hosts}, pub, certreg.HowRenew)
	if err != nil {
		return certapi.RenewResponse{}, err
	}
	c, err := tlsconf.ParseCert(cert)
	if err != nil {
		return certapi.RenewResponse{}, err
	}
	s.Log.Info("certificate renewed", "name", name, "role", role, "old_serial", tlsconf.SerialOf(leaf), "serial", tlsconf.SerialOf(c), "not_after", c.NotAfter)
	return certapi.RenewResponse{Cert: string(cert), NotAfter: c.NotAfter}, nil
}

// issue signs req for pub with JoinCA (lifetime Config.CertValidity) and
// records the certificate; nothing is handed out unless it is recorded.
func (s *Service) issue(req tlsconf.IssueRequest, pub crypto.PublicKey, how uint8) ([]byte, error) {
	req.Validity = s.Cfg.CertValidity
	certPEM, err := s.Cfg.JoinCA.IssueFor(req, pub)
	if err != nil {
		return nil, fmt.Errorf("meta: issue: %w", err)
	}
	c, err := tlsconf.ParseCert(certPEM)
	if err != nil {
		return nil, err
	}
	rec := certapi.Cert{Serial: tlsconf.SerialOf(c), Name: req.Name, Role: string(req.Role), Hosts: req.Hosts, IssuedAt: s.Cfg.Now(), NotAfter: c.NotAfter}
	if err := s.certs.Record(rec, how); err != nil {
		return nil, fmt.Errorf("meta: recording certificate %s: %w", rec.Serial, err)
	}
	return certPEM, nil
}
