package wal

// entryCache accounts for the entry payloads kept in memory (in
// entryMeta.data) and evicts the oldest durable ones past a byte limit.
// Records not yet durable are never evicted: until their round has written
// them, memory is the only place they can be read from. Guarded by Log.mu.
type entryCache struct {
	bytes   int64 // cost of every cached entry
	entries int   // cached entries
	// fifo holds a reference to every cached entry in append order (so in
	// sequence order) from head on, plus stale references to entries since
	// removed or evicted, which are skipped and, when they pile up,
	// filtered out.
	fifo []cacheRef
	head int
}

type cacheRef struct {
	g     *group
	index uint64
	seq   uint64
}

// cacheStaleSlack: the fifo is filtered when it holds this many more
// references than cached entries (and twice as many).
const cacheStaleSlack = 1024

// cost is what a cached entry's payload holds of memory: its array (the
// capacity: a copy made by append is rounded up to a size class) and
// cacheOverheadBytes. add, drop and evict count with it alike.
func cost(data []byte) int64 { return int64(cap(data)) + cacheOverheadBytes }

// add accounts for a newly cached entry whose payload is data.
func (c *entryCache) add(g *group, index, seq uint64, data []byte) {
	c.bytes += cost(data)
	c.entries++
	c.fifo = append(c.fifo, cacheRef{g: g, index: index, seq: seq})
	if live := len(c.fifo) - c.head; live > 2*c.entries+cacheStaleSlack {
		c.filter()
	}
}

// drop accounts for a cached entry being removed from its group.
func (c *entryCache) drop(e *entryMeta) {
	if e.data != nil {
		c.bytes -= cost(e.data)
		c.entries--
	}
}

// lookup returns the entry ref stands for if it is still there and cached.
func (ref *cacheRef) lookup() *entryMeta {
	g := ref.g
	if len(g.ents) == 0 || ref.index < g.first || ref.index > g.lastIndex() {
		return nil
	}
	e := &g.ents[ref.index-g.first]
	if e.seq != ref.seq || e.data == nil {
		return nil
	}
	return e
}

// evict drops the oldest cached entries with sequence numbers up to
// durableSeq until the cache is within limitBytes.
func (c *entryCache) evict(limitBytes int64, durableSeq uint64) {
	for c.head < len(c.fifo) {
		ref := &c.fifo[c.head]
		e := ref.lookup()
		if e != nil {
			if c.bytes <= limitBytes || ref.seq > durableSeq {
				break
			}
			c.bytes -= cost(e.data)
			c.entries--
			e.data = nil
		}
		*ref = cacheRef{}
		c.head++
	}
	if c.head == len(c.fifo) {
		c.fifo, c.head = c.fifo[:0], 0
	} else if c.head > cacheStaleSlack && c.head > len(c.fifo)/2 {
		n := copy(c.fifo, c.fifo[c.head:])
		clear(c.fifo[n:])
		c.fifo, c.head = c.fifo[:n], 0
	}
}

// filter removes stale references.
func (c *entryCache) filter() {
	out := c.fifo[:0]
	for i := c.head; i < len(c.fifo); i++ {
		if c.fifo[i].lookup() != nil {
			out = append(out, c.fifo[i])
		}
	}
	clear(c.fifo[len(out):])
	c.fifo, c.head = out, 0
}
