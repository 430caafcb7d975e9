// #/leaderboards/{benchmark} and #/phases/{id}

import { api, uploadFile, whoami, withQuery } from './api.js';
import { quotaText } from './page-home.js';
import { loadBenchmarkInfo, phaseResultsHidden, renderLeaderboard } from './leaderboard.js';
import { badge, clear, defList, enc, errorBox, h, loading, notice, regainFocus, timeEl } from './ui.js';

export async function leaderboardPage(root, { benchmark }, ctx) {
  root.append(
    h('p.crumbs', h('a', { href: '#/' }, 'Home'), ' / ', h('a', { href: `#/benchmarks/${enc(benchmark)}` }, benchmark), ' / leaderboard'),
    h('h1', 'Leaderboard: ', benchmark),
  );
  const sec = h('section.card#leaderboard', loading());
  root.append(sec);
  const bench = await loadBenchmarkInfo(benchmark, ctx.signal);
  if (!ctx.live()) return;
  if (bench && bench.ranking_rule) sec.before(h('p.ranking-rule', bench.ranking_rule));
  sec.querySelector('.loading')?.remove();
  await renderLeaderboard(sec, `leaderboards/${enc(benchmark)}`, bench, ctx);
}

export async function phasePage(root, { id }, ctx) {
  root.append(h('p.crumbs', h('a', { href: '#/' }, 'Home'), ' / phase'), loading());
  let phase;
  try {
    phase = await api(`phases/${enc(id)}`, { signal: ctx.signal });
  } catch (e) {
    if (e && e.name === 'AbortError') throw e;
    root.querySelector('.loading')?.remove();
    root.append(h('h1', 'Phase ', id), errorBox(e));
    return;
  }
  if (!ctx.live()) return;
  root.querySelector('.loading')?.remove();
  root.append(
    h('h1', { 'data-testid': 'phase-title' }, 'Phase ', h('span.mono', phase.id), ' ', badge(phase.state || '?', null, 'phase-state')),
    h(
      'section.card',
      defList(
        [
          ['Challenge', phase.challenge_id || '—'],
          ['Benchmark', h('a', { href: `#/benchmarks/${enc(phase.benchmark)}` }, phase.benchmark)],
          ['Opens', timeEl(phase.starts_at)],
          ['Closes', timeEl(phase.ends_at)],
          ['Leaderboard', [badge(phase.leaderboard || 'public'), leaderboardNote(phase)]],
          ['Quotas per team', quotaText(phase)],
          ['Observation groups', phase.observation_groups ? phase.observation_groups.join(', ') : "the benchmark's own"],
          ['Who runs', phase.hosted_only ? [badge('hosted only', 'teal'), ' uploaded policy files only: the server runs them, no agent receives the motions'] : 'your agent (arena-agent, the SDKs) or an uploaded policy file'],
        ],
        'phase-props',
      ),
    ),
  );
  const me = await whoami();
  if (!ctx.live()) return;
  if (me.role === 'team' && phase.state === 'open') root.append(uploadForm(phase));
  const sec = h('section.card#leaderboard', h('h2', 'Leaderboard'));
  root.append(sec);
  // The server refuses a private phase's board (403 hidden) to everyone but the admin until the
  // phase ends: the page knows it already, so it says so instead of asking.
  if (phaseResultsHidden(phase) && me.role !== 'admin') {
    sec.append(notice(['The leaderboard of private phase ', h('span.mono', phase.id), ' is hidden until the phase ends (', timeEl(phase.ends_at), ').'], 'warn', 'leaderboard-hidden'));
    return;
  }
  const bench = await loadBenchmarkInfo(phase.benchmark, ctx.signal);
  if (!ctx.live()) return;
  await renderLeaderboard(sec, `phases/${enc(id)}/leaderboard`, bench, ctx);
}

/** What a private board means now: hidden from teams until the end, or shown since it ended. */
function leaderboardNote(phase) {
  if (phase.leaderboard !== 'private') return '';
  return phaseResultsHidden(phase) ? ' results hidden from teams until the phase ends' : ' results shown now that the phase has ended';
}

/**
 * Hand in an exported policy (ONNX, mjlab / BeyondMimic or holosoma metadata): the server checks
 * it against the phase's benchmark, then runs it itself (POST /api/v1/submissions/hosted). A
 * refused file lists every problem and uses no quota.
 */
function uploadForm(phase) {
  const file = h('input', { type: 'file', name: 'policy', accept: '.onnx', required: true, 'data-testid': 'upload-file' });
  const name = h('input', { type: 'text', name: 'agent_name', placeholder: 'from the file (its run, else its name)', 'data-testid': 'upload-agent-name' });
  // A live region: the check's progress and its refusal are said, not only drawn.
  const result = h('div', { 'data-testid': 'upload-result', 'aria-live': 'polite' });
  const submit = h('button', { type: 'submit', 'data-testid': 'upload-submit' }, 'Upload and evaluate');
  const form = h(
    'form.upload',
    { 'data-testid': 'upload-form' },
    h('label', 'Policy file (ONNX) ', file),
    h('label', 'Agent name ', name),
    submit,
    result,
  );
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const f = file.files && file.files[0];
    if (!f) return;
    clear(result);
    const hadFocus = document.activeElement === submit;
    submit.disabled = true;
    result.append(notice(`Checking ${f.name} against ${phase.benchmark}…`, 'info'));
    try {
      const sub = await uploadFile(withQuery('submissions/hosted', { phase: phase.id, file_name: f.name, agent_name: name.value.trim() }), f);
      location.hash = `#/submissions/${enc(sub.id)}`;
    } catch (e) {
      clear(result);
      if (e.problems && e.problems.length) {
        result.append(
          h('div.error', { 'data-testid': 'upload-problems' }, h('p', `${f.name} cannot run here (nothing was created; no quota used):`), h('ul', ...e.problems.map((p) => h('li', p)))),
        );
      } else {
        result.append(errorBox(e));
      }
    } finally {
      submit.disabled = false;
      if (hadFocus) regainFocus(submit);
    }
  });
  return h(
    'section.card#upload',
    h('h2', 'Hand in a policy file'),
    h('p.muted', 'An ONNX export with its metadata (mjlab / BeyondMimic or holosoma). The server checks it against this phase’s benchmark, then evaluates it itself; nothing of yours needs to stay connected.'),
    form,
  );
}
