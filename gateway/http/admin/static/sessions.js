// The session browser: sessions by kind and activity a page at a time; one session's
// transcript (tool calls and results collapsed) with its live tail, its stop button
// and its send policy.
'use strict';

import {ApiFailure, call, key, stream, withQuery} from './api.js';
import {byId, clear, el, when} from './dom.js';

const PAGE = 20;

/** A rendered prompt's YAML wake header and its body (no header: all body). */
function splitWake(text) {
  if (!text.startsWith('---\n')) return ['', text];
  const end = text.indexOf('\n---', 4);
  if (end < 0) return ['', text];
  return [text.slice(4, end), text.slice(end + 4).replace(/^\n/, '')];
}

function part(p) {
  if (p.type === 'text') {
    const [header, body] = splitWake(p.text);
    return [
      header ? el('details', {class: 'wake'}, el('summary', {text: 'wake header'}), el('pre', {text: header})) : null,
      el('div', {class: 'text', text: body}),
    ];
  }
  if (p.type === 'tool_call') {
    const call = el('details', {class: 'tool call'},
      el('summary', {text: `tool call: ${p.name}`}),
      el('pre', {text: JSON.stringify(p.args, null, 2)}));
    const sends = p.name === 'dispatch' && Array.isArray(p.args?.sends) ? p.args.sends : [];
    // What dispatch sends is the turn's answer: shown, as text; the call itself stays folded.
    return [call, sends.length ? el('ul', {class: 'sends'}, sends.map((send) =>
      el('li', {text: `→ ${send.to}: ${typeof send.body === 'string' ? send.body : JSON.stringify(send.body)}`}))) : null];
  }
  if (p.type === 'tool_result') {
    return el('details', {class: `tool result${p.is_error ? ' failed' : ''}`},
      el('summary', {text: `result of ${p.name || p.call_id}${p.is_error ? ' (error)' : ''}`}),
      el('pre', {text: p.content}));
  }
  if (p.type === 'reasoning') {
    return el('details', {class: 'reasoning'}, el('summary', {text: 'reasoning'}), el('pre', {text: p.text}));
  }
  if (p.type === 'file') {
    return el('div', {class: 'file', text: `file: ${p.name || p.url} (${p.media_type})`});
  }
  return el('div', {class: 'unknown', text: `(${p.type})`});
}

export function messageNode(message) {
  const title = [message.role, message.custom ? `(${message.custom})` : '', when(message.created)]
    .filter(Boolean).join(' · ');
  return el('article', {class: `msg ${message.role}`, data: {id: message.id}},
    el('header', {text: title}),
    (message.content || []).map(part));
}

function turnNode(entry) {
  const tokens = (entry.input_tokens || 0) + (entry.output_tokens || 0);
  const words = `turn ended: ${entry.stop_reason || '?'} · ${entry.steps} step(s) · ${tokens} tokens` +
    (entry.error ? ` · ${entry.error}` : '');
  return el('div', {class: 'turn-end', data: {id: entry.id}, text: words});
}

export class SessionsView {
  constructor({notify}) {
    this.notify = notify;
    this.form = byId('sessions-filter');
    this.body = byId('sessions-body');
    this.pageText = byId('sessions-page');
    this.prev = byId('sessions-prev');
    this.next = byId('sessions-next');
    this.detail = byId('session-detail');
    this.transcript = byId('transcript');
    this.live = byId('tail-live');
    this.offset = 0;
    this.current = null;
    this.tail = null;
    this.form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      this.offset = 0;
      this.load();
    });
    this.prev.addEventListener('click', () => { this.offset = Math.max(0, this.offset - PAGE); this.load(); });
    this.next.addEventListener('click', () => { this.offset += PAGE; this.load(); });
    this.live.addEventListener('change', () => this.follow());
    byId('session-stop').addEventListener('click', () => this.stop());
    byId('policy-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      this.setPolicy();
    });
  }

  async load() {
    const data = new FormData(this.form);
    try {
      const page = await call('GET', withQuery('/sessions', {
        kind: data.get('kind'), active_minutes: data.get('active_minutes'),
        include_archived: data.get('include_archived') ? 'true' : '', limit: PAGE, offset: this.offset,
      }));
      clear(this.body);
      for (const row of page.sessions) {
        this.body.append(el('tr', {data: {key: row.key}, class: row.key === this.current ? 'selected' : ''},
          el('td', {}, el('button', {type: 'button', class: 'link', text: row.key,
            on: {click: () => this.open(row.key)}})),
          el('td', {text: row.kind}),
          el('td', {text: row.displayName || ''}),
          el('td', {text: when(row.updatedAt)}),
          el('td', {class: 'num', text: row.totalTokens ?? '–'}),
          el('td', {text: row.model || ''})));
      }
      const last = page.offset + page.sessions.length;
      this.pageText.textContent = page.total ? `${page.offset + 1}–${last} of ${page.total}` : 'no sessions';
      this.prev.disabled = page.offset === 0;
      this.next.disabled = page.next_offset === null;
    } catch (err) {
      this.notify(err.message, true);
    }
  }

  async open(sessionKey) {
    this.current = sessionKey;
    this.stopTail();
    for (const row of this.body.querySelectorAll('tr')) row.classList.toggle('selected', row.dataset.key === sessionKey);
    this.detail.hidden = false;
    byId('session-title').textContent = sessionKey;
    clear(this.transcript);
    try {
      const [check, policy, history] = await Promise.all([
        call('GET', `/sessions/${key(sessionKey)}`),
        call('GET', `/sessions/${key(sessionKey)}/send-policy`),
        call('GET', withQuery(`/sessions/${key(sessionKey)}/history`, {limit: 200, include_tools: 'true'})),
      ]);
      if (this.current !== sessionKey) return;
      this.showCheck(check);
      byId('policy-setting').value = policy.override || 'inherit';
      byId('policy-words').textContent = `${policy.policy}: ${policy.reason}`;
      for (const message of history.messages) this.transcript.append(messageNode(message));
      this.lastEntry = history.last_entry;
      this.follow();
    } catch (err) {
      this.notify(err.message, true);
    }
  }

  showCheck(check) {
    const facts = [
      ['session', check.session_id || '–'],
      ['messages', check.message_count ?? '–'],
      ['turns', check.turn_count ?? '–'],
      ['agent', check.agent || '–'],
      ['thread', check.thread_active ? `${check.thread_state} (${check.thread_pending} queued)` : 'not loaded'],
      ['last change', when(check.last_modified)],
    ];
    const list = clear(byId('session-facts'));
    for (const [name, value] of facts) list.append(el('dt', {text: name}), el('dd', {text: value}));
    byId('session-stop').disabled = !check.thread_active || check.thread_state === 'idle';
  }

  refreshFacts() {
    clearTimeout(this.factsTimer);
    const sessionKey = this.current;
    this.factsTimer = setTimeout(async () => {
      try {
        const check = await call('GET', `/sessions/${key(sessionKey)}`);
        if (this.current === sessionKey) this.showCheck(check);
      } catch (err) {
        // the transcript goes on; the facts stay as they were
      }
    }, 250);
  }

  stopTail() {
    if (this.tail) this.tail.abort();
    this.tail = null;
    byId('tail-status').textContent = '';
  }

  async follow() {
    this.stopTail();
    if (!this.live.checked || !this.current) return;
    const controller = new AbortController();
    this.tail = controller;
    const status = byId('tail-status');
    status.textContent = 'following';
    try {
      await stream(withQuery(`/sessions/${key(this.current)}/tail`, {after: this.lastEntry || ''}), (event, data) => {
        if (event === 'entry') this.add(data);
        else if (event === 'error' || event === 'end') status.textContent = data.message;
      }, controller.signal);
    } catch (err) {
      if (!controller.signal.aborted) status.textContent = err instanceof ApiFailure ? err.message : 'the tail stopped';
    }
  }

  add(entry) {
    this.lastEntry = entry.id;
    this.refreshFacts();
    if (this.transcript.querySelector(`[data-id="${CSS.escape(entry.id)}"]`)) return;
    if (entry.role && entry.type !== 'receipt') this.transcript.append(messageNode(entry));
    else if (entry.type === 'turn') this.transcript.append(turnNode(entry));
    else return;
    this.transcript.scrollTop = this.transcript.scrollHeight;
  }

  async stop() {
    if (!this.current) return;
    try {
      const answer = await call('POST', '/stop', {key: this.current});
      this.notify(`${this.current}: ${answer.text}`);
    } catch (err) {
      this.notify(err.message, true);
    }
  }

  async setPolicy() {
    if (!this.current) return;
    try {
      const policy = await call('PUT', `/sessions/${key(this.current)}/send-policy`,
        {setting: byId('policy-setting').value});
      byId('policy-words').textContent = `${policy.policy}: ${policy.reason}`;
      this.notify(`send policy of ${this.current}: ${policy.policy}`);
    } catch (err) {
      this.notify(err.message, true);
    }
  }
}
