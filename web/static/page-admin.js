// #/admin: the organiser's page (admin token): challenges, phases, teams, tokens, submissions.

import { api, getToken, whoami } from './api.js';
import { adminButtons } from './page-submission.js';
import { submissionsTable, tokenForm } from './page-team.js';
import { clear, enc, errorBox, h, loading, notice, sortableTable, timeEl } from './ui.js';

function rfc3339(d) {
  return `${d.toISOString().slice(0, 19)}Z`;
}

function field(label, input, hint) {
  return h('label.field', h('span.field-label', label), input, hint ? h('span.hint', hint) : null);
}

/** A form that POSTs JSON; errors inline, next to the form. */
function jsonForm(id, title, fields, submitLabel, onSubmit) {
  const out = h('div.form-out', { 'data-testid': `${id}-out`, 'aria-live': 'polite' });
  const btn = h('button', { type: 'submit', 'data-testid': `${id}-submit` }, submitLabel);
  const form = h(`form.admin-form#${id}`, { 'data-testid': id, autocomplete: 'off' }, h('h3', title), fields, h('div.row', btn), out);
  // When the browser's own check blocks a submit, an earlier server error no longer applies
  // (a token shown once stays).
  form.addEventListener('invalid', () => out.querySelectorAll('.error').forEach((e) => e.remove()), true);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clear(out);
    btn.disabled = true;
    try {
      const node = await onSubmit(new FormData(form), form);
      if (node) out.append(node);
    } catch (e) {
      out.append(errorBox(e));
    } finally {
      btn.disabled = false;
    }
  });
  return form;
}

function tokenReveal(token, what) {
  const code = h('code.token', { 'data-testid': 'new-token' }, token);
  const copied = h('span.muted');
  const copy = h(
    'button.secondary',
    {
      type: 'button',
      'data-testid': 'copy-token',
      onclick: async () => {
        try {
          await navigator.clipboard.writeText(token);
          copied.textContent = ' copied';
        } catch {
          // No clipboard permission: select the text so Ctrl-C works.
          const r = document.createRange();
          r.selectNodeContents(code);
          const sel = window.getSelection();
          sel.removeAllRanges();
          sel.addRange(r);
          copied.textContent = ' selected: press Ctrl-C';
        }
      },
    },
    'Copy',
  );
  return h(
    'div.notice.success',
    h('p', `${what}. The token is shown only once: copy it now and hand it to the team.`),
    h('p', code, ' ', copy, copied),
  );
}

export async function adminPage(root, _params, ctx) {
  root.append(h('h1', 'Organiser'));
  if (!getToken()) {
    root.append(notice('The organiser page needs the admin token: paste it in the token box at the top right.', 'warn', 'need-token'), h('section.card', tokenForm('Admin token')));
    return;
  }
  const who = await whoami();
  if (!ctx.live()) return;
  if (who.role !== 'admin') {
    root.append(
      notice(
        who.role === 'invalid' ? `This token is not accepted: ${who.message}` : who.role === 'team' ? 'This is a team token; the organiser page needs the admin token.' : `Cannot check the token: ${who.message || 'unknown error'}`,
        'warn',
        'need-admin',
      ),
      h('section.card', tokenForm('Admin token')),
    );
    return;
  }

  const [benchRes, chRes] = await Promise.all([
    api('benchmarks', { signal: ctx.signal }).catch((e) => ({ error: e })),
    api('challenges', { signal: ctx.signal }).catch((e) => ({ error: e })),
  ]);
  if (!ctx.live()) return;
  const benchmarks = (benchRes.benchmarks || []).map((b) => b.name);
  let challenges = chRes.challenges || [];

  // ---- challenge ----
  const challengeForm = jsonForm(
    'form-challenge',
    'New challenge',
    [
      field('Id', h('input', { name: 'id', required: true, pattern: '[a-z0-9_\\-]{1,64}', placeholder: 'g1-cup', 'data-testid': 'challenge-id' }), 'a slug: a-z 0-9 - _'),
      field('Title', h('input', { name: 'title', required: true, placeholder: 'G1 Cup', 'data-testid': 'challenge-title' })),
      field('Description', h('textarea', { name: 'description', rows: '2', placeholder: 'optional', 'data-testid': 'challenge-description' })),
    ],
    'Create challenge',
    async (fd, form) => {
      const body = { id: String(fd.get('id')).trim(), title: String(fd.get('title')).trim() };
      const d = String(fd.get('description') || '').trim();
      if (d) body.description = d;
      const c = await api('challenges', { method: 'POST', body });
      challenges = [...challenges, c];
      fillChallengeSelect(c.id);
      form.reset();
      return h('div.notice.success', { 'data-testid': 'challenge-created' }, 'Created challenge ', h('code', c.id), '.');
    },
  );

  // ---- phase ----
  const now = new Date();
  now.setUTCSeconds(0, 0);
  const later = new Date(now.getTime() + 30 * 86400000);
  const chSelect = h('select', { name: 'challenge', required: true, 'data-testid': 'phase-challenge' });
  function fillChallengeSelect(selected) {
    clear(chSelect);
    if (!challenges.length) chSelect.append(h('option', { value: '' }, '(create a challenge first)'));
    for (const c of challenges) chSelect.append(h('option', { value: c.id, selected: c.id === selected }, `${c.id} — ${c.title}`));
  }
  fillChallengeSelect(challenges.length ? challenges[challenges.length - 1].id : null);
  const numOrNull = (v) => {
    const s = String(v ?? '').trim();
    if (!s) return null;
    const n = Number(s);
    if (!Number.isInteger(n)) throw new Error(`"${s}" is not a whole number`);
    return n;
  };
  const phaseForm = jsonForm(
    'form-phase',
    'New phase',
    [
      field('Challenge', chSelect),
      field('Phase id', h('input', { name: 'id', required: true, pattern: '[a-z0-9_\\-]{1,64}', placeholder: 'final', 'data-testid': 'phase-id' }), 'unique across challenges'),
      field('Benchmark', h('select', { name: 'benchmark', required: true, 'data-testid': 'phase-benchmark' }, benchmarks.map((b) => h('option', { value: b }, b)))),
      field('Starts at', h('input', { name: 'starts_at', required: true, value: rfc3339(now), 'data-testid': 'phase-starts' }), 'RFC 3339, e.g. 2026-12-01T00:00:00Z (an offset such as +02:00 is converted to UTC)'),
      field('Ends at', h('input', { name: 'ends_at', required: true, value: rfc3339(later), 'data-testid': 'phase-ends' })),
      field('Leaderboard', h('select', { name: 'leaderboard', 'data-testid': 'phase-leaderboard' }, h('option', { value: 'public' }, 'public'), h('option', { value: 'private' }, 'private (hidden until the end)'))),
      field('Max submissions per day', h('input', { name: 'max_submissions_per_day', type: 'number', min: '1', placeholder: 'no limit', 'data-testid': 'phase-max-day' })),
      field('Max submissions in total', h('input', { name: 'max_submissions_total', type: 'number', min: '1', placeholder: 'no limit', 'data-testid': 'phase-max-total' })),
    ],
    'Create phase',
    async (fd) => {
      const challenge = String(fd.get('challenge') || '');
      if (!challenge) throw new Error('choose a challenge (create one first)');
      const body = {
        id: String(fd.get('id')).trim(),
        benchmark: String(fd.get('benchmark')),
        starts_at: String(fd.get('starts_at')).trim(),
        ends_at: String(fd.get('ends_at')).trim(),
        leaderboard: String(fd.get('leaderboard') || 'public'),
        max_submissions_per_day: numOrNull(fd.get('max_submissions_per_day')),
        max_submissions_total: numOrNull(fd.get('max_submissions_total')),
      };
      const p = await api(`challenges/${enc(challenge)}/phases`, { method: 'POST', body });
      return h(
        'div.notice.success',
        { 'data-testid': 'phase-created' },
        'Created phase ',
        h('a', { href: `#/phases/${enc(p.id)}` }, p.id),
        ` (${p.state || '?'}) in ${p.challenge_id || challenge}.`,
      );
    },
  );

  // ---- teams ----
  const teamsSec = h('div#teams-list');
  const teamSelect = h('select', { name: 'team', required: true, 'data-testid': 'token-team' });
  async function loadTeams() {
    clear(teamsSec).append(loading());
    try {
      const { teams } = await api('teams', { signal: ctx.signal });
      if (!ctx.live()) return;
      clear(teamsSec).append(
        sortableTable(
          [
            { key: 'id', label: 'Id', numeric: true },
            { key: 'name', label: 'Name' },
            { key: 'created_at', label: 'Created', render: (t) => timeEl(t.created_at) },
          ],
          teams || [],
          { testid: 'teams-table', sortKey: 'id', empty: 'No team yet.' },
        ),
      );
      const sel = teamSelect.value;
      clear(teamSelect);
      for (const t of teams || []) teamSelect.append(h('option', { value: String(t.id), selected: String(t.id) === sel }, `${t.id}: ${t.name}`));
    } catch (e) {
      if (e && e.name === 'AbortError') return;
      clear(teamsSec).append(errorBox(e));
    }
  }
  const teamForm = jsonForm(
    'form-team',
    'New team',
    [field('Name', h('input', { name: 'name', required: true, maxlength: '64', placeholder: 'my-team', 'data-testid': 'team-name' }))],
    'Create team',
    async (fd, form) => {
      const r = await api('teams', { method: 'POST', body: { name: String(fd.get('name')).trim() } });
      form.reset();
      await loadTeams();
      return tokenReveal(r.token, `Created team ${r.team ? r.team.name : ''} (id ${r.team ? r.team.id : '?'})`);
    },
  );
  const tokenIssueForm = jsonForm(
    'form-token',
    'Issue a token for a team',
    [field('Team', teamSelect), field('Label', h('input', { name: 'label', placeholder: 'laptop (optional)', 'data-testid': 'token-label' }))],
    'Issue token',
    async (fd) => {
      const team = String(fd.get('team') || '');
      if (!team) throw new Error('choose a team');
      const label = String(fd.get('label') || '').trim();
      const r = await api(`teams/${enc(team)}/tokens`, { method: 'POST', body: label ? { label } : {} });
      return tokenReveal(r.token, `Issued a token for team ${team}${label ? ` (${label})` : ''}`);
    },
  );

  // ---- submissions ----
  const subsSec = h('div#all-submissions');
  async function loadSubs() {
    clear(subsSec).append(loading());
    try {
      const { submissions } = await api('submissions', { signal: ctx.signal });
      if (!ctx.live()) return;
      const err = h('div.inline-error');
      clear(subsSec).append(
        err,
        submissionsTable(submissions || [], { actions: (s) => adminButtons(s, err, loadSubs, { cancelConfirm: true }) }),
      );
    } catch (e) {
      if (e && e.name === 'AbortError') return;
      clear(subsSec).append(errorBox(e));
    }
  }

  root.append(
    benchRes.error ? errorBox(benchRes.error, 'Benchmarks') : '',
    chRes.error ? errorBox(chRes.error, 'Challenges') : '',
    h('section.card', h('h2', 'Challenges and phases'), h('div.form-grid', challengeForm, phaseForm)),
    h('section.card', h('h2', 'Teams'), h('div.form-grid', teamForm, tokenIssueForm), teamsSec),
    h('section.card', h('h2', 'All submissions'), subsSec),
  );
  await Promise.all([loadTeams(), loadSubs()]);
}
