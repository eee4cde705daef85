// Package certwatch keeps a process's certificate current and its
// deny-list in force (issue 33 item 1): every server (datanode, meta
// member, S3 gateway) runs Run, which every certapi.PollInterval fetches
// the meta service's deny-list into its Settings' Guard (refusing those
// certificates on every port and closing their open connections) and,
// once its own certificate is past tlsconf.RenewFraction of its lifetime, renews
// it through the meta service: a new key, a certificate request, the new
// pair written over the old files (key first, each atomically) and
// reloaded — the listeners and dialers present it from their next
// handshake, no restart. The command line renews its client profile's
// certificate the same way (RenewIfDue) when a command starts.
//
// Invariants: a fetched deny-list replaces the Guard's whole (a serial
// taken off the list is admitted again); a failed fetch keeps the last
// list; a renewal that fails leaves the files as they were and is tried
// again after RetryInterval.
//
// Concurrency: Run is one goroutine per process role; RenewIfDue may run
// concurrently with a Guard's handshakes (Settings.Reload is safe).
package certwatch

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/spindle-store/spindle/internal/certapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// RetryInterval is how long a failed renewal waits to be tried again.
const RetryInterval = 30 * time.Second

// callTimeout bounds one call to the meta service.
const callTimeout = 10 * time.Second

// Due says the certificate s presents is past RenewFraction of its
// lifetime at now (tlsconf.RenewDue).
func Due(s *tlsconf.Settings, now time.Time) bool {
	leaf := s.Leaf()
	return leaf != nil && tlsconf.RenewDue(leaf, now)
}

// RenewIfDue renews s's certificate through mc (a client presenting s)
// when Due; renewed says it did.
func RenewIfDue(ctx context.Context, s *tlsconf.Settings, mc certapi.Caller, log *slog.Logger) (renewed bool, err error) {
	if !s.Enabled() || !Due(s, time.Now()) {
		return false, nil
	}
	old := s.Leaf()
	csr, keyPEM, err := tlsconf.NewKeyRequest()
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := certapi.Renew(ctx, mc, csr)
	if err != nil {
		return false, fmt.Errorf("renewing certificate %q (valid until %s): %w", old.Subject.CommonName, old.NotAfter.UTC().Format(time.RFC3339), err)
	}
	if err := tlsconf.WriteCertKey(s.Files(), []byte(resp.Cert), keyPEM); err != nil {
		return false, err
	}
	if err := s.Reload(); err != nil {
		return false, err
	}
	if log != nil {
		log.Info("certificate renewed", "name", old.Subject.CommonName, "old_serial", tlsconf.SerialOf(old),
			"serial", tlsconf.SerialOf(s.Leaf()), "not_after", resp.NotAfter, "cert", s.Files().Cert)
	}
	return true, nil
}

// Poll fetches the deny-list once into s's Guard; it returns the number
// of connections it closed.
func Poll(ctx context.Context, s *tlsconf.Settings, mc certapi.Caller) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	l, err := certapi.Denied(ctx, mc)
	if err != nil {
		return 0, err
	}
	return s.Guard().SetDenied(l.Version, l.Serials), nil
}

// Run polls the deny-list and renews s's certificate until ctx is done;
// mc is a client of the meta service presenting s. Plaintext: returns at
// once. renewed, when not nil, is called after each renewal (the S3
// gateway reloads its HTTPS certificate).
func Run(ctx context.Context, s *tlsconf.Settings, mc certapi.Caller, log *slog.Logger, renewed func()) {
	if !s.Enabled() || mc == nil {
		return
	}
	if log == nil {
		log = slog.Default()
	}
	t := time.NewTicker(certapi.PollInterval)
	defer t.Stop()
	var retry time.Time
	var pollFailing bool
	for {
		if n, err := Poll(ctx, s, mc); err != nil {
			if !pollFailing && ctx.Err() == nil {
				log.Warn("deny-list fetch failing (the last one stays in force)", "err", err)
			}
			pollFailing = true
		} else {
			pollFailing = false
			if n > 0 {
				log.Warn("revoked certificates: their open connections closed", "closed", n)
			}
		}
		if now := time.Now(); now.After(retry) {
			ok, err := RenewIfDue(ctx, s, mc, log)
			if err != nil && ctx.Err() == nil {
				log.Error("certificate renewal failed: renew it before it expires (spindle cert issue)", "err", err, "retry_in", RetryInterval)
				retry = now.Add(RetryInterval)
			}
			if ok && renewed != nil {
				renewed()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Start runs Run on a goroutine counted in wg (when s has TLS and mc is a
// certapi.Caller).
func Start(ctx context.Context, wg *sync.WaitGroup, s *tlsconf.Settings, mc any, log *slog.Logger, renewed func()) {
	c, ok := mc.(certapi.Caller)
	if !s.Enabled() || !ok {
		return
	}
	wg.Add(1)
	go func() { defer wg.Done(); Run(ctx, s, c, log, renewed) }()
}

// Notify returns a renewed callback for Start that tells ch without
// blocking (ch has room for one: a renewal not yet taken is enough).
func Notify(ch chan<- struct{}) func() {
	return func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
