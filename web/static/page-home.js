// #/ : challenges with their phases, and the benchmarks.

import { api } from './api.js';
import { badge, enc, errorBox, h, loading, sortableTable, timeEl } from './ui.js';

export function phaseTable(phases, { showChallenge = false } = {}) {
  const cols = [
    { key: 'id', label: 'Phase', render: (p) => h('a', { href: `#/phases/${enc(p.id)}`, 'data-testid': 'phase-link' }, p.id) },
  ];
  if (showChallenge) cols.push({ key: 'challenge_id', label: 'Challenge' });
  cols.push(
    { key: 'benchmark', label: 'Benchmark', render: (p) => h('a', { href: `#/benchmarks/${enc(p.benchmark)}` }, p.benchmark) },
    { key: 'state', label: 'State', render: (p) => badge(p.state || '?', null, 'phase-state') },
    { key: 'starts_at', label: 'Starts', render: (p) => timeEl(p.starts_at) },
    { key: 'ends_at', label: 'Ends', render: (p) => timeEl(p.ends_at) },
    { key: 'leaderboard', label: 'Leaderboard', render: (p) => badge(p.leaderboard || 'public') },
    { key: 'quotas', label: 'Quotas', sortable: false, render: (p) => quotaText(p) },
    {
      key: 'lb',
      label: '',
      sortable: false,
      render: (p) => h('a.nowrap', { href: `#/phases/${enc(p.id)}` }, 'leaderboard →'),
    },
  );
  return sortableTable(cols, phases, { testid: 'phase-table', empty: 'No phase yet.', rowAttrs: (p) => ({ dataset: { phaseId: p.id } }) });
}

export function quotaText(p) {
  const parts = [];
  if (p.max_submissions_per_day != null) parts.push(`${p.max_submissions_per_day}/day (UTC)`);
  if (p.max_submissions_total != null) parts.push(`${p.max_submissions_total} total`);
  return parts.length ? parts.join(', ') : h('span.muted', 'no limit');
}

export async function homePage(root, _params, ctx) {
  root.append(
    h('h1', 'MimicArena'),
    h('p.lead', 'Evaluation server for humanoid motion tracking on the Unitree G1 (29 DOF): benchmarks, challenges and leaderboards.'),
  );
  const chSec = h('section.card#challenges', { 'data-testid': 'challenges' }, h('h2', 'Challenges'), loading());
  const bSec = h('section.card#benchmarks', { 'data-testid': 'benchmarks' }, h('h2', 'Benchmarks'), loading());
  root.append(chSec, bSec);
  await Promise.all([fillChallenges(chSec, ctx), fillBenchmarks(bSec, ctx)]);
}

async function fillChallenges(sec, ctx) {
  try {
    const { challenges } = await api('challenges', { signal: ctx.signal });
    const details = await Promise.all(
      (challenges || []).map((c) =>
        api(`challenges/${enc(c.id)}`, { signal: ctx.signal }).catch((e) => {
          if (e && e.name === 'AbortError') throw e;
          return { ...c, phases: null, error: e };
        }),
      ),
    );
    if (!ctx.live()) return;
    sec.querySelector('.loading')?.remove();
    if (!details.length) {
      sec.appendChild(h('p.muted', 'No challenge yet. Benchmarks can be run without one; organisers create challenges on the Organiser page.'));
      return;
    }
    for (const c of details) {
      const box = h(
        'div.challenge',
        { dataset: { challengeId: c.id }, 'data-testid': 'challenge' },
        h('h3', c.title || c.id, ' ', h('span.muted.mono', `(${c.id})`)),
        c.description ? h('p', c.description) : null,
        c.created_at ? h('p.muted.small', 'Created ', timeEl(c.created_at)) : null,
      );
      if (c.error) box.appendChild(errorBox(c.error));
      else box.appendChild(phaseTable(c.phases || []));
      sec.appendChild(box);
    }
  } catch (e) {
    if (e && e.name === 'AbortError') throw e;
    sec.querySelector('.loading')?.remove();
    sec.appendChild(errorBox(e));
  }
}

async function fillBenchmarks(sec, ctx) {
  try {
    const { benchmarks } = await api('benchmarks', { signal: ctx.signal });
    if (!ctx.live()) return;
    sec.querySelector('.loading')?.remove();
    const grid = h('div.bench-grid');
    for (const b of benchmarks || []) {
      grid.appendChild(
        h(
          'a.bench-card',
          { href: `#/benchmarks/${enc(b.name)}`, dataset: { benchmark: b.name }, 'data-testid': 'benchmark-card' },
          h('h3', b.name, ' ', h('span.muted', `v${b.version}`)),
          h('p', b.description || ''),
          h('p.small', 'Primary metric: ', h('code', b.primary_metric || '—')),
          b.available === false
            ? h('p.small.notice.warn', { 'data-testid': 'benchmark-unavailable', title: b.unavailable || '' }, 'Not available on this server')
            : null,
        ),
      );
    }
    if (!(benchmarks || []).length) grid.appendChild(h('p.muted', 'No benchmark installed.'));
    sec.appendChild(grid);
  } catch (e) {
    if (e && e.name === 'AbortError') throw e;
    sec.querySelector('.loading')?.remove();
    sec.appendChild(errorBox(e));
  }
}
