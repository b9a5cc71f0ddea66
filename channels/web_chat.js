// The web chat page. The chat is the one the browser's cookie proves (the
// server sets it, HttpOnly); everything from the server is shown as text.
'use strict';

const log = document.getElementById('log');
const status = document.getElementById('status');
const form = document.getElementById('form');
const input = document.getElementById('text');
let ws;
// Reply ids already shown: a reply the gateway sends again after a restart shows once.
const shown = new Set();

function add(text, cls) {
  const div = document.createElement('div');
  div.className = 'msg ' + cls;
  div.textContent = text;
  log.appendChild(div);
  log.scrollTop = log.scrollHeight;
}

function connect() {
  ws = new WebSocket((location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/ws');
  ws.onclose = () => {
    status.textContent = '· reconnecting…';
    setTimeout(connect, 1000);
  };
  ws.onmessage = (ev) => {
    const m = JSON.parse(ev.data);
    if (m.type === 'hello') status.textContent = '· web:' + m.chat;
    else if (m.type === 'reply') {
      if (m.id && shown.has(m.id)) return;
      if (m.id) shown.add(m.id);
      add(m.text, 'bot');
    }
    else if (m.type === 'error') add(m.error, 'err');
  };
}

form.onsubmit = (ev) => {
  ev.preventDefault();
  const text = input.value.trim();
  if (!text || ws.readyState !== WebSocket.OPEN) return;
  ws.send(JSON.stringify({text}));
  add(text, 'me');
  input.value = '';
};

connect();
