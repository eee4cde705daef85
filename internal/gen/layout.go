package gen

import "slices"

// layout is the arithmetic of a generated cluster, so that no plan is
// kept in memory: the keys lie end to end in one stream of SizeBytes
// bytes (key k at [k·KeySizeBytes, …), the last one possibly shorter);
// container c (1-based) holds the stream's bytes [(c-1)·ContainerSizeBytes,
// c·ContainerSizeBytes); a block starts at a key's start, a container's
// start or the previous block's end, and runs for at most BlockSizeBytes,
// never past its key's end or its container's end. Block local IDs count
// from 1 in each container in stream order.
type layout struct {
	size, keySize, containerSize, blockSize uint64
	keys, containers, datanodes             int
	// pipelineOf[r] is the pipeline of the containers c with (c-1) mod
	// datanodes = r; pipelines[p-1] the members of pipeline p.
	pipelineOf []uint64
	pipelines  [][]uint64
}

func newLayout(cfg *Config) *layout {
	l := &layout{
		size: cfg.SizeBytes, keySize: cfg.KeySizeBytes, containerSize: cfg.ContainerSizeBytes, blockSize: cfg.BlockSizeBytes,
		keys:       int(ceilDiv(cfg.SizeBytes, cfg.KeySizeBytes)),
		containers: int(ceilDiv(cfg.SizeBytes, cfg.ContainerSizeBytes)),
		datanodes:  cfg.Datanodes,
	}
	// Container c goes to nodes c, c+1, c+2 (mod N): every node holds 3
	// of every N containers. One pipeline per distinct member set used.
	ids := map[[3]uint64]uint64{}
	for r := range min(l.datanodes, l.containers) {
		m := []uint64{uint64(r + 1), uint64((r+1)%l.datanodes + 1), uint64((r+2)%l.datanodes + 1)}
		slices.Sort(m)
		k := [3]uint64(m)
		id, ok := ids[k]
		if !ok {
			l.pipelines = append(l.pipelines, m)
			id = uint64(len(l.pipelines))
			ids[k] = id
		}
		l.pipelineOf = append(l.pipelineOf, id)
	}
	return l
}

func ceilDiv(a, b uint64) uint64 { return (a + b - 1) / b }

// keyLen is the size of key k.
func (l *layout) keyLen(k int) uint64 {
	return min(l.keySize, l.size-uint64(k)*l.keySize)
}

// containerRange is the stream range [lo, hi) of container c (1-based).
func (l *layout) containerRange(c int) (lo, hi uint64) {
	lo = uint64(c-1) * l.containerSize
	return lo, min(lo+l.containerSize, l.size)
}

// pipeline is the pipeline of container c (1-based).
func (l *layout) pipeline(c int) uint64 { return l.pipelineOf[(c-1)%l.datanodes] }

// members are the nodes holding container c (1-based).
func (l *layout) members(c int) []uint64 { return l.pipelines[l.pipeline(c)-1] }

// blockAt is the block that starts at stream position pos: its key, the
// offset in that key, and its length.
func (l *layout) blockAt(pos uint64) (key int, keyOff, length uint64) {
	k := pos / l.keySize
	keyEnd := min((k+1)*l.keySize, l.size)
	cEnd := min((pos/l.containerSize+1)*l.containerSize, l.size)
	return int(k), pos - k*l.keySize, min(l.blockSize, keyEnd-pos, cEnd-pos)
}

// blocks is the number of blocks of container c.
func (l *layout) blocks(c int) uint64 {
	var n uint64
	lo, hi := l.containerRange(c)
	for pos := lo; pos < hi; n++ {
		_, _, length := l.blockAt(pos)
		pos += length
	}
	return n
}

// maxBlocksPerKey bounds the blocks of one key: its full blocks, plus a
// cut at every container boundary it crosses.
func (l *layout) maxBlocksPerKey() uint64 {
	return ceilDiv(l.keySize, l.blockSize) + ceilDiv(l.keySize, l.containerSize) + 1
}

// maxBlockLen is the longest block: the buffer a worker needs.
func (l *layout) maxBlockLen() uint64 {
	return min(l.blockSize, l.keySize, l.containerSize, l.size)
}
