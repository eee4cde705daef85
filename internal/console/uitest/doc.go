// Package uitest drives the web console (package console) in headless
// Chromium against a real `spindle server` with a loader writing: `make
// test-ui` runs it (SPINDLE_UI_TEST=1; skipped otherwise). It checks that
// every page loads without a console error and shows the figures
// `spindle admin ... --json` returns, uploads and downloads a key through
// the pages byte for byte, kills a datanode and watches it become STALE
// then DEAD, keeps a screenshot of every page (SPINDLE_UI_ARTIFACTS) and
// reports each page's weight and time to first render.
//
// It talks to Chromium over the DevTools protocol (a WebSocket, one page
// target, cdp_test.go). Only processes it started are signalled: the
// server (its datanode child chosen to die is checked to be that server's
// child), the loader and the browser.
//
// Concurrency: the test is sequential; the DevTools connection has one
// reader goroutine.
package uitest
