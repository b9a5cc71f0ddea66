// Approvals: the tool calls waiting for a person (approve, always, deny) and the
// standing approvals "Always" made (revoke).
'use strict';

import {call, key} from './api.js';
import {byId, clear, confirmButton, el, when} from './dom.js';

export class ApprovalsView {
  constructor({notify}) {
    this.notify = notify;
    this.requests = byId('approvals-body');
    this.grants = byId('grants-body');
    byId('approvals-refresh').addEventListener('click', () => this.load());
  }

  async load() {
    try {
      const [{requests}, {grants}] = await Promise.all([call('GET', '/approvals'), call('GET', '/grants')]);
      clear(this.requests);
      byId('approvals-empty').hidden = requests.length > 0;
      for (const r of requests) this.requests.append(this.request(r));
      clear(this.grants);
      byId('grants-empty').hidden = grants.length > 0;
      for (const g of grants) this.grants.append(this.grant(g));
    } catch (err) {
      this.notify(err.message, true);
    }
  }

  request(r) {
    const asked = r.caller && (r.caller.name || r.caller.user_id);
    return el('tr', {data: {request: r.id}},
      el('td', {class: 'code', text: r.id}),
      el('td', {text: r.session_key}),
      el('td', {text: r.tool}),
      el('td', {class: 'args', text: JSON.stringify(r.args)}),
      el('td', {text: asked || '–'}),
      el('td', {text: when(r.created)}),
      el('td', {text: r.expiry ? when(r.expiry) : 'never'}),
      el('td', {class: 'actions'},
        el('button', {type: 'button', class: 'approve', text: 'Approve',
          on: {click: () => this.decide(r, 'approve', {always: false})}}),
        el('button', {type: 'button', class: 'always', text: 'Always',
          on: {click: () => this.decide(r, 'approve', {always: true})}}),
        confirmButton('Deny', 'Confirm deny', () => this.decide(r, 'deny', {reason: ''}), {class: 'danger deny'})));
  }

  grant(g) {
    const tests = g.args.map((a) => JSON.stringify(a)).join(', ') || 'any arguments';
    return el('tr', {data: {grant: g.id}},
      el('td', {class: 'code', text: g.id}),
      el('td', {text: g.key}),
      el('td', {text: g.label}),
      el('td', {class: 'args', text: tests}),
      el('td', {text: `${g.who} · ${when(g.created)}`}),
      el('td', {class: 'actions'},
        confirmButton('Revoke', 'Confirm revoke', () => this.revoke(g), {class: 'danger'})));
  }

  async decide(r, action, body) {
    try {
      const d = await call('POST', `/approvals/${key(r.id)}/${action}`, body);
      this.notify(`${d.outcome === 'approve' ? 'approved' : 'denied'} ${d.tool} in ${d.session_key}`);
    } catch (err) {
      this.notify(err.message, true);
    }
    await this.load();
  }

  async revoke(g) {
    try {
      await call('POST', `/grants/${key(g.id)}/revoke`);
      this.notify(`revoked the grant of ${g.label} in ${g.key}: it asks again`);
    } catch (err) {
      this.notify(err.message, true);
    }
    await this.load();
  }
}
