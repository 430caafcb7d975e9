// #/benchmarks/{name}: motions, rules, metrics, ranking rule, leaderboard, dataset export.

import { api, download, getToken, withQuery } from './api.js';
import { metricInfoMap, renderLeaderboard } from './leaderboard.js';
import {
  arrow,
  badge,
  clear,
  defList,
  enc,
  errorBox,
  fmtBytes,
  fmtDuration,
  fmtNum,
  fmtSeed,
  h,
  loading,
  notice,
  plural,
  sortableTable,
} from './ui.js';

export async function benchmarkPage(root, { name }, ctx) {
  root.append(h('p.crumbs', h('a', { href: '#/' }, 'Home'), ' / benchmark'), loading());
  let b;
  try {
    b = await api(`benchmarks/${enc(name)}`, { signal: ctx.signal });
  } catch (e) {
    if (e && e.name === 'AbortError') throw e;
    root.querySelector('.loading')?.remove();
    root.append(h('h1', name), errorBox(e));
    return;
  }
  if (!ctx.live()) return;
  root.querySelector('.loading')?.remove();
  const info = metricInfoMap(b);
  root.append(
    h('h1', { 'data-testid': 'benchmark-title' }, b.name, ' ', h('span.muted', `v${b.version}`)),
    b.description ? h('p.lead', b.description) : '',
  );

  const nav = h(
    'nav.toc',
    { 'aria-label': 'On this page' },
    ['Motions', 'Rules', 'Metrics', 'Leaderboard', 'Dataset'].map((t) =>
      h('a', { href: `#/benchmarks/${enc(name)}`, onclick: (ev) => jump(ev, `sec-${t.toLowerCase()}`) }, t),
    ),
  );
  root.append(nav);

  root.append(motionsSection(b), rulesSection(b), metricsSection(b, info));

  const lbSec = h('section.card#sec-leaderboard', h('h2', 'Leaderboard'));
  root.append(lbSec);
  root.append(datasetSection(b));
  await renderLeaderboard(lbSec, `leaderboards/${enc(name)}`, b, ctx);
}

/** To a section of the page: its heading takes the focus too (the next Tab goes into the
 * section, and a screen reader says where), with no animation for those who ask for less. */
function jump(ev, id) {
  ev.preventDefault();
  const sec = document.getElementById(id);
  if (!sec) return;
  const still = window.matchMedia('(prefers-reduced-motion: reduce)').matches;
  sec.scrollIntoView({ behavior: still ? 'auto' : 'smooth', block: 'start' });
  const heading = sec.querySelector('h2') || sec;
  heading.setAttribute('tabindex', '-1');
  heading.focus({ preventScroll: true });
}

function motionsSection(b) {
  const sec = h('section.card#sec-motions', h('h2', 'Motions'));
  const list = b.motion_list;
  if (b.motions_hidden) {
    // A hidden test set: the server sends no name, duration or source of any motion.
    sec.append(notice(`The motions are hidden: ${b.motions_hidden}. The episodes run as usual; their motions are not shown.`, 'info', 'motions-hidden'));
  } else if (Array.isArray(list)) {
    const total = list.reduce((a, m) => a + (Number.isFinite(m.duration_s) ? m.duration_s : 0), 0);
    sec.append(
      h('p.muted', `${plural(list.length, 'clip')}, ${fmtDuration(total)} in all.`),
      sortableTable(
        [
          { key: 'name', label: 'Motion', render: (m) => h('code', m.name) },
          { key: 'category', label: 'Category' },
          { key: 'duration_s', label: 'Duration', numeric: true, render: (m) => fmtDuration(m.duration_s) },
        ],
        list,
        { testid: 'motion-table', empty: 'No motion.' },
      ),
    );
  } else {
    if (b.motions_error) sec.append(notice(`The motion clips are not available: ${b.motions_error}`, 'warn', 'motions-error'));
    const src = (b.motions && b.motions.source) || {};
    const names = Array.isArray(src.builtin) ? src.builtin : null;
    if (names) sec.append(h('p', 'Built-in motions: ', names.map((n, i) => [i ? ', ' : '', h('code', n)])));
    else if (b.motions) sec.append(h('pre.json', JSON.stringify(b.motions.source ?? b.motions, null, 2)));
  }
  if (b.motions && b.motions.attribution) sec.append(h('p.small.muted', 'Attribution: ', b.motions.attribution));
  return sec;
}

function rulesSection(b) {
  const ep = b.episodes || {};
  const lim = b.limits || {};
  const obs = b.observations || {};
  const fall = typeof b.fall === 'string' ? b.fall : b.fall ? JSON.stringify(b.fall) : '—';
  return h(
    'section.card#sec-rules',
    h('h2', 'Rules'),
    defList(
      [
        ['Task', b.task || '—'],
        ['Episode window', ep.window === 'whole' ? 'whole clips' : JSON.stringify(ep.window ?? '—')],
        ['Repeats per motion', ep.repeats ?? '—'],
        ['Domain randomisation level', ep.dr_level ?? '—'],
        ['Seed', fmtSeed(ep.seed)],
        ['Fall rule', fall === 'none' ? 'none (episodes never end early)' : fall],
        ['Control rate', lim.control_hz ? `${lim.control_hz} Hz` : '—'],
        ['Max episode length', lim.max_episode_s ? `${lim.max_episode_s} s` : 'the whole clip'],
        ['Step timeout', lim.step_timeout_ms ? `${lim.step_timeout_ms} ms` : '—'],
        ['Observation groups', (obs.groups || []).length ? (obs.groups || []).map((g, i) => [i ? ' ' : '', h('code', g)]) : '—'],
        ['Reference horizon', obs.reference_horizon ?? '—'],
        ['Reference goal horizon', obs.reference_goal_horizon ?? '—'],
        ['Reference motion revealed', obs.reveal_reference === undefined ? '—' : obs.reveal_reference ? 'yes' : 'no'],
        ['Motion names hidden', motionNamesHidden(b)],
      ],
      'rules',
    ),
  );
}

/**
 * Whether agents see the motions' names: not where the file says `hide_motion_names`, nor on a
 * hidden test set (`motions.hidden`, with `motions_hidden` saying why: the file's flag or a
 * private phase that runs the benchmark), whose episodes start with empty names. The
 * `observations` block is the file as written, so its flag alone says "no" there.
 */
function motionNamesHidden(b) {
  const obs = b.observations || {};
  if (b.motions_hidden || (b.motions && b.motions.hidden)) return 'yes (a hidden test set: episodes carry no motion name)';
  if (obs.hide_motion_names === undefined) return '—';
  return obs.hide_motion_names ? 'yes' : 'no';
}

function metricsSection(b, info) {
  const sec = h('section.card#sec-metrics', h('h2', 'Metrics and ranking'));
  const r = b.ranking || {};
  if (b.ranking_rule) sec.append(h('p.ranking-rule', { 'data-testid': 'ranking-rule' }, b.ranking_rule));
  else {
    const parts = [];
    if (r.success) parts.push(`success rate (${r.success}, higher first)`);
    if (r.primary) parts.push(`${r.primary} mean${r.direction ? ` (${r.direction} is better)` : ''}`);
    if ((r.tie_breakers || []).length) parts.push(`ties broken by ${r.tie_breakers.join(', then ')}`);
    sec.append(h('p.ranking-rule', { 'data-testid': 'ranking-rule' }, `Ranking: ${parts.join('; ') || '—'}.`));
  }
  const ranking = [r.success, r.primary, ...(r.tie_breakers || [])].filter(Boolean);
  let rows = (b.metric_info || []).slice();
  if (!rows.length) rows = ((b.metrics && b.metrics.list) || []).map((n) => ({ name: n }));
  const roleOf = (n) => (n === r.success ? 'success' : n === r.primary ? 'primary' : (r.tie_breakers || []).includes(n) ? 'tie-breaker' : '');
  rows.sort((a, c) => {
    const ia = ranking.indexOf(a.name);
    const ic = ranking.indexOf(c.name);
    return (ia < 0 ? 99 : ia) - (ic < 0 ? 99 : ic);
  });
  sec.append(
    sortableTable(
      [
        { key: 'name', label: 'Metric', render: (m) => [h('code', m.name), roleOf(m.name) ? [' ', badge(roleOf(m.name), 'blue')] : null] },
        { key: 'units', label: 'Units', render: (m) => m.units || '—' },
        {
          key: 'direction',
          label: 'Better',
          render: (m) => (m.direction ? [arrow(m.direction), ` ${m.direction}`] : '—'),
        },
        { key: 'description', label: 'Description', sortable: false, render: (m) => m.description || '' },
        { key: 'formula', label: 'Formula', sortable: false, render: (m) => (m.formula ? h('code.formula', m.formula) : '') },
      ],
      rows,
      { testid: 'metric-table' },
    ),
  );
  const m = b.metrics || {};
  const extra = [];
  if (m.success_threshold_m !== undefined) extra.push(['Success threshold', `${m.success_threshold_m} m`]);
  if (m.ndtw_window_s !== undefined) extra.push(['nDTW window', `${m.ndtw_window_s} s`]);
  if (Array.isArray(m.state_slice)) extra.push(['State slice', `[${m.state_slice.join(', ')})`]);
  if (extra.length) sec.append(defList(extra));
  void info;
  return sec;
}

// ---------- dataset export ----------

function datasetSection(b) {
  const name = b.name;
  const intro = h('p.muted', "Recorded episodes of this benchmark's completed submissions, filtered, as a learner loads them: HDF5 in BFM-Zero's replay-buffer layout or one JSON object per episode (jsonl.gz). A team token gets its own submissions, the admin token everything.");
  if (b.motions_hidden) {
    // A hidden test set's trajectories carry its motions: the server refuses its datasets
    // (403 hidden) to everyone but the admin, and tells only them the motions. No form to fail.
    return h(
      'section.card#sec-dataset',
      { 'data-testid': 'dataset' },
      h('h2', 'Dataset'),
      intro,
      notice(`No dataset while the motions are hidden: ${b.motions_hidden}.`, 'info', 'dataset-hidden'),
    );
  }
  const statusBoxes = ['completed', 'fell', 'failed', 'timeout'].map((s) =>
    h('label.inline', h('input', { type: 'checkbox', name: 'status', value: s, checked: s === 'completed' || s === 'fell' }), ` ${s}`),
  );
  const metricNames = ((b.metrics && b.metrics.list) || []).slice();
  const form = h(
    'form.filters#dataset-form',
    { 'data-testid': 'dataset-form', autocomplete: 'off' },
    h('fieldset', h('legend', 'Episode status (none ticked: any)'), statusBoxes),
    h(
      'div.row',
      h(
        'label',
        'Success ',
        h('select', { name: 'success', 'data-testid': 'dataset-success' }, h('option', { value: '' }, 'any'), h('option', { value: 'true' }, 'true'), h('option', { value: 'false' }, 'false')),
      ),
      h(
        'label',
        'Metric bounds ',
        h('input', {
          name: 'metric',
          placeholder: 'emd<=0.9, mpjpe_g<100',
          list: 'dataset-metric-names',
          size: '22',
          'data-testid': 'dataset-metric',
        }),
      ),
      h('datalist#dataset-metric-names', metricNames.map((m) => h('option', { value: m }))),
      h('label', 'Team ', h('input', { name: 'team', placeholder: 'team names, comma-separated', size: '18', 'data-testid': 'dataset-team' })),
      h('label', 'Motion ', h('input', { name: 'motion', placeholder: 'motion names', size: '16', 'data-testid': 'dataset-motion' })),
    ),
    h('div.row', h('button', { type: 'submit', 'data-testid': 'dataset-card-btn' }, 'Show dataset card')),
  );
  const out = h('div#dataset-out', { 'data-testid': 'dataset-out', 'aria-live': 'polite' });
  const dl = h('div.downloads#dataset-downloads');
  const sec = h('section.card#sec-dataset', { 'data-testid': 'dataset' }, h('h2', 'Dataset'), intro, form, dl, out);

  const query = () => {
    const fd = new FormData(form);
    const statuses = fd.getAll('status');
    const metrics = String(fd.get('metric') || '')
      .split(/[,;]+/)
      .map((s) => s.replace(/\s+/g, ''))
      .filter(Boolean);
    return {
      // No box ticked means no filter on status (the API's own default is completed + fell).
      status: statuses.length ? statuses.join(',') : 'completed,fell,failed,timeout',
      success: fd.get('success') || '',
      metric: metrics,
      team: String(fd.get('team') || '').trim(),
      motion: String(fd.get('motion') || '').trim(),
    };
  };
  const base = `/api/v1/datasets/benchmarks/${enc(name)}`;

  function renderDownloads() {
    clear(dl);
    const q = query();
    const hdf5 = withQuery(`${base}/hdf5`, q);
    const jsonl = withQuery(`${base}/jsonl.gz`, q);
    const err = h('div.inline-error');
    const mk = (label, url, file, testid) => {
      const a = h('a.button', { href: url, 'data-url': url, 'data-testid': testid, download: file }, label);
      a.addEventListener('click', async (ev) => {
        ev.preventDefault();
        clear(err);
        // Without a token the server answers 401: say what to do instead of asking.
        if (!getToken()) {
          err.appendChild(notice('Downloads need a team or admin token: paste it in the box at the top right.', 'warn', 'dataset-need-token'));
          return;
        }
        if (a.classList.contains('busy')) return;
        a.classList.add('busy');
        const st = h('span.muted', ' downloading…');
        a.after(st);
        try {
          const r = await download(url, file);
          st.textContent = ` ${r.filename} (${fmtBytes(r.size)})`;
        } catch (e) {
          st.remove();
          err.appendChild(errorBox(e));
        } finally {
          a.classList.remove('busy');
        }
      });
      return a;
    };
    dl.append(
      h('span', 'Download: '),
      mk('HDF5', hdf5, `${name}.h5`, 'dataset-hdf5'),
      ' ',
      mk('JSONL.gz', jsonl, `${name}.jsonl.gz`, 'dataset-jsonl'),
      getToken() ? '' : h('span.muted', ' (paste a token in the header first)'),
      err,
    );
  }
  form.addEventListener('input', renderDownloads);
  form.addEventListener('change', renderDownloads);
  renderDownloads();

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clear(out);
    if (!getToken()) {
      out.appendChild(notice('Dataset cards need a team or admin token: paste it in the box at the top right.', 'warn', 'dataset-need-token'));
      return;
    }
    const btn = form.querySelector('button[type=submit]');
    btn.disabled = true;
    out.appendChild(loading('Building the dataset card…'));
    try {
      const card = await api(withQuery(`${base}/card`, query()));
      clear(out);
      out.appendChild(cardView(card));
    } catch (e) {
      clear(out);
      out.appendChild(errorBox(e));
    } finally {
      btn.disabled = false;
    }
  });
  return sec;
}

function cardView(card) {
  const c = card.counts || {};
  const counts = [
    ['submissions', c.submissions],
    ['teams', c.teams],
    ['episodes', c.episodes],
    ['rows', c.rows],
    ['duration_s', c.duration_s],
  ];
  const wrap = h('div.dataset-card', { 'data-testid': 'dataset-card' });
  wrap.append(
    h(
      'div.counts',
      counts.map(([k, v]) =>
        h(
          'div.count',
          { 'data-testid': `dataset-count-${k}` },
          h('div.count-value', k === 'duration_s' ? fmtDuration(v) : fmtNum(v)),
          // "1 submission", "2 submissions": the label follows the count.
          h('div.count-label', k === 'duration_s' ? 'duration' : v === 1 ? k.replace(/s$/, '') : k),
        ),
      ),
    ),
  );
  const attribution = card.motions && card.motions.attribution;
  wrap.append(
    defList(
      [
        ['Filters applied', h('code', JSON.stringify(card.filters || {}))],
        card.teams ? ['Teams', (card.teams || []).join(', ') || '—'] : null,
        card.motions && card.motions.names ? ['Motions', card.motions.names.join(', ') || '—'] : null,
        card.simulator ? ['Simulator', [card.simulator.engine, card.simulator.robot].filter(Boolean).join('; ')] : null,
        ['Attribution', h('span', { 'data-testid': 'dataset-attribution' }, attribution || '—')],
        card.created_at ? ['Card created', card.created_at] : null,
      ],
      'dataset-props',
    ),
  );
  wrap.append(h('details', h('summary', 'Full card (JSON)'), h('pre.json', JSON.stringify(card, null, 2))));
  return wrap;
}
