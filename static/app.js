// Leasehold dashboard: live updates over the SSE feed (/api/v1/events).
// The page says what it shows in <body data-cluster data-operation>; when an event concerns
// it, the page is fetched again and every element marked [data-live] is swapped in place
// (focus and form input outside those regions are kept). A dropped feed shows a banner and
// reconnects (EventSource does, with Last-Event-ID); `resync` reloads the regions.
(function () {
  "use strict";
  var body = document.body;
  var cluster = body.dataset.cluster || "";
  var operation = body.dataset.operation || "";
  var conn = document.getElementById("conn");
  var pending = null;
  var leaving = false;
  var last = 0;
  var MIN_GAP_MS = 800;
  var PERIODIC_MS = 15000;

  function concerns(type, data) {
    if (type === "resync") { return true; }
    if (type === "operation") {
      if (operation) { return data.id === operation; }
      return !cluster || data.cluster === cluster;
    }
    if (operation && type === "ownership") { return data.operation === operation; }
    return !cluster || data.cluster === cluster;
  }

  function refresh() {
    pending = null;
    if (leaving) { return; }
    last = Date.now();
    fetch(window.location.href, { credentials: "same-origin", headers: { "X-Live": "1" } })
      .then(function (res) {
        if (res.redirected || res.status === 401) { window.location.reload(); return null; }
        if (!res.ok) { return null; }
        return res.text();
      })
      .then(function (text) {
        if (text === null) { return; }
        var next = new DOMParser().parseFromString(text, "text/html");
        var focused = document.activeElement && document.activeElement.id;
        document.querySelectorAll("[data-live]").forEach(function (el) {
          var fresh = el.id && next.getElementById(el.id);
          if (fresh) { el.replaceWith(document.importNode(fresh, true)); }
        });
        if (focused) {
          var again = document.getElementById(focused);
          if (again && again !== document.activeElement) { again.focus(); }
        }
        body.dataset.refreshed = String(Date.now());
      })
      .catch(function () { /* the next event or the periodic refresh tries again */ });
  }

  function schedule() {
    if (pending) { return; }
    var wait = Math.max(0, MIN_GAP_MS - (Date.now() - last));
    pending = window.setTimeout(refresh, wait);
  }

  if (!document.querySelector("[data-live]") || !window.EventSource) { return; }
  var feed = new EventSource("/api/v1/events");
  ["ownership", "instance", "leader", "operation", "targets", "resync"].forEach(function (type) {
    feed.addEventListener(type, function (e) {
      var data = {};
      try { data = JSON.parse(e.data); } catch (err) { data = {}; }
      if (concerns(type, data)) { schedule(); }
    });
  });
  feed.onopen = function () { if (conn) { conn.hidden = true; } body.dataset.live = "open"; };
  feed.onerror = function () { if (conn) { conn.hidden = false; } body.dataset.live = "lost"; };
  window.setInterval(schedule, PERIODIC_MS);
  // A submitted form navigates away: stop, so no refresh races the request it made.
  document.addEventListener("submit", function () { leaving = true; feed.close(); });

})();
