// #/admin: the organiser's page (admin token): challenges, phases, teams, tokens, submissions.

import { api, getToken, whoami } from './api.js';
import { adminButtons } from './page-submission.js';
import { submissionsTable, tokenForm } from './page-team.js';
import { quotaText } from './page-home.js';
import { actionButton, badge, clear, enc, errorBox, h, loading, notice, regainFocus, sortableTable, timeEl } from './ui.js';

function rfc3339(d) {
  return `${d.toISOString().slice(0, 19)}Z`;
}

/** Unix ms -> RFC 3339 UTC for a form field (milliseconds only when there are some). */
function rfc3339Ms(ms) {
  if (ms === null || ms === undefined) return '';
  return new Date(ms).toISOString().replace(/\.000Z$/, 'Z');
}

/** An empty field is null (no limit); otherwise a whole number. */
function numOrNull(v) {
  const s = String(v ?? '').trim();
  if (!s) return null;
  const n = Number(s);
  if (!Number.isInteger(n)) throw new Error(`"${s}" is not a whole number`);
  return n;
}

/** "state, reference" -> ["state", "reference"]; empty -> null (the benchmark's own groups). */
function groupsOrNull(v) {
  const list = String(v ?? '')
    .split(/[\s,]+/)
    .filter(Boolean);
  return list.length ? list : null;
}

/** A token's state now: revoked, expired or active. */
function tokenState(t, now = Date.now()) {
  if (t.revoked_at != null) return 'revoked';
  if (t.expires_at != null && t.expires_at <= now) return 'expired';
  return 'active';
}

let hintSeq = 0;

/** A labelled input; its hint describes it (`aria-describedby`) rather than joining its name. */
function field(label, input, hint) {
  if (!hint) return h('label.field', h('span.field-label', label), input);
  const hintId = `field-hint-${++hintSeq}`;
  input.setAttribute('aria-describedby', hintId);
  return h('div.field', h('label', { for: fieldId(input) }, h('span.field-label', label)), input, h('span.hint', { id: hintId }, hint));
}

/** The input's id, given one if it has none (a `<label for>` needs it). */
function fieldId(input) {
  if (!input.id) input.id = `field-${++hintSeq}`;
  return input.id;
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
    const hadFocus = document.activeElement === btn;
    btn.disabled = true;
    try {
      const node = await onSubmit(new FormData(form), form);
      if (node) out.append(node);
    } catch (e) {
      out.append(errorBox(e));
    } finally {
      btn.disabled = false;
      if (hadFocus) regainFocus(btn);
    }
  });
  return form;
}

function tokenReveal(token, what) {
  const code = h('code.token', { 'data-testid': 'new-token' }, token);
  const copied = h('span.muted', { role: 'status' });
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
      await loadPhases();
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
      field('Who runs', h('select', { name: 'runs', 'data-testid': 'phase-runs' }, h('option', { value: 'agents' }, 'agents and uploads'), h('option', { value: 'hosted' }, 'uploads only')), 'hosted_only: with uploaded policy files only, the server runs every submission and no team’s agent receives the phase’s motions'),
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
        hosted_only: fd.get('runs') === 'hosted',
        max_submissions_per_day: numOrNull(fd.get('max_submissions_per_day')),
        max_submissions_total: numOrNull(fd.get('max_submissions_total')),
      };
      const p = await api(`challenges/${enc(challenge)}/phases`, { method: 'POST', body });
      await loadPhases();
      return h(
        'div.notice.success',
        { 'data-testid': 'phase-created' },
        'Created phase ',
        h('a', { href: `#/phases/${enc(p.id)}` }, p.id),
        ` (${p.state || '?'}) in ${p.challenge_id || challenge}.`,
        (p.warnings || []).length
          ? h('ul.phase-warnings', { 'data-testid': 'phase-warnings' }, p.warnings.map((w) => h('li', `Warning: ${w}`)))
          : '',
      );
    },
  );

  // ---- phases: list and edit ----
  let phases = [];
  const phasesSec = h('div#phases-list');
  const editSelect = h('select', { name: 'phase', required: true, 'data-testid': 'edit-phase-id' });
  const edit = {
    starts: h('input', { name: 'starts_at', required: true, 'data-testid': 'edit-starts' }),
    ends: h('input', { name: 'ends_at', required: true, 'data-testid': 'edit-ends' }),
    leaderboard: h(
      'select',
      { name: 'leaderboard', 'data-testid': 'edit-leaderboard' },
      h('option', { value: 'public' }, 'public'),
      h('option', { value: 'private' }, 'private (hidden until the end)'),
    ),
    runs: h('select', { name: 'runs', 'data-testid': 'edit-runs' }, h('option', { value: 'agents' }, 'agents and uploads'), h('option', { value: 'hosted' }, 'uploads only')),
    maxDay: h('input', { name: 'max_submissions_per_day', type: 'number', min: '1', placeholder: 'no limit', 'data-testid': 'edit-max-day' }),
    maxTotal: h('input', { name: 'max_submissions_total', type: 'number', min: '1', placeholder: 'no limit', 'data-testid': 'edit-max-total' }),
    groups: h('input', { name: 'observation_groups', placeholder: "the benchmark's own", 'data-testid': 'edit-groups' }),
  };
  const phaseById = (id) => phases.find((p) => p.id === id) || null;
  /** Fills the edit form with a phase's current values. */
  function fillEdit(id) {
    const p = phaseById(id);
    if (!p) return;
    editSelect.value = p.id;
    edit.starts.value = rfc3339Ms(p.starts_at);
    edit.ends.value = rfc3339Ms(p.ends_at);
    edit.leaderboard.value = p.leaderboard || 'public';
    edit.runs.value = p.hosted_only ? 'hosted' : 'agents';
    edit.maxDay.value = p.max_submissions_per_day ?? '';
    edit.maxTotal.value = p.max_submissions_total ?? '';
    edit.groups.value = (p.observation_groups || []).join(', ');
  }
  editSelect.addEventListener('change', () => {
    fillEdit(editSelect.value);
    clear(editForm.querySelector('.form-out'));
  });
  async function loadPhases() {
    clear(phasesSec).append(loading());
    try {
      const details = await Promise.all(challenges.map((c) => api(`challenges/${enc(c.id)}`, { signal: ctx.signal })));
      if (!ctx.live()) return;
      phases = details.flatMap((c) => (c.phases || []).map((p) => ({ ...p, challenge_id: p.challenge_id || c.id })));
    } catch (e) {
      if (e && e.name === 'AbortError') return;
      clear(phasesSec).append(errorBox(e, 'Phases'));
      return;
    }
    clear(phasesSec).append(
      sortableTable(
        [
          { key: 'id', label: 'Phase', render: (p) => h('a.nowrap', { href: `#/phases/${enc(p.id)}` }, p.id) },
          { key: 'challenge_id', label: 'Challenge' },
          { key: 'benchmark', label: 'Benchmark' },
          { key: 'state', label: 'State', render: (p) => badge(p.state || '?', null, 'phase-state') },
          { key: 'starts_at', label: 'Opens', render: (p) => timeEl(p.starts_at) },
          { key: 'ends_at', label: 'Closes', render: (p) => timeEl(p.ends_at) },
          {
            key: 'leaderboard',
            label: 'Leaderboard',
            render: (p) => [badge(p.leaderboard || 'public', null, 'phase-visibility'), p.hosted_only ? [' ', badge('hosted only', 'teal', 'phase-hosted-only')] : null],
          },
          { key: 'quotas', label: 'Quotas', sortable: false, render: (p) => quotaText(p) },
          { key: 'groups', label: 'Groups', sortable: false, render: (p) => (p.observation_groups ? p.observation_groups.join(', ') : h('span.muted', "benchmark's")) },
          {
            key: 'edit',
            label: '',
            sortable: false,
            render: (p) =>
              h(
                'button.secondary',
                {
                  type: 'button',
                  'data-testid': 'phase-edit',
                  onclick: () => {
                    fillEdit(p.id);
                    clear(editForm.querySelector('.form-out'));
                    editForm.scrollIntoView({ block: 'nearest' });
                    edit.starts.focus();
                  },
                },
                'Edit',
              ),
          },
        ],
        phases,
        { testid: 'admin-phase-table', sortKey: 'starts_at', empty: 'No phase yet.', rowAttrs: (p) => ({ dataset: { phaseId: p.id } }) },
      ),
    );
    const sel = editSelect.value;
    clear(editSelect);
    if (!phases.length) editSelect.append(h('option', { value: '' }, '(create a phase first)'));
    for (const p of phases) editSelect.append(h('option', { value: p.id }, `${p.id} (${p.challenge_id}, ${p.benchmark})`));
    fillEdit(phaseById(sel) ? sel : phases.length ? phases[phases.length - 1].id : null);
  }
  const editForm = jsonForm(
    'form-phase-edit',
    'Edit a phase',
    [
      field('Phase', editSelect, 'the id, challenge and benchmark cannot change'),
      field('Opens at', edit.starts, 'starts_at, RFC 3339'),
      field('Closes at', edit.ends, 'ends_at: moving it into the past ends the phase (and shows a private leaderboard)'),
      field('Leaderboard', edit.leaderboard),
      field('Who runs', edit.runs, 'hosted_only'),
      field('Max submissions per day', edit.maxDay, 'empty: no limit'),
      field('Max submissions in total', edit.maxTotal, 'empty: no limit'),
      field('Observation groups', edit.groups, "comma-separated; empty: the benchmark's own"),
    ],
    'Save phase',
    async (fd) => {
      const p = phaseById(String(fd.get('phase') || ''));
      if (!p) throw new Error('choose a phase (create one first)');
      // Only what changed goes in the PATCH; what the form shows is the phase's current state.
      const body = {};
      const starts = String(fd.get('starts_at')).trim();
      const ends = String(fd.get('ends_at')).trim();
      if (starts !== rfc3339Ms(p.starts_at)) body.starts_at = starts;
      if (ends !== rfc3339Ms(p.ends_at)) body.ends_at = ends;
      const lb = String(fd.get('leaderboard') || 'public');
      if (lb !== (p.leaderboard || 'public')) body.leaderboard = lb;
      const hosted = fd.get('runs') === 'hosted';
      if (hosted !== !!p.hosted_only) body.hosted_only = hosted;
      const day = numOrNull(fd.get('max_submissions_per_day'));
      if (day !== (p.max_submissions_per_day ?? null)) body.max_submissions_per_day = day;
      const total = numOrNull(fd.get('max_submissions_total'));
      if (total !== (p.max_submissions_total ?? null)) body.max_submissions_total = total;
      const groups = groupsOrNull(fd.get('observation_groups'));
      if (JSON.stringify(groups) !== JSON.stringify(p.observation_groups ?? null)) body.observation_groups = groups;
      const changed = Object.keys(body);
      if (!changed.length) return notice(`Nothing to save: the form holds phase ${p.id}'s current values.`, 'info', 'phase-unchanged');
      const updated = await api(`phases/${enc(p.id)}`, { method: 'PATCH', body });
      await loadPhases();
      fillEdit(updated.id);
      return h(
        'div.notice.success',
        { 'data-testid': 'phase-updated' },
        'Saved phase ',
        h('a', { href: `#/phases/${enc(updated.id)}` }, updated.id),
        ` (${changed.join(', ')}): now ${updated.state || '?'}, ${updated.leaderboard || 'public'} leaderboard, opens `,
        timeEl(updated.starts_at),
        ', closes ',
        timeEl(updated.ends_at),
        '.',
        (updated.warnings || []).length
          ? h('ul.phase-warnings', { 'data-testid': 'phase-warnings' }, updated.warnings.map((w) => h('li', `Warning: ${w}`)))
          : '',
      );
    },
  );
  editForm.classList.add('narrow');

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
            {
              key: 'tokens',
              label: '',
              sortable: false,
              render: (t) =>
                h(
                  'button.secondary',
                  {
                    type: 'button',
                    'data-testid': 'team-tokens',
                    onclick: () => {
                      tokensTeam.value = String(t.id);
                      loadTokens();
                      tokensBox.scrollIntoView({ block: 'nearest' });
                    },
                  },
                  'Tokens',
                ),
            },
          ],
          teams || [],
          { testid: 'teams-table', sortKey: 'id', empty: 'No team yet.' },
        ),
      );
      for (const select of [teamSelect, tokensTeam]) {
        const sel = select.value;
        clear(select);
        for (const t of teams || []) select.append(h('option', { value: String(t.id), selected: String(t.id) === sel }, `${t.id}: ${t.name}`));
      }
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
      if (tokensTeam.value === team) await loadTokens();
      return tokenReveal(r.token, `Issued a token for team ${team}${label ? ` (${label})` : ''}`);
    },
  );

  // ---- a team's tokens: list and revoke ----
  const tokensTeam = h('select', { 'data-testid': 'tokens-team', 'aria-label': 'team' });
  const tokensList = h('div#tokens-list');
  const tokensOut = h('div.form-out', { 'data-testid': 'tokens-out', 'aria-live': 'polite' });
  const tokensBox = h(
    'div.admin-form#team-tokens',
    { 'data-testid': 'team-tokens-box' },
    h('h3', 'Tokens of a team'),
    h('div.row', h('label', h('span.field-label', 'Team '), tokensTeam)),
    tokensList,
    tokensOut,
  );
  tokensTeam.addEventListener('change', () => {
    clear(tokensOut);
    loadTokens();
  });
  let tokensSeq = 0;
  async function loadTokens() {
    const team = tokensTeam.value;
    const my = ++tokensSeq;
    if (!team) {
      clear(tokensList).append(h('p.muted', 'No team yet.'));
      return;
    }
    clear(tokensList).append(loading());
    let tokens;
    try {
      ({ tokens } = await api(`teams/${enc(team)}/tokens`, { signal: ctx.signal }));
    } catch (e) {
      if (e && e.name === 'AbortError') return;
      if (my === tokensSeq) clear(tokensList).append(errorBox(e));
      return;
    }
    if (!ctx.live() || my !== tokensSeq) return;
    const now = Date.now();
    clear(tokensList).append(
      sortableTable(
        [
          { key: 'id', label: 'Token id', render: (t) => h('span.mono.nowrap', t.id) },
          { key: 'label', label: 'Label', render: (t) => t.label || h('span.muted', '—') },
          { key: 'created_at', label: 'Created', render: (t) => timeEl(t.created_at) },
          { key: 'expires_at', label: 'Expires', render: (t) => (t.expires_at == null ? h('span.muted', 'never') : timeEl(t.expires_at)) },
          {
            key: 'state',
            label: 'State',
            value: (t) => tokenState(t, now),
            render: (t) => {
              const st = tokenState(t, now);
              return [badge(st, st === 'active' ? 'green' : st === 'revoked' ? 'red' : 'dark', 'token-state'), st === 'revoked' ? [' ', timeEl(t.revoked_at)] : null];
            },
          },
          {
            key: 'revoke',
            label: '',
            sortable: false,
            render: (t) =>
              t.revoked_at != null
                ? ''
                : actionButton(
                    'Revoke',
                    { 'data-testid': 'btn-revoke', class: 'danger' },
                    async () => {
                      if (!window.confirm(`Revoke token ${t.id}${t.label ? ` ("${t.label}")` : ''} of team ${team}? Every later request with it is refused.`)) return;
                      const r = await api(`teams/${enc(team)}/tokens/${enc(t.id)}`, { method: 'DELETE' });
                      await loadTokens();
                      const info = (r && r.token_info) || t;
                      tokensOut.append(
                        h(
                          'div.notice.success',
                          { 'data-testid': 'token-revoked' },
                          'Revoked token ',
                          h('code', info.id),
                          info.label ? ` ("${info.label}")` : '',
                          ` of team ${team} at `,
                          timeEl(info.revoked_at),
                          ': requests and connects with it are refused from now on (a session already connected runs to its end; cancel its submission to stop it).',
                        ),
                      );
                    },
                    tokensOut,
                  ),
          },
        ],
        tokens || [],
        { testid: 'tokens-table', sortKey: 'created_at', empty: 'This team has no token.', rowAttrs: (t) => ({ dataset: { tokenId: t.id } }) },
      ),
    );
  }

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
        submissionsTable(submissions || [], { actions: (s) => adminButtons(s, err, loadSubs, { cancelConfirm: true, compact: true }) }),
      );
    } catch (e) {
      if (e && e.name === 'AbortError') return;
      clear(subsSec).append(errorBox(e));
    }
  }

  root.append(
    benchRes.error ? errorBox(benchRes.error, 'Benchmarks') : '',
    chRes.error ? errorBox(chRes.error, 'Challenges') : '',
    h('section.card', h('h2', 'Challenges and phases'), h('div.form-grid', challengeForm, phaseForm), h('h3', 'Phases'), phasesSec, editForm),
    h('section.card', h('h2', 'Teams'), h('div.form-grid', teamForm, tokenIssueForm), teamsSec, tokensBox),
    h('section.card', h('h2', 'All submissions'), subsSec),
  );
  await Promise.all([loadPhases(), loadTeams().then(loadTokens), loadSubs()]);
}
