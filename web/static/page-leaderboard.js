// #/leaderboards/{benchmark} and #/phases/{id}

import { api } from './api.js';
import { quotaText } from './page-home.js';
import { loadBenchmarkInfo, metricInfoMap, renderLeaderboard } from './leaderboard.js';
import { badge, defList, enc, errorBox, h, loading, timeEl } from './ui.js';

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
        ],
        'phase-props',
      ),
    ),
  );
  const sec = h('section.card#leaderboard', h('h2', 'Leaderboard'));
  root.append(sec);
  const bench = await loadBenchmarkInfo(phase.benchmark, ctx.signal);
  if (!ctx.live()) return;
  await renderLeaderboard(sec, `phases/${enc(id)}/leaderboard`, metricInfoMap(bench), ctx);
}
