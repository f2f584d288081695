"""The HTML report's stylesheet and script, inlined into every report.

No framework and no network: the script is small vanilla JavaScript that
reads the JSON embedded in ``<script type="application/json">`` tags and
builds the episode browser with ``textContent`` only (never ``innerHTML``),
so model output, however hostile, is shown as text.
"""

from __future__ import annotations

CSS = r"""
:root {
  --ink: #1f2937; --muted: #6b7280; --faint: #9ca3af; --line: #e5e7eb; --bg: #f6f7f9;
  --card: #ffffff; --accent: #0072B2; --code: #f6f8fa;
  --ok: #15803d; --bad: #b91c1c; --warn: #b45309; --time: #c2410c; --infra: #7e22ce;
  --mono: ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", "Liberation Mono", monospace;
}
* { box-sizing: border-box; }
body { margin: 0; color: var(--ink); background: var(--bg);
  font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, "Noto Sans", "DejaVu Sans", sans-serif; }
header.top { background: #111827; color: #f9fafb; padding: 22px 0 18px; }
header.top .wrap, main { max-width: 1320px; margin: 0 auto; padding: 0 28px; }
header.top h1 { margin: 0; font-size: 22px; font-weight: 650; letter-spacing: -0.01em; }
header.top h1 .brand { color: #93c5fd; }
header.top .sub { color: #cbd5e1; font-size: 13px; margin-top: 4px; }
header.top .sub code { color: #e2e8f0; }
nav.toc { margin-top: 12px; display: flex; flex-wrap: wrap; gap: 6px 16px; font-size: 13px; }
nav.toc a { color: #bfdbfe; text-decoration: none; }
nav.toc a:hover { text-decoration: underline; }
main { padding-bottom: 60px; }
section { background: var(--card); border: 1px solid var(--line); border-radius: 10px;
  padding: 18px 22px 20px; margin: 18px 0; }
section > h2 { font-size: 17px; margin: 0 0 2px; font-weight: 650; }
p.lede { color: var(--muted); margin: 0 0 14px; font-size: 13px; max-width: 960px; }
p.note { color: var(--muted); font-size: 13px; margin: 6px 0; padding: 6px 10px;
  border-left: 3px solid var(--faint); background: #fafafa; }
p.note.omitted { border-left-color: #f59e0b; background: #fffbeb; color: #78350f; }
h3 { font-size: 14px; margin: 18px 0 6px; font-weight: 600; }
details.pak > summary { cursor: pointer; margin: 18px 0 6px; }
details.pak > summary h3 { display: inline; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; margin: 4px 0 14px; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px; min-width: 132px; }
.card .v { font-size: 22px; font-weight: 650; font-variant-numeric: tabular-nums; }
.card .k { font-size: 12px; color: var(--muted); }
.card.infra .v { color: var(--infra); }
table.data { border-collapse: collapse; font-size: 13px; font-variant-numeric: tabular-nums; margin: 6px 0 4px; }
table.data th { text-align: left; font-weight: 600; color: var(--muted); font-size: 12px;
  border-bottom: 1px solid var(--line); padding: 5px 12px 5px 0; white-space: nowrap; }
table.data td { border-bottom: 1px solid #f1f2f4; padding: 4px 12px 4px 0; vertical-align: top; }
table.data td.num, table.data th.num { text-align: right; }
table.data td.mono, .mono { font-family: var(--mono); font-size: 12px; }
.muted { color: var(--muted); }
.plots { display: flex; flex-wrap: wrap; gap: 18px 36px; align-items: flex-start; overflow-x: auto; }
svg.plot { display: block; max-width: none; }
svg.plot text { font-family: inherit; }
svg.plot .cell.link { cursor: pointer; }
svg.plot .cell.link:hover rect { stroke: #111827; stroke-width: 2; }
.badge { display: inline-block; font-size: 11px; font-weight: 600; padding: 1px 7px; border-radius: 999px;
  color: #fff; background: var(--faint); white-space: nowrap; }
.badge.success { background: var(--ok); } .badge.failure { background: var(--bad); }
.badge.budget_exhausted { background: var(--warn); } .badge.timeout { background: var(--time); }
.badge.infra_error { background: var(--infra); }
.est { display: inline-block; font-size: 11px; padding: 0 6px; border-radius: 4px; background: #eef2ff;
  color: #3730a3; border: 1px solid #e0e7ff; white-space: nowrap; }
/* episode browser */
.browser { display: grid; grid-template-columns: minmax(360px, 500px) minmax(0, 1fr); gap: 16px; align-items: start; }
.filters { display: flex; flex-wrap: wrap; gap: 6px 8px; margin-bottom: 8px; }
.filters select, .filters input[type=search] { font: inherit; font-size: 12px; padding: 3px 6px;
  border: 1px solid #d1d5db; border-radius: 6px; background: #fff; max-width: 100%; }
.filters input[type=search] { flex: 1 1 160px; }
.filters label { font-size: 12px; color: var(--muted); display: flex; align-items: center; gap: 4px; }
.count { font-size: 12px; color: var(--muted); margin: 2px 0 6px; }
.eplist { border: 1px solid var(--line); border-radius: 8px; max-height: 720px; overflow: auto; }
.eplist table { width: 100%; table-layout: fixed; border-collapse: collapse; font-size: 12px; font-variant-numeric: tabular-nums; }
.eplist th { position: sticky; top: 0; background: #f9fafb; text-align: left; font-weight: 600;
  color: var(--muted); padding: 5px 6px; border-bottom: 1px solid var(--line); }
.eplist td { padding: 4px 6px; border-bottom: 1px solid #f3f4f6; white-space: nowrap;
  overflow: hidden; text-overflow: ellipsis; }
.eplist th:nth-child(1) { width: 27%; } .eplist th:nth-child(2) { width: 19%; }
.eplist th:nth-child(3) { width: 18%; } .eplist th:nth-child(4) { width: 8%; }
.eplist th:nth-child(5) { width: 84px; } .eplist th:nth-child(6) { width: 38px; }
.eplist tr.ep { cursor: pointer; }
.eplist tr.ep:hover { background: #f0f7ff; }
.eplist tr.ep.sel { background: #dbeafe; }
.eplist tr.ep.noturns td { color: var(--faint); }
.more { margin: 8px; }
button { font: inherit; font-size: 12px; padding: 3px 10px; border: 1px solid #d1d5db; border-radius: 6px;
  background: #fff; cursor: pointer; color: var(--ink); }
button:hover:not(:disabled) { background: #f3f4f6; }
button:disabled { color: var(--faint); cursor: default; }
.viewer { border: 1px solid var(--line); border-radius: 8px; padding: 12px 16px; min-height: 240px; min-width: 0; }
.viewer .empty { color: var(--muted); padding: 40px 0; text-align: center; }
.viewer h3 { margin: 0 0 4px; font-size: 15px; }
.kv { display: flex; flex-wrap: wrap; gap: 4px 16px; font-size: 12px; color: var(--muted); margin: 4px 0 8px; }
.kv b { color: var(--ink); font-weight: 600; }
.instr { background: #f8fafc; border: 1px solid var(--line); border-radius: 6px; padding: 6px 10px; margin: 6px 0; }
.stepper { display: flex; align-items: center; gap: 8px; margin: 12px 0 8px; flex-wrap: wrap; }
.pips { display: flex; flex-wrap: wrap; gap: 3px; }
.pip { width: 14px; height: 14px; border-radius: 3px; background: #d1d5db; cursor: pointer; border: 0; padding: 0; }
.pip.perr { background: var(--bad); } .pip.aerr { background: var(--warn); } .pip.rew { background: var(--ok); }
.pip.cur { outline: 2px solid #111827; outline-offset: 1px; }
.viewer .blk { margin: 8px 0; }
.viewer .lbl { font-size: 11px; font-weight: 650; letter-spacing: .04em; text-transform: uppercase; color: var(--muted); margin-bottom: 2px; }
.viewer .blk.err .lbl { color: var(--bad); } .viewer .blk.warn .lbl { color: var(--warn); }
pre { white-space: pre-wrap; word-break: break-word; overflow-wrap: anywhere; font: 12px/1.45 var(--mono);
  background: var(--code); border: 1px solid #eef0f3; border-radius: 6px; padding: 7px 10px; margin: 0;
  max-height: 420px; overflow: auto; }
.blk.err pre { background: #fef2f2; border-color: #fecaca; }
.blk.warn pre { background: #fffbeb; border-color: #fde68a; }
details.msgs > summary, details.old > summary { cursor: pointer; font-size: 12px; color: var(--muted); margin: 2px 0; }
.msg { border-left: 3px solid var(--line); padding-left: 8px; margin: 6px 0; }
.msg .role { font-size: 11px; font-weight: 650; text-transform: uppercase; letter-spacing: .04em; color: var(--muted); }
.msg.system { border-left-color: #a5b4fc; } .msg.user { border-left-color: #93c5fd; }
.msg.assistant { border-left-color: #86efac; } .msg.tool { border-left-color: #fcd34d; }
.msg img.shot { display: block; max-width: 100%; height: auto; margin: 4px 0; border: 1px solid var(--line); }
.tiny { font-size: 11px; color: var(--muted); }
footer { color: var(--muted); font-size: 12px; text-align: center; margin: 30px 0; }
@media (max-width: 900px) { .browser { grid-template-columns: 1fr; } }
"""

JS = r"""
(function () {
  "use strict";
  function load(id) {
    var el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  }
  var IDX = load("tr-index");
  var DET = load("tr-turns") || {};
  var root = document.getElementById("browser");
  if (!IDX || !root) return;

  // h("div", {class: "x"}, [children]): builds elements with text only, never HTML.
  function h(tag, attrs, kids) {
    var el = document.createElement(tag);
    if (attrs) for (var k in attrs) {
      if (!Object.prototype.hasOwnProperty.call(attrs, k) || attrs[k] == null) continue;
      if (k === "text") el.textContent = attrs[k];
      else if (k === "class") el.className = attrs[k];
      else if (k.slice(0, 2) === "on") el.addEventListener(k.slice(2), attrs[k]);
      else el.setAttribute(k, attrs[k]);
    }
    (kids || []).forEach(function (c) {
      if (c == null) return;
      el.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    });
    return el;
  }
  function pretty(v) {
    if (v == null) return "";
    if (typeof v === "string") return v;
    try { return JSON.stringify(v, null, 2); } catch (e) { return String(v); }
  }

  var L = IDX.lookups, C = {};
  IDX.cols.forEach(function (c, i) { C[c] = i; });
  var rows = IDX.rows;
  var PAGE = 200;
  var state = { shown: PAGE, sel: null, turn: 0, matches: [] };

  // ---- filters -----------------------------------------------------------
  var F = {};
  function sel(name, label, values) {
    var s = h("select", { "aria-label": label, "data-f": name });
    s.appendChild(h("option", { value: "", text: "all " + label }));
    values.forEach(function (v, i) { s.appendChild(h("option", { value: String(i), text: v })); });
    s.addEventListener("change", function () { state.shown = PAGE; refresh(); });
    F[name] = s;
    return s;
  }
  var filters = h("div", { class: "filters" }, [
    L.run.length > 1 ? sel("run", "runs", L.run) : null,
    sel("task", "tasks", L.task), sel("harness", "harnesses", L.harness),
    sel("policy", "policies", L.policy), sel("outcome", "outcomes", L.outcome)
  ]);
  var search = h("input", { type: "search", placeholder: "search id, error…", "aria-label": "search" });
  search.addEventListener("input", function () { state.shown = PAGE; refresh(); });
  filters.appendChild(search);
  var onlyTurns = null;
  if (IDX.embedded < rows.length) {
    onlyTurns = h("input", { type: "checkbox" });
    onlyTurns.addEventListener("change", function () { state.shown = PAGE; refresh(); });
    filters.appendChild(h("label", {}, [onlyTurns, "with turns only"]));
  }
  var count = h("div", { class: "count" });
  var tbody = h("tbody");
  var list = h("div", { class: "eplist", id: "eplist" }, [
    h("table", {}, [h("thead", {}, [h("tr", {}, ["task", "harness", "policy", "seed", "outcome", "turns"].map(
      function (c) { return h("th", { text: c }); }))]), tbody])
  ]);
  var more = h("button", { class: "more", text: "show more", onclick: function () { state.shown += PAGE * 5; render(); } });
  var viewer = h("div", { class: "viewer", id: "viewer" }, [h("div", { class: "empty", text: "Pick an episode on the left to step through its turns." })]);
  root.appendChild(h("div", { class: "browser" }, [h("div", {}, [filters, count, list, more]), viewer]));

  function fval(name) { return F[name] && F[name].value !== "" ? Number(F[name].value) : null; }
  function refresh() {
    var fr = fval("run"), ft = fval("task"), fh = fval("harness"), fp = fval("policy"), fo = fval("outcome");
    var q = search.value.trim().toLowerCase();
    var only = onlyTurns && onlyTurns.checked;
    state.matches = [];
    for (var i = 0; i < rows.length; i++) {
      var r = rows[i];
      if (fr !== null && r[C.run] !== fr) continue;
      if (ft !== null && r[C.task] !== ft) continue;
      if (fh !== null && r[C.harness] !== fh) continue;
      if (fp !== null && r[C.policy] !== fp) continue;
      if (fo !== null && r[C.outcome] !== fo) continue;
      if (only && !r[C.turns_embedded]) continue;
      if (q && (r[C.id] + " " + L.task[r[C.task]] + " " + (r[C.error] || "")).toLowerCase().indexOf(q) < 0) continue;
      state.matches.push(i);
    }
    render();
  }
  function shortTask(t) { return IDX.strip && t.indexOf(IDX.strip) === 0 ? t.slice(IDX.strip.length) : t; }
  function render() {
    var m = state.matches, n = Math.min(m.length, state.shown);
    tbody.textContent = "";
    for (var j = 0; j < n; j++) {
      var i = m[j], r = rows[i];
      var oc = L.outcome[r[C.outcome]];
      var tr = h("tr", { class: "ep" + (r[C.turns_embedded] ? "" : " noturns") + (state.sel === i ? " sel" : ""),
        "data-i": String(i), title: r[C.id] + (r[C.attempt] ? " (attempt " + r[C.attempt] + ")" : "") }, [
        h("td", { text: shortTask(L.task[r[C.task]]) }), h("td", { text: L.harness[r[C.harness]] }),
        h("td", { text: L.policy[r[C.policy]] }), h("td", { text: String(r[C.seed]) + (r[C.attempt] ? "·" + r[C.attempt] : "") }),
        h("td", {}, [h("span", { class: "badge " + oc, text: oc.replace("_", " ") })]),
        h("td", { text: String(r[C.n_turns]) })
      ]);
      tbody.appendChild(tr);
    }
    count.textContent = m.length === rows.length
      ? rows.length + " episodes" + (n < m.length ? " (showing " + n + ")" : "")
      : m.length + " of " + rows.length + " episodes match" + (n < m.length ? " (showing " + n + ")" : "");
    more.style.display = n < m.length ? "" : "none";
  }
  tbody.addEventListener("click", function (ev) {
    var tr = ev.target.closest("tr.ep");
    if (tr) select(Number(tr.getAttribute("data-i")), 0);
  });

  // ---- viewer ------------------------------------------------------------
  function key(r) { return L.run[r[C.run]] + "/" + r[C.id]; }
  function messagesOf(turns, t) {
    var msgs = [];
    for (var k = 0; k <= t; k++) msgs = msgs.slice(0, turns[k].k).concat(turns[k].m);
    return msgs;
  }
  function contentText(c) {
    if (c == null) return "";
    if (typeof c === "string") return c;
    if (Array.isArray(c)) return c.map(function (p) {
      if (p && p.type === "text") return p.text;
      if (p && p.omitted) return "[" + p.omitted + "]";
      return pretty(p);
    }).join("\n");
    return pretty(c);
  }
  function msgEl(msg) {
    var role = String(msg.role || "?");
    var kids = [h("div", { class: "role", text: role + (msg.name ? " · " + msg.name : "") + (msg.tool_call_id ? " · " + msg.tool_call_id : "") })];
    var c = msg.content;
    var imgs = IDX.image_urls || [];
    if (Array.isArray(c) && c.some(function (p) { return p && p.img != null; })) {
      // Text parts as text, embedded images (screenshots) as images, in their order.
      var buf = [];
      var flush = function () { if (buf.length) { kids.push(h("pre", { text: buf.join("") })); buf = []; } };
      c.forEach(function (p) {
        if (p && p.img != null && imgs[p.img]) { flush(); kids.push(h("img", { class: "shot", src: imgs[p.img], alt: "image shown to the model" })); }
        else buf.push(contentText([p]));
      });
      flush();
    } else {
      var text = contentText(c);
      if (text) kids.push(h("pre", { text: text }));
    }
    if (msg.tool_calls && msg.tool_calls.length) kids.push(h("pre", { text: toolCallsText(msg.tool_calls) }));
    return h("div", { class: "msg " + role.replace(/[^a-z_]/gi, "") }, kids);
  }
  function toolCallsText(tcs) {
    return tcs.map(function (tc) {
      var f = tc.function || tc;
      return (f.name || "?") + "(" + (typeof f.arguments === "string" ? f.arguments : pretty(f.arguments)) + ")" + (tc.id ? "   # " + tc.id : "");
    }).join("\n");
  }
  function blk(label, body, cls) {
    return h("div", { class: "blk" + (cls ? " " + cls : "") }, [h("div", { class: "lbl", text: label }), body]);
  }
  function num(x, d) { return x == null ? "–" : Number(x).toFixed(d); }

  function select(i, t) {
    state.sel = i; state.turn = t || 0;
    var trs = tbody.querySelectorAll("tr.ep");
    for (var j = 0; j < trs.length; j++) trs[j].classList.toggle("sel", Number(trs[j].getAttribute("data-i")) === i);
    try { history.replaceState(null, "", "#episode=" + encodeURIComponent(key(rows[i]))); } catch (e) { /* file: URLs may refuse */ }
    show();
  }
  function show() {
    var i = state.sel, r = rows[i], d = DET[key(r)];
    var oc = L.outcome[r[C.outcome]];
    viewer.textContent = "";
    viewer.appendChild(h("h3", { text: L.task[r[C.task]] }));
    viewer.appendChild(h("div", { class: "kv" }, [
      h("span", {}, [h("span", { class: "badge " + oc, text: oc.replace("_", " ") })]),
      h("span", {}, ["harness ", h("b", { text: L.harness[r[C.harness]] })]),
      h("span", {}, ["policy ", h("b", { text: L.policy[r[C.policy]] })]),
      h("span", {}, ["seed ", h("b", { text: String(r[C.seed]) })]),
      r[C.attempt] ? h("span", {}, ["attempt ", h("b", { text: String(r[C.attempt]) })]) : null,
      h("span", {}, ["reward ", h("b", { text: num(r[C.reward], 2) })]),
      h("span", {}, ["turns ", h("b", { text: String(r[C.n_turns]) })]),
      h("span", {}, ["tokens ", h("b", { text: String(r[C.tokens]) })]),
      r[C.parse_errors] ? h("span", {}, ["parse errors ", h("b", { text: String(r[C.parse_errors]) })]) : null,
      h("span", { class: "mono", text: key(r) })
    ]));
    if (!r[C.final]) viewer.appendChild(h("p", { class: "note", text: "A later attempt of this cell was recorded (this attempt ended in an infra error and was retried); only the final attempt is scored." }));
    if (!d) {
      viewer.appendChild(h("p", { class: "note omitted", text: "Turns of this episode are not embedded in this report (" + IDX.embedded + " of " + rows.length + " episodes are). See them with: tackroom show " + L.run[r[C.run]] + " " + r[C.id] }));
      if (r[C.error]) viewer.appendChild(blk("error", h("pre", { text: r[C.error] }), "err"));
      return;
    }
    if (d.instruction) viewer.appendChild(h("div", { class: "instr" }, [h("span", { class: "tiny", text: "Instruction  " }), d.instruction]));
    if (d.error) viewer.appendChild(blk("episode error", h("pre", { text: d.error }), "err"));
    var turns = d.turns;
    if (!turns.length) { viewer.appendChild(h("p", { class: "note", text: "This episode has no turns." })); return; }
    var t = Math.max(0, Math.min(state.turn, turns.length - 1)); state.turn = t;
    var pips = h("div", { class: "pips" }, turns.map(function (tu, k) {
      var cls = "pip" + (tu.pe ? " perr" : tu.ae ? " aerr" : tu.r > 0 ? " rew" : "") + (k === t ? " cur" : "");
      return h("button", { class: cls, title: "turn " + (k + 1) + (tu.pe ? " · parse error" : tu.ae ? " · action error" : ""),
        "aria-label": "turn " + (k + 1), onclick: function () { state.turn = k; show(); } });
    }));
    viewer.appendChild(h("div", { class: "stepper" }, [
      h("button", { text: "◀ prev", class: "prev", disabled: t === 0 ? "" : null, onclick: function () { step(-1); } }),
      h("span", { class: "turnno", text: "turn " + (t + 1) + " / " + turns.length }),
      h("button", { text: "next ▶", class: "next", disabled: t === turns.length - 1 ? "" : null, onclick: function () { step(1); } }),
      pips
    ]));
    var tu = turns[t];
    var body = h("div", { class: "turn" });
    var msgs = messagesOf(turns, t);
    var old = t === 0 ? 0 : Math.min(tu.k, msgs.length);  // shown on the previous turn too
    var md = h("details", { class: "msgs", open: "" }, [h("summary", { text: "Messages shown to the model: " + msgs.length + (t > 0 ? " (" + (msgs.length - old) + " new this turn)" : "") })]);
    if (old > 0) md.appendChild(h("details", { class: "old" }, [h("summary", { text: old + " message(s) already shown on the previous turn" })].concat(msgs.slice(0, old).map(msgEl))));
    msgs.slice(old).forEach(function (m) { md.appendChild(msgEl(m)); });
    body.appendChild(blk("Input", md));
    body.appendChild(blk("Model output (raw)", tu.raw == null ? h("div", { class: "tiny", text: "(no text)" }) : h("pre", { class: "raw", text: tu.raw })));
    if (tu.tc && tu.tc.length) body.appendChild(blk("Tool calls", h("pre", { text: toolCallsText(tu.tc) })));
    if (tu.pe) body.appendChild(blk("Parse error", h("pre", { text: tu.pe }), "err"));
    if (tu.a && tu.a.length) body.appendChild(blk("Actions", h("pre", { text: tu.a.map(function (a) { return JSON.stringify(a); }).join("\n") })));
    if (tu.ae) body.appendChild(blk("Action error", h("pre", { text: tu.ae }), "warn"));
    if (tu.fb) body.appendChild(blk("Feedback shown to the model", h("pre", { text: tu.fb }), "warn"));
    if (tu.o != null) body.appendChild(blk("Observation after the actions", h("pre", { text: tu.o })));
    body.appendChild(h("div", { class: "kv" }, [
      h("span", {}, ["reward ", h("b", { text: num(tu.r, 2) })]),
      h("span", {}, ["tokens in/out ", h("b", { text: (tu.pt || 0) + " / " + (tu.ct || 0) })]),
      h("span", {}, ["policy ", h("b", { text: num(tu.tp, 3) + " s" })]),
      h("span", {}, ["env ", h("b", { text: num(tu.te, 3) + " s" })]),
      h("span", {}, ["harness ", h("b", { text: num(tu.th, 3) + " s" })]),
      tu.lp ? h("span", {}, ["log-probs ", h("b", { text: tu.lp[0] + " tokens, mean " + num(tu.lp[1], 3) })]) : null,
      tu.ad ? h("span", {}, ["adapter ", h("b", { text: tu.ad })]) : null
    ]));
    viewer.appendChild(body);
  }
  function step(dx) {
    if (state.sel === null) return;
    var d = DET[key(rows[state.sel])];
    if (!d) return;
    var t = state.turn + dx;
    if (t < 0 || t >= d.turns.length) return;
    state.turn = t; show();
  }
  document.addEventListener("keydown", function (ev) {
    var tag = (ev.target && ev.target.tagName) || "";
    if (tag === "INPUT" || tag === "SELECT" || tag === "TEXTAREA") return;
    if (ev.key === "ArrowRight") step(1);
    else if (ev.key === "ArrowLeft") step(-1);
  });

  // Heatmap cells carry data-task / data-harness / data-policy: clicking one filters the browser.
  function setF(name, value) {
    if (!F[name]) return;
    var i = value == null ? -1 : L[name].indexOf(value);
    F[name].value = i < 0 ? "" : String(i);
  }
  document.addEventListener("click", function (ev) {
    var g = ev.target.closest ? ev.target.closest("[data-filter]") : null;
    if (!g) return;
    ["run", "task", "harness", "policy", "outcome"].forEach(function (n) { setF(n, g.getAttribute("data-" + n)); });
    state.shown = PAGE; refresh();
    document.getElementById("episodes").scrollIntoView();
  });

  refresh();
  var m = /^#episode=(.+)$/.exec(location.hash);
  if (m) {
    var want = decodeURIComponent(m[1]);
    for (var i = 0; i < rows.length; i++) if (key(rows[i]) === want) { select(i, 0); break; }
  }
})();
"""
