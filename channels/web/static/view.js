// The conversation on screen. Everything people and models wrote is set as text
// (textContent, DOM attributes), except an answer's HTML: the server renders it
// from markdown with raw HTML off (docs/decisions/web-04), so it is the one
// markup this page inserts.
'use strict';

/** An element: el('li', {class: 'x', text: 'y'}, ...children). */
export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'text') node.textContent = String(value);
    else if (name === 'on') for (const [type, fn] of Object.entries(value)) node.addEventListener(type, fn);
    else node.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

const STATES = {sending: 'sending…', sent: 'sent ✓', failed: 'not sent'};

export class ChatView {
  constructor(log, {retry, press}) {
    this.log = log;
    this.retry = retry;
    this.press = press;
    this.typingNode = null;
    this.draftNode = null;
    this.toolsNode = null;
    log.addEventListener('click', (ev) => {
      const button = ev.target.closest('button.copy');
      if (button) copyCode(button);
    });
  }

  /** Keep the newest message in sight, unless the reader scrolled up to read. */
  scroll(force = false) {
    const near = this.log.scrollHeight - this.log.scrollTop - this.log.clientHeight < 120;
    if (force || near) this.log.scrollTop = this.log.scrollHeight;
  }

  /** Show the conversation as the server has it (every tab, every reconnect). */
  replace(items, more) {
    this.log.replaceChildren();
    this.typingNode = this.draftNode = this.toolsNode = null;
    if (more) this.log.append(el('p', {class: 'note', text: 'Earlier messages are not shown here.'}));
    for (const item of items) {
      if (item.role === 'user') this.user({id: item.id, text: item.text, files: item.files, state: item.id ? 'sent' : ''});
      else if (item.role === 'bot') this.bot(item.html);
      else if (item.role === 'tools') this.tools(item.calls);
    }
    this.scroll(true);
  }

  has(id) {
    return Boolean(id) && this.log.querySelector(`.me[data-id="${CSS.escape(id)}"]`) !== null;
  }

  /** A message of the person here; ``files`` are {name, type, size, url}. */
  user({id, text, files, state}) {
    const node = el('div', {class: 'msg me', 'data-id': id || null, 'data-state': state || null});
    if (text) node.append(el('div', {class: 'text', text}));
    if (files && files.length) node.append(fileList(files));
    if (state) node.append(el('span', {class: 'state'}));
    this.log.append(node);
    if (state) this.mark(id, state);
    this.scroll(true);
    return node;
  }

  /** The state of a message sent from this tab: sending, sent or failed (with why). */
  mark(id, state, why = '') {
    const node = this.log.querySelector(`.me[data-id="${CSS.escape(id)}"]`);
    if (!node) return;
    node.dataset.state = state;
    let line = node.querySelector('.state');
    if (!line) node.append(line = el('span', {class: 'state'}));
    line.replaceChildren(state === 'failed' && why ? `not sent: ${why}` : STATES[state] || state);
    if (state === 'failed') {
      line.append(el('button', {type: 'button', class: 'retry', text: 'Retry', on: {click: () => this.retry(id)}}));
    }
  }

  /** An answer: the draft of the running turn becomes it, unless it stands ``apart``
   * (a command's answer), which goes before the turn's draft. */
  bot(html, apart = false) {
    let node = apart ? null : this.draftNode;
    if (node) {
      this.draftNode = null;
      node.classList.remove('draft');
    } else {
      node = el('div', {class: 'msg bot'});
      const running = this.draftNode || this.typingNode;
      if (apart && running) running.before(node);
      else this.log.append(node);
    }
    if (!apart) this.unType();
    node.innerHTML = html;  // trusted: rendered on the server with raw HTML off
    this.scroll();
  }

  typing() {
    if (this.typingNode || this.draftNode) return;
    this.typingNode = el('div', {class: 'msg typing', id: 'typing', 'aria-label': 'typing'},
      el('span', {text: 'typing'}), el('span', {class: 'dots'}));
    this.log.append(this.typingNode);
    this.scroll();
  }

  unType() {
    if (this.typingNode) this.typingNode.remove();
    this.typingNode = null;
  }

  /** The answer so far, redrawn as it is written. */
  draft(html) {
    this.unType();
    if (!this.draftNode) {
      this.draftNode = el('div', {class: 'msg bot draft'});
      this.log.append(this.draftNode);
    }
    this.draftNode.innerHTML = html;  // trusted: rendered on the server with raw HTML off
    this.scroll();
  }

  /** The turn ended: a draft no answer took over goes; its tools stay, folded. */
  end() {
    this.unType();
    if (this.draftNode) this.draftNode.remove();
    this.draftNode = this.toolsNode = null;
  }

  /** The tools of the conversation so far, folded. */
  tools(calls) {
    this.log.append(el('details', {class: 'tools'}, el('summary', {text: toolsLabel(calls.map((c) => c.name))}),
      el('ul', {}, ...calls.map((c) => el('li', {class: c.error ? 'error' : null, text: c.summary})))));
  }

  /** A tool of the running turn: listed as it starts, with its result once it ends. */
  tool({id, name, summary, error}) {
    if (!this.toolsNode) {
      this.toolsNode = el('details', {class: 'tools'}, el('summary'), el('ul'));
      const running = this.draftNode || this.typingNode;
      if (running) running.before(this.toolsNode);
      else this.log.append(this.toolsNode);
    }
    const list = this.toolsNode.querySelector('ul');
    let item = [...list.children].find((li) => li.dataset.id === id);
    if (!item) list.append(item = el('li', {'data-id': id, 'data-name': name}));
    item.textContent = summary || `${name}…`;
    item.dataset.done = summary ? 'yes' : '';
    if (error) item.classList.add('error');
    const items = [...list.children];
    const busy = items.find((li) => !li.dataset.done);
    this.toolsNode.querySelector('summary').textContent =
      busy ? `Using ${busy.dataset.name}…` : toolsLabel(items.map((li) => li.dataset.name));
    this.scroll();
  }

  /** An approval question: its text, and a button per choice that sends the button's data. */
  approval({id, text, buttons}) {
    let node = this.approvalNode(id);
    if (!node) this.log.append(node = el('div', {class: 'msg bot approval', 'data-approval': id}));
    node.replaceChildren(el('div', {class: 'text', text}), el('div', {class: 'buttons'},
      ...buttons.map(([data, label]) => el('button', {type: 'button', text: label, on: {click: () => this.press(data)}}))));
    this.scroll();
  }

  /** A decided question: how it went takes the place of its buttons. */
  settle(id, text) {
    const node = this.approvalNode(id);
    if (!node) return;
    node.textContent = text;
    node.classList.add('settled');
  }

  approvalNode(id) {
    return [...this.log.querySelectorAll('.approval')].find((n) => n.dataset.approval === id);
  }

  error(text) {
    this.log.append(el('div', {class: 'msg err', text}));
    this.scroll(true);
  }
}

function toolsLabel(names) {
  return names.length === 1 ? `Used ${names[0]}` : `Used ${names.length} tools`;
}

function fileList(files) {
  return el('ul', {class: 'files'}, ...files.map((f) => {
    const url = f.url || f.preview || '';
    if (url && /^image\//.test(f.type)) {
      return el('li', {}, el('a', {href: url, target: '_blank', title: f.name}, el('img', {src: url, alt: f.name})));
    }
    const label = `📄 ${f.name}`;
    return el('li', {}, url ? el('a', {href: url, download: f.name, text: label}) : el('span', {text: label}));
  }));
}

async function copyCode(button) {
  const code = button.parentElement.querySelector('pre').textContent;
  try {
    await navigator.clipboard.writeText(code);
  } catch (err) {
    // Over plain http off loopback there is no clipboard API: select and copy.
    const area = el('textarea', {class: 'sr'});
    area.value = code;
    document.body.append(area);
    area.select();
    document.execCommand('copy');
    area.remove();
  }
  button.textContent = 'Copied';
  setTimeout(() => { button.textContent = 'Copy'; }, 1500);
}
