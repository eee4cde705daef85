// Package crc32c is Spindle's one CRC32C (Castagnoli): the table, Checksum
// and Update (checksum.go), and the combination of checksums without the bytes:
// crc(A‖B) from crc(A), crc(B) and len(B) (zlib's crc32_combine, for the
// Castagnoli polynomial). Spindle's generator uses it to make a block's CRC
// from its pieces' checksums, and the meta service to make a multipart
// object's CRC32C from its parts'. Pure functions; safe for concurrent use.
package crc32c

import "hash/crc32"

// CRC32C (Castagnoli) combination: crc(A‖B) from crc(A), crc(B) and len(B),
// without the bytes (zlib's crc32_combine, for the Castagnoli polynomial).
// Feeding n zero bytes through the CRC register, without the pre- and
// post-conditioning, is a linear map over GF(2)^32; crc(A‖B) is that map
// for len(B) bytes applied to crc(A), XOR crc(B) (the conditioning cancels
// out).

// gf2Matrix is a linear map on 32-bit vectors: column i is the image of
// bit i.
type gf2Matrix [32]uint32

func (m *gf2Matrix) times(v uint32) uint32 {
	var s uint32
	for i := 0; v != 0; i, v = i+1, v>>1 {
		if v&1 != 0 {
			s ^= m[i]
		}
	}
	return s
}

// square returns m∘m.
func (m *gf2Matrix) square() gf2Matrix {
	var sq gf2Matrix
	for i := range sq {
		sq[i] = m.times(m[i])
	}
	return sq
}

// zeroBytesOp returns the map of feeding n zero bytes through the register.
func zeroBytesOp(n uint64) gf2Matrix {
	// One zero bit: shift right, XOR the polynomial when bit 0 falls out.
	var op gf2Matrix
	op[0] = crc32.Castagnoli
	for i := 1; i < 32; i++ {
		op[i] = 1 << (i - 1)
	}
	op = op.square() // 2 bits
	op = op.square() // 4 bits
	op = op.square() // 8 bits: one byte
	var acc gf2Matrix
	for i := range acc {
		acc[i] = 1 << i // identity
	}
	for ; n != 0; n >>= 1 {
		if n&1 != 0 {
			for i := range acc {
				acc[i] = op.times(acc[i])
			}
		}
		op = op.square()
	}
	return acc
}

// Shift applies the map of n zero bytes quickly: four table lookups.
type Shift [4][256]uint32

func NewShift(n uint64) *Shift {
	m := zeroBytesOp(n)
	var t Shift
	for k := range 4 {
		for b := range 256 {
			t[k][b] = m.times(uint32(b) << (8 * k))
		}
	}
	return &t
}

func (t *Shift) Apply(v uint32) uint32 {
	return t[0][v&0xff] ^ t[1][(v>>8)&0xff] ^ t[2][(v>>16)&0xff] ^ t[3][v>>24]
}

// Combine returns crc(A‖B) given crc(A), crc(B) and len(B).
func Combine(crcA, crcB uint32, lenB uint64) uint32 {
	if lenB == 0 {
		return crcA
	}
	m := zeroBytesOp(lenB)
	return m.times(crcA) ^ crcB
}
