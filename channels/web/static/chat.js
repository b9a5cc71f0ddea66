// The web chat page. The chat is the one the browser's cookie proves (the server
// sets it, HttpOnly). Each message gets an id here; it shows "sending…" until the
// server says it holds it durably ("ack"), and is sent again, with the same id,
// after a reconnect until then (docs/decisions/web-05). A lost connection is shown
// and retried with backoff.
'use strict';

import {Composer} from './composer.js';
import {ChatView} from './view.js';

const $ = (id) => document.getElementById(id);
const status = $('status');
const banner = $('banner');
const bannerText = $('banner-text');
const OUTBOX = 'gateway-chat-outbox';
const DELAYS = [500, 1000, 2000, 4000, 8000];

const view = new ChatView($('log'), {retry: (id) => retry(id), press: (data) => press(data)});
const composer = new Composer(
  {form: $('composer'), text: $('text'), file: $('file'), attach: $('attach'), list: $('attachments'), notice: $('notice')},
  {send: (text, files) => submit(text, files)},
);

// Messages not yet acknowledged, oldest first: {id, text, files, state, tries}.
const outbox = new Map();
// The outbound ids of the answers shown: one the gateway sends again after a restart shows once.
const shown = new Set();
let socket = null;
let live = false;
let attempt = 0;
let timer = 0;

function newId() {
  const bytes = crypto.getRandomValues(new Uint8Array(12));
  return 'm-' + Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

/** Keep unacknowledged messages over a reload of this tab (files too, when they fit). */
function save() {
  const pending = [...outbox.values()].filter((m) => m.state === 'sending');
  for (const kept of [pending, pending.map((m) => ({...m, files: []}))]) {
    try {
      sessionStorage.setItem(OUTBOX, JSON.stringify(kept));
      return;
    } catch (err) {
      // Over the storage quota: keep the texts without their files.
    }
  }
}

function restore() {
  try {
    for (const m of JSON.parse(sessionStorage.getItem(OUTBOX) || '[]')) {
      outbox.set(m.id, {...m, tries: Math.max(1, m.tries || 0)});
    }
  } catch (err) {
    sessionStorage.removeItem(OUTBOX);
  }
}

function setStatus(state, text) {
  status.dataset.state = state;
  status.textContent = text;
}

function transmit(message) {
  if (!live || message.state !== 'sending') return;
  socket.send(JSON.stringify({
    type: 'message',
    id: message.id,
    text: message.text,
    files: message.files.map(({name, type, data}) => ({name, type, data})),
    resend: message.tries > 0,
  }));
  message.tries += 1;
}

function submit(text, files) {
  const message = {id: newId(), text, files, state: 'sending', tries: 0};
  outbox.set(message.id, message);
  save();
  view.user({id: message.id, text, files: files.map((f) => ({...f, url: f.preview})), state: 'sending'});
  transmit(message);
}

function press(data) {
  if (!live) {
    composer.notice('Not connected: press the button again once the chat is back.');
    return;
  }
  socket.send(JSON.stringify({press: data}));
}

function retry(id) {
  const message = outbox.get(id);
  if (!message) return;
  message.state = 'sending';
  view.mark(id, 'sending');
  save();
  transmit(message);
}

function settle(id, state, why) {
  const message = outbox.get(id);
  view.mark(id, state, why);
  if (!message) return;
  if (state === 'sent') outbox.delete(id);
  else message.state = state;
  save();
}

/** After the conversation is redrawn, messages still in hand show at its end. */
function showOutbox() {
  for (const message of outbox.values()) {
    if (view.has(message.id)) view.mark(message.id, message.state);
    else view.user({id: message.id, text: message.text, files: message.files, state: message.state});
  }
}

const handlers = {
  hello(frame) {
    live = true;
    attempt = 0;
    banner.hidden = true;
    setStatus('live', 'connected');
    status.title = `web:${frame.chat}`;
    composer.limits(frame.limits || {});
    for (const message of outbox.values()) transmit(message);
  },
  history(frame) {
    for (const item of frame.items || []) if (item.id && item.role === 'bot') shown.add(item.id);
    view.replace(frame.items || [], frame.more);
    showOutbox();
  },
  ack(frame) { settle(frame.id, 'sent'); },
  failed(frame) { settle(frame.id, 'failed', frame.error); },
  user(frame) { if (!view.has(frame.id)) view.user({...frame, state: 'sent'}); },
  typing() { view.typing(); },
  draft(frame) { view.draft(frame.html); },
  tool(frame) { view.tool(frame); },
  reply(frame) {
    if (frame.id && shown.has(frame.id)) return;
    if (frame.id) shown.add(frame.id);
    view.bot(frame.html, Boolean(frame.apart));
  },
  approval(frame) { view.approval(frame); },
  approval_settled(frame) { view.settle(frame.id, frame.text); },
  end() { view.end(); },
  error(frame) { view.error(frame.error); },
};

function connect() {
  clearTimeout(timer);
  if (socket) return;
  setStatus('connecting', 'connecting…');
  const ws = new WebSocket((location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/ws');
  socket = ws;
  ws.onmessage = (ev) => {
    const frame = JSON.parse(ev.data);
    const handle = handlers[frame.type];
    if (handle && socket === ws) handle(frame);
  };
  ws.onclose = () => {
    if (socket !== ws) return;
    socket = null;
    live = false;
    view.end();
    disconnected();
  };
}

/** Show the lost connection and count down to the next try; the button tries now. */
function disconnected() {
  const delay = DELAYS[Math.min(attempt, DELAYS.length - 1)] * (0.8 + Math.random() * 0.4);
  attempt += 1;
  const due = Date.now() + delay;
  setStatus('disconnected', 'disconnected');
  banner.hidden = false;
  const tick = () => {
    const left = Math.ceil((due - Date.now()) / 1000);
    if (left <= 0) {
      bannerText.textContent = 'Disconnected. Reconnecting…';
      connect();
      return;
    }
    bannerText.textContent = `Disconnected. Reconnecting in ${left} s…`;
    timer = setTimeout(tick, Math.min(1000, due - Date.now()));
  };
  tick();
}

$('retry').addEventListener('click', () => connect());
$('new-chat').addEventListener('click', () => submit('/new', []));
window.addEventListener('online', () => { if (!socket) connect(); });

restore();
connect();
