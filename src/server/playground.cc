#include "server/playground.h"

namespace pagoda::server {
namespace {
const char* const kHtml = R"PAGODA_HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Pagoda playground</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 0; background: #f4f5f7; color: #1d2330; }
  header { background: #243b55; color: #fff; padding: 10px 18px; display: flex; gap: 16px; align-items: center; flex-wrap: wrap; }
  header h1 { font-size: 18px; margin: 0 12px 0 0; }
  header label { font-size: 13px; }
  header input { margin-left: 4px; padding: 3px 5px; }
  #log { max-width: 860px; margin: 16px auto; padding: 0 12px 120px; }
  .msg { padding: 10px 14px; border-radius: 8px; margin: 10px 0; white-space: pre-wrap; line-height: 1.4; }
  .user { background: #dbe8ff; margin-left: 80px; }
  .assistant { background: #fff; margin-right: 80px; border: 1px solid #dde; }
  .error { background: #ffe1e1; border: 1px solid #e99; }
  .meta { font-size: 12px; color: #667; margin-top: 6px; }
  .assistant .content { white-space: normal; }
  .assistant .content p { margin: 0 0 8px; }
  .assistant .content pre { background: #f0f2f5; padding: 8px; border-radius: 6px; overflow-x: auto; white-space: pre; }
  .assistant .content code { font-family: ui-monospace, monospace; font-size: 13px; }
  #context { font-size: 13px; opacity: 0.85; }
  form { position: fixed; bottom: 0; left: 0; right: 0; background: #fff; border-top: 1px solid #ccd; padding: 12px; display: flex; gap: 8px; justify-content: center; }
  textarea { width: min(720px, 70vw); height: 52px; font: inherit; padding: 6px; }
  button { padding: 0 18px; font: inherit; }
</style>
</head>
<body>
<header>
  <h1>Pagoda playground</h1>
  <label>Model <input id="model" size="22"></label>
  <label>API key <input id="apikey" type="password" size="16" placeholder="(none)"></label>
  <label>Max tokens <input id="maxtokens" type="number" value="128" min="1" style="width:64px"></label>
  <label>Temperature <input id="temperature" type="number" value="0.7" step="0.1" min="0" max="2" style="width:56px"></label>
  <label>Top-p <input id="topp" type="number" value="1" step="0.05" min="0" max="1" style="width:56px"></label>
  <label>Top-k <input id="topk" type="number" value="0" min="0" style="width:56px" title="0: off"></label>
  <label>Seed <input id="seed" type="number" min="0" style="width:72px" placeholder="(random)"></label>
  <label>Stop <input id="stop" size="10" placeholder="a,b" title="stop strings, comma-separated"></label>
  <span id="context" title="the model's context length (max_model_len)"></span>
  <label>System <input id="system" size="24" placeholder="(optional system prompt)"></label>
  <button id="clear" type="button">Clear</button>
</header>
<div id="log"></div>
<form id="form">
  <textarea id="input" placeholder="Type a message and press Enter"></textarea>
  <button id="send" type="submit">Send</button>
  <button id="stopbtn" type="button" disabled>Stop</button>
</form>
<script>
"use strict";
const log = document.getElementById("log");
const input = document.getElementById("input");
const history = [];
let busy = false;
let controller = null;  // AbortController of the request in flight: Stop aborts it (the server cancels)

// The model name from /v1/models (again once an API key is typed in).
function loadModel() {
  fetch("/v1/models", { headers: authHeaders() }).then(r => r.json()).then(j => {
    if (j.data && j.data.length) {
      document.getElementById("model").value = j.data[0].id;
      if (j.data[0].max_model_len) document.getElementById("context").textContent = "context " + j.data[0].max_model_len + " tokens";
    }
  }).catch(() => {});
}
loadModel();
document.getElementById("apikey").addEventListener("change", loadModel);

function authHeaders() {
  const key = document.getElementById("apikey").value.trim();
  const h = { "Content-Type": "application/json" };
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

// Markdown of a reply as HTML: the text is escaped first, so only these constructs become
// markup: ``` fenced code ```, `inline code`, **bold**, *italic*, # headings, - / * / 1. lists,
// [links](http(s) URLs only), paragraphs and line breaks.
function escapeHtml(t) {
  return t.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}
function inlineMarkdown(t) {
  const parts = t.split(/(`[^`\n]+`)/);
  return parts.map(p => {
    if (p.length > 1 && p.startsWith("`") && p.endsWith("`")) return "<code>" + p.slice(1, -1) + "</code>";
    return p.replace(/\*\*([^*\n]+)\*\*/g, "<strong>$1</strong>")
            .replace(/(^|[^*])\*([^*\n]+)\*/g, "$1<em>$2</em>")
            .replace(/\[([^\]\n]+)\]\((https?:\/\/[^\s)]+)\)/g, '<a href="$2" target="_blank" rel="noopener">$1</a>');
  }).join("");
}
function renderMarkdown(text) {
  const lines = escapeHtml(text).split("\n");
  const out = [];
  let para = [], list = null, code = null;
  const flushPara = () => { if (para.length) out.push("<p>" + para.map(inlineMarkdown).join("<br>") + "</p>"); para = []; };
  const flushList = () => { if (list) out.push("<" + list.tag + ">" + list.items.map(i => "<li>" + inlineMarkdown(i) + "</li>").join("") + "</" + list.tag + ">"); list = null; };
  for (const line of lines) {
    if (code !== null) {
      if (/^\s*```/.test(line)) { out.push("<pre><code>" + code.join("\n") + "</code></pre>"); code = null; }
      else code.push(line);
      continue;
    }
    let m;
    if (/^\s*```/.test(line)) { flushPara(); flushList(); code = []; }
    else if ((m = line.match(/^(#{1,6})\s+(.*)$/))) { flushPara(); flushList(); out.push("<h" + m[1].length + ">" + inlineMarkdown(m[2]) + "</h" + m[1].length + ">"); }
    else if ((m = line.match(/^\s*[-*]\s+(.*)$/)) || (m = line.match(/^\s*\d+[.)]\s+(.*)$/))) {
      const tag = /^\s*\d/.test(line) ? "ol" : "ul";
      flushPara();
      if (list && list.tag !== tag) flushList();
      if (!list) list = { tag, items: [] };
      list.items.push(m[1]);
    }
    else if (!line.trim()) { flushPara(); flushList(); }
    else { flushList(); para.push(line); }
  }
  if (code !== null) out.push("<pre><code>" + code.join("\n") + "</code></pre>");  // still streaming
  flushPara(); flushList();
  return out.join("");
}

function addMessage(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  div.textContent = text;
  log.appendChild(div);
  window.scrollTo(0, document.body.scrollHeight);
  return div;
}

// Parses SSE events out of a text buffer; returns the unconsumed tail.
function parseEvents(buffer, onData) {
  let idx;
  while ((idx = buffer.search(/\r?\n\r?\n/)) >= 0) {
    const block = buffer.slice(0, idx);
    buffer = buffer.slice(idx).replace(/^\r?\n\r?\n/, "");
    const data = block.split(/\r?\n/).filter(l => l.startsWith("data:")).map(l => l.slice(5).replace(/^ /, "")).join("\n");
    if (data) onData(data);
  }
  return buffer;
}

async function send(text) {
  busy = true;
  document.getElementById("send").disabled = true;
  controller = new AbortController();
  document.getElementById("stopbtn").disabled = false;
  history.push({ role: "user", content: text });
  addMessage("user", text);
  const bubble = addMessage("assistant", "");
  bubble.dataset.state = "streaming";
  const content = document.createElement("span");
  content.className = "content";
  bubble.appendChild(content);
  const meta = document.createElement("div");
  meta.className = "meta";
  bubble.appendChild(meta);
  const messages = [];
  const system = document.getElementById("system").value.trim();
  if (system) messages.push({ role: "system", content: system });
  messages.push(...history);
  const body = {
    model: document.getElementById("model").value || undefined,
    messages,
    stream: true,
    stream_options: { include_usage: true },
    max_tokens: parseInt(document.getElementById("maxtokens").value, 10) || 128,
    temperature: parseFloat(document.getElementById("temperature").value),
    top_p: parseFloat(document.getElementById("topp").value),
    top_k: parseInt(document.getElementById("topk").value, 10) || 0,
  };
  const seed = document.getElementById("seed").value.trim();
  if (seed !== "") body.seed = parseInt(seed, 10);
  const stops = document.getElementById("stop").value.split(",").filter(x => x.length);
  if (stops.length) body.stop = stops;
  const t0 = performance.now();
  let tFirst = 0, tokens = 0, reply = "", finish = "";
  try {
    const resp = await fetch("/v1/chat/completions", { method: "POST", headers: authHeaders(), body: JSON.stringify(body),
                                                       signal: controller.signal });
    if (!resp.ok) {
      const err = await resp.json().catch(() => ({}));
      throw new Error((err.error && err.error.message) || ("HTTP " + resp.status));
    }
    const reader = resp.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer = parseEvents(buffer + decoder.decode(value, { stream: true }), data => {
        if (data === "[DONE]") return;
        const j = JSON.parse(data);
        if (j.error) throw new Error(j.error.message);
        if (j.usage) tokens = j.usage.completion_tokens;
        for (const c of j.choices || []) {
          if (c.delta && c.delta.content) {
            if (!tFirst) tFirst = performance.now();
            reply += c.delta.content;
            content.dataset.raw = reply;
            content.innerHTML = renderMarkdown(reply);
          }
          if (c.finish_reason) finish = c.finish_reason;
        }
        window.scrollTo(0, document.body.scrollHeight);
      });
    }
    const t1 = performance.now();
    const rate = tokens > 1 && tFirst ? (tokens - 1) / ((t1 - tFirst) / 1000) : 0;
    meta.textContent = `${tokens} tokens · first token ${((tFirst || t1) - t0).toFixed(0)} ms · ${rate.toFixed(1)} tokens/s · finish ${finish}`;
    history.push({ role: "assistant", content: reply });
    bubble.dataset.state = "done";
  } catch (e) {
    if (e.name === "AbortError") {
      // Stop: the connection is closed, so the server cancels the request; the partial reply stays.
      meta.textContent = `stopped after ${reply.length} characters`;
      history.push({ role: "assistant", content: reply });
      bubble.dataset.state = "stopped";
      return;
    }
    bubble.className = "msg error";
    content.textContent = "Error: " + e.message;
    bubble.dataset.state = "error";
    history.pop();
  } finally {
    busy = false;
    controller = null;
    document.getElementById("send").disabled = false;
    document.getElementById("stopbtn").disabled = true;
  }
}

document.getElementById("form").addEventListener("submit", ev => {
  ev.preventDefault();
  const text = input.value.trim();
  if (!text || busy) return;
  input.value = "";
  send(text);
});
input.addEventListener("keydown", ev => {
  if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); document.getElementById("form").requestSubmit(); }
});
document.getElementById("stopbtn").addEventListener("click", () => { if (controller) controller.abort(); });
document.getElementById("clear").addEventListener("click", () => { history.length = 0; log.textContent = ""; });
</script>
</body>
</html>
)PAGODA_HTML";
}  // namespace

const std::string& playground_html() {
  static const std::string html(kHtml);
  return html;
}

}  // namespace pagoda::server
