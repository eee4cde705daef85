package crc32c

import "hash/crc32"

// Table is the CRC32C (Castagnoli) table: the one every Spindle package
// checksums with (pieces of chunks, log and meta records, whole values).
// hash/crc32 picks the machine's fastest implementation for it (SSE 4.2
// on amd64, the CRC instructions on arm64).
var Table = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns the CRC32C of b.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, Table) }

// Update returns the CRC32C of the bytes that gave crc followed by b.
func Update(crc uint32, b []byte) uint32 { return crc32.Update(crc, Table, b) }
