// Leasehold dashboard: live updates over the SSE feed (/api/v1/events).
// The page says what it shows in <body data-cluster data-operation>; when an event concerns
// it, the page is fetched again and every element marked [data-live] is swapped in place
// (focus and form input outside those regions are kept). A dropped feed shows a banner and
// reconnects (EventSource does, with Last-Event-ID); `resync` reloads the regions.
//
// One feed per browser, not per page: a browser allows six connections per host, and pages in
// the back/forward cache or in other tabs would each keep one. The tab holding the Web Lock
// "leasehold-feed" opens the feed and passes every event on over a BroadcastChannel; the
// others listen there. A page closes its feed (and lets go of the lock) when it is hidden in
// the cache or left, and takes part again when it is shown. The feed resumes after the event
// id the page was rendered at (<body data-event-id>, `?after=`), so nothing that happened
// between the render and the connection is missed. Browsers without Web Locks or
// BroadcastChannel open a feed per page.
//
// A hidden page (a background tab, a minimized window) takes in every event but fetches
// nothing: it notes that it is behind and fetches once when it is shown again. Its relative
// times stop ticking meanwhile. With a hundred tabs open, only the one in view does page work.
(function () {
  "use strict";
  var body = document.body;
  var cluster = body.dataset.cluster || "";
  var operation = body.dataset.operation || "";
  var conn = document.getElementById("conn");
  // Every kind the feed sends (docs/api.md): a kind not listed here never reaches the page.
  var TYPES = ["ownership", "instance", "leader", "operation", "targets", "members", "resync"];
  var pending = null;
  // Looks again in a row for a page older than the events this page took in.
  var again = 0;
  var leaving = false;
  var last = 0;
  // Hidden when an event concerned this page or a refresh was due: fetch when shown.
  var behind = false;
  // The newest event id this page has taken into account.
  var seen = Number(body.dataset.eventId || 0);
  var LOCK = "leasehold-feed";
  var feed = null;
  // Lets go of the lock (set while this tab holds the feed).
  var release = null;
  var channel = null;
  // Hidden or left: a lock granted now is given straight back.
  var stopped = false;
  // At most one page fetch per this: a burst of events (a failover's moves) costs one or two
  // fetches, and the page shows where the burst ended within about half a second of it.
  var MIN_GAP_MS = 400;
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

  function hidden() { return document.visibilityState === "hidden"; }

  function refresh() {
    pending = null;
    if (leaving) { return; }
    if (hidden()) { behind = true; return; }
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
        // The server may answer from a model built a moment before the last event this page
        // took in (its data-event-id says which events it includes; models are at most about
        // a second old, two while nothing changes): look again shortly, a dozen times at most
        // (after a server restart the ids start again, below what this page saw).
        if (Number(next.body.dataset.eventId || 0) < seen && again < 12) {
          again += 1;
          schedule();
        } else {
          again = 0;
        }
      })
      .catch(function () { /* the next event or the periodic refresh tries again */ });
  }

  function schedule() {
    if (hidden()) { behind = true; return; }
    if (pending) { return; }
    var wait = Math.max(0, MIN_GAP_MS - (Date.now() - last));
    pending = window.setTimeout(refresh, wait);
  }

  function status(state) {
    if (conn) { conn.hidden = state === "open"; }
    body.dataset.live = state;
  }

  // One event, from this page's feed or another tab's. (One this page already shows only
  // costs a refresh; ids start again at 1 when the server restarts, so none is dropped.)
  // Every event taken in is also dispatched on the document as "leasehold:event" (detail:
  // type, data, id, and via "feed" or "tab"), so a script can tell when it arrived; the
  // pages_live bench listens for it (docs/benchmarks.md).
  function take(type, data, id, via) {
    if (id > seen) { seen = id; }
    if (concerns(type, data)) { schedule(); }
    document.dispatchEvent(new CustomEvent("leasehold:event", {
      detail: { type: type, data: data, id: id, via: via }
    }));
  }

  // This tab holds the feed: open it, and pass every event on to the other tabs.
  function openFeed() {
    feed = new EventSource("/api/v1/events?after=" + seen);
    TYPES.forEach(function (type) {
      feed.addEventListener(type, function (e) {
        var data = {};
        try { data = JSON.parse(e.data); } catch (err) { data = {}; }
        var id = Number(e.lastEventId) || 0;
        take(type, data, id, "feed");
        if (channel) { channel.postMessage({ type: type, data: data, id: id }); }
      });
    });
    feed.onopen = function () {
      status("open");
      if (channel) { channel.postMessage({ live: "open" }); }
    };
    feed.onerror = function () {
      status("lost");
      if (channel) { channel.postMessage({ live: "lost" }); }
    };
  }

  // Holds the lock, and with it the feed, until stop() lets go.
  function hold() {
    if (stopped) { return null; }
    return new Promise(function (resolve) {
      release = resolve;
      openFeed();
    });
  }

  function noop() { /* a lock request ended: nothing to do */ }

  function start() {
    stopped = false;
    if (!channel) { openFeed(); return; }
    status("open");
    navigator.locks.request(LOCK, { ifAvailable: true }, function (lock) {
      if (lock) { return hold(); }
      // Another tab holds the feed. Events may have come between this page's render and now:
      // look once, then wait in line to take the feed over when that tab lets go.
      schedule();
      navigator.locks.request(LOCK, hold).catch(noop);
      return null;
    }).catch(noop);
  }

  function stop() {
    stopped = true;
    if (feed) { feed.close(); feed = null; }
    if (release) { release(); release = null; }
  }

  // Relative times tick: every <time data-ago datetime> says how long ago, by the server's
  // clock (the page says what time it was rendered at, so a skewed local clock does not show).
  var skew = Number(body.dataset.now || Date.now()) - Date.now();
  function span(ms) {
    if (ms < 1000) { return ms + " ms"; }
    if (ms < 60000) { return Math.floor(ms / 1000) + " s"; }
    if (ms < 3600000) { return Math.floor(ms / 60000) + " min"; }
    if (ms < 86400000) { return Math.floor(ms / 3600000) + " h"; }
    return Math.floor(ms / 86400000) + " d";
  }
  function tick() {
    if (hidden()) { return; }
    var now = Date.now() + skew;
    document.querySelectorAll("time[data-ago]").forEach(function (t) {
      var at = Date.parse(t.getAttribute("datetime"));
      if (!isNaN(at)) { t.textContent = span(Math.max(0, now - at)) + " ago"; }
    });
  }
  window.setInterval(tick, 1000);

  if (!document.querySelector("[data-live]") || !window.EventSource) { return; }
  if (window.BroadcastChannel && navigator.locks) {
    channel = new BroadcastChannel(LOCK);
    channel.onmessage = function (m) {
      var d = m.data || {};
      if (feed || stopped) { return; }
      if (d.live) { status(d.live); return; }
      if (d.type) { take(d.type, d.data || {}, d.id || 0, "tab"); }
    };
  }
  start();
  window.setInterval(schedule, PERIODIC_MS);
  // Hidden in the back/forward cache or left: no connection kept. Shown again: take part
  // again (a feed this tab opens resumes after the last event it saw).
  window.addEventListener("pagehide", stop);
  window.addEventListener("pageshow", function (e) {
    if (e.persisted) { leaving = false; start(); shown(); }
  });
  // Shown again (its tab chosen, its window restored, or back from the cache): catch up once
  // on what it missed while hidden.
  function shown() {
    if (hidden()) { return; }
    tick();
    if (behind) { behind = false; schedule(); }
  }
  document.addEventListener("visibilitychange", shown);
  // A submitted form navigates away: stop, so no refresh races the request it made.
  document.addEventListener("submit", function () { leaving = true; stop(); });

})();
