package bench

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ServerProcs returns the processes of servers a bench did not start
// (`bench s3 --endpoint --server-pid`), so that their CPU time is charged
// to its loops as an embedded server's is: each PID and, recursively, its
// children (a `spindle server` with its meta members and datanodes). Each
// is named by what it runs: "server" for `spindle server` (its S3 gateway,
// and its meta service unless --meta-replicas > 1), "gateway" for `spindle
// s3`, "meta<ID>" for `spindle meta --id ID`, "dn<i>" for a datanode
// whose data directory ends in dn<i>, otherwise its command name and PID
// (a peer store: "minio-1234"). Processes that cannot be read are left
// out (the loop's CPUPartial names those that exit meanwhile).
func ServerProcs(pids []int) []Proc {
	var out []Proc
	seen := map[int]bool{}
	var walk func(pid int)
	walk = func(pid int) {
		if pid <= 0 || seen[pid] || pid == os.Getpid() {
			return
		}
		seen[pid] = true
		args, err := procArgs(pid)
		if err != nil {
			return
		}
		out = append(out, Proc{Name: procName(pid, args), PID: pid})
		for _, c := range procChildren(pid) {
			walk(c)
		}
	}
	for _, p := range pids {
		walk(p)
	}
	slices.SortFunc(out, func(a, b Proc) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// procArgs reads /proc/<pid>/cmdline.
func procArgs(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"), nil
}

// procChildren lists the children of pid (every thread's children file).
func procChildren(pid int) []int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid)) // only ErrBadPattern: the pattern is fixed
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // the thread exited
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// procName names a server process by its command line (see ServerProcs).
func procName(pid int, args []string) string {
	flag := func(name string) string {
		for i, a := range args {
			if a == name && i+1 < len(args) {
				return args[i+1]
			}
			if v, ok := strings.CutPrefix(a, name+"="); ok {
				return v
			}
		}
		return ""
	}
	if len(args) > 1 && strings.Contains(filepath.Base(args[0]), "spindle") {
		switch args[1] {
		case "server":
			return "server"
		case "s3":
			return "gateway"
		case "meta":
			return "meta" + flag("--id")
		case "datanode":
			if d := filepath.Base(flag("--data-dir")); strings.HasPrefix(d, "dn") {
				return d
			}
		}
	}
	return fmt.Sprintf("%s-%d", filepath.Base(args[0]), pid)
}

// ServerCPUNote says what a loop of ops operations moving bytes cost the
// processes other than this one (the servers): in all, per operation and
// per GB, and each process's µs per operation; "" without a figure.
func ServerCPUNote(u *CPUUse, ops, bytes int64) string {
	if u == nil || ops <= 0 {
		return ""
	}
	var sum float64
	var each []string
	for _, k := range slices.Sorted(maps.Keys(u.CPUByProcess)) {
		if k == SelfProcName {
			continue
		}
		s := u.CPUByProcess[k]
		sum += s
		each = append(each, fmt.Sprintf("%s %.0f", k, s*1e6/float64(ops)))
	}
	if len(each) == 0 {
		return ""
	}
	perGB := ""
	if bytes > 0 {
		perGB = fmt.Sprintf(", %.2f CPU-s/GB", sum*1e9/float64(bytes))
	}
	return fmt.Sprintf("server cpu (every process but the client): %.2f s, %.0f µs/op%s; µs/op by process: %s", sum, sum*1e6/float64(ops), perGB, strings.Join(each, ", "))
}
