// The cron editor: the jobs with their next fires and actions, an editor that
// explains an expression as its next fire times while you type (debounced calls to
// /api/cron/explain), and each job's run history.
'use strict';

import {ApiFailure, call, key, withQuery} from './api.js';
import {byId, clear, confirmButton, debounce, el, inZone, utc, when} from './dom.js';

const FIELDS = ['id', 'kind', 'expr', 'at', 'every', 'timezone', 'task', 'wake_session', 'direct_wake', 'agent', 'enabled'];

export class CronView {
  constructor({notify}) {
    this.notify = notify;
    this.body = byId('jobs-body');
    this.empty = byId('jobs-empty');
    this.form = byId('job-form');
    this.editor = byId('job-editor');
    this.preview = byId('explain');
    this.editing = null;
    this.asked = 0;
    byId('job-new').addEventListener('click', () => this.edit(null));
    byId('job-cancel').addEventListener('click', () => { this.editor.hidden = true; });
    byId('jobs-refresh').addEventListener('click', () => this.load());
    this.form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      this.save();
    });
    const explainSoon = debounce(() => this.explain(), 300);
    this.field('expr').addEventListener('input', explainSoon);
    this.field('timezone').addEventListener('input', explainSoon);
    this.field('kind').addEventListener('change', () => this.showKind());
  }

  field(name) {
    return this.form.elements.namedItem(name);
  }

  async load() {
    try {
      const {jobs} = await call('GET', '/cron/jobs');
      clear(this.body);
      this.empty.hidden = jobs.length > 0;
      for (const view of jobs) this.body.append(this.row(view));
    } catch (err) {
      this.notify(err.message, true);
    }
  }

  row(view) {
    const job = view.job;
    const schedule = job.kind === 'cron' ? `${job.expr} (${job.timezone})` : job.kind === 'at' ? `at ${utc(job.at)}` : `every ${job.every}`;
    const target = job.direct_wake ? `${job.wake_session} (direct wake)` : `cron:${job.id}${job.wake_session ? ` → ${job.wake_session}` : ''}`;
    const state = job.enabled ? 'enabled' : (job.kind === 'at' && !view.next_fire ? 'done' : 'paused');
    const toggle = job.enabled
      ? el('button', {type: 'button', text: 'Pause', on: {click: () => this.act(job.id, 'pause')}})
      : el('button', {type: 'button', text: 'Resume', on: {click: () => this.act(job.id, 'resume')}});
    return el('tr', {data: {id: job.id}},
      el('td', {text: job.id}),
      el('td', {text: schedule}),
      el('td', {text: view.next_fire ? inZone(view.next_fire, job.timezone) : '–'}),
      el('td', {text: target}),
      el('td', {}, el('span', {class: `state ${state}`, text: state})),
      el('td', {text: view.last_status || '–'}),
      el('td', {class: 'actions'},
        el('button', {type: 'button', text: 'Edit', on: {click: () => this.edit(view)}}),
        toggle,
        el('button', {type: 'button', text: 'Run now', on: {click: () => this.act(job.id, 'run')}}),
        el('button', {type: 'button', text: 'Runs', on: {click: () => this.runs(job.id)}}),
        confirmButton('Remove', 'Confirm remove', () => this.remove(job.id), {class: 'danger'})));
  }

  edit(view) {
    this.editing = view ? view.job.id : null;
    const job = view ? view.job : {kind: 'cron', enabled: true, direct_wake: false};
    byId('job-editor-title').textContent = view ? `Edit ${job.id}` : 'New job';
    for (const name of FIELDS) {
      const input = this.field(name);
      if (input.type === 'checkbox') input.checked = Boolean(job[name]);
      else input.value = job[name] ?? '';
      input.removeAttribute('aria-invalid');
    }
    this.field('id').readOnly = Boolean(view);
    byId('job-error').textContent = '';
    this.editor.hidden = false;
    this.showKind();
    this.explain();
  }

  showKind() {
    const kind = this.field('kind').value;
    for (const name of ['expr', 'at', 'every']) {
      byId(`field-${name}`).hidden = {cron: 'expr', at: 'at', every: 'every'}[kind] !== name;
    }
    this.explain();
  }

  async explain() {
    const asked = ++this.asked;
    const kind = this.field('kind').value;
    const expr = this.field('expr').value.trim();
    const zone = this.field('timezone').value.trim();
    clear(this.preview);
    this.preview.dataset.state = 'idle';
    if (kind !== 'cron') {
      this.preview.append(el('p', {class: 'hint', text: kind === 'at'
        ? 'Fires once at the time given (RFC 3339 with an offset, e.g. 2026-05-01T09:00:00+02:00).'
        : 'Fires at this interval, counted from when the job is saved (e.g. 15m, 1h30m).'}));
      return;
    }
    if (!expr) {
      this.preview.append(el('p', {class: 'hint', text: 'Type five fields: minute hour day month weekday.'}));
      return;
    }
    try {
      const answer = await call('GET', withQuery('/cron/explain', {expr, timezone: zone, count: 5}));
      if (asked !== this.asked) return;
      clear(this.preview);
      this.preview.dataset.state = 'ok';
      this.preview.append(el('p', {class: 'hint', text: `Next fires of “${answer.expr}” in ${answer.timezone}:`}));
      this.preview.append(el('ol', {class: 'fires'}, answer.times.map((t) =>
        el('li', {text: answer.timezone === 'UTC' ? inZone(t, 'UTC') : `${inZone(t, answer.timezone)}  (${utc(t)})`}))));
    } catch (err) {
      if (asked !== this.asked) return;
      clear(this.preview);
      this.preview.dataset.state = 'error';
      this.preview.append(el('p', {class: 'error', text: err.message}));
    }
  }

  formBody() {
    const out = {};
    for (const name of FIELDS) {
      const input = this.field(name);
      if (input.type === 'checkbox') out[name] = input.checked;
      else if (input.value.trim() !== '') out[name] = input.value.trim();
    }
    const kind = out.kind;
    for (const name of ['expr', 'at', 'every']) {
      if ({cron: 'expr', at: 'at', every: 'every'}[kind] !== name) delete out[name];
    }
    return out;
  }

  async save() {
    const body = this.formBody();
    for (const input of this.form.elements) input.removeAttribute?.('aria-invalid');
    try {
      const detail = this.editing
        ? await call('PUT', `/cron/jobs/${key(this.editing)}`, body)
        : await call('POST', '/cron/jobs', body);
      this.editor.hidden = true;
      this.notify(`saved cron job ${detail.job.id}; next fire ${detail.next_fire ? inZone(detail.next_fire, detail.job.timezone) : 'none'}`);
      await this.load();
    } catch (err) {
      byId('job-error').textContent = err.message;
      if (err instanceof ApiFailure) {
        for (const problem of err.problems) {
          const input = this.field(problem.field);
          if (input && input.setAttribute) input.setAttribute('aria-invalid', 'true');
        }
      }
    }
  }

  async act(id, action) {
    try {
      const answer = await call('POST', `/cron/jobs/${key(id)}/${action}`);
      if (action === 'run') {
        const run = answer.run;
        this.notify(run ? `cron job ${id}: ${run.status}${run.error ? `: ${run.error}` : ''}` : `asked to run ${id}`);
      } else {
        this.notify(`cron job ${id}: ${action === 'pause' ? 'paused' : 'resumed'}`);
      }
      await this.load();
    } catch (err) {
      this.notify(err.message, true);
    }
  }

  async remove(id) {
    try {
      await call('DELETE', `/cron/jobs/${key(id)}`);
      this.notify(`removed cron job ${id} (its runs are kept)`);
      await this.load();
    } catch (err) {
      this.notify(err.message, true);
    }
  }

  async runs(id) {
    const panel = byId('job-runs');
    try {
      const {runs} = await call('GET', withQuery(`/cron/jobs/${key(id)}/runs`, {limit: 20}));
      panel.hidden = false;
      byId('job-runs-title').textContent = `Runs of ${id}`;
      const body = clear(byId('runs-body'));
      byId('runs-empty').hidden = runs.length > 0;
      for (const run of runs) {
        body.append(el('tr', {},
          el('td', {class: 'num', text: run.seq}),
          el('td', {}, el('span', {class: `state ${run.status}`, text: run.status + (run.coalesced ? ` (+${run.coalesced})` : '')})),
          el('td', {text: run.via}),
          el('td', {text: when(run.scheduled)}),
          el('td', {text: when(run.fired)}),
          el('td', {class: 'num', text: run.lateness_ms.toFixed(1)}),
          el('td', {text: run.run_id || '–'}),
          el('td', {text: run.error || run.note || ''})));
      }
    } catch (err) {
      this.notify(err.message, true);
    }
  }
}
