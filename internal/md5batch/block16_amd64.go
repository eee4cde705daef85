//go:build amd64 && gc && !purego

package md5batch

import "golang.org/x/sys/cpu"

// block16 runs n bytes (a multiple of 64, more than 0) of each lane whose
// bit is set in mask through the MD5 block function, 16 lanes at once
// (AVX-512). state is the digests, lane-interleaved (digest16); lane i
// reads base+ptrs[i] onwards (a signed 32-bit offset). The state of a lane
// not in mask is garbage afterwards.
//
//go:noescape
func block16(state *uint32, base uintptr, ptrs *int32, mask uint64, n int)

// haveBlock16: the CPU (and OS) run block16's instructions (AVX-512 F for
// the arithmetic and gathers, DQ for VANDNPD, BW for KMOVQ).
var haveBlock16 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512BW

// avx512md5consts are MD5's 64 round constants, each repeated for the 16
// lanes (read by block16).
//
//lint:ignore U1000 read by block16_amd64.s, which staticcheck does not see
var avx512md5consts = func() []uint32 {
	inf := make([]uint32, 16*len(md5consts))
	for i, c := range md5consts {
		for j := range 16 {
			inf[i*16+j] = c
		}
	}
	return inf
}()

// md5consts are MD5's round constants (RFC 1321).
//
//lint:ignore U1000 read by avx512md5consts, itself read by block16_amd64.s
var md5consts = [64]uint32{
	0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee,
	0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
	0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be,
	0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
	0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa,
	0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
	0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed,
	0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
	0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c,
	0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
	0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05,
	0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
	0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039,
	0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
	0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1,
	0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391,
}
