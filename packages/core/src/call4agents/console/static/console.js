// Live updates: the pages work without this script; it only shows new tickets and in-doubt
// actions without a reload, by polling a small JSON endpoint of the console.
"use strict";
(function () {
  if (!document.body.dataset.live) return;
  let list = document.getElementById("live-list");
  if (!list) return;
  const inbox = location.pathname === "/";

  function busy() {
    // Never replace a form someone is filling in: say there is news instead.
    const typed = Array.from(list.querySelectorAll("textarea, input[name=note]")).some((f) => f.value);
    return typed || list.contains(document.activeElement);
  }

  async function refresh() {
    if (busy()) {
      const note = document.getElementById("live-note");
      note.hidden = false;
      note.textContent = "New items arrived: reload the page to see them.";
      return;
    }
    const answer = await fetch(location.pathname, { credentials: "same-origin", cache: "no-store" });
    if (!answer.ok) return;
    const fresh = new DOMParser().parseFromString(await answer.text(), "text/html");
    const next = fresh.getElementById("live-list");
    if (next) {
      list.replaceWith(next);
      list = next;
    }
  }

  async function poll() {
    try {
      const answer = await fetch("/api/live", { credentials: "same-origin", cache: "no-store" });
      if (!answer.ok) return;
      const live = await answer.json();
      const ids = (inbox ? live.tickets : live.in_doubt_keys).join(",");
      if (ids !== list.dataset.ids) await refresh();
    } catch (e) {
      // the console may be restarting: try again at the next tick
    }
  }

  setInterval(poll, 2000);
})();
