// #/team: the token box and the team's submissions.

import { api, download, getToken, setToken, whoami } from './api.js';
import { actionButton, badge, enc, errorBox, fmtBytes, h, loading, notice, plural, sortableTable, timeEl } from './ui.js';

/** The submissions list as a sortable table (team page and organiser page). */
export function submissionsTable(subs, { actions } = {}) {
  const cols = [
    { key: 'id', label: 'Submission', render: (s) => h('a.mono', { href: `#/submissions/${enc(s.id)}`, 'data-testid': 'submission-link' }, s.id) },
    { key: 'team_name', label: 'Team' },
    { key: 'benchmark', label: 'Benchmark', render: (s) => h('a', { href: `#/benchmarks/${enc(s.benchmark)}` }, s.benchmark) },
    { key: 'phase', label: 'Phase', render: (s) => (s.phase ? h('a', { href: `#/phases/${enc(s.phase)}` }, s.phase) : h('span.muted', '—')) },
    { key: 'agent_name', label: 'Agent', render: (s) => [s.agent_name || '—', s.baseline ? [' ', badge('baseline', 'teal', 'baseline-badge')] : null] },
    { key: 'status', label: 'Status', render: (s) => [badge(s.status), s.error ? h('span.muted.small', ` ${s.error}`) : null] },
    { key: 'episodes_total', label: 'Episodes', numeric: true },
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
  try {
    ({ submissions: subs } = await api('submissions', { signal: ctx.signal }));
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
    submissionsTable(subs || []),
  );
}
