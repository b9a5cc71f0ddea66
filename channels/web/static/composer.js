// Writing a message: a growing text box (Enter sends, Shift+Enter breaks the line)
// and files to send with it, checked against the chat's size cap before anything goes.
'use strict';

import {el} from './view.js';

function size(bytes) {
  if (bytes < 1024) return `${bytes} bytes`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}

function base64Of(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).replace(/^data:[^,]*,/, ''));
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

export class Composer {
  constructor({form, text, file, attach, list, notice}, {send}) {
    this.form = form;
    this.text = text;
    this.file = file;
    this.attach = attach;
    this.list = list;
    this.noticeNode = notice;
    this.send = send;
    this.files = [];
    this.maxBytes = 0;
    this.maxText = Infinity;
    text.addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter' && !ev.shiftKey && !ev.ctrlKey && !ev.altKey && !ev.metaKey && !ev.isComposing) {
        ev.preventDefault();
        this.submit();
      }
    });
    text.addEventListener('input', () => this.fit());
    text.addEventListener('paste', (ev) => {
      const pasted = [...(ev.clipboardData ? ev.clipboardData.files : [])];
      if (pasted.length) {
        ev.preventDefault();
        this.add(pasted);
      }
    });
    file.addEventListener('change', () => {
      this.add([...file.files]);
      file.value = '';
    });
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      this.submit();
    });
  }

  /** What the server takes: ``text`` characters, ``file_bytes`` for one message's files (0: none). */
  limits({text: maxText, file_bytes: fileBytes}) {
    this.maxText = maxText || Infinity;
    this.maxBytes = fileBytes || 0;
    this.attach.hidden = this.maxBytes === 0;
  }

  fit() {
    this.text.style.height = 'auto';
    this.text.style.height = `${this.text.scrollHeight + 2}px`;
  }

  notice(text) {
    this.noticeNode.textContent = text;
    this.noticeNode.hidden = !text;
  }

  add(files) {
    this.notice('');
    for (const file of files) {
      const total = this.files.reduce((sum, f) => sum + f.size, 0) + file.size;
      if (this.maxBytes === 0) {
        this.notice('This chat takes no files.');
        return;
      }
      if (total > this.maxBytes) {
        this.notice(`${file.name} is ${size(file.size)}: a message may carry up to ${size(this.maxBytes)} of files, so it was not added.`);
        continue;
      }
      this.files.push(file);
    }
    this.showFiles();
  }

  showFiles() {
    this.list.replaceChildren(...this.files.map((file, index) => el('li', {},
      `${file.name} (${size(file.size)})`,
      el('button', {type: 'button', title: `Remove ${file.name}`, text: '×', on: {click: () => {
        this.files.splice(index, 1);
        this.showFiles();
      }}}))));
    this.list.hidden = this.files.length === 0;
  }

  async submit() {
    const text = this.text.value;
    if (!text.trim() && this.files.length === 0) return;
    if (text.length > this.maxText) {
      this.notice(`The message is ${text.length} characters; the limit is ${this.maxText}. Nothing was sent.`);
      return;
    }
    const files = this.files;
    let encoded;
    try {
      encoded = await Promise.all(files.map(async (f) => ({
        name: f.name, type: f.type || 'application/octet-stream', size: f.size,
        data: await base64Of(f), preview: URL.createObjectURL(f),
      })));
    } catch (err) {
      this.notice(`A file could not be read, so nothing was sent: ${err}`);
      return;
    }
    this.files = [];
    this.showFiles();
    this.notice('');
    this.text.value = '';
    this.fit();
    this.send(text, encoded);
  }
}
