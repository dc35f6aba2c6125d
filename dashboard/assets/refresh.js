(function () {
  "use strict";
  var every = Number(document.documentElement.getAttribute("data-refresh"));
  if (!every || !window.fetch || !window.DOMParser) return;
  function lost() {
    var live = document.getElementById("live");
    if (live) { live.textContent = "connection lost, retrying"; live.className = "live lost"; }
  }
  function tick() {
    if (document.hidden) { setTimeout(tick, every); return; }
    fetch(location.href, { cache: "no-store", credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (r) { return r.text(); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var next = doc.getElementById("page"), cur = document.getElementById("page");
        if (!next || !cur) { lost(); return; }
        cur.replaceWith(document.adoptNode(next));
        document.title = doc.title;
      }, lost)
      .then(function () { setTimeout(tick, every); });
  }
  setTimeout(tick, every);
})();
