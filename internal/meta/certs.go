package meta

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/spindle-store/spindle/internal/certapi"
	"github.com/spindle-store/spindle/internal/certwatch"
	"github.com/spindle-store/spindle/internal/meta/httpio"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// Certificates (issue 33 item 1): the registry of the certificates this
// service issued, revocation, the deny-list every server polls
// (certwatch: every PollInterval), and renewal: package certreg.

func (s *Service) routeCerts(route func(pattern, name string, h func(w http.ResponseWriter, r *http.Request) (any, int, error))) {
	route("GET "+certapi.CertsRoute, "certs", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		l, err := s.certs.List()
		return l, http.StatusOK, err
	})
	route("POST "+certapi.RevokeRoute, "revoke_cert", func(w http.ResponseWriter, r *http.Request) (any, int, error) {
		var req certapi.RevokeRequest
		if err := httpio.DecodeBody(w, r, &req); err != nil {
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
		if err := httpio.DecodeBody(w, r, &req); err != nil {
			return nil, 0, err
		}
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			return nil, 0, fmt.Errorf("%w: renewal needs a verified certificate", metaapi.ErrForbidden)
		}
		resp, err := s.certs.Renew(r.TLS.VerifiedChains[0][0], req)
		return resp, http.StatusOK, err
	})
}

// watchCerts runs certwatch for this member's own certificate and Guard
// until Close: through its peers' API (the leader answers) in a group,
// from its own state alone.
func (s *Server) watchCerts() {
	cfg := s.svc.Cfg
	var c certapi.Caller = localCerts{s.svc}
	if len(cfg.Peers) > 1 {
		var addrs []string
		for _, a := range cfg.Peers {
			addrs = append(addrs, a)
		}
		slices.Sort(addrs)
		mc, err := metaapi.NewClient(strings.Join(addrs, ","), metaapi.ClientOptions{TLS: cfg.TLS, Timeout: 5 * time.Second})
		if err != nil {
			s.svc.Log.Error("certificate watch not started", "err", err)
			return
		}
		c = mc
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.wg.Add(2)
	go func() { defer s.wg.Done(); <-s.stop; cancel() }()
	go func() { defer s.wg.Done(); certwatch.Run(ctx, cfg.TLS, c, s.svc.Log, nil) }()
}

// localCerts is a certapi.Caller served by the Service itself (a member
// alone: its own deny-list and renewals).
type localCerts struct{ s *Service }

func (l localCerts) Do(_ context.Context, _, path string, in, out any, _ bool) error {
	switch path {
	case certapi.DeniedRoute:
		d, err := l.s.certs.Denied()
		*out.(*certapi.DenyList) = d
		return err
	case certapi.RenewRoute:
		resp, err := l.s.certs.Renew(l.s.Cfg.TLS.Leaf(), in.(certapi.RenewRequest))
		*out.(*certapi.RenewResponse) = resp
		return err
	}
	return errors.New("meta: local certificate calls: " + path)
}
