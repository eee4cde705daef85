package datanode

import (
	"net"
	"strings"
	"testing"
)

// TestAdvertiseAddr: the address a datanode registers — the listener's when
// it is dialable, the advertised one (its port defaulting to the
// listener's) otherwise; a listener on every interface without an
// advertised address, or an advertised address nobody can dial, refused.
func TestAdvertiseAddr(t *testing.T) {
	any4 := &net.TCPAddr{IP: net.IPv4zero, Port: 9870}
	any6 := &net.TCPAddr{IP: net.IPv6unspecified, Port: 9870}
	lo := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9870}
	for _, tc := range []struct {
		ln        net.Addr
		advertise string
		want      string // "" with wantErr
		wantErr   string
	}{
		{lo, "", "127.0.0.1:9870", ""},
		{any4, "", "", "needs --advertise-addr"},
		{any6, "", "", "needs --advertise-addr"},
		{any4, "10.0.0.7", "10.0.0.7:9870", ""},
		{any6, "dn7.example.net:19870", "dn7.example.net:19870", ""},
		{any6, "[fd00::7]", "[fd00::7]:9870", ""},
		{any6, "fd00::7", "[fd00::7]:9870", ""},
		{any4, "0.0.0.0:9870", "", "not an address"},
		{any4, "10.0.0.7:0", "", "bad port"},
		{any4, ":9870", "", "no host"},
	} {
		got, err := AdvertiseAddr(tc.ln, tc.advertise)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("listen %v, advertise %q: %q, %v; want an error saying %q", tc.ln, tc.advertise, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("listen %v, advertise %q: %q, %v; want %q", tc.ln, tc.advertise, got, err, tc.want)
		}
	}
}
