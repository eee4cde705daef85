package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spindle-store/spindle/internal/client"
	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/transport"
)

// Fault kinds. Adding one: a name here, an entry in faultKinds with its
// inject function (which returns how to heal it), and a line in
// docs/CHAOS.md.
const (
	FaultKill      = "kill"      // kill -9 of one datanode, restarted later on its directories
	FaultKill2     = "kill2"     // kill -9 of two datanodes at once, both restarted later
	FaultPause     = "pause"     // SIGSTOP of one datanode, SIGCONT later
	FaultMetaKill  = "meta-kill" // kill -9 of the meta service, restarted later on its directory
	FaultBitrot    = "bitrot"    // one byte flipped in a committed block file of one replica
	FaultFull      = "full"      // root: one datanode's data volume (a tmpfs of its own) filled to ENOSPC, then freed
	FaultPartition = "partition" // root: one datanode cut from the other datanodes (packets dropped silently), healed later
	FaultDelay     = "delay"     // root: what one datanode sends delayed (and some of it lost), healed later
)

// ErrUnknownFault is a fault kind the bench does not know.
var ErrUnknownFault = errors.New("unknown fault kind")

// DefaultFaults is what --faults is by default.
var DefaultFaults = []string{FaultKill, FaultPause, FaultMetaKill, FaultBitrot}

// ParseFaults parses a comma-separated list of fault kinds; an unknown one
// gives ErrUnknownFault.
func ParseFaults(s string) ([]string, error) {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if faultKinds[f] == nil {
			known := slices.Sorted(maps.Keys(faultKinds))
			return nil, fmt.Errorf("fault %q: %w (known: %s)", f, ErrUnknownFault, strings.Join(known, ","))
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no fault kind in %q", s)
	}
	return out, nil
}

// faultKind injects one fault and says how to heal it and how long to
// hold it. scale (0.25..1) shortens the holds of short runs.
type faultKind struct {
	// hold is how long the fault stays before it is healed.
	hold func(rng *rand.Rand, scale float64) time.Duration
	// inject injects it; heal undoes it (nil: nothing to undo).
	inject func(ctx context.Context, r *run, rng *rand.Rand) (desc string, heal func(context.Context) error, err error)
}

var faultKinds = map[string]*faultKind{
	FaultKill:      {hold: holdBetween(5*time.Second, 20*time.Second), inject: injectKill},
	FaultKill2:     {hold: holdBetween(5*time.Second, 20*time.Second), inject: injectKill2},
	FaultPause:     {hold: holdBetween(5*time.Second, 20*time.Second), inject: injectPause},
	FaultMetaKill:  {hold: holdBetween(1*time.Second, 5*time.Second), inject: injectMetaKill},
	FaultPartition: {hold: holdBetween(5*time.Second, 20*time.Second), inject: injectPartition},
	FaultFull:      {hold: holdBetween(5*time.Second, 20*time.Second), inject: injectFull},
	FaultDelay:     {hold: holdBetween(5*time.Second, 20*time.Second), inject: injectDelay},
	// bitrot needs no heal; its hold is the time its row of the report
	// covers after the flip.
	FaultBitrot: {hold: holdBetween(2*time.Second, 6*time.Second), inject: injectBitrot},
}

func holdBetween(lo, hi time.Duration) func(*rand.Rand, float64) time.Duration {
	return func(rng *rand.Rand, scale float64) time.Duration {
		d := lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
		return time.Duration(float64(d) * scale)
	}
}

// pickDatanode picks a running datanode: one of five is a minority of
// every pipeline (3 members), and the nemesis injects one fault at a time.
func pickDatanode(r *run, rng *rand.Rand) (int, error) {
	ids, err := pickDatanodes(r, rng, 1)
	if err != nil {
		return 0, err
	}
	return ids[0], nil
}

// pickDatanodes picks n distinct datanodes, all of them running; it
// refuses when a datanode is already down (faults are serial, each healed
// before the next).
func pickDatanodes(r *run, rng *rand.Rand, n int) ([]int, error) {
	var ids []int
	for _, nd := range r.cl.dns.Nodes() {
		if r.cl.dns.Running(nd.ID) {
			ids = append(ids, nd.ID)
		}
	}
	if len(ids) < len(r.cl.dns.Nodes()) {
		// Faults are healed before the next: a datanode down now exited
		// on its own. Say so once, with the end of its log.
		for _, nd := range r.cl.dns.Nodes() {
			if !r.cl.dns.Running(nd.ID) && !r.exitSeen[nd.ID] {
				r.exitSeen[nd.ID] = true
				return nil, fmt.Errorf("datanode %d is down and the nemesis did not leave it so: it exited on its own; its log ends:\n%s", nd.ID, r.cl.dns.LogTail(nd.ID))
			}
		}
		return nil, fmt.Errorf("a datanode is already down")
	}
	if n > len(ids) {
		return nil, fmt.Errorf("%d datanodes wanted, %d running", n, len(ids))
	}
	// One rng.IntN per pick: a one-node pick draws as it always did, so
	// the seeded schedules of earlier runs replay unchanged.
	var picked []int
	for range n {
		i := rng.IntN(len(ids))
		picked = append(picked, ids[i])
		ids = slices.Delete(ids, i, i+1)
	}
	return picked, nil
}

func injectKill(ctx context.Context, r *run, rng *rand.Rand) (string, func(context.Context) error, error) {
	id, err := pickDatanode(r, rng)
	if err != nil {
		return "", nil, err
	}
	role := r.role(ctx, id)
	if err := r.cl.dns.Kill(id); err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("kill -9 datanode %d (%s)", id, role), func(ctx context.Context) error {
		return r.cl.restartDatanode(ctx, id)
	}, nil
}

// kill2MinDatanodes: with two datanodes down, three must remain to make
// a pipeline.
const kill2MinDatanodes = 5

// injectKill2 kills -9 two datanodes at once: of five, two members of a
// pipeline of three may be among them (a majority lost: its writes stop
// until the meta service moves the clients to other pipelines or the
// nodes return). The heal restarts both.
func injectKill2(ctx context.Context, r *run, rng *rand.Rand) (string, func(context.Context) error, error) {
	if len(r.cl.dns.Nodes()) < kill2MinDatanodes {
		return "", nil, fmt.Errorf("needs at least %d datanodes, the run has %d", kill2MinDatanodes, len(r.cl.dns.Nodes()))
	}
	ids, err := pickDatanodes(r, rng, 2)
	if err != nil {
		return "", nil, err
	}
	slices.Sort(ids)
	var descs []string
	for _, id := range ids {
		descs = append(descs, fmt.Sprintf("%d (%s)", id, r.role(ctx, id)))
	}
	var killed []int
	for _, id := range ids {
		if err := r.cl.dns.Kill(id); err != nil {
			// bring back the one already killed: the nemesis heals only
			// what it injected
			for _, k := range killed {
				err = errors.Join(err, r.cl.restartDatanode(ctx, k))
			}
			return "", nil, err
		}
		killed = append(killed, id)
	}
	return "kill -9 datanodes " + strings.Join(descs, " and "), func(ctx context.Context) error {
		var errs []error
		for _, id := range ids {
			errs = append(errs, r.cl.restartDatanode(ctx, id))
		}
		return errors.Join(errs...)
	}, nil
}

func injectPause(ctx context.Context, r *run, rng *rand.Rand) (string, func(context.Context) error, error) {
	id, err := pickDatanode(r, rng)
	if err != nil {
		return "", nil, err
	}
	role := r.role(ctx, id)
	if err := r.cl.dns.Pause(id); err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("SIGSTOP datanode %d (%s)", id, role), func(context.Context) error {
		return r.cl.dns.Resume(id)
	}, nil
}

// role says which open pipelines datanode id leads and serves, as the
// meta service last heard (for the events: a fault on a leader costs more).
func (r *run) role(ctx context.Context, id int) string {
	ctx, cancel := context.WithTimeout(ctx, roleTimeout)
	defer cancel()
	addr := r.cl.dns.Nodes()[id-1].Addr
	pls, err := r.cl.meta.Pipelines(ctx)
	if err != nil {
		return "pipelines unknown"
	}
	var leads, member []uint64
	for _, p := range pls {
		if p.State == "CLOSED" {
			continue
		}
		for _, m := range p.Members {
			if m.Addr != addr {
				continue
			}
			member = append(member, p.ID)
			if p.Leader == m.NodeID {
				leads = append(leads, p.ID)
			}
		}
	}
	return fmt.Sprintf("leads pipelines %v of %v", leads, member)
}

// pickLabDatanode picks a running datanode for a network fault and says
// what it leads; an error when the run has no network namespaces.
func pickLabDatanode(ctx context.Context, r *run, rng *rand.Rand) (int, string, error) {
	if r.lab == nil {
		return 0, "", errors.New("no network namespaces: datanodes share one network")
	}
	id, err := pickDatanode(r, rng)
	if err != nil {
		return 0, "", err
	}
	return id, r.role(ctx, id), nil
}

// injectPartition cuts one datanode from every other datanode (each on a
// host of its own, see netlab): their packets to each other are dropped
// silently, while it still reaches the meta service and the clients — a
// minority of its pipelines isolated from the majority, or a leader from
// its followers. The heal restores every link.
func injectPartition(ctx context.Context, r *run, rng *rand.Rand) (string, func(context.Context) error, error) {
	id, role, err := pickLabDatanode(ctx, r, rng)
	if err != nil {
		return "", nil, err
	}
	me := fmt.Sprintf("dn%d", id)
	for _, n := range r.cl.dns.Nodes() {
		if n.ID == id {
			continue
		}
		if err := r.lab.Partition(me, fmt.Sprintf("dn%d", n.ID)); err != nil {
			return "", nil, errors.Join(err, r.lab.Heal())
		}
	}
	return fmt.Sprintf("partition datanode %d (%s) from the other datanodes", id, role), func(context.Context) error {
		return r.lab.Heal()
	}, nil
}

// The delay fault's range: a slow, lossy link, not a cut one.
const (
	minDelay, maxDelay = 20 * time.Millisecond, 200 * time.Millisecond
	maxLossPercent     = 5
)

// injectDelay delays everything one datanode sends (to the other
// datanodes, the meta service and the clients) by 20-200 ms ± a quarter
// of it, and loses up to 5 % of it: a pipeline's leader slow to its
// followers, a follower slow to ack, a slow heartbeat (netlab.Delay: tc
// netem, or its relay where the kernel has no netem). The heal restores
// every link.
func injectDelay(ctx context.Context, r *run, rng *rand.Rand) (string, func(context.Context) error, error) {
	id, role, err := pickLabDatanode(ctx, r, rng)
	if err != nil {
		return "", nil, err
	}
	delay := minDelay + time.Duration(rng.Int64N(int64(maxDelay-minDelay)+1))
	delay = delay.Round(time.Millisecond)
	loss := float64(rng.IntN(maxLossPercent*10+1)) / 10
	if err := r.lab.Delay(fmt.Sprintf("dn%d", id), delay, delay/4, loss); err != nil {
		return "", nil, errors.Join(err, r.lab.Heal())
	}
	return fmt.Sprintf("delay %v ± %v, loss %.1f%% on what datanode %d sends (%s; %s)", delay, delay/4, loss, id, role, r.lab.Faults()), func(context.Context) error {
		return r.lab.Heal()
	}, nil
}

// roleTimeout bounds asking the meta service for a datanode's pipelines.
const roleTimeout = 5 * time.Second

// injectMetaKill kills -9 the meta leader (with one member, the meta
// service); the heal restarts it on its directory and address.
func injectMetaKill(ctx context.Context, r *run, _ *rand.Rand) (string, func(context.Context) error, error) {
	id := r.cl.metas.Leader(ctx)
	if id == 0 {
		return "", nil, errors.New("no meta member serving as the leader")
	}
	if err := r.cl.metas.Kill(id); err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("kill -9 meta leader %d of %d", id, r.cl.metas.Size()), func(ctx context.Context) error {
		return r.cl.metas.Start(ctx, id)
	}, nil
}

// injectBitrot flips one byte inside the committed part of a block of an
// acknowledged key, in the block file of one replica, on disk. A container
// is damaged on one replica only (later flips of it go to the same node),
// so that a good copy of every block always remains.
func injectBitrot(ctx context.Context, r *run, rng *rand.Rand) (string, func(context.Context) error, error) {
	for range bitrotAttempts {
		rec, ok := r.w.randomAcked(rng)
		if !ok {
			return "", nil, errors.New("no acknowledged key to damage yet")
		}
		b := engine.BlockID{Container: engine.ContainerID(rec.container), Local: rec.local}
		var files []string
		for _, n := range r.cl.dns.Nodes() {
			if node, ok := r.rotted[rec.container]; ok && node != n.ID {
				continue
			}
			f := engine.BlockFilePath(n.DataDir, b)
			if _, err := os.Stat(f); err == nil {
				files = append(files, fmt.Sprintf("%d\x00%s", n.ID, f))
			}
		}
		if len(files) == 0 {
			continue // re-replicated or deleted meanwhile: try another key
		}
		pick := files[rng.IntN(len(files))]
		var id int
		var path string
		if _, err := fmt.Sscanf(pick, "%d", &id); err != nil {
			return "", nil, fmt.Errorf("chaos: bitrot: %q: %w", pick, err)
		}
		path = pick[strings.IndexByte(pick, 0)+1:]
		off := rng.Int64N(int64(rec.blockLen))
		if err := engine.FlipBlockByte(r.cl.dns.Nodes()[id-1].DataDir, b, off, byte(1+rng.IntN(255))); err != nil {
			return "", nil, fmt.Errorf("chaos: bitrot: %w", err)
		}
		r.rotted[rec.container] = id
		desc := fmt.Sprintf("flipped byte %d of block %d/%d on datanode %d (%s)", off, rec.container, rec.local, id, path)
		return desc + "; " + r.probeBitrot(ctx, rec, id, off), nil, nil
	}
	return "", nil, fmt.Errorf("no block file found for %d acknowledged keys", bitrotAttempts)
}

// probeBitrot reads the damaged piece from the damaged replica (it must
// refuse it: ErrCorrupt, never the flipped byte) and then the whole key
// through the key client (it must return the right bytes from another
// replica, or fail). What the replica answered is counted in the run.
func (r *run) probeBitrot(ctx context.Context, rec coldRec, node int, off int64) string {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	addr := r.cl.dns.Nodes()[node-1].Addr
	pc, err := client.New([]string{addr}, rec.pipeline, client.Options{Conn: transport.ConnConfig{TLS: r.cl.tls}})
	if err != nil {
		return fmt.Sprintf("probe: %v", err)
	}
	defer closeQuietly(pc)
	start := uint64(off) - uint64(off)%bitrotProbeBytes
	n := min(bitrotProbeBytes, rec.blockLen-start)
	id := client.BlockID{Container: rec.container, Local: rec.local}
	if ki, err := r.w.kc.Stat(ctx, bucket, coldName(rec.index)); err == nil { // its block token
		for _, kb := range ki.Blocks {
			if kb.Container == id.Container && kb.Local == id.Local {
				id.Token = kb.Token
			}
		}
	}
	ch, err := pc.ReadChunk(ctx, addr, id, start, n)
	var verdict string
	switch {
	case errors.Is(err, client.ErrCorrupt) || isStatus(err, transport.StatusCorrupt):
		r.bitrot.detected.Add(1)
		verdict = "the damaged replica refused the read (corrupt)"
	case err != nil:
		r.bitrot.otherErr.Add(1)
		verdict = fmt.Sprintf("the damaged replica's read failed: %v", err)
	default:
		want := make([]byte, start+n)
		newValueGen(r.cfg.Seed, valueID{key: coldKeyBase + uint64(rec.index), version: 1, size: int64(rec.blockLen)}).fill(want)
		want = want[start:]
		if !bytes.Equal(ch.Data, want) {
			r.bitrot.served.Add(1)
			r.w.mu.Lock()
			r.w.wrongReads = append(r.w.wrongReads, wrongRead{atNs: r.w.now(), msg: fmt.Sprintf(
				"datanode %d served %d bytes at %d of block %d/%d, damaged on its disk, without an error", node, len(ch.Data), start, rec.container, rec.local)})
			r.w.mu.Unlock()
			verdict = "the damaged replica SERVED WRONG BYTES"
		} else {
			r.bitrot.otherErr.Add(1)
			verdict = "the damaged replica returned the right bytes (the flip was not read?)"
		}
	}
	if why, err := r.w.checkCold(ctx, rec.index, true); why != "" {
		verdict += fmt.Sprintf("; the key's get: %s: %v", why, err)
	} else {
		verdict += "; the key's get returned the right bytes"
	}
	return verdict
}

// isStatus reports whether err carries a datanode's status st.
func isStatus(err error, st transport.Status) bool {
	var se *transport.StatusError
	return errors.As(err, &se) && se.Status == st
}

// bitrotProbeBytes is the range read back from a damaged replica: one
// checksum piece of the default size.
const bitrotProbeBytes = 16 << 10

// bitrotAttempts bounds the keys tried to find a block file to damage.
const bitrotAttempts = 16
