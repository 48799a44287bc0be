// The cocoonbox web app: every action is a Connect/JSON call to the API on this origin, with the
// user's bearer token; the desktop is noVNC over the API's desktop edge, opened with a
// short-lived ticket. No build step: plain ES modules.
import RFB from './novnc/core/rfb.js';
import { agentPanel } from './agent.js';

const $ = (id) => document.getElementById(id);
const tokenKey = 'cocoonbox.token';
let current = null; // { id, box, rfb, control, poll }
let agent = null;   // the agent panel beside the desktop

// call makes one Connect unary call and returns the decoded answer, or throws the API's message.
async function call(method, body = {}) {
  const res = await fetch('/cocoonbox.v1.' + method, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'Authorization': 'Bearer ' + localStorage.getItem(tokenKey) },
    body: JSON.stringify(body),
  });
  const data = await res.json().catch(() => ({}));
  if (!res.ok) {
    if (res.status === 401) signOut();
    throw new Error(data.message || res.statusText);
  }
  return data;
}

// stream makes one Connect server-streaming call (JSON messages in 5-byte envelopes) and gives
// each message to onMessage until the stream ends, signal aborts it, or it fails (thrown).
async function stream(method, body, onMessage, signal) {
  const frame = new TextEncoder().encode(JSON.stringify(body));
  const req = new Uint8Array(5 + frame.length);
  new DataView(req.buffer).setUint32(1, frame.length);
  req.set(frame, 5);
  const res = await fetch('/cocoonbox.v1.' + method, {
    method: 'POST', signal, body: req,
    headers: { 'Content-Type': 'application/connect+json', 'Authorization': 'Bearer ' + localStorage.getItem(tokenKey) },
  });
  if (!res.ok) throw new Error(res.statusText);
  const reader = res.body.getReader();
  const text = new TextDecoder();
  let buf = new Uint8Array(0);
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    const joined = new Uint8Array(buf.length + value.length);
    joined.set(buf);
    joined.set(value, buf.length);
    buf = joined;
    while (buf.length >= 5) {
      const flags = buf[0];
      const len = new DataView(buf.buffer, buf.byteOffset + 1, 4).getUint32(0);
      if (buf.length < 5 + len) break;
      const msg = JSON.parse(text.decode(buf.subarray(5, 5 + len)) || '{}');
      buf = buf.subarray(5 + len);
      if (flags & 2) { // the end of the stream, with its error if it failed
        if (msg.error) throw new Error(msg.error.message || msg.error.code);
        return;
      }
      onMessage(msg);
    }
  }
}

function show(section) {
  for (const s of ['signin', 'boxes', 'box']) $(s).hidden = s !== section;
}

function report(err) {
  $('error').textContent = err ? String(err.message || err) : '';
  $('error').hidden = !err;
  if (err) setTimeout(() => { $('error').hidden = true; }, 6000);
}

// busy disables a button while its call runs, and reports a failure.
function busy(button, f) {
  button.addEventListener('click', async () => {
    button.disabled = true;
    try { await f(); report(null); } catch (e) { report(e); } finally { button.disabled = false; }
  });
}

async function signIn(token) {
  localStorage.setItem(tokenKey, token);
  const me = await call('AccountService/WhoAmI');
  $('who').textContent = me.user.name;
  $('who').dataset.id = me.user.id;
  $('signout').hidden = false;
  await listBoxes();
  // #/box/<id> opens that box: the link `cocoonbox desktop BOX` prints.
  const m = location.hash.match(/^#\/box\/(bx_[0-9a-f]{16})$/);
  if (m) await openBox(m[1]);
}

function signOut() {
  localStorage.removeItem(tokenKey);
  closeBox();
  $('who').textContent = '';
  $('signout').hidden = true;
  show('signin');
}

async function listBoxes() {
  closeBox();
  const { boxes = [] } = await call('BoxService/ListBoxes');
  const names = new Map(boxes.map(b => [b.id, b.name]));
  fillTable($('box-list'), boxes.map(b => {
    const open = document.createElement('button');
    open.textContent = 'Open';
    open.addEventListener('click', () => openBox(b.id).catch(report));
    const name = b.parent ? b.name + ' (fork of ' + (names.get(b.parent) || b.parent) + ')' : b.name;
    return [name, b.state, b.size, b.role, open];
  }), 5, 'No boxes yet: create one above.');
  show('boxes');
  listUsage().catch(report);
}

// listUsage shows what the user's agent runs' model calls used in the last 30 days, by model,
// and the hours each box ran in them with what its snapshots store.
async function listUsage() {
  const since = new Date(Date.now() - 30 * 24 * 3600 * 1000).toISOString();
  const { rows = [], boxes = [] } = await call('AccountService/GetUsage', { by: 'model', since });
  fillTable($('usage-list'), rows.map(r =>
    [r.key, r.calls, r.inputTokens, r.cachedTokens, r.outputTokens, Number(r.costUsd || 0).toFixed(4)].map(v => String(v ?? 0))),
  6, 'No model calls yet.');
  fillTable($('box-usage-list'), boxes.map(b =>
    [b.name, Number(b.hours || 0).toFixed(2), String(b.snapshots || 0), sizeText(Number(b.snapshotBytes || 0))]),
  4, 'No boxes in these 30 days.');
}

// fillTable replaces the rows of tbody with one per cells (text or an element each), or one
// row saying empty across span columns when there are none.
function fillTable(tbody, rows, span, empty) {
  tbody.replaceChildren();
  for (const cells of rows) {
    const tr = document.createElement('tr');
    for (const c of cells) {
      const td = document.createElement('td');
      if (c instanceof Node) td.append(c); else td.textContent = c ?? '';
      tr.append(td);
    }
    tbody.append(tr);
  }
  if (rows.length === 0) {
    const tr = document.createElement('tr');
    const td = document.createElement('td');
    td.colSpan = span;
    td.textContent = empty;
    tr.append(td);
    tbody.append(tr);
  }
}

// sizeText writes a byte count in binary units, as the CLI does.
function sizeText(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return i === 0 ? n + ' B' : n.toFixed(1) + ' ' + units[i];
}

function render(b) {
  current.box = b;
  $('box-name').textContent = b.name;
  $('box-state').textContent = b.state;
  $('box-state').className = 'state ' + b.state;
  const n = b.viewers || 0;
  $('box-viewers').textContent = n === 1 ? '1 viewer' : n + ' viewers';
  const me = $('who').dataset.id;
  const mine = b.controller && b.controller === me;
  $('takeover').hidden = mine;
  $('handback').hidden = !mine;
  $('wake').disabled = b.state === 'running';
  $('hibernate').disabled = b.state !== 'running';
  $('fork').hidden = b.role !== 'owner' && b.role !== 'admin';
  $('fork').disabled = b.state !== 'running' && b.state !== 'hibernated';
  const banner = bannerText(b);
  $('box-banner').textContent = banner;
  $('box-banner').hidden = banner === '';
}

// bannerWarn is how long before an idle hibernate the page says it is coming (the box's own
// idle_warning is at most this far ahead too).
const bannerWarn = 2 * 60 * 1000;

// bannerText is what the box is waiting for, what is about to happen to it, or what happened
// that its user must know; '' for nothing.
function bannerText(b) {
  if (b.waiting) return 'Waiting: ' + b.waiting;
  if (b.state === 'failed' && (b.lastError || '').startsWith('lost:')) {
    return 'This box was lost with no snapshot to rebuild it from. Recreate starts it again from its template, empty.';
  }
  if (b.restoredFrom && b.restoredFrom.at && Date.now() - Date.parse(b.restoredFrom.at) < 10 * 60 * 1000) {
    return 'This box was rebuilt from snapshot ' + b.restoredFrom.snapshotId + ', taken ' +
      new Date(b.restoredFrom.takenAt).toLocaleString() + ': its sandbox was lost.';
  }
  if (b.state === 'running' && b.idleDeadline) {
    const left = Date.parse(b.idleDeadline) - Date.now();
    if (left > 0 && left <= bannerWarn) {
      return 'Nothing is happening here: the box hibernates at ' + new Date(b.idleDeadline).toLocaleTimeString() +
        ' unless you use it.';
    }
  }
  if (b.seal === 'sealing') return 'Sealing: the box\'s disk is uploading to a verified snapshot.';
  return '';
}

// listEvents adds the box's events since the last one shown, newest at the bottom.
async function listEvents() {
  const id = current.id;
  const { events = [] } = await call('BoxService/ListEvents', { box: id, afterId: current.lastEvent || 0, limit: 100 });
  if (current.id !== id) return;
  const list = $('box-events');
  for (const e of events) {
    current.lastEvent = Math.max(current.lastEvent || 0, Number(e.id));
    const li = document.createElement('li');
    const at = document.createElement('time');
    at.dateTime = e.at;
    at.textContent = new Date(e.at).toLocaleTimeString();
    let detail = '';
    try { detail = JSON.parse(e.detail || '{}').detail || ''; } catch { detail = ''; }
    li.append(at, e.action.replace(/^box\./, '') + (detail ? ': ' + detail : ''));
    list.append(li);
  }
  while (list.children.length > 200) list.firstChild.remove();
}

async function openBox(id) {
  closeBox();
  current = { id };
  const b = await call('BoxService/GetBox', { box: id });
  render(b);
  show('box');
  agent.open(id).catch(report); // the runs load beside the desktop, not before it
  listPorts().catch(report);
  await connect(false);
  $('box-events').replaceChildren();
  const events = b.role !== 'viewer'; // the events name commands and paths: drivers read them
  $('box-events').hidden = $('events-title').hidden = !events;
  if (events) listEvents().catch(report);
  current.poll = setInterval(async () => {
    try { render(await call('BoxService/GetBox', { box: id })); } catch (e) { report(e); }
    if (events) listEvents().catch(report);
  }, 2000);
}

// connect opens the desktop in view or control mode, with a fresh ticket.
async function connect(control) {
  if (current.rfb) { current.rfb.disconnect(); current.rfb = null; }
  const t = await call('BoxService/DesktopTicket', { box: current.id, control });
  const url = (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + t.url;
  const rfb = new RFB($('screen'), url, { wsProtocols: ['binary'], shared: true });
  rfb.viewOnly = !control;
  rfb.scaleViewport = true;
  rfb.addEventListener('disconnect', (e) => {
    if (!e.detail.clean) report('the desktop connection closed');
  });
  current.rfb = rfb;
  current.control = control;
}

// listPorts shows what listens in the box, each with a link that opens its preview (on its own
// host, with a one-time ticket that becomes a session cookie for that host) and, for the owner, a
// switch that makes it public.
async function listPorts() {
  const id = current.id;
  const { ports = [] } = await call('BoxService/ListPorts', { box: id });
  if (!current || current.id !== id) return;
  const list = $('port-list');
  list.replaceChildren();
  if (ports.length === 0) {
    const li = document.createElement('li');
    li.textContent = 'nothing listens yet';
    list.append(li);
  }
  for (const p of ports) {
    const li = document.createElement('li');
    const open = document.createElement('button');
    open.textContent = String(p.port);
    open.title = p.previewHost ? 'open ' + p.previewHost : 'this API has no preview domain: use cocoonbox box port';
    open.disabled = !p.previewHost;
    open.addEventListener('click', async () => {
      try {
        const t = await call('BoxService/DesktopTicket', { box: id, previewPort: p.port });
        window.open(location.protocol + t.url, '_blank', 'noopener');
      } catch (e) { report(e); }
    });
    li.append(open);
    if (current.box && current.box.role === 'owner') {
      const label = document.createElement('label');
      const box = document.createElement('input');
      box.type = 'checkbox';
      box.checked = !!p.public;
      box.addEventListener('change', async () => {
        try { await call('BoxService/SetPortPublic', { box: id, port: p.port, public: box.checked }); }
        catch (e) { box.checked = !box.checked; report(e); }
      });
      label.append(box, ' public');
      li.append(label);
    }
    list.append(li);
  }
}

// filesURL is where the API serves a box path over plain HTTP.
function filesURL(path) {
  return '/v1/boxes/' + current.id + '/files' + path.split('/').map(encodeURIComponent).join('/');
}

// upload puts a local file at path in the box, with its progress beside the desktop. The box's
// file is replaced only once all of it has arrived.
function upload(file, path) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open('PUT', filesURL(path));
    xhr.setRequestHeader('Authorization', 'Bearer ' + localStorage.getItem(tokenKey));
    xhr.upload.onprogress = (e) => {
      if (e.lengthComputable) $('upload-status').textContent = file.name + ' ' + Math.floor(100 * e.loaded / e.total) + '%';
    };
    xhr.onload = () => {
      if (xhr.status === 200) { $('upload-status').textContent = file.name + ' → ' + path; resolve(); return; }
      let msg = xhr.statusText;
      try { msg = JSON.parse(xhr.responseText).message || msg; } catch { /* not JSON */ }
      $('upload-status').textContent = '';
      reject(new Error('upload ' + file.name + ': ' + msg));
    };
    xhr.onerror = () => reject(new Error('upload ' + file.name + ': the connection failed'));
    xhr.send(file);
  });
}

// download saves the box's file at path through the browser.
async function download(path) {
  if (!path.startsWith('/')) throw new Error('give the absolute path of a file in the box');
  const res = await fetch(filesURL(path), { headers: { 'Authorization': 'Bearer ' + localStorage.getItem(tokenKey) } });
  if (!res.ok) {
    const data = await res.json().catch(() => ({}));
    throw new Error(data.message || res.statusText);
  }
  const a = document.createElement('a');
  a.href = URL.createObjectURL(await res.blob());
  a.download = path.split('/').pop();
  a.click();
  setTimeout(() => URL.revokeObjectURL(a.href), 60000);
}

function closeBox() {
  if (!current) return;
  agent.close();
  clearInterval(current.poll);
  if (current.rfb) current.rfb.disconnect();
  current = null;
}

async function main() {
  agent = agentPanel(call, report, stream);
  $('signin-form').addEventListener('submit', (e) => {
    e.preventDefault();
    signIn($('token').value.trim()).catch(report);
  });
  $('signout').addEventListener('click', signOut);
  $('back').addEventListener('click', () => listBoxes().catch(report));
  $('create-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    try {
      const b = await call('BoxService/CreateBox', { name: $('create-name').value });
      $('create-name').value = '';
      await openBox(b.id);
    } catch (err) { report(err); }
  });
  busy($('wake'), async () => { render(await call('BoxService/WakeBox', { box: current.id })); await connect(current.control); });
  busy($('hibernate'), async () => { render(await call('BoxService/HibernateBox', { box: current.id })); });
  busy($('snapshot'), async () => {
    const s = await call('BoxService/SnapshotBox', { box: current.id });
    report('snapshot ' + s.id + ' complete');
  });
  busy($('fork'), async () => {
    const r = await call('BoxService/ForkBox', { box: current.id, count: 1 });
    const f = r.boxes[0];
    await openBox(f.id);
    report(f.name + ' is a fork of this box as it was a moment ago (it paused ' + (r.pausedMs || 0) + ' ms for the copy)');
  });
  busy($('takeover'), async () => { render(await call('BoxService/TakeOver', { box: current.id })); await connect(true); });
  busy($('handback'), async () => { render(await call('BoxService/HandBack', { box: current.id })); await connect(false); });
  $('terminal').addEventListener('click', () => window.open('/terminal.html#/box/' + current.id, '_blank'));
  busy($('download'), () => download($('download-path').value.trim()));
  busy($('ports-refresh'), listPorts);
  const screen = $('screen');
  screen.addEventListener('dragover', (e) => { e.preventDefault(); screen.classList.add('dropping'); });
  screen.addEventListener('dragleave', () => screen.classList.remove('dropping'));
  screen.addEventListener('drop', async (e) => {
    e.preventDefault();
    screen.classList.remove('dropping');
    try {
      for (const f of e.dataTransfer.files) await upload(f, '/home/user/Desktop/' + f.name);
      report(null);
    } catch (err) { report(err); }
  });

  if (!localStorage.getItem(tokenKey)) { show('signin'); return; }
  try { await signIn(localStorage.getItem(tokenKey)); } catch (e) { report(e); show('signin'); }
}

main().catch(report); // a module script runs after the document is parsed

// Installable: the service worker keeps the app's own files, so an installed window opens
// offline (and says the API is unreachable) rather than not at all.
if ('serviceWorker' in navigator) {
  navigator.serviceWorker.register('/sw.js', { scope: '/' }).catch(() => {});
}
