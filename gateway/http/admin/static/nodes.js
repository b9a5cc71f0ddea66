// The gateway nodes on this Redis: each node alive or gone, what it leads, the keys it
// owns and its threads (as it last published them); looked at again every few seconds
// while the view is open.
'use strict';

import {call} from './api.js';
import {byId, clear, duration, el} from './dom.js';

const EVERY_MS = 3000;
const KEYS_SHOWN = 12;

export class NodesView {
  constructor({notify}) {
    this.notify = notify;
    this.root = byId('nodes-list');
    this.summary = byId('nodes-summary');
    this.timer = 0;
    byId('nodes-refresh').addEventListener('click', () => this.load());
  }

  async load() {
    clearTimeout(this.timer);
    try {
      this.show(await call('GET', '/nodes'));
    } catch (err) {
      this.notify(err.message, true);
    }
    if (!byId('view-nodes').hidden) this.timer = setTimeout(() => this.load(), EVERY_MS);
  }

  stop() {
    clearTimeout(this.timer);
  }

  show({node, cluster}) {
    clear(this.root);
    if (!cluster) {
      this.summary.textContent = `node ${node.id} (boot ${node.boot}) runs on its own: sessions are not in Redis`;
      return;
    }
    const alive = cluster.nodes.filter((n) => n.alive).length;
    this.summary.textContent =
      `${alive} of ${cluster.nodes.length} nodes alive · this is ${node.id} · leases last ${cluster.lease_seconds} s`;
    for (const row of cluster.nodes) this.root.append(this.card(row, row.node === node.id));
    if (cluster.lapsed_leases.length) {
      this.root.append(el('section', {class: 'card lapsed'},
        el('h3', {text: 'Lapsed, not yet taken over'}),
        el('ul', {}, ...cluster.lapsed_leases.map((l) => el('li', {text: `${l.name} (node ${l.node})`})))));
    }
  }

  card(row, self) {
    const state = row.draining ? 'draining' : (row.alive ? 'alive' : 'gone');
    const facts = [];
    if (row.pid) facts.push(`pid ${row.pid} on ${row.host}`);
    if (row.boot) facts.push(`boot ${row.boot}`);
    if (row.started) facts.push(`up ${duration(Math.max(0, Date.now() / 1000 - row.started))}`);
    if (row.http) facts.push(row.http);
    facts.push(row.leads.length ? `leads ${row.leads.join(', ')}` : 'leads nothing');
    const keys = [...row.keys].sort();
    const shown = keys.slice(0, KEYS_SHOWN).join(', ') + (keys.length > KEYS_SHOWN ? ` and ${keys.length - KEYS_SHOWN} more` : '');
    const threads = (row.threads || []).map((t) => el('tr', {data: {key: t.session_key, state: t.state}},
      el('td', {text: t.session_key}),
      el('td', {}, el('span', {class: `state ${t.state}`, text: t.state})),
      el('td', {class: 'num', text: t.pending}),
      el('td', {class: 'tool', text: t.current_tool || '–'}),
      el('td', {class: 'elapsed', text: t.state === 'running' ? duration(t.elapsed_sec) : '–'})));
    return el('section', {class: 'card node', data: {node: row.node, state}},
      el('div', {class: 'toolbar'},
        el('h3', {text: row.node + (self ? ' (this node)' : '')}),
        el('span', {class: `state ${state}`, text: state}),
        el('span', {class: 'hint', text: facts.join(' · ')})),
      el('p', {class: 'keys', text: keys.length ? `owns ${keys.length} keys: ${shown}` : 'owns no keys'}),
      threads.length
        ? el('table', {class: 'threads'},
          el('thead', {}, el('tr', {}, ...['Session', 'State', 'Queue', 'Current tool', 'In turn'].map((h) => el('th', {text: h})))),
          el('tbody', {}, ...threads))
        : el('p', {class: 'hint', text: `${row.thread_count || 0} live threads`}));
  }
}
