// The dashboard: log in with the admin token (kept in this tab's sessionStorage),
// then the views — live threads and charts, sessions, cron, pairing, approvals, nodes.
'use strict';

import {call, setToken, token, whenUnauthorized} from './api.js';
import {ApprovalsView} from './approvals.js';
import {CronView} from './cron.js';
import {byId} from './dom.js';
import {NodesView} from './nodes.js';
import {PairingView} from './pairing.js';
import {SessionsView} from './sessions.js';
import {ThreadsView} from './threads.js';

const login = byId('login');
const app = byId('app');
const notice = byId('notice');

function notify(text, failed = false) {
  notice.textContent = text;
  notice.dataset.kind = failed ? 'error' : 'info';
}

const sessions = new SessionsView({notify});
const views = {
  threads: new ThreadsView({notify, openSession: (k) => { show('sessions'); sessions.open(k); }}),
  sessions,
  cron: new CronView({notify}),
  pairing: new PairingView({notify}),
  approvals: new ApprovalsView({notify}),
  nodes: new NodesView({notify}),
};

function show(name) {
  for (const tab of document.querySelectorAll('nav [data-view]')) {
    tab.setAttribute('aria-selected', String(tab.dataset.view === name));
  }
  for (const view of document.querySelectorAll('main > .view')) view.hidden = view.id !== `view-${name}`;
  if (name === 'sessions') sessions.load();
  else if (name === 'cron') views.cron.load();
  else if (name === 'pairing') views.pairing.load();
  else if (name === 'approvals') views.approvals.load();
  if (name === 'nodes') views.nodes.load();
  else views.nodes.stop();
}

function loggedOut(message) {
  views.threads.stopStream();
  views.nodes.stop();
  sessions.stopTail();
  setToken('');
  app.hidden = true;
  login.hidden = false;
  byId('login-error').textContent = message || '';
  byId('token').focus();
}

function loggedIn() {
  login.hidden = true;
  app.hidden = false;
  byId('login-error').textContent = '';
  views.threads.start();
  show('threads');
}

whenUnauthorized((message) => loggedOut(message));

byId('login-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const input = byId('token');
  setToken(input.value.trim());
  input.value = '';
  try {
    await call('GET', '/threads');
    loggedIn();
  } catch (err) {
    if (err.status !== 401) loggedOut(err.message);
  }
});

byId('logout').addEventListener('click', () => loggedOut('Logged out.'));

for (const tab of document.querySelectorAll('nav [data-view]')) {
  tab.addEventListener('click', () => show(tab.dataset.view));
}

async function boot() {
  if (!token()) {
    loggedOut('');
    return;
  }
  try {
    await call('GET', '/threads');
    loggedIn();
  } catch (err) {
    if (err.status !== 401) loggedOut(err.message);
  }
}

boot();
