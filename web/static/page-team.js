// #/team: the token box and the team's submissions.

import { api, download, getToken, setToken, whoami } from './api.js';
import { actionButton, badge, enc, errorBox, fmtBytes, fmtNum, fmtPct, h, loading, notice, plural, sortableTable, timeEl } from './ui.js';

/** The submissions list as a sortable table (team page and organiser page). */
export function submissionsTable(subs, { actions } = {}) {
  const cols = [
    { key: 'id', label: 'Submission', render: (s) => h('a.mono', { href: `#/submissions/${enc(s.id)}`, 'data-testid': 'submission-link' }, s.id) },
    { key: 'team_name', label: 'Team', render: (s) => h('span.team', s.team_name || '—') },
    { key: 'benchmark', label: 'Benchmark', render: (s) => h('a', { href: `#/benchmarks/${enc(s.benchmark)}` }, s.benchmark) },
    { key: 'phase', label: 'Phase', render: (s) => (s.phase ? h('a', { href: `#/phases/${enc(s.phase)}` }, s.phase) : h('span.muted', '—')) },
    { key: 'agent_name', label: 'Agent', render: (s) => [h('span.agent', s.agent_name || '—'), s.baseline ? [' ', badge('baseline', 'teal', 'baseline-badge')] : null] },
    {
      key: 'status',
      label: 'Status',
      render: (s) => [
        badge(s.status),
        // As the submission's page says it: nothing runs it until its agent reconnects, or
        // (hosted) until one of the server's places for hosted runs is free.
        s.awaiting_agent ? h('span.muted.small', { 'data-testid': 'awaiting-agent-flag', title: 'no agent runs it now: resume it with its submission id' }, ' waits for its agent') : null,
        s.awaiting_hosted_place ? h('span.muted.small', { 'data-testid': 'awaiting-hosted-flag', title: 'the server runs it once a place for hosted runs is free' }, ' queued') : null,
        s.error ? h('span.muted.small', ` ${s.error}`) : null,
      ],
    },
    // The leaderboard row's numbers in one column, so a COMPLETED submission whose episodes
    // mostly failed says so here too (none while it runs, or while a private phase hides them).
    {
      key: 'result',
      label: h('span', { title: 'scored of all episodes (unscored failures in red), success rate over all episodes, mean primary metric over the scored ones' }, 'Result'),
      numeric: true,
      value: (s) => (s.scores ? s.scores.scored / Math.max(1, s.scores.episodes) : -1),
      render: (s) => {
        if (!s.scores) {
          return h('span.muted', { title: s.results_hidden ? 'results hidden until the private phase ends' : 'no report yet' }, `${plural(s.episodes_total || 0, 'episode')}${s.results_hidden ? ', hidden' : ''}`);
        }
        const sc = s.scores;
        return h(
          'span.result',
          { 'data-testid': 'result' },
          h('span', { title: 'scored episodes / all episodes' }, `${sc.scored}/${sc.episodes}`),
          sc.failed ? h('span.bad', { 'data-testid': 'failed-count' }, ` (${sc.failed} failed)`) : '',
          sc.success_rate != null ? h('span', { title: `${sc.success_metric} over all episodes` }, ` · ${fmtPct(sc.success_rate)}`) : '',
          h('span', { title: `mean ${sc.primary} over the scored episodes${sc.primary_units ? ` (${sc.primary_units})` : ''}` }, ` · ${sc.primary} ${fmtNum(sc.score)}`),
        );
      },
    },
    { key: 'created_at', label: 'Created', render: (s) => timeEl(s.created_at), defaultDir: 'desc' },
    { key: 'finished_at', label: 'Finished', render: (s) => timeEl(s.finished_at), defaultDir: 'desc' },
  ];
  if (actions) cols.push({ key: 'actions', label: 'Actions', sortable: false, render: actions });
  return sortableTable(cols, subs, {
    testid: 'submissions-table',
    sortKey: 'created_at',
    sortDir: 'desc',
    empty: 'No submission yet.',
    rowAttrs: (s) => ({ dataset: { submissionId: s.id } }),
  });
}

export function tokenForm(label = 'Token') {
  const input = h('input#team-token', { type: 'password', autocomplete: 'off', placeholder: 'at_… (team) or the admin token', autocomplete: 'off', size: '36', 'data-testid': 'team-token-input' });
  const form = h(
    'form.token-form',
    h('label', `${label} `, input),
    ' ',
    h('button', { type: 'submit', 'data-testid': 'team-token-save' }, 'Use this token'),
    ' ',
    getToken() ? h('button.secondary', { type: 'button', onclick: () => setToken('') }, 'Forget token') : null,
  );
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    if (input.value.trim()) setToken(input.value);
  });
  return form;
}

export async function teamPage(root, _params, ctx) {
  root.append(h('h1', 'My team'));
  root.append(
    h(
      'section.card',
      h('p', 'Paste your team token (or the organiser token). It is kept in this browser tab only (sessionStorage) and sent as ', h('code', 'Authorization: Bearer …'), ' to this server.'),
      tokenForm('Team token'),
    ),
  );
  if (!getToken()) {
    root.append(notice('No token yet: paste one above to see your submissions.', 'info', 'need-token'));
    return;
  }
  const who = await whoami();
  if (!ctx.live()) return;
  if (who.role === 'invalid') {
    root.append(errorBox({ message: `This token is not accepted: ${who.message}` }));
    return;
  }
  const sec = h('section.card#my-submissions', h('h2', who.role === 'admin' ? 'All submissions (organiser token)' : `Submissions of ${who.team || 'my team'}`), loading());
  root.append(sec);
  let subs;
  let quotas;
  try {
    ({ submissions: subs, quotas } = await api('submissions', { signal: ctx.signal }));
  } catch (e) {
    if (e && e.name === 'AbortError') throw e;
    sec.querySelector('.loading')?.remove();
    sec.append(errorBox(e));
    return;
  }
  if (!ctx.live()) return;
  sec.querySelector('.loading')?.remove();
  const err = h('div.inline-error');
  sec.append(
    h(
      'div.button-row',
      actionButton(
        'Export CSV',
        { class: 'secondary', 'data-testid': 'export-csv' },
        async (btn) => {
          const r = await download('/api/v1/submissions.csv', 'submissions.csv');
          btn.title = `${r.filename}, ${fmtBytes(r.size)}`;
        },
        err,
      ),
      h('span.muted', ` ${plural(subs.length, 'submission')}, newest first`),
    ),
    err,
    ...((quotas || []).length
      ? [h(
          'ul.quotas',
          { 'data-testid': 'quotas' },
          quotas.map((q) => {
            const left = q.left_today == null ? 'no limit' : `${q.left_today} left today`;
            const total = q.max_total == null ? '' : `, ${q.left_total} of ${q.max_total} left in the phase`;
            return h('li', h('a', { href: `#/phases/${enc(q.phase)}` }, q.phase), `: ${plural(q.used_total, 'submission')} used; ${left}${total} (the day, UTC, resets at ${q.day_resets_at})`);
          }),
        )]
      : []),
    submissionsTable(subs || []),
  );
}
