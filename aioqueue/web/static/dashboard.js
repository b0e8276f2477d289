/* aioqueue dashboard: refresh the [data-live] part of the page every 2 s, ask before
   destructive actions, select jobs for a bulk action, and show an action's banner only
   once. Plain JS, no library.

   A refresh never lands under the user's hand: not while a button is pressed, a control
   inside the live part has the keyboard focus, text in it is selected, jobs are selected
   for a bulk action, or a form is being sent; and an unchanged fragment leaves the page
   alone. */
(function () {
  "use strict";
  var PERIOD_MS = 2000;
  var live = document.querySelector("[data-live]");
  var status = document.getElementById("live-status");
  var busy = false;
  var pressed = false;
  var leaving = false;
  var shown = live ? live.innerHTML : "";
  var LABELS = { ok: "live", error: "retrying", offline: "offline", paused: "paused" };
  var health = status ? status.getAttribute("data-state") : "ok";  // the last refresh's

  // The header's dot and word: how the last refresh went; "paused" while jobs are selected.
  function showStatus() {
    if (!status) return;
    var state = health === "ok" && selected() > 0 ? "paused" : health;
    status.setAttribute("data-state", state);
    status.textContent = LABELS[state];
  }

  function setStatus(state) {
    health = state;
    showStatus();
  }

  function selected() {
    return live ? live.querySelectorAll("input[data-select]:checked").length : 0;
  }

  function inUse() {
    if (pressed || leaving || document.hidden || selected() > 0) return true;
    var focused = document.activeElement;
    if (focused && focused !== document.body && live.contains(focused)) return true;
    var selection = window.getSelection();
    return Boolean(selection && !selection.isCollapsed && live.contains(selection.anchorNode));
  }

  function apply(response, html) {
    if (response.ok && live.hasAttribute("data-reload-on-ok")) {
      window.location.reload();  // Redis is back: show the page itself again
      return;
    }
    setStatus(response.ok ? "ok" : "error");
    if (html === shown || inUse()) return;
    live.innerHTML = html;
    shown = html;
    updateBulk();
  }

  function refresh() {
    if (busy || inUse()) return;
    var url = new URL(window.location.href);
    url.searchParams.set("partial", "1");
    busy = true;
    fetch(url, { credentials: "same-origin", cache: "no-store", headers: { "Accept": "text/html" } })
      .then(function (response) {
        return response.text().then(function (html) { apply(response, html); });
      })
      .catch(function () { setStatus("offline"); })
      .then(function () { busy = false; });
  }

  if (live) {
    window.setInterval(refresh, PERIOD_MS);
    document.addEventListener("pointerdown", function () { pressed = true; }, true);
    document.addEventListener("pointerup", function () { pressed = false; }, true);
    document.addEventListener("pointercancel", function () { pressed = false; }, true);
  } else if (status) {
    status.hidden = true;
  }

  function jobs(n) { return n + (n === 1 ? " job" : " jobs"); }

  // The bulk bar: how many are selected, its buttons usable only then; "select all".
  function updateBulk() {
    var n = selected();
    document.querySelectorAll("[data-selected]").forEach(function (label) {
      label.textContent = n ? jobs(n) + " selected" : "None selected";
    });
    document.querySelectorAll("form[data-bulk] button").forEach(function (button) {
      button.disabled = n === 0;
    });
    var all = document.querySelector("input[data-select-all]");
    if (all) {
      var boxes = live ? live.querySelectorAll("input[data-select]").length : 0;
      all.checked = boxes > 0 && n === boxes;
      all.indeterminate = n > 0 && n < boxes;
    }
    showStatus();
  }

  document.addEventListener("change", function (event) {
    var target = event.target;
    if (target.matches("input[data-select-all]")) {
      document.querySelectorAll("input[data-select]").forEach(function (box) {
        box.checked = target.checked;
      });
    }
    if (target.matches("input[data-select], input[data-select-all]")) updateBulk();
  });

  document.addEventListener("submit", function (event) {
    var submitter = event.submitter;
    var message = (submitter && submitter.getAttribute("data-confirm")) ||
      event.target.getAttribute("data-confirm");
    if (message && event.target.hasAttribute("data-bulk")) {
      message = message.replace("{n}", jobs(selected()));
    }
    if (message && !window.confirm(message)) {
      event.preventDefault();
      return;
    }
    leaving = true;  // the page is about to be replaced: stop touching it
    var button = submitter || event.target.querySelector("button[type=submit]");
    if (button) button.disabled = true;  // one click, one action
  });

  window.addEventListener("pageshow", function () {  // back to this page from the cache
    leaving = false;
    document.querySelectorAll("button[type=submit][disabled]").forEach(function (button) {
      button.disabled = false;
    });
    updateBulk();
  });

  var here = new URL(window.location.href);
  if (here.searchParams.has("done")) {
    here.searchParams.delete("done");
    here.searchParams.delete("n");
    window.history.replaceState(null, "", here);
  }
})();
