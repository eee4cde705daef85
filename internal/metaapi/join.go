package metaapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spindle-store/spindle/internal/tlsconf"
)

// Join tokens (issue 17 item 2): an administrator asks the meta service
// for a one-time token (POST JoinTokensRoute); a new datanode, which has
// only the CA's certificate, sends it with a certificate request (POST
// JoinRoute, over TLS without a client certificate: tlsconf.JoinALPN) and
// gets back a datanode certificate whose name the meta service chose.
const (
	JoinTokensRoute = "/v1/join-tokens"
	JoinRoute       = "/v1/join"
	// DefaultJoinTokenTTL and MaxJoinTokenTTL bound a token's life.
	DefaultJoinTokenTTL = time.Hour
	MaxJoinTokenTTL     = 24 * time.Hour
	// MaxJoinHosts bounds the addresses a joining datanode asks for.
	MaxJoinHosts = 8
	// joinTimeout bounds one Join call.
	joinTimeout = 30 * time.Second
)

// The token request is certapi.JoinTokenRequest (role and hosts).

// JoinToken is a one-time token for one datanode to join.
type JoinToken struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// JoinRequest is a joining datanode's: its token, a PEM certificate
// request (tlsconf.NewKeyRequest), and the addresses (IP or DNS) others
// dial it at, for the certificate.
type JoinRequest struct {
	Token string   `json:"token"`
	CSR   string   `json:"csr"`
	Hosts []string `json:"hosts"`
}

// JoinResponse carries the datanode's certificate (PEM) with the name the
// meta service gave it, and the CA's certificate.
type JoinResponse struct {
	Name string `json:"name"`
	Cert string `json:"cert"`
	CA   string `json:"ca"`
}

// Join sends req to the meta service at addr (host:port), verifying it by
// the CA certificate in caFile, without a client certificate.
func Join(ctx context.Context, addr, caFile string, req JoinRequest) (JoinResponse, error) {
	var out JoinResponse
	tc, err := tlsconf.JoinClientConfig(caFile, addr)
	if err != nil {
		return out, err
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: joinTimeout}
	defer hc.CloseIdleConnections()
	body, err := json.Marshal(req)
	if err != nil {
		return out, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+addr+JoinRoute, bytes.NewReader(body))
	if err != nil {
		return out, fmt.Errorf("join: %w", err)
	}
	hr.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(hr)
	if err != nil {
		return out, fmt.Errorf("join at %s: %w", addr, unwrapURLError(err))
	}
	defer func() { _ = resp.Body.Close() }() // read below: ReadAll's error is the one
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return out, fmt.Errorf("join at %s: %w", addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e Error
		if json.Unmarshal(b, &e) == nil && e.Code != "" {
			return out, &e
		}
		return out, fmt.Errorf("join at %s: HTTP %d: %s", addr, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return out, fmt.Errorf("join at %s: %w", addr, err)
	}
	return out, nil
}
