// #/leaderboards/{benchmark} and #/phases/{id}

import { api, uploadFile, whoami, withQuery } from './api.js';
import { quotaText } from './page-home.js';
import { loadBenchmarkInfo, metricInfoMap, renderLeaderboard } from './leaderboard.js';
import { badge, clear, defList, enc, errorBox, h, loading, notice, timeEl } from './ui.js';

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
  await renderLeaderboard(sec, `leaderboards/${enc(benchmark)}`, metricInfoMap(bench), ctx);
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
          ['Leaderboard', [badge(phase.leaderboard || 'public'), phase.leaderboard === 'private' ? ' results hidden from teams until the phase ends' : '']],
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
  const bench = await loadBenchmarkInfo(phase.benchmark, ctx.signal);
  if (!ctx.live()) return;
  await renderLeaderboard(sec, `phases/${enc(id)}/leaderboard`, metricInfoMap(bench), ctx);
}

/**
 * Hand in an exported policy (ONNX, mjlab / BeyondMimic or holosoma metadata): the server checks
 * it against the phase's benchmark, then runs it itself (POST /api/v1/submissions/hosted). A
 * refused file lists every problem and uses no quota.
 */
function uploadForm(phase) {
  const file = h('input', { type: 'file', name: 'policy', accept: '.onnx', required: true, 'data-testid': 'upload-file' });
  const name = h('input', { type: 'text', name: 'agent_name', placeholder: 'from the file (its run, else its name)', 'data-testid': 'upload-agent-name' });
  const result = h('div', { 'data-testid': 'upload-result' });
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
    }
  });
  return h(
    'section.card#upload',
    h('h2', 'Hand in a policy file'),
    h('p.muted', 'An ONNX export with its metadata (mjlab / BeyondMimic or holosoma). The server checks it against this phase’s benchmark, then evaluates it itself; nothing of yours needs to stay connected.'),
    form,
  );
}
