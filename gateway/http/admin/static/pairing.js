// Pairing approvals: each access-controlled channel's pending codes (approve, deny)
// and paired users (revoke).
'use strict';

import {call, key} from './api.js';
import {byId, clear, confirmButton, el, when} from './dom.js';

export class PairingView {
  constructor({notify}) {
    this.notify = notify;
    this.root = byId('pairing-channels');
    byId('pairing-refresh').addEventListener('click', () => this.load());
  }

  async load() {
    try {
      const {channels} = await call('GET', '/pairing');
      clear(this.root);
      const names = Object.keys(channels);
      if (!names.length) {
        this.root.append(el('p', {class: 'hint', text: 'No channel has access control, so nobody pairs here.'}));
      }
      for (const name of names) this.root.append(this.channel(name, channels[name]));
    } catch (err) {
      this.notify(err.message, true);
    }
  }

  channel(name, found) {
    const pending = found.pending.map((r) => el('tr', {data: {code: r.code}},
      el('td', {class: 'code', text: r.code}),
      el('td', {text: r.user_id}),
      el('td', {text: r.user_name || '–'}),
      el('td', {text: when(r.created)}),
      el('td', {text: when(r.expires)}),
      el('td', {class: 'actions'},
        el('button', {type: 'button', class: 'approve', text: 'Approve',
          on: {click: () => this.decide(name, r.code, 'approve')}}),
        confirmButton('Deny', 'Confirm deny', () => this.decide(name, r.code, 'deny'), {class: 'danger deny'}))));
    const paired = found.paired.map((u) => el('tr', {data: {user: u.user_id}},
      el('td', {text: u.user_id}),
      el('td', {text: u.user_name || '–'}),
      el('td', {text: when(u.approved)}),
      el('td', {class: 'actions'},
        confirmButton('Revoke', 'Confirm revoke', () => this.revoke(name, u.user_id), {class: 'danger'}))));
    return el('section', {class: 'channel', data: {channel: name}},
      el('h3', {text: name}),
      el('h4', {text: `Waiting for approval (${pending.length})`}),
      pending.length
        ? el('table', {}, el('thead', {}, el('tr', {}, ['Code', 'User id', 'Name', 'Asked', 'Expires', ''].map((t) => el('th', {text: t})))), el('tbody', {}, pending))
        : el('p', {class: 'hint', text: 'No pending requests.'}),
      el('h4', {text: `Paired users (${paired.length})`}),
      paired.length
        ? el('table', {}, el('thead', {}, el('tr', {}, ['User id', 'Name', 'Approved', ''].map((t) => el('th', {text: t})))), el('tbody', {}, paired))
        : el('p', {class: 'hint', text: 'Nobody is paired yet.'}));
  }

  async decide(channel, code, action) {
    try {
      const outcome = await call('POST', `/pairing/${key(channel)}/${action}`, {code});
      const who = outcome.request.user_name || outcome.request.user_id;
      const told = outcome.told ? 'they were told' : 'they are told when the channel is back';
      this.notify(`${action === 'approve' ? 'approved' : 'denied'} ${who} on ${channel}; ${told}`);
    } catch (err) {
      this.notify(err.message, true);
    }
    await this.load();
  }

  async revoke(channel, user) {
    try {
      await call('POST', `/pairing/${key(channel)}/revoke`, {user});
      this.notify(`revoked ${user} on ${channel}`);
    } catch (err) {
      this.notify(err.message, true);
    }
    await this.load();
  }
}
