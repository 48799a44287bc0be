// The agent panel beside the desktop: give the box's agent a task, pick one of its latest runs,
// and follow the selected run step by step by polling GetRun while it has not ended, with the
// model's text of the step under way streamed beside it (WatchRun's text events). Every piece of
// run data reaches the page through textContent, never as markup.

const $ = (id) => document.getElementById(id);

// ended are the states a run does not leave; any other state is polled.
const ended = new Set(['succeeded', 'failed', 'cancelled']);
const pollMs = 1000;
const planMarks = { todo: '☐', doing: '▶', done: '☑', skipped: '–' };
const listEvery = 10; // polls between refreshes of the run list, to notice runs started elsewhere

const notes = {
  running: 'The agent is working.',
  waiting: 'A person holds the desktop; hand back to let the agent continue.',
  succeeded: 'The agent finished the task.',
  cancelled: 'The run was cancelled; its steps so far are kept.',
};

// agentPanel wires the panel's controls once; call and report are the app's Connect caller and
// error reporter. open(box) shows a box's runs, close() stops polling.
export function agentPanel(call, report, stream) {
  let box = null;   // the open box's ID
  let run = null;   // the selected run as last fetched
  let timer = null;
  let ticks = 0;
  let gen = 0;      // bumped on every open, close and selection: answers for an older one are dropped
  let live = null;  // the selected run's text stream: { abort, step }

  const active = () => run && !ended.has(run.state);

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(tick, pollMs);
  }

  async function tick() {
    const g = gen;
    try {
      if (active()) {
        const r = await call('AgentService/GetRun', { runId: run.id });
        if (g !== gen) return;
        const changed = r.state !== run.state;
        showRun(r);
        if (changed) await listRuns();
      } else if (++ticks % listEvery === 0) {
        await listRuns();
      }
    } catch (e) {
      if (g === gen) report(e);
    }
    if (g === gen) schedule();
  }

  // listRuns refreshes the run picker, keeping the selection.
  async function listRuns() {
    const g = gen;
    const { runs = [] } = await call('AgentService/ListRuns', { box });
    if (g !== gen) return runs;
    const pick = $('agent-runs');
    pick.replaceChildren();
    for (const r of runs) {
      const when = r.createdAt ? new Date(r.createdAt).toLocaleString() : '';
      pick.append(new Option(`${clip(r.task, 60)} — ${r.state}${when ? ', ' + when : ''}`, r.id));
    }
    if (runs.length === 0) pick.append(new Option('No runs yet', ''));
    pick.disabled = runs.length === 0;
    if (run) pick.value = run.id;
    return runs;
  }

  // select shows one run, fetched fresh, and polls it while it has not ended.
  async function select(id) {
    const g = ++gen;
    run = null;
    unfollow();
    $('agent-steps').replaceChildren();
    showRun(null);
    try {
      if (!id) return;
      const r = await call('AgentService/GetRun', { runId: id });
      if (g !== gen) return;
      $('agent-steps').setAttribute('aria-busy', 'true'); // one announcement for the history, not one per step
      showRun(r);
      $('agent-steps').setAttribute('aria-busy', 'false');
      $('agent-runs').value = r.id;
      if (active()) follow(r.id, g);
    } finally {
      if (g === gen) schedule(); // keep the run list fresh even when the run could not be read
    }
  }

  // showRun renders the run's state and any steps not yet shown. Text is only written when it
  // changes, so the status region is not announced again on every poll.
  function showRun(r) {
    run = r;
    const state = r ? r.state || 'unknown' : '';
    const failed = state === 'failed';
    $('agent-state').hidden = !r;
    set('agent-state', state, 'state ' + state);
    set('agent-model', r && r.model ? 'model ' + r.model : '');
    let note = notes[state] || '';
    if (failed) note = r.error || 'The run failed.';
    else if (state === 'succeeded' && r.result) note = r.result; // the agent's answer, where the server says it
    else if (state === 'waiting_for_user') note = 'The agent asks: ' + (r.question || '') + ' Answer below; it goes on with your answer.';
    set('agent-note', note, failed ? 'note bad' : 'note');
    set('agent-run-task', r ? r.task || '' : '');
    const replay = r && r.recording ? '/replay.html#/run/' + r.id : '';
    $('agent-replay').hidden = !replay;
    if (replay && $('agent-replay').getAttribute('href') !== replay) $('agent-replay').href = replay;
    showPlan(r ? r.plan || [] : []);
    if (r) showSteps(r.steps || []);
    const on = active();
    $('agent-cancel').hidden = !on;
    $('agent-message-form').hidden = !on;
  }

  // showPlan shows the agent's checklist (gui_plan) as it last wrote it.
  function showPlan(items) {
    const list = $('agent-plan');
    const sig = JSON.stringify(items);
    if (list.dataset.sig === sig) return;
    list.dataset.sig = sig;
    list.replaceChildren(...items.map((it) => {
      const li = el('li', 'plan ' + (it.status || 'todo'));
      li.append(el('span', 'mark', planMarks[it.status] || '☐'), ' ', it.text || '');
      return li;
    }));
    list.hidden = items.length === 0;
  }

  // showSteps appends new steps and replaces changed ones, so the live region reads only news.
  function showSteps(steps) {
    const list = $('agent-steps');
    const shown = new Map();
    for (const li of list.children) shown.set(li.dataset.number, li);
    for (const s of steps) {
      const key = String(s.number || 0);
      const sig = JSON.stringify(s);
      const old = shown.get(key);
      if (old && old.dataset.sig === sig) continue;
      const li = stepItem(s);
      li.dataset.number = key;
      li.dataset.sig = sig;
      if (old) old.replaceWith(li); else list.append(li);
      shown.set(key, li);
      if (imageCount(s) > 0 && run) showShots(li, run.id, s.number).catch(report);
    }
  }

  // showShots adds the step's screenshots (small copies the worker kept) to its item.
  async function showShots(li, runId, step) {
    const g = gen;
    const { images = [] } = await call('AgentService/GetStepImages', { runId, step });
    if (g !== gen || images.length === 0) return;
    const div = el('div', 'shots');
    for (const b64 of images) {
      const img = el('img', 'shot');
      img.alt = 'Screenshot of step ' + step;
      img.src = 'data:image/png;base64,' + b64;
      div.append(img);
    }
    li.append(div);
  }

  $('agent-runs').addEventListener('change', (e) => select(e.target.value).catch(report));

  $('agent-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const task = $('agent-task').value.trim();
    if (!task || !box) return;
    const button = $('agent-run');
    button.disabled = true;
    try {
      const r = await call('AgentService/StartRun', { box, task });
      $('agent-task').value = '';
      await select(r.id);
      await listRuns();
      report(null);
    } catch (err) { report(err); } finally { button.disabled = false; }
  });

  $('agent-message-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const text = $('agent-message').value.trim();
    if (!text || !run) return;
    const button = $('agent-send');
    button.disabled = true;
    try {
      await call('AgentService/SendMessage', { runId: run.id, text });
      $('agent-message').value = '';
      report(null);
    } catch (err) { report(err); } finally { button.disabled = false; }
  });

  $('agent-cancel').addEventListener('click', async () => {
    if (!run) return;
    const button = $('agent-cancel');
    button.disabled = true;
    try {
      const g = gen;
      const r = await call('AgentService/CancelRun', { runId: run.id });
      if (g === gen) showRun(r);
      await listRuns();
      report(null);
    } catch (err) { report(err); } finally { button.disabled = false; }
  });

  // follow streams the run's model text into the live line while the step is under way; a
  // recorded step replaces it (the polled step carries the whole text). Best effort: without the
  // stream the panel still shows every step.
  function follow(id, g) {
    const abort = new AbortController();
    live = { abort, step: 0 };
    const line = $('agent-live');
    stream('AgentService/WatchRun', { runId: id }, (m) => {
      if (g !== gen) return;
      if (m.text) {
        if (m.text.step !== live.step) {
          live.step = m.text.step;
          line.textContent = '';
        }
        line.textContent += m.text.text || '';
        line.hidden = false;
      } else if (m.step && m.step.number >= live.step) {
        line.hidden = true;
        line.textContent = '';
      }
    }, abort.signal).catch(() => {}).finally(() => {
      if (g === gen) line.hidden = true;
    });
  }

  function unfollow() {
    if (live) live.abort.abort();
    live = null;
    $('agent-live').hidden = true;
    $('agent-live').textContent = '';
  }

  function close() {
    gen++;
    unfollow();
    clearTimeout(timer);
    box = null;
    run = null;
    ticks = 0;
    $('agent-runs').replaceChildren();
    $('agent-steps').replaceChildren();
    showRun(null);
  }

  async function open(id) {
    close();
    box = id;
    const g = gen;
    try {
      const runs = await listRuns();
      if (g === gen && runs.length > 0) await select(runs[0].id);
    } finally {
      if (g === gen) schedule();
    }
  }

  return { open, close };
}

// stepItem renders one step: its number, kind and time, the summary, the model's text, the tool
// calls it made (failed ones marked in words, not only colour) and a person's message.
function stepItem(s) {
  const li = el('li', 'step ' + (s.kind || ''));
  const head = el('div', 'step-head');
  head.append(el('strong', '', 'Step ' + (s.number || 0)));
  if (s.kind) head.append(' ', el('span', 'kind', s.kind.replace(/_/g, ' ')));
  if (s.at) {
    const t = el('time', '', new Date(s.at).toLocaleTimeString());
    t.dateTime = s.at;
    head.append(' ', t);
  }
  const tokens = Number(s.tokens || 0);
  if (tokens > 0) {
    const cost = Number(s.costUsd || 0);
    head.append(' ', el('span', 'cost', tokens + ' tokens' + (cost > 0 ? ', $' + cost.toFixed(4) : '')));
  }
  li.append(head);
  // A step without tool calls is summed up by its text's first line: show the text alone.
  if (s.summary && !(s.text || '').trim().startsWith(s.summary)) li.append(el('p', 'summary', s.summary));
  if (s.message) {
    const p = el('p', 'message');
    p.append(el('span', 'who', 'Message: '), s.message);
    li.append(p);
  }
  if (s.text) li.append(el('p', 'text', s.text));
  if (s.question) {
    const p = el('p', 'message');
    p.append(el('span', 'who', 'Asked you: '), s.question);
    li.append(p);
  }
  const calls = s.toolCalls || [];
  if (calls.length > 0) {
    const ul = el('ul', 'tools');
    for (const c of calls) {
      const item = el('li', c.isError ? 'tool error' : 'tool');
      item.append(el('code', '', c.name || 'tool'));
      if (c.isError) item.append(' ', el('span', 'flag', 'error'));
      const n = Array.isArray(c.images) ? c.images.length : Number(c.images) || 0;
      if (n > 0) item.append(' ', el('span', 'images', n === 1 ? '1 image' : n + ' images'));
      if (c.result) item.append(el('pre', 'result', c.result));
      ul.append(item);
    }
    li.append(ul);
  }
  return li;
}

// imageCount is how many images the step's tool calls carried.
function imageCount(s) {
  let n = 0;
  for (const c of s.toolCalls || []) n += Array.isArray(c.images) ? c.images.length : Number(c.images) || 0;
  return n;
}

// set writes an element's text and class only when they differ from what it shows.
function set(id, text, className) {
  const e = $(id);
  if (e.textContent !== text) e.textContent = text;
  if (className !== undefined && e.className !== className) e.className = className;
}

function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

function clip(s, n) {
  s = (s || '').replace(/\s+/g, ' ').trim();
  return s.length > n ? s.slice(0, n - 1) + '…' : s;
}
