package blocktoken

import (
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

var (
	k1 = Key{ID: 1, Secret: []byte(strings.Repeat("1", SecretBytes))}
	k2 = Key{ID: 2, Secret: []byte(strings.Repeat("2", SecretBytes))}
)

func mustSign(t *testing.T, tok Token, k Key) string {
	t.Helper()
	s, err := Sign(tok, k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSignVerify: a signed token verifies under its key and decodes to
// what was signed; under another key, with a byte changed, truncated or
// extended, it does not.
func TestSignVerify(t *testing.T) {
	exp := time.UnixMilli(time.Now().Add(time.Hour).UnixMilli())
	tok := Token{Ops: OpRead, Expiry: exp, Container: 7, Blocks: Ranges([]uint64{3, 4, 5, 9}), Principal: "carol"}
	s := mustSign(t, tok, k2)
	got, err := Verify([]byte(s), []Key{k1, k2})
	if err != nil {
		t.Fatal(err)
	}
	tok.KeyID = 2
	if got.KeyID != 2 || got.Ops != tok.Ops || !got.Expiry.Equal(exp) || got.Container != 7 || !slices.Equal(got.Blocks, tok.Blocks) || got.Principal != "carol" {
		t.Fatalf("decoded %+v, signed %+v", got, tok)
	}
	if _, err := Verify([]byte(s), []Key{k1}); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("without its key: %v", err)
	}
	if _, err := Verify([]byte(s), []Key{{ID: 2, Secret: k1.Secret}}); !errors.Is(err, ErrSignature) {
		t.Errorf("under another secret: %v", err)
	}
	raw, _ := base64.RawURLEncoding.DecodeString(s)
	for i := range raw {
		b := slices.Clone(raw)
		b[i] ^= 1
		if _, err := Verify([]byte(base64.RawURLEncoding.EncodeToString(b)), []Key{k1, k2}); !errors.Is(err, ErrForbidden) {
			t.Fatalf("byte %d changed: %v", i, err)
		}
	}
	for _, b := range [][]byte{raw[:len(raw)-1], append(slices.Clone(raw), 0), raw[:10]} {
		if _, err := Verify([]byte(base64.RawURLEncoding.EncodeToString(b)), []Key{k1, k2}); !errors.Is(err, ErrForbidden) {
			t.Errorf("%d bytes: %v", len(b), err)
		}
	}
	if _, err := Verify([]byte("not base64!"), []Key{k1}); !errors.Is(err, ErrMalformed) {
		t.Errorf("not base64: %v", err)
	}
	if _, err := Sign(Token{}, k1); err == nil {
		t.Error("a token without blocks was signed")
	}
}

// TestAllows: scope, operation, expiry and principal.
func TestAllows(t *testing.T) {
	now := time.Now()
	tok := Token{Ops: OpWrite, Expiry: now.Add(time.Minute), Container: 7, Blocks: []Range{{First: 10, Count: 3}}, Principal: "carol"}
	if err := tok.Allows(now, 7, 12, OpWrite, "carol"); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"block below":  tok.Allows(now, 7, 9, OpWrite, "carol"),
		"block above":  tok.Allows(now, 7, 13, OpWrite, "carol"),
		"container":    tok.Allows(now, 8, 10, OpWrite, "carol"),
		"read":         tok.Allows(now, 7, 10, OpRead, "carol"),
		"principal":    tok.Allows(now, 7, 10, OpWrite, "mallory"),
		"expired":      tok.Allows(now.Add(time.Minute), 7, 10, OpWrite, "carol"),
		"read & write": tok.Allows(now, 7, 10, OpRead|OpWrite, "carol"),
	} {
		if !errors.Is(err, ErrForbidden) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestRanges(t *testing.T) {
	got := Ranges([]uint64{9, 3, 4, 5, 4, 20})
	want := []Range{{3, 3}, {9, 1}, {20, 1}}
	if !slices.Equal(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
}

// TestVerifierCache: a token is verified once and then served from the
// cache (bounded), whose entries still obey expiry and scope; new keys
// empty it; no keys: ErrNoKeys; no token: ErrRequired.
func TestVerifierCache(t *testing.T) {
	now := time.Now()
	v := NewVerifier(2, func() time.Time { return now })
	if err := v.Check([]byte("x"), 1, 1, OpRead, ""); !errors.Is(err, ErrNoKeys) {
		t.Errorf("no keys: %v", err)
	}
	v.SetKeys([]Key{k1, k2})
	if err := v.Check(nil, 1, 1, OpRead, ""); !errors.Is(err, ErrRequired) || err.Error() != "forbidden: block token required" {
		t.Errorf("no token: %v", err)
	}
	var toks []string
	for c := uint64(1); c <= 3; c++ {
		toks = append(toks, mustSign(t, Token{Ops: OpRead, Expiry: now.Add(time.Minute), Container: c, Blocks: []Range{{1, 1}}}, k1))
	}
	for i, s := range toks {
		if err := v.Check([]byte(s), uint64(i+1), 1, OpRead, "anyone"); err != nil {
			t.Fatal(err)
		}
	}
	if v.Cached() != 2 {
		t.Errorf("%d cached, want the bound 2", v.Cached())
	}
	if err := v.Check([]byte(toks[2]), 3, 2, OpRead, ""); !errors.Is(err, ErrScope) {
		t.Errorf("a cached token for another block: %v", err)
	}
	now = now.Add(time.Minute)
	if err := v.Check([]byte(toks[2]), 3, 1, OpRead, ""); !errors.Is(err, ErrExpired) {
		t.Errorf("a cached token past its expiry: %v", err)
	}
	v.SetKeys([]Key{k2})
	if v.Cached() != 0 {
		t.Errorf("%d cached after the keys changed", v.Cached())
	}
}

// BenchmarkVerifierHit is the cost per chunk of a cached token.
func BenchmarkVerifierHit(b *testing.B) {
	v := NewVerifier(0, nil)
	v.SetKeys([]Key{k1})
	s, _ := Sign(Token{Ops: OpWrite, Expiry: time.Now().Add(time.Hour), Container: 1, Blocks: []Range{{1, 1}}, Principal: "carol"}, k1)
	tok := []byte(s)
	for b.Loop() {
		if err := v.Check(tok, 1, 1, OpWrite, "carol"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerify is the cost of a token not cached (an HMAC).
func BenchmarkVerify(b *testing.B) {
	s, _ := Sign(Token{Ops: OpWrite, Expiry: time.Now().Add(time.Hour), Container: 1, Blocks: []Range{{1, 1}}, Principal: "carol"}, k1)
	tok := []byte(s)
	for b.Loop() {
		if _, err := Verify(tok, []Key{k1}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestEncodeExample: the example of docs/FORMAT.md §15.
func TestEncodeExample(t *testing.T) {
	b, err := Encode(&Token{KeyID: 2, Ops: OpRead, Expiry: time.UnixMilli(1767326645000), Container: 7, Blocks: []Range{{3, 3}}, Principal: "carol"})
	if err != nil {
		t.Fatal(err)
	}
	const want = "0101020000000" + "87be07c9b010000070000000000000001000300000000000000030000000563" + "61726f6c"
	if got := fmt.Sprintf("%x", b); got != want {
		t.Fatalf("%s, want %s", got, want)
	}
}
