// The chat page's logic. The conversation, the settings and the API key
// live in this browser's localStorage; each reply streams from
// /v1/chat/completions as server-sent events read with fetch. Model text is
// only ever put into text nodes, never parsed as HTML.
"use strict";

const STORE = { chat: "tandem.chat", settings: "tandem.settings", key: "tandem.apiKey" };
const $ = (id) => document.getElementById(id);

const state = {
  messages: [], // {role: "user"|"assistant", content, stats?, error?}
  controller: null, // the running reply's AbortController
};

function load(name, fallback) {
  try {
    const v = JSON.parse(localStorage.getItem(name));
    return v === null ? fallback : v;
  } catch (e) {
    return fallback;
  }
}

function store(name, value) {
  try {
    localStorage.setItem(name, typeof value === "string" ? value : JSON.stringify(value));
  } catch (e) {
    // Storage full or turned off: the page works, it just forgets.
  }
}

function apiKey() {
  return $("api-key").value.trim();
}

function storedKey() {
  try {
    return localStorage.getItem(STORE.key) || "";
  } catch (e) {
    return "";
  }
}

// What was stored, kept only where it has the shape this page writes (an
// older page or another app on this origin may have left anything there).
function loadChat() {
  const saved = load(STORE.chat, []);
  if (!Array.isArray(saved)) return [];
  return saved.filter((m) => m && (m.role === "user" || m.role === "assistant") &&
    typeof m.content === "string" && (m.content !== "" || typeof m.error === "string"));
}

function saveChat() {
  store(STORE.chat, state.messages.map((m) => {
    const out = { role: m.role, content: m.content };
    if (m.stats) out.stats = m.stats;
    if (m.error) out.error = m.error;
    return out;
  }));
}

function readSettings() {
  const s = { system: $("system").value };
  const t = parseFloat($("temperature").value);
  if (Number.isFinite(t)) s.temperature = Math.min(2, Math.max(0, t));
  const n = parseInt($("max-tokens").value, 10);
  if (Number.isFinite(n) && n >= 1) s.max_tokens = n;
  return s;
}

function showSettings(settings) {
  if (typeof settings.system === "string") $("system").value = settings.system;
  if (typeof settings.temperature === "number") $("temperature").value = settings.temperature;
  if (typeof settings.max_tokens === "number") $("max-tokens").value = settings.max_tokens;
  $("api-key").value = storedKey();
}

function openSettings(open) {
  $("settings").hidden = !open;
  $("toggle-settings").setAttribute("aria-expanded", String(open));
}

function notice(text) {
  $("notice").textContent = text || "";
  $("notice").hidden = !text;
}

function keyNotice(hadKey) {
  notice(hadKey ? "The server refused this API key. Check it under Settings \u2192 API key, then send again."
                : "This server needs an API key. Enter it under Settings \u2192 API key, then send again.");
  openSettings(true);
  $("api-key").focus();
}

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = apiKey();
  if (key) h.Authorization = "Bearer " + key;
  return h;
}

// One message's view: its text, and under a reply its speed or its error.
function view(m) {
  const wrap = document.createElement("div");
  wrap.className = "msg " + m.role;
  const text = document.createElement("div");
  text.className = "bubble";
  text.textContent = m.content;
  const stats = document.createElement("div");
  stats.className = "stats";
  wrap.append(text, stats);
  showStats(wrap, m);
  return wrap;
}

function showStats(wrap, m) {
  const stats = wrap.querySelector(".stats");
  stats.textContent = m.error ? "Error: " + m.error : m.stats || "";
  stats.classList.toggle("error", Boolean(m.error));
  stats.hidden = !stats.textContent;
  wrap.classList.toggle("failed", Boolean(m.error));
}

function render() {
  const box = $("messages");
  box.replaceChildren();
  if (state.messages.length === 0) {
    const empty = document.createElement("p");
    empty.className = "empty";
    empty.textContent = "Send a message to start a conversation. It stays in this browser until you start a new chat.";
    box.append(empty);
  }
  for (const m of state.messages) box.append(view(m));
  box.scrollTop = box.scrollHeight;
}

function append(m) {
  const box = $("messages");
  box.querySelector(".empty")?.remove();
  const v = view(m);
  box.append(v);
  box.scrollTop = box.scrollHeight;
  return v;
}

function busy(on) {
  $("send").hidden = on;
  $("stop").hidden = !on;
}

// The messages sent for the next reply: the system prompt, then the turns
// that have text (a reply that failed or was stopped before a word is left
// out).
function history(settings, upTo) {
  const out = [];
  if (settings.system.trim()) out.push({ role: "system", content: settings.system });
  for (const m of state.messages.slice(0, upTo)) {
    if (m.content && !(m.role === "assistant" && m.error)) out.push({ role: m.role, content: m.content });
  }
  return out;
}

async function errorText(res) {
  try {
    const body = await res.json();
    const e = body.error;
    return (e && (e.message || e)) || JSON.stringify(body);
  } catch (e) {
    return res.statusText || "no details";
  }
}

// Reads server-sent events from a fetch body, calling onData with each
// event's parsed JSON. Returns true at "data: [DONE]".
async function readEvents(body, onData) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return false;
    buf += decoder.decode(value, { stream: true }).replace(/\r\n/g, "\n");
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      const data = block.split("\n").filter((l) => l.startsWith("data:"))
        .map((l) => l.slice(5).replace(/^ /, "")).join("\n");
      if (!data) continue;
      if (data === "[DONE]") return true;
      onData(JSON.parse(data));
    }
  }
}

// tok/s: from the server's generation time when it sends one (its first
// token to its last), else from when the pieces arrived here.
function statsText(t) {
  const n = t.usage && Number.isFinite(t.usage.completion_tokens) ? t.usage.completion_tokens : t.pieces;
  let rate = null;
  const ms = t.timings && t.timings.predicted_ms;
  if (ms > 0 && n > 1) rate = ((n - 1) * 1000) / ms;
  else if (t.last > t.first && t.pieces > 1) rate = ((t.pieces - 1) * 1000) / (t.last - t.first);
  const parts = [n + (n === 1 ? " token" : " tokens")];
  if (rate !== null) parts.push(rate.toFixed(1) + " tok/s");
  if (t.stopped) parts.push("stopped");
  else if (t.finish === "length") parts.push("cut at max tokens");
  return parts.join(" \u00b7 ");
}

async function send(text) {
  if (state.controller) return;
  const settings = readSettings();
  const user = { role: "user", content: text };
  const reply = { role: "assistant", content: "" };
  state.messages.push(user);
  const messages = history(settings, state.messages.length);
  state.messages.push(reply);
  saveChat();
  append(user);
  const v = append(reply);
  v.classList.add("pending");
  const bubble = v.querySelector(".bubble");
  const controller = new AbortController();
  state.controller = controller;
  busy(true);
  const body = { messages, stream: true, stream_options: { include_usage: true } };
  if (settings.temperature !== undefined) body.temperature = settings.temperature;
  if (settings.max_tokens !== undefined) body.max_tokens = settings.max_tokens;
  const t = { pieces: 0, first: 0, last: 0, usage: null, timings: null, finish: null, stopped: false };
  try {
    const res = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers(), body: JSON.stringify(body), signal: controller.signal,
    });
    if (!res.ok) {
      const why = await errorText(res);
      // Nothing was answered: the message goes back into the box, to send
      // again once the key (or whatever was wrong) is fixed.
      const at = state.messages.indexOf(user);
      if (at >= 0) state.messages.splice(at, 2);
      render();
      if (!$("input").value) $("input").value = text;
      if (res.status === 401) keyNotice(Boolean(apiKey()));
      else notice("The server answered " + res.status + ": " + why);
      return;
    }
    notice("");
    await readEvents(res.body, (ev) => {
      if (ev.error) throw new Error(ev.error.message || JSON.stringify(ev.error));
      const choice = ev.choices && ev.choices[0];
      const piece = choice && choice.delta && choice.delta.content;
      if (piece) {
        const now = performance.now();
        if (!t.pieces) t.first = now;
        t.last = now;
        t.pieces += 1;
        reply.content += piece;
        const box = $("messages");
        const atEnd = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
        bubble.append(piece); // a text node: never markup
        if (atEnd) box.scrollTop = box.scrollHeight;
      }
      if (choice && choice.finish_reason) t.finish = choice.finish_reason;
      if (ev.usage) t.usage = ev.usage;
      if (ev.timings) t.timings = ev.timings;
    });
  } catch (e) {
    if (e.name === "AbortError") t.stopped = true;
    else reply.error = String(e.message || e);
  } finally {
    if (state.controller === controller) state.controller = null;
    busy(Boolean(state.controller));
    v.classList.remove("pending");
    const at = state.messages.indexOf(reply); // -1: a new chat, or nothing answered
    if (at >= 0 && !reply.content && !reply.error && t.stopped) {
      // Stopped before a word: nothing to keep.
      state.messages.splice(at, 1);
      v.remove();
    } else if (at >= 0) {
      if (!reply.error) reply.stats = statsText(t);
      showStats(v, reply);
    }
    saveChat();
  }
}

async function showModel() {
  try {
    const res = await fetch("/v1/models", { headers: headers() });
    if (res.status === 401) {
      keyNotice(Boolean(apiKey()));
      return;
    }
    if (!res.ok) return;
    const body = await res.json();
    const id = body.data && body.data[0] && body.data[0].id;
    $("model").textContent = id || "";
    notice("");
  } catch (e) {
    // The server is down or still loading: sending will say so.
  }
}

function start() {
  state.messages = loadChat();
  showSettings(load(STORE.settings, {}));
  render();
  for (const id of ["system", "temperature", "max-tokens"]) {
    $(id).addEventListener("input", () => store(STORE.settings, readSettings()));
  }
  $("api-key").addEventListener("input", () => store(STORE.key, apiKey()));
  $("api-key").addEventListener("change", showModel);
  $("toggle-settings").addEventListener("click", () => openSettings($("settings").hidden));
  $("new-chat").addEventListener("click", () => {
    if (state.controller) state.controller.abort();
    state.messages = [];
    saveChat();
    render();
    notice("");
    $("input").focus();
  });
  $("stop").addEventListener("click", () => {
    if (state.controller) state.controller.abort();
  });
  $("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    const text = $("input").value.trim();
    if (!text || state.controller) return;
    $("input").value = "";
    send(text);
  });
  $("input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      $("composer").requestSubmit();
    }
  });
  showModel();
  $("input").focus();
}

start();
