(function () {
  "use strict";
  // Live updates: the dashboard sends, as server-sent events on the page's
  // own address, the parts of the page that changed; this swaps them in,
  // keeping the others (and the scroll, and open details) as they are.
  var root = document.documentElement;
  if (!Number(root.getAttribute("data-refresh")) || !window.EventSource || !window.JSON) return;
  var version = root.getAttribute("data-version") || "";
  var source = null;
  function live(text, lost) {
    var el = document.getElementById("live");
    if (el) { el.textContent = text; el.className = lost ? "live lost" : "live"; }
  }
  function apply(ev) {
    var main = document.getElementById("main");
    if (!main) return;
    var open = {};
    main.querySelectorAll("details[open]").forEach(function (d) {
      var p = d.closest(".part");
      if (p) open[p.id] = true;
    });
    var next = [];
    ev.order.forEach(function (id) {
      var el = null;
      if (Object.prototype.hasOwnProperty.call(ev.parts, id)) {
        var t = document.createElement("template");
        t.innerHTML = ev.parts[id];
        el = t.content.firstElementChild;
        if (el && open[id]) el.querySelectorAll("details").forEach(function (d) { d.open = true; });
      } else {
        el = document.getElementById(id);
      }
      if (el) next.push(el);
    });
    main.replaceChildren.apply(main, next);
    document.title = ev.title;
    var at = document.getElementById("at");
    if (at) { at.textContent = ev.at; at.title = ev.stamp; }
    version = ev.version;
    live(ev.failed ? "unavailable" : "live", ev.failed);
  }
  function address() {
    var u = new URL(location.href);
    u.searchParams.set("live", version);
    return u.toString();
  }
  function open() {
    if (source) return;
    source = new EventSource(address(), { withCredentials: true });
    source.onopen = function () { live("live", false); };
    source.onerror = function () { live("connection lost, retrying", true); };
    source.addEventListener("change", function (e) {
      try { apply(JSON.parse(e.data)); } catch (err) { live("connection lost, retrying", true); }
    });
  }
  function close() {
    if (source) { source.close(); source = null; }
  }
  // A page left in a background tab reads nothing.
  document.addEventListener("visibilitychange", function () {
    if (document.hidden) close(); else open();
  });
  if (!document.hidden) open();
})();
