// Spindle console: the only script. Every page works without it; with it a
// live page (body data-refresh = seconds) refreshes its <main> in place —
// not while the user is in a form field in it, nor while the tab is hidden.
(function () {
  "use strict";
  var secs = parseInt(document.body.getAttribute("data-refresh") || "0", 10);
  if (!secs || !window.fetch || !window.DOMParser) { return; }
  function busy() {
    var a = document.activeElement;
    return a && a.closest && a.closest("main") && /^(INPUT|SELECT|TEXTAREA|BUTTON)$/.test(a.tagName);
  }
  function tick() {
    if (document.hidden || busy()) { return; }
    fetch(location.href, {credentials: "same-origin", cache: "no-store"}).then(function (r) {
      if (!r.ok || r.redirected) { return null; }
      return r.text();
    }).then(function (text) {
      if (!text) { return; }
      var doc = new DOMParser().parseFromString(text, "text/html");
      var fresh = doc.querySelector("main"), cur = document.querySelector("main");
      var foot = doc.querySelector("footer"), curFoot = document.querySelector("footer");
      if (fresh && cur) { cur.innerHTML = fresh.innerHTML; }
      if (foot && curFoot) { curFoot.innerHTML = foot.innerHTML; }
    }).catch(function () { /* the next tick tries again */ });
  }
  setInterval(tick, secs * 1000);
})();
