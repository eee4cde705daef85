package transport

import (
	"encoding/binary"
	"math"
	"slices"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
)

// Hand-written protobuf encoding helpers. Encoders write fields in field
// number order, omit zero scalars and empty repeated fields, and pack
// repeated scalars: the canonical encoding, so that a header re-marshals to
// the same bytes it was decoded from when it came from this package.
// Decoders accept any field order, skip unknown fields, accept repeated
// scalars packed or not, and refuse a known field with a wrong wire type.

func appendUint64(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendString[S ~string | ~[]byte](b []byte, num protowire.Number, v S) []byte {
	if len(v) == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return append(protowire.AppendVarint(b, uint64(len(v))), v...)
}

func appendPackedFixed32(b []byte, num protowire.Number, vs []uint32) []byte {
	if len(vs) == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(4*len(vs)))
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return b
}

func appendPackedVarint(b []byte, num protowire.Number, vs []uint64) []byte {
	if len(vs) == 0 {
		return b
	}
	n := 0
	for _, v := range vs {
		n += protowire.SizeVarint(v)
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	for _, v := range vs {
		b = protowire.AppendVarint(b, v)
	}
	return b
}

// appendMessageTag appends the tag and length of an embedded message of
// size bytes; the caller appends the body.
func appendMessageTag(b []byte, num protowire.Number, size int) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendVarint(b, uint64(size))
}

func sizeUint64(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

func sizeString[S ~string | ~[]byte](num protowire.Number, v S) int {
	if len(v) == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(len(v))
}

func sizePackedFixed32(num protowire.Number, vs []uint32) int {
	if len(vs) == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(4*len(vs))
}

func sizeMessage(num protowire.Number, size int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(size)
}

// decoder walks the fields of one protobuf message.
type decoder struct {
	msg string // message name, for errors
	b   []byte
	num protowire.Number
	typ protowire.Type
}

func (d *decoder) errf(format string, args ...any) error {
	return badFrame("%s: "+format, append([]any{d.msg}, args...)...)
}

func (d *decoder) wireErr(what string, n int) error {
	return d.errf("%s: %v", what, protowire.ParseError(n))
}

// next reads the next field's tag; false at the end of the message.
func (d *decoder) next() (bool, error) {
	if len(d.b) == 0 {
		return false, nil
	}
	num, typ, n := protowire.ConsumeTag(d.b)
	if n < 0 {
		return false, d.wireErr("tag", n)
	}
	d.num, d.typ = num, typ
	d.b = d.b[n:]
	return true, nil
}

// skip skips the value of an unknown field.
func (d *decoder) skip() error {
	n := protowire.ConsumeFieldValue(d.num, d.typ, d.b)
	if n < 0 {
		return d.wireErr("unknown field "+strconv.Itoa(int(d.num)), n)
	}
	d.b = d.b[n:]
	return nil
}

func (d *decoder) wrongType() error {
	return d.errf("field %d: wire type %d", d.num, d.typ)
}

func (d *decoder) uint64() (uint64, error) {
	if d.typ != protowire.VarintType {
		return 0, d.wrongType()
	}
	v, n := protowire.ConsumeVarint(d.b)
	if n < 0 {
		return 0, d.wireErr("field "+strconv.Itoa(int(d.num)), n)
	}
	d.b = d.b[n:]
	return v, nil
}

func (d *decoder) uint32() (uint32, error) {
	v, err := d.uint64()
	if err != nil {
		return 0, err
	}
	if v > math.MaxUint32 {
		return 0, d.errf("field %d: %d overflows uint32", d.num, v)
	}
	return uint32(v), nil
}

func (d *decoder) bytes() ([]byte, error) {
	if d.typ != protowire.BytesType {
		return nil, d.wrongType()
	}
	v, n := protowire.ConsumeBytes(d.b)
	if n < 0 {
		return nil, d.wireErr("field "+strconv.Itoa(int(d.num)), n)
	}
	d.b = d.b[n:]
	return v, nil
}

func (d *decoder) string() (string, error) {
	v, err := d.bytes()
	return string(v), err
}

// fixed32s appends a repeated fixed32 field, packed or not, to vs.
func (d *decoder) fixed32s(vs []uint32) ([]uint32, error) {
	switch d.typ {
	case protowire.Fixed32Type:
		v, n := protowire.ConsumeFixed32(d.b)
		if n < 0 {
			return vs, d.wireErr("field "+strconv.Itoa(int(d.num)), n)
		}
		d.b = d.b[n:]
		return append(vs, v), nil
	case protowire.BytesType:
		p, err := d.bytes()
		if err != nil {
			return vs, err
		}
		if len(p)%4 != 0 {
			return vs, d.errf("field %d: packed fixed32 of %d bytes", d.num, len(p))
		}
		vs = slices.Grow(vs, len(p)/4)
		for i := 0; i < len(p); i += 4 {
			vs = append(vs, binary.LittleEndian.Uint32(p[i:]))
		}
		return vs, nil
	}
	return vs, d.wrongType()
}

// varints appends a repeated varint field, packed or not, to vs.
func (d *decoder) varints(vs []uint64) ([]uint64, error) {
	switch d.typ {
	case protowire.VarintType:
		v, err := d.uint64()
		return append(vs, v), err
	case protowire.BytesType:
		p, err := d.bytes()
		if err != nil {
			return vs, err
		}
		for len(p) > 0 {
			v, n := protowire.ConsumeVarint(p)
			if n < 0 {
				return vs, d.wireErr("field "+strconv.Itoa(int(d.num)), n)
			}
			vs = append(vs, v)
			p = p[n:]
		}
		return vs, nil
	}
	return vs, d.wrongType()
}

// countElements returns how many elements the repeated field num holds in
// the message bytes b, so that a decoder allocates once, exactly: one per
// occurrence, except that a packed run (wire type bytes) of a varint field
// (varints set) counts its varints. It stops at malformed input (the
// decode that follows reports it).
func countElements(b []byte, num protowire.Number, varints bool) int {
	n := 0
	for len(b) > 0 {
		fnum, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return n
		}
		b = b[l:]
		l = protowire.ConsumeFieldValue(fnum, typ, b)
		if l < 0 {
			return n
		}
		if fnum == num {
			if varints && typ == protowire.BytesType {
				v, _ := protowire.ConsumeBytes(b[:l])
				for _, c := range v {
					if c < 0x80 {
						n++
					}
				}
			} else {
				n++
			}
		}
		b = b[l:]
	}
	return n
}
