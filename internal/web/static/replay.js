// The replay of a recorded agent run: the box's desktop as the run saw it, in noVNC, with the
// run's steps and the moments a person took the desktop over or handed it back as marks to seek
// to. The recording is the RFB stream the box's server sent, with the time of each piece (see
// activities.RecordDesktop); noVNC reads it from a channel that plays it back and drops what
// noVNC sends. Seeking plays the stream from the last session start up to the moment at once.
import RFB from './novnc/core/rfb.js';

const $ = (id) => document.getElementById(id);
const token = localStorage.getItem('cocoonbox.token');
const restart = 0xFFFFFFFF;

let records = [];  // { t: ms, data: Uint8Array, or null for a new session }
let end = 0;       // the last record's time
let rfb = null, ch = null;
let next = 0;      // the next record to play
let zero = 0;      // performance.now() at the recording's 0 while playing
let playing = false;

async function get(path) {
  const res = await fetch(path, { headers: { 'Authorization': 'Bearer ' + token } });
  if (!res.ok) {
    const data = await res.json().catch(() => ({}));
    throw new Error(data.message || res.statusText);
  }
  return res;
}

function parse(u8) {
  const dv = new DataView(u8.buffer, u8.byteOffset, u8.byteLength);
  for (let o = 0; o + 8 <= u8.length;) {
    const t = dv.getUint32(o), n = dv.getUint32(o + 4);
    o += 8;
    if (n === restart) {
      records.push({ t, data: null });
      continue;
    }
    records.push({ t, data: u8.slice(o, o + n) });
    o += n;
  }
}

// session starts a fresh noVNC on a channel the recording feeds.
function session() {
  if (rfb) rfb.disconnect();
  $('screen').replaceChildren();
  ch = {
    binaryType: 'arraybuffer', protocol: '', readyState: 'open',
    onmessage: null, onopen: null, onclose: null, onerror: null,
    send() {}, // a recording answers nothing
    close() { this.readyState = 'closed'; },
  };
  rfb = new RFB($('screen'), ch, { shared: true });
  rfb.viewOnly = true;
  rfb.scaleViewport = true;
}

function feed(i) {
  const r = records[i];
  if (r.data === null) {
    session();
    return;
  }
  if (ch && ch.onmessage) ch.onmessage({ data: r.data.buffer.slice(r.data.byteOffset, r.data.byteOffset + r.data.byteLength) });
}

// seek shows the screen at t: the stream from the session start before t, played at once.
function seek(t) {
  let from = 0;
  for (let i = 0; i < records.length && records[i].t <= t; i++) {
    if (records[i].data === null) from = i;
  }
  next = from;
  while (next < records.length && records[next].t <= t) feed(next++);
  zero = performance.now() - t;
  show(t);
}

function show(t) {
  $('seek').value = String(t);
  const s = Math.floor(t / 1000);
  $('clock').textContent = Math.floor(s / 60) + ':' + String(s % 60).padStart(2, '0');
}

function tick() {
  if (!playing) return;
  const t = performance.now() - zero;
  while (next < records.length && records[next].t <= t) feed(next++);
  show(Math.min(t, end));
  if (next >= records.length) {
    pause();
    return;
  }
  requestAnimationFrame(tick);
}

function play() {
  playing = true;
  $('play').textContent = 'Pause';
  zero = performance.now() - Number($('seek').value);
  requestAnimationFrame(tick);
}

function pause() {
  playing = false;
  $('play').textContent = 'Play';
}

async function main() {
  const m = location.hash.match(/^#\/run\/(run_[0-9a-f]{32})$/);
  if (!m) throw new Error('open a replay from a run: no run in the address');
  if (!token) throw new Error('sign in to the app first');
  const rec = await (await get('/v1/runs/' + m[1] + '/recording')).json();
  $('replay-title').textContent = 'run ' + rec.run_id + ' on ' + rec.box_id;
  $('replay-status').textContent = rec.ended_at ? 'recorded' : 'recording';
  for (let i = 0; i < rec.chunks; i++) {
    const res = await get('/v1/runs/' + m[1] + '/recording/' + i);
    parse(new Uint8Array(await new Response(res.body.pipeThrough(new DecompressionStream('gzip'))).arrayBuffer()));
  }
  if (records.length === 0) throw new Error('the recording holds nothing yet');
  end = records[records.length - 1].t;
  $('seek').max = String(end);
  for (const mk of rec.markers || []) {
    const b = document.createElement('button');
    b.textContent = mk.label;
    b.dataset.at = String(mk.at_ms);
    b.className = 'marker ' + mk.kind;
    b.addEventListener('click', () => { pause(); seek(Math.min(mk.at_ms, end)); });
    $('markers').append(b);
  }
  $('seek').addEventListener('input', () => { pause(); seek(Number($('seek').value)); });
  $('play').addEventListener('click', () => (playing ? pause() : play()));
  seek(0);
  window.cocoonboxReplay = { ready: true, end, records: records.length }; // for the app's tests
}

main().catch((err) => {
  $('error').textContent = String(err.message || err);
  $('error').hidden = false;
});
