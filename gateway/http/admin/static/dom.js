// Building the page from data: every value is set as text (textContent, attributes
// through the DOM), never parsed as HTML, so what a model wrote can never run here.
'use strict';

const SVG = 'http://www.w3.org/2000/svg';

function build(node, attrs, children) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'text') node.textContent = String(value);
    else if (name === 'on') for (const [type, fn] of Object.entries(value)) node.addEventListener(type, fn);
    else if (name === 'data') for (const [key, v] of Object.entries(value)) node.dataset[key] = String(v);
    else if (name === 'class') node.setAttribute('class', String(value));
    else if (value === true) node.setAttribute(name, '');
    else node.setAttribute(name, String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** An HTML element: el('td', {class: 'x', text: value}, ...children). */
export function el(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

/** An SVG element, built the same way. */
export function svg(tag, attrs, ...children) {
  return build(document.createElementNS(SVG, tag), attrs, children);
}

export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

export function byId(id) {
  const node = document.getElementById(id);
  if (!node) throw new Error('the page has no #' + id);
  return node;
}

const two = (n) => String(n).padStart(2, '0');

/** A moment (ms, ISO text or Date) as local "YYYY-MM-DD HH:MM:SS". */
export function when(moment) {
  if (moment === null || moment === undefined || moment === '') return '–';
  const d = moment instanceof Date ? moment : new Date(moment);
  if (Number.isNaN(d.getTime())) return String(moment);
  return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())} ` +
    `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}`;
}

/** A moment in an IANA zone, e.g. "2026-05-01 09:00:00 Europe/Berlin". */
export function inZone(moment, zone) {
  const d = new Date(moment);
  try {
    const parts = new Intl.DateTimeFormat('en-CA', {
      timeZone: zone, year: 'numeric', month: '2-digit', day: '2-digit',
      hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23',
    }).formatToParts(d);
    const part = (type) => (parts.find((p) => p.type === type) || {}).value || '';
    return `${part('year')}-${part('month')}-${part('day')} ${part('hour')}:${part('minute')}:${part('second')} ${zone}`;
  } catch (err) {
    return when(d);
  }
}

/** A UTC moment as "HH:MM:SSZ" on its date. */
export function utc(moment) {
  const d = new Date(moment);
  return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

/** Seconds as "4 s", "2 min 5 s", "1 h 3 min". */
export function duration(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

/** Call fn once input has paused for ms milliseconds. */
export function debounce(fn, ms) {
  let timer = 0;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}

/** A button that asks for a second click before it acts. */
export function confirmButton(label, confirmLabel, action, attrs = {}) {
  let armed = false;
  let timer = 0;
  const button = el('button', {type: 'button', ...attrs, text: label});
  button.addEventListener('click', () => {
    if (!armed) {
      armed = true;
      button.textContent = confirmLabel;
      button.classList.add('armed');
      timer = setTimeout(() => {
        armed = false;
        button.textContent = label;
        button.classList.remove('armed');
      }, 5000);
      return;
    }
    clearTimeout(timer);
    armed = false;
    button.textContent = label;
    button.classList.remove('armed');
    action();
  });
  return button;
}
