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
  const rows = $('box-list');
  rows.replaceChildren();
  for (const b of boxes) {
    const tr = document.createElement('tr');
    for (const v of [b.name, b.state, b.size, b.role]) {
      const td = document.createElement('td');
      td.textContent = v || '';
      tr.append(td);
    }
    const open = document.createElement('button');
    open.textContent = 'Open';
    open.addEventListener('click', () => openBox(b.id).catch(report));
    const td = document.createElement('td');
    td.append(open);
    tr.append(td);
    rows.append(tr);
  }
  if (boxes.length === 0) {
    const tr = document.createElement('tr');
    const td = document.createElement('td');
    td.colSpan = 5;
    td.textContent = 'No boxes yet: create one above.';
    tr.append(td);
    rows.append(tr);
  }
  show('boxes');
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
}

async function openBox(id) {
  closeBox();
  current = { id };
  const b = await call('BoxService/GetBox', { box: id });
  render(b);
  show('box');
  agent.open(id).catch(report); // the runs load beside the desktop, not before it
  await connect(false);
  current.poll = setInterval(async () => {
    try { render(await call('BoxService/GetBox', { box: id })); } catch (e) { report(e); }
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

function closeBox() {
  if (!current) return;
  agent.close();
  clearInterval(current.poll);
  if (current.rfb) current.rfb.disconnect();
  current = null;
}

async function main() {
  agent = agentPanel(call, report);
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
  busy($('takeover'), async () => { render(await call('BoxService/TakeOver', { box: current.id })); await connect(true); });
  busy($('handback'), async () => { render(await call('BoxService/HandBack', { box: current.id })); await connect(false); });

  if (!localStorage.getItem(tokenKey)) { show('signin'); return; }
  try { await signIn(localStorage.getItem(tokenKey)); } catch (e) { report(e); show('signin'); }
}

main().catch(report); // a module script runs after the document is parsed

// Installable: the service worker keeps the app's own files, so an installed window opens
// offline (and says the API is unreachable) rather than not at all.
if ('serviceWorker' in navigator) {
  navigator.serviceWorker.register('/sw.js', { scope: '/' }).catch(() => {});
}
