// The leaderboard table (benchmark pages, #/leaderboards/{b}, #/phases/{id}).

import { api, whoami } from './api.js';
import { badge, enc, errorBox, fmtNum, fmtPct, h, metricLabel, notice, plural, sortableTable, timeEl } from './ui.js';

/** metric name -> {description, formula, units, direction} from a benchmark's metric_info. */
export function metricInfoMap(bench) {
  const map = {};
  for (const mi of (bench && bench.metric_info) || []) map[mi.name] = mi;
  return map;
}

/** Loads a benchmark's JSON for units/arrows; failures only lose the units. */
export async function loadBenchmarkInfo(name, signal) {
  try {
    return await api(`benchmarks/${enc(name)}`, { signal });
  } catch (e) {
    if (e && e.name === 'AbortError') throw e;
    return null;
  }
}

/**
 * Which leaderboard entries this visitor may open (a submission page needs the owning team's
 * token or the admin token): the admin every one, a team its own, an anonymous visitor none.
 */
export function entryOpener(who) {
  if (who && who.role === 'admin') return () => true;
  if (who && who.role === 'team' && who.team) return (e) => e.team === who.team;
  return () => false;
}

/**
 * Renders a Leaderboard JSON as a sortable table.
 * lb: {benchmark, success_metric, primary, direction, entries: [...]}; info: metricInfoMap;
 * canOpen(entry): whether to link the entry's submission page (default: never).
 */
export function leaderboardTable(lb, info = {}, { canOpen = () => false } = {}) {
  const primaryInfo = { ...(info[lb.primary] || {}) };
  if (!primaryInfo.direction && lb.direction) primaryInfo.direction = lb.direction;
  const tieNames = [];
  for (const e of lb.entries || []) {
    for (const [name] of e.tie_breakers || []) if (!tieNames.includes(name)) tieNames.push(name);
  }
  const cols = [
    { key: 'rank', label: 'Rank', numeric: true },
    {
      key: 'team',
      label: 'Team',
      render: (e) => h('span.team', e.team),
    },
    {
      key: 'agent_name',
      label: 'Agent',
      render: (e) => [h('span', e.agent_name || '—'), e.baseline ? [' ', badge('baseline', 'teal', 'baseline-badge')] : null],
    },
    {
      key: 'submission_id',
      label: 'Submission',
      render: (e) =>
        canOpen(e)
          ? h('a.mono', { href: `#/submissions/${enc(e.submission_id)}`, 'data-testid': 'submission-link' }, e.submission_id)
          : h('span.mono', { title: "its page needs the team's token or the admin token", 'data-testid': 'submission-id' }, e.submission_id),
    },
    { key: 'finished_at', label: 'Date', render: (e) => timeEl(e.finished_at), defaultDir: 'desc' },
  ];
  if (lb.success_metric || (lb.entries || []).some((e) => e.success_rate !== null && e.success_rate !== undefined)) {
    cols.push({
      key: 'success_rate',
      label: h('span', { title: `share of all episodes with ${lb.success_metric || 'success'} = 1` }, 'Success rate ', h('span.arrow', { title: 'higher is better' }, '↑')),
      numeric: true,
      defaultDir: 'desc',
      render: (e) => fmtPct(e.success_rate),
    });
  }
  cols.push({
    key: 'score',
    label: metricLabel(lb.primary, primaryInfo),
    numeric: true,
    defaultDir: primaryInfo.direction === 'higher' ? 'desc' : 'asc',
    render: (e) => h('strong', fmtNum(e.score)),
  });
  tieNames.forEach((name) => {
    const mi = info[name] || {};
    cols.push({
      key: `tb:${name}`,
      label: metricLabel(name, mi),
      numeric: true,
      defaultDir: mi.direction === 'higher' ? 'desc' : 'asc',
      value: (e) => tieValue(e, name),
      render: (e) => fmtNum(tieValue(e, name)),
    });
  });
  cols.push({
    key: 'scored_episodes',
    label: h('span', { title: 'scored episodes (failed episodes in brackets)' }, 'Episodes'),
    numeric: true,
    render: (e) => [String(e.scored_episodes ?? '—'), e.failed_episodes ? h('span.muted', ` (+${e.failed_episodes} failed)`) : null],
  });
  return sortableTable(cols, lb.entries || [], {
    testid: 'leaderboard-table',
    sortKey: 'rank',
    empty: 'No completed submission yet.',
    rowAttrs: (e) => ({ class: e.baseline ? 'baseline-row' : '', dataset: { submissionId: e.submission_id, rank: String(e.rank) } }),
  });
}

function tieValue(e, name) {
  for (const [n, v] of e.tie_breakers || []) if (n === name) return v;
  return null;
}

/** Fetches a leaderboard and renders it (or the server's reason why not) into `el`. */
export async function renderLeaderboard(el, path, info, ctx) {
  let lb;
  let who;
  try {
    [lb, who] = await Promise.all([api(path, { signal: ctx && ctx.signal }), whoami()]);
  } catch (e) {
    if (e && e.name === 'AbortError') throw e;
    if (e.code === 'hidden') {
      el.appendChild(notice(e.message, 'warn', 'leaderboard-hidden'));
    } else {
      el.appendChild(errorBox(e));
    }
    return null;
  }
  if (ctx && !ctx.live()) return null;
  const count = (lb.entries || []).length;
  el.appendChild(
    h(
      'p.muted.lb-caption',
      `${plural(count, 'entry', 'entries')} ranked by ${lb.success_metric ? 'success rate first, then ' : ''}mean ${lb.primary} (${lb.direction === 'higher' ? 'higher' : 'lower'} is better)${(lb.entries || []).some((e) => e.baseline) ? '; baseline rows are the organisers\' reference agents' : ''}. Click a column header to sort.`,
    ),
  );
  el.appendChild(leaderboardTable(lb, info || {}, { canOpen: entryOpener(who) }));
  return lb;
}
