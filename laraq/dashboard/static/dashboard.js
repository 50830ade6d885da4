// Live pages: re-fetch this page every data-live seconds and swap its <main> in place.
// The page reads the same without this script; nothing here is needed to act.
(function () {
  "use strict";
  var main = document.querySelector("main[data-live]");
  if (!main || !window.fetch || !window.DOMParser) { return; }
  var seconds = parseFloat(main.getAttribute("data-live")) || 5;
  function busy() {
    var el = document.activeElement;
    if (el && (el.tagName === "INPUT" || el.tagName === "TEXTAREA" || el.tagName === "SELECT")) { return true; }
    return !!main.querySelector("input[type=checkbox]:checked");
  }
  function refresh() {
    if (document.hidden || busy()) { return; }
    fetch(window.location.href, { credentials: "same-origin", headers: { "X-Laraq-Poll": "1" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html === null || busy()) { return; }
        var fresh = new DOMParser().parseFromString(html, "text/html").querySelector("main");
        if (fresh) { main.innerHTML = fresh.innerHTML; main.setAttribute("data-refreshed", String(Date.now())); }
      })
      .catch(function () { /* the next tick tries again */ });
  }
  window.setInterval(refresh, seconds * 1000);
}());
