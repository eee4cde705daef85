package units

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"1024", 1024},
		{"1B", 1},
		{"1KiB", 1024},
		{"1kib", 1024},
		{"1MiB", 1 << 20},
		{"4GiB", 4 << 30},
		{"1TiB", 1 << 40},
		{"1PiB", 1 << 50},
		{"7EiB", 7 << 60},
		{"1KB", 1000},
		{"1kb", 1000},
		{"1MB", 1000000},
		{"1GB", 1000000000},
		{"1TB", 1000000000000},
		{"1k", 1024},
		{"1K", 1024},
		{"1m", 1 << 20},
		{"1g", 1 << 30},
		{"2Mi", 2 << 20},
		{"  16 MiB  ", 16 << 20},
		{"1.5KiB", 1536},
		{"1.0 MiB", 1 << 20},
		{"0.5k", 512},
		{"0.1KiB", 102},      // 102.4 rounds down
		{"0.0009765625k", 1}, // exactly 1 byte
		{"1.00049KB", 1000},  // 1000.49 rounds down
		{"1.0005KB", 1001},   // 1000.5 rounds half up
		{"9223372036854775807", math.MaxInt64},
		{"8191PiB", 8191 << 50},
	}
	for _, tt := range tests {
		got, err := ParseBytes(tt.in)
		if err != nil {
			t.Errorf("ParseBytes(%q): unexpected error %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("ParseBytes(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func TestParseBytesErrors(t *testing.T) {
	tests := []struct {
		in      string
		wantErr error
		mention string
	}{
		{"", ErrSyntax, "empty"},
		{"   ", ErrSyntax, "empty"},
		{"abc", ErrSyntax, "want a number"},
		{"KiB", ErrSyntax, "want a number"},
		{"1XB", ErrSyntax, "unknown unit"},
		{"1 KiB extra", ErrSyntax, "unknown unit"},
		{"1..5KiB", ErrSyntax, "want a number"},
		{"1.KiB", ErrSyntax, "want a number"},
		{".5KiB", ErrSyntax, "want a number"},
		{"1.5", ErrSyntax, "fraction of a byte"},
		{"1e3", ErrSyntax, "unknown unit"},
		{"0x10", ErrSyntax, "unknown unit"},
		{"+1", ErrSyntax, "want a number"},
		{"-1", ErrRange, "negative"},
		{"-1KiB", ErrRange, "negative"},
		{"9223372036854775808", ErrRange, "overflows"},
		{"8EiB", ErrRange, "overflows"},
		{"8192PiB", ErrRange, "overflows"},
		{"8.5EiB", ErrRange, "overflows"},
		{"99999999999999999999999KiB", ErrRange, "overflows"},
		{strings.Repeat("1", 100), ErrSyntax, "longer than"},
	}
	for _, tt := range tests {
		got, err := ParseBytes(tt.in)
		if err == nil {
			t.Errorf("ParseBytes(%q) = %d, want error", tt.in, got)
			continue
		}
		if !errors.Is(err, tt.wantErr) {
			t.Errorf("ParseBytes(%q) error %v, want errors.Is %v", tt.in, err, tt.wantErr)
		}
		if !strings.Contains(err.Error(), tt.mention) {
			t.Errorf("ParseBytes(%q) error %q does not mention %q", tt.in, err, tt.mention)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	tests := []struct {
		in   int64
		want string
	}{
		{0, "0 B"},
		{1, "1 B"},
		{1023, "1023 B"},
		{1024, "1.0 KiB"},
		{1536, "1.5 KiB"},
		{1 << 20, "1.0 MiB"},
		{10 << 30, "10.0 GiB"},
		{1 << 40, "1.0 TiB"},
		{-2048, "-2.0 KiB"},
		{math.MaxInt64, "8.0 EiB"},
		{math.MinInt64, "-8.0 EiB"},
	}
	for _, tt := range tests {
		if got := FormatBytes(tt.in); got != tt.want {
			t.Errorf("FormatBytes(%d) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestByteSizeFlag(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	size := ByteSize(MiB)
	fs.Var(&size, "chunk-size", "chunk size")
	if got := fs.Lookup("chunk-size").DefValue; got != "1MiB" {
		t.Errorf("default shown as %q, want 1MiB", got)
	}
	if err := fs.Parse([]string{"--chunk-size", "1KiB"}); err != nil {
		t.Fatal(err)
	}
	if size.Int64() != 1024 {
		t.Errorf("--chunk-size 1KiB gave %d", size)
	}
	if err := fs.Parse([]string{"--chunk-size=lots"}); err == nil || !strings.Contains(err.Error(), "chunk-size") {
		t.Errorf("bad value: error %v, want one naming the flag", err)
	}
	if got := (&size).Type(); got != "bytes" {
		t.Errorf("Type() = %q", got)
	}
}

func TestByteSizeStringExact(t *testing.T) {
	for _, n := range []int64{0, 1, 1000, 1024, 1500, 3 * KiB, 5 * MiB, 1<<40 + 1<<10, math.MaxInt64} {
		s := ByteSize(n).String()
		got, err := ParseBytes(s)
		if err != nil || got != n {
			t.Errorf("ByteSize(%d).String() = %q parses to %d, %v", n, s, got, err)
		}
	}
	if got := ByteSize(3 * MiB).String(); got != "3MiB" {
		t.Errorf("ByteSize(3MiB).String() = %q", got)
	}
}

// checkRoundTrip asserts the sanity relations between ParseBytes, FormatBytes
// and ByteSize.String for a non-negative n.
func checkRoundTrip(t *testing.T, n int64) {
	t.Helper()
	exact := ByteSize(n).String()
	if back, err := ParseBytes(exact); err != nil || back != n {
		t.Fatalf("ByteSize(%d).String() = %q parses back to %d, %v", n, exact, back, err)
	}
	human := FormatBytes(n)
	back, err := ParseBytes(human)
	if err != nil {
		if errors.Is(err, ErrRange) && n > math.MaxInt64-math.MaxInt64/20 {
			return // "8.0 EiB" is just above MaxInt64 after rounding.
		}
		t.Fatalf("FormatBytes(%d) = %q does not parse: %v", n, human, err)
	}
	// One decimal in the chosen unit: error at most 0.05 unit (+1 byte of rounding).
	tol := int64(1)
	for _, bu := range binaryUnits {
		if n >= bu.size {
			tol = bu.size/20 + 1
			break
		}
	}
	if d := back - n; d > tol || d < -tol {
		t.Fatalf("FormatBytes(%d) = %q parses back to %d, off by %d (tolerance %d)", n, human, back, d, tol)
	}
}

func TestRoundTrip(t *testing.T) {
	for _, n := range []int64{0, 1, 1023, 1024, 1025, 1048575, 1 << 20, 123456789, 1 << 62, math.MaxInt64 / 2, math.MaxInt64} {
		checkRoundTrip(t, n)
	}
}

func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"1024", "1KiB", "1.5 MiB", "4GiB", "1KB", "1k", "-1", "", "8EiB", "0.1k", "1e3", "९"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseBytes(s)
		if err != nil {
			if n != 0 {
				t.Fatalf("ParseBytes(%q) = %d with error %v; want 0", s, n, err)
			}
			if !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrRange) {
				t.Fatalf("ParseBytes(%q): error %v wraps neither ErrSyntax nor ErrRange", s, err)
			}
			return
		}
		if n < 0 {
			t.Fatalf("ParseBytes(%q) = %d, negative", s, n)
		}
		checkRoundTrip(t, n)
	})
}

func BenchmarkParseBytes(b *testing.B) {
	for b.Loop() {
		if _, err := ParseBytes("1MiB"); err != nil {
			b.Fatal(err)
		}
	}
}
