// Package units parses and formats byte sizes for flags, config files and
// reports: "1024", "1KiB", "1MiB", "4GiB", "1TiB" (binary), "1KB", "1MB",
// "1GB" (decimal, powers of 1000), and the short forms "1k", "1m", "1g"
// (binary, as in dd and most storage tools).
//
// Grammar accepted by ParseBytes (case-insensitive, surrounding blanks and
// blanks between number and unit allowed):
//
//	size   = digits [ "." digits ] [ unit ]
//	unit   = "b"
//	       | "k" | "m" | "g" | "t" | "p"            (binary: 1k = 1024)
//	       | "ki" | "mi" | "gi" | "ti" | "pi" | "ei" (binary)
//	       | "kib" | "mib" | "gib" | "tib" | "pib" | "eib"
//	       | "kb" | "mb" | "gb" | "tb" | "pb" | "eb" (decimal: 1kb = 1000)
//
// Invariants:
//   - ParseBytes never returns a negative value; signs are rejected.
//   - Results are exact (no floating point): a fraction with a unit is
//     rounded to the nearest byte ("1.5KiB" = 1536, "0.1KiB" = 102); a
//     fraction without a unit ("1.5") is an error, as is any value that does
//     not fit in an int64.
//   - ByteSize.String is exact and re-parsable: ParseBytes(b.String()) == b.
//     FormatBytes is for humans (one decimal) and round-trips only to within
//     the rounding of that decimal.
//
// Concurrency: all functions are pure and safe for concurrent use. A ByteSize
// is a plain integer; concurrent Set calls on one flag are a caller bug.
package units

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// Binary and decimal multipliers.
const (
	KiB int64 = 1 << 10
	MiB int64 = 1 << 20
	GiB int64 = 1 << 30
	TiB int64 = 1 << 40
	PiB int64 = 1 << 50
	EiB int64 = 1 << 60

	KB int64 = 1e3
	MB int64 = 1e6
	GB int64 = 1e9
	TB int64 = 1e12
	PB int64 = 1e15
	EB int64 = 1e18
)

// maxInputBytes bounds the input ParseBytes looks at; no valid size is longer.
const maxInputBytes = 64

// ErrSyntax is wrapped by ParseBytes errors for malformed input; ErrRange by
// errors for negative or overflowing values.
var (
	ErrSyntax = errors.New("invalid byte size")
	ErrRange  = errors.New("byte size out of range")
)

var multipliers = map[string]int64{
	"": 1, "b": 1,
	"k": KiB, "m": MiB, "g": GiB, "t": TiB, "p": PiB,
	"ki": KiB, "mi": MiB, "gi": GiB, "ti": TiB, "pi": PiB, "ei": EiB,
	"kib": KiB, "mib": MiB, "gib": GiB, "tib": TiB, "pib": PiB, "eib": EiB,
	"kb": KB, "mb": MB, "gb": GB, "tb": TB, "pb": PB, "eb": EB,
}

// ParseBytes parses a byte size such as "1024", "1KiB", "1.5 GiB", "1KB"
// (= 1000) or "4k" (= 4096). See the package comment for the grammar.
func ParseBytes(s string) (int64, error) {
	in := strings.TrimSpace(s)
	if in == "" {
		return 0, fmt.Errorf("units: %w: empty string", ErrSyntax)
	}
	if len(in) > maxInputBytes {
		return 0, fmt.Errorf("units: %w: %.20q... is longer than %d characters", ErrSyntax, in, maxInputBytes)
	}
	if in[0] == '-' {
		return 0, fmt.Errorf("units: %w: %q is negative", ErrRange, s)
	}
	// Split into the numeric part and the unit.
	i := 0
	for i < len(in) && (in[i] >= '0' && in[i] <= '9' || in[i] == '.') {
		i++
	}
	num, unit := in[:i], strings.ToLower(strings.TrimSpace(in[i:]))
	intPart, fracPart, hasDot := strings.Cut(num, ".")
	if intPart == "" || !allDigits(intPart) || (hasDot && (fracPart == "" || !allDigits(fracPart))) {
		return 0, fmt.Errorf("units: %w: %q: want a number such as 1024, 1.5 or 4 followed by an optional unit (B, KiB, MiB, GiB, TiB, KB, MB, GB, k, m, g)", ErrSyntax, s)
	}
	mult, ok := multipliers[unit]
	if !ok {
		return 0, fmt.Errorf("units: %w: %q: unknown unit %q (want B, KiB, MiB, GiB, TiB, PiB, EiB, KB, MB, GB, TB, PB, EB, k, m, g, t, p)", ErrSyntax, s, in[i:])
	}
	if !hasDot {
		n, err := strconv.ParseInt(intPart, 10, 64)
		if err != nil || n > math.MaxInt64/mult {
			return 0, fmt.Errorf("units: %w: %q overflows int64", ErrRange, s)
		}
		return n * mult, nil
	}
	if mult == 1 {
		return 0, fmt.Errorf("units: %w: %q is a fraction of a byte; give a unit (e.g. 1.5KiB) or whole bytes", ErrSyntax, s)
	}
	// Exact arithmetic: (int.frac) * mult, rounded half up.
	r, ok := new(big.Rat).SetString(intPart + "." + fracPart)
	if !ok {
		return 0, fmt.Errorf("units: %w: %q", ErrSyntax, s)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	q, m := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	if m.Lsh(m, 1).Cmp(r.Denom()) >= 0 {
		q.Add(q, big.NewInt(1))
	}
	if !q.IsInt64() {
		return 0, fmt.Errorf("units: %w: %q overflows int64", ErrRange, s)
	}
	return q.Int64(), nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

var binaryUnits = []struct {
	name string
	size int64
}{
	{"EiB", EiB}, {"PiB", PiB}, {"TiB", TiB}, {"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB},
}

// FormatBytes renders n for humans with one decimal in the largest binary
// unit not exceeding it: 512 -> "512 B", 1536 -> "1.5 KiB", 1<<20 -> "1.0 MiB".
func FormatBytes(n int64) string {
	sign := ""
	u := uint64(n)
	if n < 0 {
		sign, u = "-", uint64(-(n+1))+1 // safe for math.MinInt64
	}
	for _, bu := range binaryUnits {
		if u >= uint64(bu.size) {
			return fmt.Sprintf("%s%.1f %s", sign, float64(u)/float64(bu.size), bu.name)
		}
	}
	return fmt.Sprintf("%s%d B", sign, u)
}

// formatExact renders n without loss: the largest binary unit dividing it
// ("1MiB", "3KiB"), or plain bytes ("1500").
func formatExact(n int64) string {
	if n == 0 {
		return "0"
	}
	for _, bu := range binaryUnits {
		if n%bu.size == 0 {
			return strconv.FormatInt(n/bu.size, 10) + bu.name
		}
	}
	return strconv.FormatInt(n, 10)
}

// ByteSize is a byte count usable as a pflag.Value, so that flags read
// "--chunk-size 1KiB":
//
//	size := units.ByteSize(units.MiB) // default
//	fs.Var(&size, "chunk-size", "chunk size (e.g. 1KiB, 1MiB)")
type ByteSize int64

// String returns the exact, re-parsable form ("1MiB", "1500").
func (b ByteSize) String() string { return formatExact(int64(b)) }

// Set parses s with ParseBytes.
func (b *ByteSize) Set(s string) error {
	n, err := ParseBytes(s)
	if err != nil {
		return err
	}
	*b = ByteSize(n)
	return nil
}

// Type names the value kind in flag help.
func (b *ByteSize) Type() string { return "bytes" }

// Int64 returns the size in bytes.
func (b ByteSize) Int64() int64 { return int64(b) }
