// wick's chat page: conversations in local storage, answers streamed from
// /v1/chat/completions, Markdown rendered with marked (raw HTML escaped) and then
// sanitized with DOMPurify: model output is untrusted and never becomes markup of its own.
'use strict';

const KEYS = { conversations: 'wick.conversations', settings: 'wick.settings', apiKey: 'wick.apiKey' };
const DEFAULTS = { model: '', system: '', temperature: 0.7, max_tokens: 512, extra: '' };
const $ = (id) => document.getElementById(id);

function load(key, fallback) {
  try {
    const value = JSON.parse(localStorage.getItem(key));
    return value ?? fallback;
  } catch {
    return fallback;
  }
}

const state = {
  conversations: load(KEYS.conversations, []),
  settings: { ...DEFAULTS, ...load(KEYS.settings, {}) },
  apiKey: localStorage.getItem(KEYS.apiKey) || '',
  current: null,
  controller: null,
};

function saveConversations() {
  try {
    localStorage.setItem(KEYS.conversations, JSON.stringify(state.conversations));
  } catch (error) {
    // Images can outgrow the browser's storage: the conversation stays on the page.
    showStatus(`The conversation is not saved in this browser (${error.name}): its images are too large`);
  }
}

function escapeHtml(text) {
  return text.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
}

// HTML inside Markdown is shown as the text it is; the sanitizer is a second wall.
marked.use({ gfm: true, renderer: { html({ text }) { return escapeHtml(text); } } });

function renderMarkdown(element, text) {
  element.innerHTML = DOMPurify.sanitize(marked.parse(text), { FORBID_TAGS: ['style', 'img', 'form'] });
}

function headers() {
  const h = { 'Content-Type': 'application/json' };
  if (state.apiKey) h.Authorization = `Bearer ${state.apiKey}`;
  return h;
}

function showStatus(text) {
  const status = $('status');
  status.textContent = text;
  status.hidden = !text;
}

async function loadModels() {
  const response = await fetch('/v1/models', { headers: headers() });
  if (response.status === 401) {
    showStatus('This server needs an API key: enter it under Settings.');
    $('settings').open = true;
    $('api-key').focus();
    return;
  }
  const models = (await response.json()).data || [];
  const select = $('model');
  select.replaceChildren(...models.map((m) => new Option(m.id, m.id)));
  if (models.some((m) => m.id === state.settings.model)) select.value = state.settings.model;
  showStatus('');
}

function newConversation() {
  const conversation = { id: `${Date.now()}-${Math.random().toString(16).slice(2)}`, title: 'New chat', messages: [] };
  state.conversations.unshift(conversation);
  state.current = conversation;
  return conversation;
}

function renderList() {
  const list = $('conversations');
  list.replaceChildren(...state.conversations.map((c) => {
    const item = document.createElement('li');
    item.dataset.id = c.id;
    item.classList.toggle('current', c === state.current);
    const title = document.createElement('span');
    title.className = 'title';
    title.textContent = c.title;
    title.title = c.title;
    title.addEventListener('click', () => { state.current = c; renderAll(); });
    const remove = document.createElement('button');
    remove.className = 'delete';
    remove.type = 'button';
    remove.title = 'Delete this conversation';
    remove.textContent = '×';
    remove.addEventListener('click', () => {
      state.conversations = state.conversations.filter((x) => x !== c);
      if (state.current === c) state.current = state.conversations[0] || null;
      saveConversations();
      renderAll();
    });
    item.append(title, remove);
    return item;
  }));
}

// A thumbnail of an image the user attached (a data URL of an image type, made by this page).
function thumbnail(url) {
  const image = document.createElement('img');
  image.className = 'thumb';
  image.alt = 'attached image';
  if (/^data:image\/[a-z0-9.+-]+;base64,/i.test(url)) image.src = url;
  return image;
}

function messageElement(message) {
  const element = document.createElement('div');
  element.className = `msg ${message.role}`;
  if (message.role === 'user') {
    element.textContent = message.content;
    for (const url of message.images || []) element.append(thumbnail(url));
    return element;
  }
  if (message.reasoning) {
    const details = document.createElement('details');
    details.className = 'reasoning';
    const summary = document.createElement('summary');
    summary.textContent = 'Reasoning';
    const text = document.createElement('div');
    text.className = 'text';
    text.textContent = message.reasoning;
    details.append(summary, text);
    element.append(details);
  }
  const content = document.createElement('div');
  content.className = 'content';
  renderMarkdown(content, message.content);
  element.append(content);
  for (const call of message.tool_calls || []) {
    const box = document.createElement('div');
    box.className = 'tool-call';
    const name = document.createElement('div');
    name.className = 'name';
    name.textContent = `Tool call: ${call.name}`;
    const args = document.createElement('pre');
    try {
      args.textContent = JSON.stringify(JSON.parse(call.arguments), null, 2);
    } catch {
      args.textContent = call.arguments;
    }
    box.append(name, args);
    element.append(box);
  }
  const stats = document.createElement('div');
  stats.className = 'stats';
  stats.textContent = statsText(message);
  element.append(stats);
  return element;
}

function statsText(message) {
  const parts = [];
  const s = message.stats;
  if (s) {
    if (s.ttft_ms != null) parts.push(`first token ${Math.round(s.ttft_ms)} ms`);
    if (s.tokens_per_second != null) parts.push(`${s.tokens_per_second.toFixed(1)} tokens/s`);
    if (s.cached_tokens != null) parts.push(`${s.cached_tokens} cached prompt tokens`);
  }
  if (message.stopped) parts.push('stopped');
  if (message.error) parts.push(`error: ${message.error}`);
  return parts.join(' · ');
}

function renderMessages() {
  const messages = state.current ? state.current.messages : [];
  $('messages').replaceChildren(...messages.map(messageElement));
  $('messages').scrollTop = $('messages').scrollHeight;
}

function renderAll() {
  renderList();
  renderMessages();
}

function readSettings() {
  const s = state.settings;
  s.model = $('model').value;
  s.system = $('system').value;
  s.temperature = Number($('temperature').value);
  s.max_tokens = Number($('max-tokens').value);
  s.extra = $('extra').value;
  localStorage.setItem(KEYS.settings, JSON.stringify(s));
  state.apiKey = $('api-key').value;
  localStorage.setItem(KEYS.apiKey, state.apiKey);
}

function requestBody(conversation) {
  const s = state.settings;
  let extra = {};
  if (s.extra.trim()) {
    extra = JSON.parse(s.extra); // checked when the setting changes
  }
  const messages = [];
  if (s.system.trim()) messages.push({ role: 'system', content: s.system });
  for (const m of conversation.messages.slice(0, -1)) {
    if (m.role === 'assistant') {
      const turn = { role: 'assistant', content: m.content };
      if (m.tool_calls && m.tool_calls.length) {
        turn.tool_calls = m.tool_calls.map((c, i) => ({ id: c.id || `call_${i}`, type: 'function', function: { name: c.name, arguments: c.arguments } }));
      }
      messages.push(turn);
    } else if (m.images && m.images.length) {
      // OpenAI's content parts: the text, then each image as a data URL.
      const content = [{ type: 'text', text: m.content }];
      for (const url of m.images) content.push({ type: 'image_url', image_url: { url } });
      messages.push({ role: m.role, content });
    } else {
      messages.push({ role: m.role, content: m.content });
    }
  }
  return {
    ...extra,
    model: s.model || undefined,
    messages,
    temperature: s.temperature,
    max_tokens: s.max_tokens,
    stream: true,
    stream_options: { include_usage: true },
  };
}

// Each server-sent event's data lines, as they complete.
async function* events(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, '');
      const data = event.split(/\r?\n/).filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart()).join('\n');
      if (data) yield data;
    }
  }
}

function setBusy(busy) {
  $('send').hidden = busy;
  $('stop').hidden = !busy;
  $('messages').dataset.busy = busy ? 'true' : 'false';
}

// Images waiting for the next message, as data URLs.
const attached = [];

function renderAttached() {
  const box = $('attached');
  box.replaceChildren();
  attached.forEach((url, i) => {
    const figure = document.createElement('figure');
    const remove = document.createElement('button');
    remove.type = 'button';
    remove.textContent = '×';
    remove.title = 'Remove this image';
    remove.addEventListener('click', () => { attached.splice(i, 1); renderAttached(); });
    figure.append(thumbnail(url), remove);
    box.append(figure);
  });
  box.hidden = attached.length === 0;
}

// Reads image files (from the picker or a drop) into the next message's attachments.
function attach(files) {
  for (const file of files) {
    if (!file.type.startsWith('image/')) {
      showStatus(`${file.name} is not an image`);
      continue;
    }
    const reader = new FileReader();
    reader.onload = () => { attached.push(reader.result); renderAttached(); };
    reader.onerror = () => showStatus(`Cannot read ${file.name}`);
    reader.readAsDataURL(file);
  }
}

async function send(text) {
  const conversation = state.current || newConversation();
  if (conversation.messages.length === 0) conversation.title = text.slice(0, 60);
  const user = { role: 'user', content: text };
  if (attached.length) user.images = attached.splice(0);
  renderAttached();
  conversation.messages.push(user);
  const answer = { role: 'assistant', content: '', reasoning: '', tool_calls: [] };
  conversation.messages.push(answer);
  saveConversations();
  renderAll();
  const element = () => $('messages').lastElementChild;
  let pending = false;
  let finished = false;
  const update = () => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      // The final render below draws the finished answer; a frame queued before it must not
      // replace that again.
      if (!finished && state.current === conversation) element().replaceWith(messageElement(answer));
    });
  };
  const controller = new AbortController();
  state.controller = controller;
  setBusy(true);
  const started = performance.now();
  let first = null;
  let usage = null;
  try {
    const response = await fetch('/v1/chat/completions', {
      method: 'POST', headers: headers(), body: JSON.stringify(requestBody(conversation)), signal: controller.signal,
    });
    if (!response.ok) {
      const body = await response.json().catch(() => ({}));
      throw new Error((body.error && body.error.message) || `${response.status} ${response.statusText}`);
    }
    for await (const data of events(response)) {
      if (data === '[DONE]') break;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(chunk.error.message || 'the server failed');
      if (chunk.usage) usage = chunk.usage;
      const delta = chunk.choices && chunk.choices[0] && chunk.choices[0].delta;
      if (!delta) continue;
      if (delta.content || delta.reasoning_content || delta.tool_calls) first ??= performance.now();
      if (delta.content) answer.content += delta.content;
      if (delta.reasoning_content) answer.reasoning += delta.reasoning_content;
      for (const call of delta.tool_calls || []) {
        const slot = (answer.tool_calls[call.index ?? 0] ??= { id: '', name: '', arguments: '' });
        if (call.id) slot.id = call.id;
        if (call.function && call.function.name) slot.name += call.function.name;
        if (call.function && call.function.arguments) slot.arguments += call.function.arguments;
      }
      update();
    }
  } catch (error) {
    if (error.name === 'AbortError') answer.stopped = true;
    else answer.error = error.message;
  } finally {
    const ended = performance.now();
    answer.stats = {
      ttft_ms: first == null ? null : first - started,
      tokens_per_second: usage && first != null && usage.completion_tokens > 1 && ended > first
        ? (usage.completion_tokens - 1) * 1000 / (ended - first) : null,
      cached_tokens: usage && usage.prompt_tokens_details ? usage.prompt_tokens_details.cached_tokens : null,
    };
    finished = true;
    state.controller = null;
    saveConversations();
    if (state.current === conversation) renderMessages();
    // Idle only once the finished answer is drawn.
    setBusy(false);
  }
}

function init() {
  const s = state.settings;
  $('system').value = s.system;
  $('temperature').value = s.temperature;
  $('max-tokens').value = s.max_tokens;
  $('extra').value = s.extra;
  $('api-key').value = state.apiKey;
  for (const id of ['model', 'system', 'temperature', 'max-tokens', 'api-key']) {
    $(id).addEventListener('change', () => {
      readSettings();
      if (id === 'api-key') loadModels();
    });
  }
  $('extra').addEventListener('change', () => {
    const error = $('settings-error');
    try {
      const value = $('extra').value.trim() ? JSON.parse($('extra').value) : {};
      if (typeof value !== 'object' || Array.isArray(value) || value === null) throw new Error('an object is needed');
      error.hidden = true;
      readSettings();
    } catch (e) {
      error.textContent = `Extra request fields: ${e.message}`;
      error.hidden = false;
    }
  });
  $('new-chat').addEventListener('click', () => {
    state.current = null;
    renderAll();
    $('input').focus();
  });
  $('composer').addEventListener('submit', (event) => {
    event.preventDefault();
    const text = $('input').value.trim();
    if (!text || state.controller) return;
    $('input').value = '';
    send(text);
  });
  $('input').addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && !event.shiftKey) {
      event.preventDefault();
      $('composer').requestSubmit();
    }
  });
  $('stop').addEventListener('click', () => state.controller && state.controller.abort());
  $('attach').addEventListener('change', (event) => { attach(event.target.files); event.target.value = ''; });
  const main = document.querySelector('main');
  main.addEventListener('dragover', (event) => { event.preventDefault(); main.classList.add('dropping'); });
  main.addEventListener('dragleave', () => main.classList.remove('dropping'));
  main.addEventListener('drop', (event) => {
    event.preventDefault();
    main.classList.remove('dropping');
    attach(event.dataTransfer.files);
  });
  state.current = state.conversations[0] || null;
  renderAll();
  setBusy(false);
  loadModels().catch((e) => showStatus(`Cannot reach the server: ${e.message}`));
}

init();
