// The web chat page. The chat is the one the browser's cookie proves (the
// server sets it, HttpOnly); everything from the server is shown as text.
'use strict';

const log = document.getElementById('log');
const status = document.getElementById('status');
const form = document.getElementById('form');
const input = document.getElementById('text');
let ws;

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
    else if (m.type === 'reply') add(m.text, 'bot');
    else if (m.type === 'error') add(m.error, 'err');
    else if (m.type === 'approval') showApproval(m);
    else if (m.type === 'approval_settled') settleApproval(m);
  };
}

// An approval question: its text, and one button per choice; a press sends the
// button's data, and the server answers with how it was decided.
function showApproval(m) {
  const div = document.createElement('div');
  div.className = 'msg bot approval';
  div.dataset.approval = m.id;
  const text = document.createElement('div');
  text.textContent = m.text;
  div.appendChild(text);
  const row = document.createElement('div');
  for (const [data, label] of m.buttons) {
    const button = document.createElement('button');
    button.type = 'button';
    button.textContent = label;
    button.onclick = () => ws.readyState === WebSocket.OPEN && ws.send(JSON.stringify({press: data}));
    row.appendChild(button);
  }
  div.appendChild(row);
  log.appendChild(div);
  log.scrollTop = log.scrollHeight;
}

function settleApproval(m) {
  for (const div of log.querySelectorAll('.approval')) {
    if (div.dataset.approval === m.id) div.textContent = m.text;
  }
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
