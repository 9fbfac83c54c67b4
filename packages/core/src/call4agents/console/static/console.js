// Live updates: the pages work without this script; it only shows new tickets and in-doubt
// actions without a reload. Where the ledger can push (PostgreSQL), the console streams its news
// (server-sent events); elsewhere, and whenever the stream is down, a small JSON endpoint is
// polled every two seconds.
"use strict";
(function () {
  if (!document.body.dataset.live) return;
  let list = document.getElementById("live-list");
  if (!list) return;
  const inbox = location.pathname === "/";
  let streaming = false;
  document.body.dataset.liveMode = "poll";

  function busy() {
    // Never replace a form someone is filling in: say there is news instead.
    const typed = Array.from(list.querySelectorAll("textarea, input[name=note], input[name=reason]")).some((f) => f.value);
    const ticked = list.querySelector("input[type=checkbox]:checked");
    return typed || ticked !== null || list.contains(document.activeElement);
  }

  async function refresh() {
    if (busy()) {
      const note = document.getElementById("live-note");
      note.hidden = false;
      note.textContent = "New items arrived: reload the page to see them.";
      return;
    }
    const here = location.pathname + location.search; // the same view (lines or cards)
    const answer = await fetch(here, { credentials: "same-origin", cache: "no-store" });
    if (!answer.ok) return;
    const fresh = new DOMParser().parseFromString(await answer.text(), "text/html");
    const next = fresh.getElementById("live-list");
    if (next && next.dataset.ids !== list.dataset.ids) {
      list.replaceWith(next);
      list = next;
    }
  }

  async function poll() {
    if (streaming) return;
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

  if (window.EventSource) {
    const stream = new EventSource("/api/events");
    stream.addEventListener("ready", () => {
      streaming = true;
      document.body.dataset.liveMode = "listen";
      refresh(); // anything that arrived before the stream listened
    });
    stream.addEventListener("news", (e) => {
      const news = JSON.parse(e.data);
      if ((news.what === "ticket") === inbox || news.what === "unknown") refresh();
    });
    stream.onerror = () => {
      // SQLite (204: the browser stops asking) or the stream is down (it asks again): poll.
      streaming = false;
      document.body.dataset.liveMode = "poll";
    };
  }
  setInterval(poll, 2000);
})();

// Keyboard: j and k move between cards (tickets, in-doubt actions) or the inbox's lines, and o
// opens a line's card; on a ticket's card, a approves and d denies, each only after a confirm
// that names the tool and the run, through the card's own form, so the yes stays bound to the
// arguments that card shows. Keys typed into a field, or with a modifier held, are left alone.
(function () {
  function cards() {
    return Array.from(document.querySelectorAll("section.ticket, section.doubt, li.row"));
  }

  function current() {
    return document.activeElement && document.activeElement.closest("section.ticket, section.doubt, li.row");
  }

  function move(step) {
    const all = cards();
    if (!all.length) return;
    const at = all.indexOf(current());
    const next = all[Math.min(all.length - 1, Math.max(0, at < 0 ? 0 : at + step))];
    next.tabIndex = -1;
    next.focus();
    next.scrollIntoView({ block: "nearest" });
  }

  function decide(card, decision) {
    const button = card && card.querySelector(`button[name=decision][value=${decision}]`);
    if (!button) return;
    const tool = card.querySelector("h2 code").textContent;
    const run = card.querySelector("dd a").textContent;
    const verb = decision === "approve" ? "Approve" : "Deny";
    if (window.confirm(`${verb} ${tool} in run ${run}, with the arguments shown?`)) button.click();
  }

  document.addEventListener("keydown", (e) => {
    if (e.ctrlKey || e.metaKey || e.altKey || e.defaultPrevented) return;
    if (e.target.closest && e.target.closest("input, textarea, select, [contenteditable]")) return;
    const actions = { j: () => move(1), k: () => move(-1) };
    actions.a = () => decide(current(), "approve");
    actions.d = () => decide(current(), "deny");
    actions.o = () => {
      const link = current() && current().querySelector("a.open");
      if (link) link.click();
    };
    const act = actions[e.key];
    if (!act) return;
    e.preventDefault();
    act();
  });
})();

// The decision on ticked tickets asks first, with how many: each is still decided on its own,
// bound to the arguments its card shows (the server checks each card's fingerprint).
document.addEventListener("submit", (e) => {
  if (e.target.id !== "bulk") return;
  const ticked = document.querySelectorAll("input[type=checkbox][form=bulk]:checked").length;
  const verb = e.submitter && e.submitter.value === "deny" ? "Deny" : "Approve";
  if (!window.confirm(`${verb} ${ticked} ticked ticket(s), each with the arguments its card shows?`)) {
    e.preventDefault();
  }
});
