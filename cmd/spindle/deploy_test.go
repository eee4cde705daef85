package main

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spindle-store/spindle/internal/testutil"
)

// deployDir is the repository's deploy/, read by the tests as an operator
// copies it.
var deployDir = filepath.Join("..", "..", "deploy")

// deployHosts are the hosts of docs/OPERATIONS.md §4, each with its
// deploy/hosts/HOST.env, and their addresses there.
var deployHosts = []struct{ name, addr string }{{"spindle1", "10.0.0.1"}, {"spindle2", "10.0.0.2"}, {"spindle3", "10.0.0.3"}}

// readEnvFile reads a file of systemd's EnvironmentFile= syntax as the
// deploy files use it: NAME=VALUE lines, comments on lines of their own.
func readEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, f)
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.ContainsAny(k, " \t") {
			t.Fatalf("%s: %q is not NAME=VALUE", path, line)
		}
		if strings.Contains(v, " #") || strings.HasPrefix(v, "\"") {
			t.Fatalf("%s: %q: systemd takes a comment or quotes after = as part of the value", path, line)
		}
		env[k] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return env
}

// hostEnv is deploy/hosts/HOST.env of host i as a test installs it: the
// guide's addresses replaced by addrs (addrs[j] for host j's), and every
// absolute path moved under root/HOST (the host's own tree).
func hostEnv(t *testing.T, i int, addrs []string, root string) map[string]string {
	t.Helper()
	h := deployHosts[i].name
	env := readEnvFile(t, filepath.Join(deployDir, "hosts", h+".env"))
	var pairs []string
	for j, dh := range deployHosts {
		pairs = append(pairs, dh.addr, addrs[j])
	}
	readdr := strings.NewReplacer(pairs...)
	for k, v := range env {
		v = readdr.Replace(v)
		if strings.HasPrefix(v, "/") {
			var paths []string
			for _, p := range strings.Split(v, ",") {
				paths = append(paths, filepath.Join(root, h, p))
			}
			v = strings.Join(paths, ",")
		}
		env[k] = v
	}
	return env
}

// resolveFlags resolves the flags of `spindle COMMAND --config FILE` in the
// environment env, as the command would: flag name -> value.
func resolveFlags(t *testing.T, command, file string, env map[string]string) (map[string]string, error) {
	t.Helper()
	cmd, _, err := newRootCmd().Find([]string{command})
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.ParseFlags([]string{"--config", file}); err != nil {
		t.Fatal(err)
	}
	if _, err := applyConfig(cmd, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		return nil, err
	}
	got := map[string]string{}
	for _, name := range []string{"id", "peers", "listen", "advertise-addr", "metrics-listen", "meta", "dir", "data-dir", "log-dir", "tls-cert", "tls-key", "tls-ca", "log-level"} {
		if fl := cmd.Flags().Lookup(name); fl != nil {
			got[name] = fl.Value.String()
		}
	}
	return got, nil
}

// The files of deploy/ that docs/OPERATIONS.md installs are read as the
// systemd units read them (the host's environment file, --config FILE
// whose ${NAME} are its values) and give each host the flags the
// documentation says: a renamed flag, a typo or a host's file out of step
// with the others fails here, not on an operator's host.
func TestDeployConfigs(t *testing.T) {
	var names, addrs []string
	for i, h := range deployHosts {
		env := readEnvFile(t, filepath.Join(deployDir, "hosts", h.name+".env"))
		if i == 0 {
			names = slices.Sorted(maps.Keys(env))
		} else if keys := slices.Sorted(maps.Keys(env)); !slices.Equal(keys, names) {
			t.Errorf("%s.env names %v, spindle1.env %v", h.name, keys, names)
		}
		for _, k := range []string{"META_PEERS", "META_ADDRS", "META_DIR", "DATA_DIRS", "LOG_DIR", "TLS_CA", "META_TLS_CERT", "META_TLS_KEY", "DATANODE_TLS_CERT", "DATANODE_TLS_KEY"} {
			if first := readEnvFile(t, filepath.Join(deployDir, "hosts", "spindle1.env"))[k]; env[k] != first {
				t.Errorf("%s.env: %s=%s, spindle1.env %s: the same on every host", h.name, k, env[k], first)
			}
		}
		meta := fmt.Sprintf("%s:9860", h.addr)
		addrs = append(addrs, meta)
		for _, c := range []struct {
			file, command string
			want          map[string]string
		}{
			{"meta.json", "meta", map[string]string{"id": fmt.Sprint(i + 1), "peers": "1=10.0.0.1:9860,2=10.0.0.2:9860,3=10.0.0.3:9860",
				"listen": meta, "dir": "/var/lib/spindle/meta", "log-level": "info",
				"tls-cert": "/etc/spindle/tls/meta.crt", "tls-key": "/etc/spindle/tls/meta.key", "tls-ca": "/etc/spindle/tls/ca.crt"}},
			{"datanode.json", "datanode", map[string]string{"meta": "10.0.0.1:9860,10.0.0.2:9860,10.0.0.3:9860",
				"listen": h.addr + ":9870", "advertise-addr": h.addr, "metrics-listen": h.addr + ":9871",
				"data-dir": "[/srv/spindle/disk1,/srv/spindle/disk2]", "log-dir": "/srv/spindle/log", "log-level": "info",
				"tls-cert": "/etc/spindle/tls/datanode.crt", "tls-key": "/etc/spindle/tls/datanode.key", "tls-ca": "/etc/spindle/tls/ca.crt"}},
		} {
			got, err := resolveFlags(t, c.command, filepath.Join(deployDir, c.file), env)
			if err != nil {
				t.Fatalf("%s with %s.env: %v", c.file, h.name, err)
			}
			for name, want := range c.want {
				if v, ok := got[name]; !ok {
					t.Errorf("%s: spindle %s has no --%s", c.file, c.command, name)
				} else if v != want {
					t.Errorf("%s with %s.env: --%s = %q, want %q", c.file, h.name, name, v, want)
				}
			}
		}
	}
	if env := readEnvFile(t, filepath.Join(deployDir, "hosts", "spindle1.env")); env["META_ADDRS"] != strings.Join(addrs, ",") {
		t.Errorf("META_ADDRS=%s, want every member's address %s", env["META_ADDRS"], strings.Join(addrs, ","))
	}
	// A variable the environment file lacks is an error naming it, not
	// an empty value.
	if _, err := resolveFlags(t, "meta", filepath.Join(deployDir, "meta.json"), map[string]string{}); err == nil || !strings.Contains(err.Error(), "$HOST_ID not set") {
		t.Errorf("meta.json without its environment: %v, want $HOST_ID not set", err)
	}
	// The guide issues and installs what TestThreeHosts does
	// (issueHostPairs): the same commands, host by host.
	guide, err := os.ReadFile(filepath.Join("..", "..", "docs", "OPERATIONS.md"))
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range deployHosts {
		for _, line := range []string{
			fmt.Sprintf("spindle cert issue --ca-dir ~/spindle-ca --name meta-%d --role meta --host %s --out out/%s\n", i+1, h.addr, h.name),
			fmt.Sprintf("spindle cert issue --ca-dir ~/spindle-ca --name dn-%s --role datanode --host %s --out out/%s\n", h.name, h.addr, h.name),
		} {
			if !strings.Contains(string(guide), line) {
				t.Errorf("OPERATIONS.md lacks %q", line)
			}
		}
	}
	for _, line := range []string{"install -m 0644 deploy/hosts/spindle2.env /etc/spindle/host.env ",
		"install -m 0644 -o spindle meta-2.crt /etc/spindle/tls/meta.crt\n", "install -m 0600 -o spindle meta-2.key /etc/spindle/tls/meta.key\n",
		"install -m 0644 -o spindle dn-spindle2.crt /etc/spindle/tls/datanode.crt\n", "install -m 0600 -o spindle dn-spindle2.key /etc/spindle/tls/datanode.key\n",
		"install -m 0644 deploy/meta.json deploy/datanode.json /etc/spindle/\n"} {
		if !strings.Contains(string(guide), line) {
			t.Errorf("OPERATIONS.md lacks %q", line)
		}
	}
	for _, unit := range []string{"spindle-meta.service", "spindle-datanode.service"} {
		b, err := os.ReadFile(filepath.Join(deployDir, unit))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"\nEnvironmentFile=/etc/spindle/host.env\n", "\nExecStart=/usr/local/bin/spindle ", " --config /etc/spindle/"} {
			if !strings.Contains(string(b), want) {
				t.Errorf("%s: no %q", unit, strings.TrimSpace(want))
			}
		}
	}
}

// issueHostPairs issues host number n's pairs as §4 "Certificates" does
// (meta-N and dn-HOST for the address addr, into out) and installs them,
// with the CA's certificate from caDir, at the paths of the host's
// environment file env.
func issueHostPairs(t *testing.T, caDir, out string, env map[string]string, n int, host, addr string) {
	t.Helper()
	meta, dn := fmt.Sprintf("meta-%d", n), "dn-"+host
	for _, c := range [][2]string{{meta, "meta"}, {dn, "datanode"}} {
		if _, errOut, err := runIn(t, nil, "cert", "issue", "--ca-dir", caDir, "--name", c[0], "--role", c[1], "--host", addr, "--out", out); err != nil {
			t.Fatalf("cert issue %s: %v\n%s", c[0], err, errOut)
		}
	}
	for from, to := range map[string]string{
		filepath.Join(caDir, "ca.crt"):  env["TLS_CA"],
		filepath.Join(out, meta+".crt"): env["META_TLS_CERT"], filepath.Join(out, meta+".key"): env["META_TLS_KEY"],
		filepath.Join(out, dn+".crt"): env["DATANODE_TLS_CERT"], filepath.Join(out, dn+".key"): env["DATANODE_TLS_KEY"],
	} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(to), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}
