// The live threads view: one event stream (/api/live) pushes the threads and the
// metrics as they change; the time into each running turn ticks on in the page.
'use strict';

import {ApiFailure, call, stream} from './api.js';
import {lineChart} from './charts.js';
import {byId, clear, confirmButton, duration, el} from './dom.js';

export class ThreadsView {
  constructor({notify, openSession}) {
    this.notify = notify;
    this.openSession = openSession;
    this.body = byId('threads-body');
    this.empty = byId('threads-empty');
    this.summary = byId('threads-summary');
    this.status = byId('live-status');
    this.drain = byId('stop-drain');
    this.threads = [];
    this.receivedAt = 0;
    this.controller = null;
    this.retry = 0;
    this.ticker = 0;
    const stopAll = confirmButton('Stop all', 'Confirm: stop every running turn', () => this.stop({all: true}),
      {id: 'stop-all', class: 'danger'});
    byId('stop-all-slot').append(stopAll);
  }

  start() {
    this.stopStream();
    this.controller = new AbortController();
    this.connect(this.controller.signal);
    this.ticker = setInterval(() => this.tick(), 1000);
  }

  stopStream() {
    if (this.controller) this.controller.abort();
    this.controller = null;
    clearInterval(this.ticker);
    this.setStatus('off', 'offline');
  }

  setStatus(state, text) {
    this.status.dataset.state = state;
    this.status.textContent = text;
  }

  async connect(signal) {
    let why = '';  // what the gateway said when it last ended or refused the stream
    const waiting = (doing) => this.setStatus('connecting', why ? `${why} · ${doing}` : doing);
    while (!signal.aborted) {
      waiting('connecting…');
      try {
        await stream('/live', (event, data) => {
          this.retry = 0;
          if (event === 'end' || event === 'error') {
            why = data.message;
            return;
          }
          why = '';
          this.setStatus('live', 'live');
          if (event === 'threads') this.showThreads(data);
          else if (event === 'metrics') this.showMetrics(data);
        }, signal);
      } catch (err) {
        if (signal.aborted || (err instanceof ApiFailure && err.status === 401)) return;
        if (err instanceof ApiFailure) why = err.message;
      }
      if (signal.aborted) return;
      waiting('reconnecting…');
      this.retry = Math.min(this.retry + 1, 5);
      await new Promise((resolve) => setTimeout(resolve, 1000 * this.retry));
    }
  }

  showThreads(view) {
    this.threads = view.threads;
    this.receivedAt = performance.now();
    this.summary.textContent =
      `${view.live} live · ${view.running} running · ${view.pending} pending · ` +
      `${view.turns_in_flight}/${view.max_concurrent_turns} turn slots in use`;
    clear(this.body);
    this.empty.hidden = view.threads.length > 0;
    for (const thread of view.threads) {
      const stop = el('button', {type: 'button', class: 'stop danger', text: 'Stop',
        disabled: thread.state === 'idle',
        title: thread.state === 'idle' ? 'nothing is running' : `stop ${thread.session_key}`,
        on: {click: () => this.stop({key: thread.session_key})}});
      const open = el('button', {type: 'button', class: 'link', text: thread.session_key,
        on: {click: () => this.openSession(thread.session_key)}});
      this.body.append(el('tr', {data: {key: thread.session_key, state: thread.state}},
        el('td', {}, open),
        el('td', {}, el('span', {class: `state ${thread.state}`, text: thread.state})),
        el('td', {text: thread.agent}),
        el('td', {class: 'tool', text: thread.current_tool || '–'}),
        el('td', {class: 'elapsed', text: thread.state === 'running' ? duration(thread.elapsed_sec) : '–'}),
        el('td', {class: 'num', text: thread.pending}),
        el('td', {class: 'num', text: thread.iterations}),
        el('td', {}, stop),
      ));
    }
  }

  tick() {
    const since = (performance.now() - this.receivedAt) / 1000;
    for (const row of this.body.querySelectorAll('tr[data-state="running"]')) {
      const thread = this.threads.find((t) => t.session_key === row.dataset.key);
      const cell = row.querySelector('.elapsed');
      if (thread && cell) cell.textContent = duration(thread.elapsed_sec + since);
    }
  }

  async stop(target) {
    try {
      const answer = await call('POST', '/stop', {...target, drain: this.drain.checked});
      this.notify(`${target.key || 'all sessions'}: ${answer.text}`);
    } catch (err) {
      this.notify(err.message, true);
    }
  }

  showMetrics(metrics) {
    const minutes = metrics.points.map((p) => p.minute);
    lineChart(byId('chart-turns'), {minutes, empty: 'no turns in this hour', series: [
      {name: 'turns', values: metrics.points.map((p) => p.turns)},
      {name: 'model calls', values: metrics.points.map((p) => p.model_calls)},
    ]});
    lineChart(byId('chart-latency'), {minutes, unit: 'ms', empty: 'no model calls in this hour', series: [
      {name: 'p50', values: metrics.points.map((p) => p.latency_p50_ms)},
      {name: 'p95', values: metrics.points.map((p) => p.latency_p95_ms)},
      {name: 'max', values: metrics.points.map((p) => p.latency_max_ms)},
    ]});
    lineChart(byId('chart-tokens'), {minutes, empty: 'no tokens spent in this hour', series: metrics.sessions.map((s) => {
      let total = 0;
      return {name: s.key, values: s.tokens.map((t) => (total += t))};
    })});
    const totals = metrics.points.reduce((sum, p) => ({
      turns: sum.turns + p.turns, calls: sum.calls + p.model_calls, tokens: sum.tokens + p.tokens,
    }), {turns: 0, calls: 0, tokens: 0});
    byId('metrics-summary').textContent =
      `last ${metrics.minutes} min: ${totals.turns} turns, ${totals.calls} model calls, ${totals.tokens} tokens`;
  }
}
