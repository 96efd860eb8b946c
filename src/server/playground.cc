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
  <label>System <input id="system" size="24" placeholder="(optional system prompt)"></label>
  <button id="clear" type="button">Clear</button>
</header>
<div id="log"></div>
<form id="form">
  <textarea id="input" placeholder="Type a message and press Enter"></textarea>
  <button id="send" type="submit">Send</button>
</form>
<script>
"use strict";
const log = document.getElementById("log");
const input = document.getElementById("input");
const history = [];
let busy = false;

// The model name from /v1/models (again once an API key is typed in).
function loadModel() {
  fetch("/v1/models", { headers: authHeaders() }).then(r => r.json()).then(j => {
    if (j.data && j.data.length) document.getElementById("model").value = j.data[0].id;
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
  };
  const t0 = performance.now();
  let tFirst = 0, tokens = 0, reply = "", finish = "";
  try {
    const resp = await fetch("/v1/chat/completions", { method: "POST", headers: authHeaders(), body: JSON.stringify(body) });
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
            content.textContent = reply;
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
    bubble.className = "msg error";
    content.textContent = "Error: " + e.message;
    bubble.dataset.state = "error";
    history.pop();
  } finally {
    busy = false;
    document.getElementById("send").disabled = false;
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
