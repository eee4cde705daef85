package uitest

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/websocket"
)

// msg is a DevTools protocol message: a reply (ID) or an event (Method).
type msg struct {
	ID     int             `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// browser is headless Chromium and a DevTools connection to its page.
type browser struct {
	t    *testing.T
	cmd  *exec.Cmd
	ws   *websocket.Conn
	mu   sync.Mutex
	next int
	wait map[int]chan msg
	errs []string // console errors, exceptions, failed loads since clearErrors
	done chan struct{}
}

// startBrowser starts chromium (port 0: it writes the port it got in
// DevToolsActivePort) and connects to its page.
func startBrowser(t *testing.T, bin string) *browser {
	t.Helper()
	prof := t.TempDir()
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
		"--remote-debugging-port=0", "--remote-allow-origins=http://127.0.0.1", "--user-data-dir="+prof,
		"--ignore-certificate-errors", // the console's certificate is the test cluster's own CA's
		"--window-size=1280,900", "about:blank")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	b := &browser{t: t, cmd: cmd, wait: map[int]chan msg{}, done: make(chan struct{})}
	t.Cleanup(b.close)
	var port string
	eventually(t, "chromium's DevToolsActivePort", 60*time.Second, func() (bool, string) {
		raw, err := os.ReadFile(filepath.Join(prof, "DevToolsActivePort"))
		port, _, _ = strings.Cut(string(raw), "\n")
		return err == nil && port != "", fmt.Sprint(err)
	})
	var wsURL string
	eventually(t, "chromium's page target", 30*time.Second, func() (bool, string) {
		resp, err := http.Get("http://127.0.0.1:" + port + "/json/list")
		if err != nil {
			return false, err.Error()
		}
		var targets []struct{ Type, WebSocketDebuggerURL string }
		err = errors.Join(json.NewDecoder(resp.Body).Decode(&targets), resp.Body.Close())
		for _, tg := range targets {
			if tg.Type == "page" {
				wsURL = tg.WebSocketDebuggerURL
			}
		}
		return err == nil && wsURL != "", fmt.Sprint(err, targets)
	})
	ws, err := websocket.Dial(wsURL, "", "http://127.0.0.1")
	if err != nil {
		t.Fatalf("DevTools connection: %v", err)
	}
	ws.MaxPayloadBytes = 256 << 20 // full-page screenshots
	b.ws = ws
	go b.read()
	for _, d := range []string{"Page.enable", "Runtime.enable", "Log.enable", "Network.enable"} {
		b.call(d, nil, nil)
	}
	b.call("Network.setCacheDisabled", map[string]any{"cacheDisabled": true}, nil) // every page weighed and timed cold
	return b
}

func (b *browser) close() {
	if b.ws != nil {
		_ = b.ws.Close() // the reader ends with it
	}
	if b.cmd.Process == nil {
		return
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM) // chromium, started above
	exited := make(chan struct{})
	go func() { _ = b.cmd.Wait(); close(exited) }() // its exit status says nothing useful here
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL) // the process group chromium leads (Setpgid above)
		<-exited
	}
}

// read dispatches replies and keeps the errors events report.
func (b *browser) read() {
	defer close(b.done)
	for {
		var raw []byte
		if err := websocket.Message.Receive(b.ws, &raw); err != nil {
			return
		}
		var m msg
		if json.Unmarshal(raw, &m) != nil {
			continue
		}
		b.mu.Lock()
		if m.ID != 0 {
			if ch := b.wait[m.ID]; ch != nil {
				ch <- m
				delete(b.wait, m.ID)
			}
		} else if e := eventError(m); e != "" {
			b.errs = append(b.errs, e)
		}
		b.mu.Unlock()
	}
}

// eventError is the error an event reports ("" none): a console.error,
// an uncaught exception, an error log entry (CSP refusals, failed loads).
func eventError(m msg) string {
	switch m.Method {
	case "Runtime.consoleAPICalled":
		var p struct {
			Type string
			Args []struct {
				Value       any
				Description string
			}
		}
		if json.Unmarshal(m.Params, &p) == nil && (p.Type == "error" || p.Type == "assert") {
			return fmt.Sprintf("console.%s %v", p.Type, p.Args)
		}
	case "Runtime.exceptionThrown":
		return "exception: " + string(m.Params)
	case "Log.entryAdded":
		var p struct {
			Entry struct{ Level, Text, URL, Source string }
		}
		if json.Unmarshal(m.Params, &p) == nil && p.Entry.Level == "error" {
			return fmt.Sprintf("log %s: %s (%s)", p.Entry.Source, p.Entry.Text, p.Entry.URL)
		}
	}
	return ""
}

// call sends method and decodes its result into out (nil: dropped).
func (b *browser) call(method string, params any, out any) {
	b.t.Helper()
	if err := b.tryCall(method, params, out); err != nil {
		b.t.Fatal(err)
	}
}

func (b *browser) tryCall(method string, params any, out any) error {
	b.mu.Lock()
	b.next++
	id := b.next
	ch := make(chan msg, 1)
	b.wait[id] = ch
	b.mu.Unlock()
	req, err := json.Marshal(map[string]any{"id": id, "method": method, "params": params})
	if err != nil {
		return err
	}
	if err := websocket.Message.Send(b.ws, string(req)); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	select {
	case m := <-ch:
		if m.Error != nil {
			return fmt.Errorf("%s: %d %s", method, m.Error.Code, m.Error.Message)
		}
		if out != nil {
			return json.Unmarshal(m.Result, out)
		}
		return nil
	case <-b.done:
		return fmt.Errorf("%s: the DevTools connection closed", method)
	case <-time.After(60 * time.Second):
		return fmt.Errorf("%s: no answer in 60 s", method)
	}
}

// eval runs expr (awaiting a promise) and decodes its JSON-able value.
func (b *browser) eval(expr string, out any) {
	b.t.Helper()
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails json.RawMessage `json:"exceptionDetails"`
	}
	b.call("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &r)
	if r.ExceptionDetails != nil {
		b.t.Fatalf("evaluating %.200s: %s", expr, r.ExceptionDetails)
	}
	if out != nil {
		if err := json.Unmarshal(r.Result.Value, out); err != nil {
			b.t.Fatalf("evaluating %.200s: %s: %v", expr, r.Result.Value, err)
		}
	}
}

// clearErrors forgets the errors so far; takeErrors returns them.
func (b *browser) clearErrors() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.errs = nil
}

func (b *browser) takeErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.errs
	b.errs = nil
	return e
}

// loaded waits until the document that replaced the marked one is
// complete (mark: before a navigation or a submit).
func (b *browser) mark() { b.eval("window.__spindleOld = true", nil) }

func (b *browser) waitLoaded(what string) {
	b.t.Helper()
	eventually(b.t, what+" loaded", 60*time.Second, func() (bool, string) {
		var st string
		if err := b.tryEval("(window.__spindleOld ? 'old' : document.readyState)", &st); err != nil {
			return false, err.Error() // mid-navigation: the context went away
		}
		return st == "complete", st
	})
}

func (b *browser) tryEval(expr string, out any) error {
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails json.RawMessage `json:"exceptionDetails"`
	}
	if err := b.tryCall("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &r); err != nil {
		return err
	}
	if r.ExceptionDetails != nil {
		return fmt.Errorf("%s", r.ExceptionDetails)
	}
	return json.Unmarshal(r.Result.Value, out)
}

// navigate loads url and waits for it.
func (b *browser) navigate(url string) {
	b.t.Helper()
	b.mark()
	b.call("Page.navigate", map[string]any{"url": url}, nil)
	b.waitLoaded(url)
}

// screenshot saves the whole page as PNG into path.
func (b *browser) screenshot(path string) {
	b.t.Helper()
	var r struct{ Data string }
	b.call("Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true}, &r)
	png, err := base64.StdEncoding.DecodeString(r.Data)
	if err == nil {
		err = os.WriteFile(path, png, 0o644)
	}
	if err != nil {
		b.t.Fatal(err)
	}
}

// eventually polls cond until true or the deadline (then fails with its
// last detail).
func eventually(t *testing.T, what string, within time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %s", what, within, detail)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
