// The admin API from the page: the token the operator typed rides in the
// Authorization header of every call (it lives in this tab's sessionStorage, never
// in a cookie or the address bar), and event streams are read with fetch so they
// carry it too.
'use strict';

const KEY = 'gateway-admin-token';

export class ApiFailure extends Error {
  constructor(status, message, field, problems) {
    super(message);
    this.status = status;
    this.field = field || null;
    this.problems = problems || [];
  }
}

let onUnauthorized = () => {};

export function whenUnauthorized(fn) {
  onUnauthorized = fn;
}

export function token() {
  return sessionStorage.getItem(KEY) || '';
}

export function setToken(value) {
  if (value) sessionStorage.setItem(KEY, value);
  else sessionStorage.removeItem(KEY);
}

function headers(extra) {
  return {Authorization: 'Bearer ' + token(), ...extra};
}

async function failure(response) {
  let message = `${response.status} ${response.statusText}`;
  let field = null;
  let problems = [];
  try {
    const body = await response.json();
    if (body && body.error) {
      message = body.error.message;
      field = body.error.field;
      problems = body.error.problems || [];
    }
  } catch (err) {
    // not JSON: keep the status line
  }
  if (response.status === 401) onUnauthorized(message);
  return new ApiFailure(response.status, message, field, problems);
}

/** Call the API; the answer's JSON, or an ApiFailure naming the status and the field. */
export async function call(method, path, body, {signal} = {}) {
  const init = {method, headers: headers({Accept: 'application/json'}), cache: 'no-store', signal};
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const response = await fetch('/api' + path, init);
  if (!response.ok) throw await failure(response);
  return response.json();
}

/** A path with its query string; empty values are left out. */
export function withQuery(path, params) {
  const query = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== '') query.set(name, String(value));
  }
  const text = query.toString();
  return text ? `${path}?${text}` : path;
}

export const key = (value) => encodeURIComponent(value);

/**
 * Read a server-sent event stream, calling onEvent(name, data) for each event,
 * until it ends (resolves) or fails (rejects); abort it with signal.
 */
export async function stream(path, onEvent, signal) {
  const response = await fetch('/api' + path, {
    headers: headers({Accept: 'text/event-stream'}), cache: 'no-store', signal,
  });
  if (!response.ok) throw await failure(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const {value, done} = await reader.read();
    if (done) return;
    buffer += value;
    let cut;
    while ((cut = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let event = 'message';
      let data = '';
      for (const line of block.split('\n')) {
        if (line.startsWith('event: ')) event = line.slice(7);
        else if (line.startsWith('data: ')) data += line.slice(6);
      }
      if (data) onEvent(event, JSON.parse(data));
    }
  }
}
