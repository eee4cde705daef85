package tlsconf

import (
	"crypto/x509"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// NotAfter is when the certificate in use expires (zero when plaintext or
// unreadable). It follows rotations (the Reloader's current pair).
func (s *Settings) NotAfter() time.Time {
	if !s.Enabled() {
		return time.Time{}
	}
	c, _ := s.r.current()
	if c == nil || len(c.Certificate) == 0 {
		return time.Time{}
	}
	if c.Leaf != nil {
		return c.Leaf.NotAfter
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		return time.Time{}
	}
	return leaf.NotAfter
}

// ExpiryGauge is spindle_tls_certificate_expiry_timestamp_seconds of s
// (absent when plaintext), for the certificate-expiry alert
// (deploy/prometheus/alerts.yml).
func ExpiryGauge(s *Settings) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "spindle_tls_certificate_expiry_timestamp_seconds",
		Help: "When the process's TLS certificate expires (Unix seconds; 0 when plaintext)."},
		func() float64 {
			t := s.NotAfter()
			if t.IsZero() {
				return 0
			}
			return float64(t.Unix())
		})
}
