// The web terminal: a login shell in the box (as its desktop's user) on xterm.js, over the API's
// terminal edge, opened with a short-lived terminal ticket. It is a page of its own, opened from
// the box's view, because xterm.js styles itself with <style> elements: only this page's policy
// allows inline styles, and no box data reaches it as markup (the terminal draws text).
import { Terminal } from './xterm/xterm.mjs';
import { FitAddon } from './xterm/addon-fit.mjs';

const $ = (id) => document.getElementById(id);
const token = localStorage.getItem('cocoonbox.token');

async function call(method, body) {
  const res = await fetch('/cocoonbox.v1.' + method, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'Authorization': 'Bearer ' + token },
    body: JSON.stringify(body),
  });
  const data = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(data.message || res.statusText);
  return data;
}

function setStatus(text, cls) {
  $('term-status').textContent = text;
  $('term-status').className = 'state ' + (cls || '');
}

async function main() {
  const m = location.hash.match(/^#\/box\/(bx_[0-9a-f]{16})$/);
  if (!m) throw new Error('open the terminal from a box: no box in the address');
  if (!token) throw new Error('sign in to the app first');
  const box = await call('BoxService/GetBox', { box: m[1] });
  $('term-title').textContent = box.name;
  document.title = box.name + ' — cocoonbox terminal';

  const term = new Terminal({ cursorBlink: true, fontSize: 14, scrollback: 5000 });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.open($('term'));
  fit.fit();
  window.cocoonboxTerminal = term; // for the app's tests, which read what the terminal shows

  const t = await call('BoxService/DesktopTicket', { box: box.id, terminal: true });
  const url = (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + t.url +
    '&rows=' + term.rows + '&cols=' + term.cols;
  const ws = new WebSocket(url, ['binary']);
  ws.binaryType = 'arraybuffer';
  const enc = new TextEncoder();
  ws.onopen = () => { setStatus('connected', 'running'); term.focus(); };
  ws.onmessage = (e) => {
    if (typeof e.data === 'string') {
      const msg = JSON.parse(e.data);
      if ('exit' in msg) { term.write('\r\n[the shell exited with status ' + msg.exit + ']\r\n'); setStatus('exited ' + msg.exit); }
      return;
    }
    term.write(new Uint8Array(e.data));
  };
  ws.onclose = (e) => {
    if ($('term-status').textContent === 'connected') setStatus('closed' + (e.reason ? ': ' + e.reason : ''), 'failed');
  };
  const send = (bytes) => { if (ws.readyState === WebSocket.OPEN) ws.send(bytes); };
  term.onData((d) => send(enc.encode(d)));
  term.onBinary((d) => send(Uint8Array.from(d, (c) => c.charCodeAt(0))));
  term.onResize(({ rows, cols }) => { if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ resize: { rows, cols } })); });
  window.addEventListener('resize', () => fit.fit());
}

main().catch((e) => {
  $('error').textContent = String(e.message || e);
  $('error').hidden = false;
  setStatus('not connected', 'failed');
});
