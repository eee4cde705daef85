package bench

// FillPseudoRandom fills p with a xorshift64 stream started from seed:
// incompressible, reproducible from the seed, and cheap enough not to show
// in a bench's profile. Seed 0 is as good as any other.
func FillPseudoRandom(p []byte, seed uint64) {
	x := seed*0x9E3779B97F4A7C15 | 1
	for i := range p {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		p[i] = byte(x)
	}
}
