package gen

import (
	"encoding/binary"
	"fmt"
)

// KeyName is the name of key i (0-based) in the generated bucket:
// "key-00000000", "key-00000001", ... (byte order is index order below
// 10^8 keys).
func KeyName(i int) string { return fmt.Sprintf("key-%08d", i) }

// splitmix64 is the finaliser of SplitMix64: a bijective mix of 64 bits.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Content fills dst with the bytes of key keyIndex from offset on: byte p
// of the key is byte p mod 8 (little-endian) of splitmix64(seed ^
// keyIndex<<40 ^ p/8). Any range of any key can be produced alone (tests
// and benches verify what they read back byte for byte); one core makes
// several GB/s.
func Content(seed uint64, keyIndex int, offset uint64, dst []byte) {
	base := seed ^ uint64(keyIndex)<<40
	w := offset / 8
	if r := offset % 8; r != 0 && len(dst) > 0 {
		var tmp [8]byte
		binary.LittleEndian.PutUint64(tmp[:], splitmix64(base^w))
		n := copy(dst, tmp[r:])
		dst = dst[n:]
		w++
	}
	n := len(dst) &^ 31
	for i := 0; i < n; i += 32 {
		d := (*[32]byte)(dst[i : i+32])
		binary.LittleEndian.PutUint64(d[0:8], splitmix64(base^w))
		binary.LittleEndian.PutUint64(d[8:16], splitmix64(base^(w+1)))
		binary.LittleEndian.PutUint64(d[16:24], splitmix64(base^(w+2)))
		binary.LittleEndian.PutUint64(d[24:32], splitmix64(base^(w+3)))
		w += 4
	}
	for ; n+8 <= len(dst); n += 8 {
		binary.LittleEndian.PutUint64(dst[n:n+8], splitmix64(base^w))
		w++
	}
	if tail := dst[n:]; len(tail) > 0 {
		var tmp [8]byte
		binary.LittleEndian.PutUint64(tmp[:], splitmix64(base^w))
		copy(tail, tmp[:])
	}
}
