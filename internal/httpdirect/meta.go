package httpdirect

import "github.com/spindle-store/spindle/internal/tlsconf"

// ForMeta is the transport of a client of the meta service (the S3
// gateway's and the console's; metaapi.NewClient's default stays
// net/http's, ARCHITECTURE §17.1): the TLS
// peer pinned to the meta role (issue 33; sec nil or plaintext: http),
// never through a proxy (the meta service is on the cluster's network).
func ForMeta(sec *tlsconf.Settings) *Transport {
	t := &Transport{}
	if sec.Enabled() {
		t.DialTLS = sec.Pin(tlsconf.RoleMeta).Dial
	}
	return t
}
