//go:build !amd64 || !gc || purego

package md5batch

// haveBlock16 is false: no multi-lane block function here; every digest
// is computed by crypto/md5.
var haveBlock16 = false

func block16(*uint32, uintptr, *int32, uint64, int) {
	panic("md5batch: block16 without AVX-512")
}
