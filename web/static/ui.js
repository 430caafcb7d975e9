// DOM helpers, formatting and the sortable table. API data only ever reaches the page
// through textContent / attributes (never innerHTML).

/**
 * h('div.card#main', {attrs}, children...): creates an element. Attributes: `class`,
 * `dataset`, `on*` event listeners, `style` (object), booleans, anything else via setAttribute.
 */
export function h(tag, attrs, ...children) {
  const m = /^([a-z0-9]+)?((?:[.#][\w-]+)*)$/i.exec(tag) || [null, tag, ''];
  const el = document.createElement(m[1] || 'div');
  for (const part of (m[2] || '').match(/[.#][\w-]+/g) || []) {
    if (part[0] === '.') el.classList.add(part.slice(1));
    else el.id = part.slice(1);
  }
  if (attrs !== undefined && attrs !== null && (typeof attrs !== 'object' || attrs instanceof Node || Array.isArray(attrs))) {
    children.unshift(attrs);
    attrs = null;
  }
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') {
      for (const c of String(v).split(/\s+/).filter(Boolean)) el.classList.add(c);
    } else if (k === 'dataset') {
      for (const [dk, dv] of Object.entries(v)) el.dataset[dk] = dv;
    } else if (k === 'style' && typeof v === 'object') {
      Object.assign(el.style, v);
    } else if (k.startsWith('on') && typeof v === 'function') {
      el.addEventListener(k.slice(2).toLowerCase(), v);
    } else if (k === 'value') {
      el.value = v;
    } else if (k === 'checked' || k === 'disabled' || k === 'selected') {
      el[k] = !!v;
    } else if (k === 'text') {
      el.textContent = v;
    } else {
      el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

export function loading(text = 'Loading…') {
  return h('p.loading', { 'data-testid': 'loading' }, h('span.spinner'), text);
}

/** An error box with the API's message (never a blank page). */
export function errorBox(err, prefix) {
  const msg = err && err.message ? err.message : String(err);
  const code = err && err.code ? err.code : null;
  return h(
    'div.error',
    { role: 'alert', 'data-testid': 'error', dataset: code ? { code } : {} },
    prefix ? h('strong', `${prefix}: `) : null,
    msg,
    code && !String(code).startsWith('http_') ? h('span.code', ` (${code})`) : null,
  );
}

export function notice(text, kind = 'info', testid) {
  return h(`div.notice.${kind}`, { 'data-testid': testid }, text);
}

// ---------- formatting ----------

const dateFmt = new Intl.DateTimeFormat(undefined, {
  year: 'numeric',
  month: 'short',
  day: 'numeric',
  hour: '2-digit',
  minute: '2-digit',
  hourCycle: 'h23',
  timeZone: 'UTC',
  timeZoneName: 'short',
});

/** Unix ms (or RFC 3339) -> "Nov 24, 2026, 01:53 UTC"; '—' for null. */
export function fmtDate(ms) {
  if (ms === null || ms === undefined || ms === '') return '—';
  const d = typeof ms === 'number' ? new Date(ms) : new Date(ms);
  if (Number.isNaN(d.getTime())) return String(ms);
  return dateFmt.format(d);
}

// The same date in two halves, so that a narrow table column can break between them.
const dayFmt = new Intl.DateTimeFormat(undefined, { year: 'numeric', month: 'short', day: 'numeric', timeZone: 'UTC' });
const clockFmt = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', hourCycle: 'h23', timeZone: 'UTC', timeZoneName: 'short' });
const clockSecondsFmt = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23', timeZone: 'UTC', timeZoneName: 'short' });

export function isoDate(ms) {
  if (ms === null || ms === undefined) return '';
  const d = new Date(ms);
  return Number.isNaN(d.getTime()) ? '' : d.toISOString();
}

/**
 * A <time> element with the readable date and the ISO date as a tooltip: "Nov 24, 2026," and
 * "01:53 UTC" in two spans that each stay whole (tables may wrap between them).
 */
export function timeEl(ms, seconds = false) {
  if (ms === null || ms === undefined) return h('span.muted', '—');
  const d = new Date(ms);
  if (Number.isNaN(d.getTime())) return h('span', String(ms));
  const clock = seconds ? clockSecondsFmt : clockFmt;
  return h('time', { datetime: isoDate(ms), title: isoDate(ms) }, h('span', `${dayFmt.format(d)},`), ' ', h('span', clock.format(d)));
}

/** An episode's runs: "3", or "3 (1 lost by the server, 1 charged to nobody)", the runs that were not the agent's. */
export function attemptsText(ep) {
  if (ep.attempts === null || ep.attempts === undefined) return '—';
  const notAgents = [];
  if (ep.server_faults) notAgents.push(`${ep.server_faults} lost by the server`);
  if (ep.uncharged_runs) notAgents.push(`${ep.uncharged_runs} charged to nobody`);
  return notAgents.length ? `${ep.attempts} (${notAgents.join(', ')})` : String(ep.attempts);
}

/** "1 submission", "2 submissions" (`many` defaults to `one` + "s"). */
export function plural(n, one, many) {
  return `${n} ${n === 1 ? one : many || `${one}s`}`;
}

/**
 * An episode seed. Seeds are u64, beyond JavaScript's exact integers (2^53), so the server sends
 * them as decimal strings, shown verbatim; an older server's number is shown as it is when exact,
 * else approximately, with a note.
 */
export function fmtSeed(seed) {
  if (seed === null || seed === undefined || seed === '') return '—';
  if (typeof seed === 'number' && !Number.isSafeInteger(seed)) {
    return h('span', { title: 'this seed is above 2^53, which JavaScript numbers cannot hold exactly; the report JSON and episodes CSV have the exact value' }, `≈${seed.toExponential(9)}`);
  }
  return String(seed);
}

export function fmtNum(v, digits = 4) {
  if (v === null || v === undefined || v === '') return '—';
  if (typeof v !== 'number') return String(v);
  if (!Number.isFinite(v)) return String(v);
  if (Number.isInteger(v) && Math.abs(v) < 1e9) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(2);
  if (a >= 1000) return v.toFixed(1);
  if (a >= 100) return v.toFixed(2);
  return Number(v.toPrecision(digits)).toString();
}

export function fmtPct(v) {
  if (v === null || v === undefined || !Number.isFinite(v)) return '—';
  return `${(v * 100).toFixed(1)}%`;
}

export function fmtDuration(s) {
  if (s === null || s === undefined || !Number.isFinite(s)) return '—';
  if (s < 60) return `${s.toFixed(s < 10 ? 2 : 1)} s`;
  const m = Math.floor(s / 60);
  const r = s - m * 60;
  if (m < 60) return `${m} min ${r.toFixed(0)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

export function fmtBytes(n) {
  if (!Number.isFinite(n)) return '';
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

const STATUS_CLASS = {
  PENDING: 'grey',
  RUNNING: 'blue',
  COMPLETED: 'green',
  FAILED: 'red',
  FELL: 'orange',
  TIMEOUT: 'red',
  upcoming: 'grey',
  open: 'green',
  closed: 'dark',
  public: 'blue',
  private: 'purple',
  baseline: 'teal',
};

/** A motion's name as shown: `hidden` where the server withholds it (a hidden test set). */
export function motionName(name) {
  return name === null || name === undefined ? 'hidden' : name;
}

export function badge(text, kind, testid) {
  const cls = kind || STATUS_CLASS[text] || STATUS_CLASS[String(text).toUpperCase()] || 'grey';
  return h(`span.badge.${cls}`, { 'data-testid': testid }, String(text));
}

/** "↓" (lower is better) / "↑" (higher is better) with a tooltip. */
export function arrow(direction) {
  // Named for screen readers, which read the glyph as "downwards arrow".
  if (direction === 'lower') return h('span.arrow', { title: 'lower is better', role: 'img', 'aria-label': 'lower is better' }, '↓');
  if (direction === 'higher') return h('span.arrow', { title: 'higher is better', role: 'img', 'aria-label': 'higher is better' }, '↑');
  return null;
}

/** A metric header label: name, units and the direction arrow. */
export function metricLabel(name, info) {
  const i = info || {};
  return h(
    'span.metric-label',
    { title: [i.description, i.formula].filter(Boolean).join(' — ') || name },
    name,
    // Units that carry their own parentheses ("fraction (0-1)") in brackets, not nested ones.
    i.units ? h('span.units', String(i.units).includes('(') ? ` [${i.units}]` : ` (${i.units})`) : null,
    i.direction ? ' ' : null,
    arrow(i.direction),
  );
}

export function link(href, text, attrs = {}) {
  return h('a', { href, ...attrs }, text);
}

export function enc(s) {
  return encodeURIComponent(s);
}

// ---------- sortable table ----------

/**
 * A table with sortable headers (client-side).
 * columns: [{key, label (string|Node), value(row) -> sort value, render(row) -> Node|string,
 *            numeric, className, sortable (default true)}]
 * opts: {rows, sortKey, sortDir ('asc'|'desc'), testid, rowAttrs(row) -> attrs, empty}
 */
export function sortableTable(columns, rows, opts = {}) {
  let sortKey = opts.sortKey ?? null;
  let sortDir = opts.sortDir || 'asc';
  const table = h('table.data', { 'data-testid': opts.testid });
  const thead = h('thead');
  const tbody = h('tbody');
  table.append(thead, tbody);

  const headRow = h('tr');
  const ths = columns.map((col) => {
    const sortable = col.sortable !== false;
    const th = h(
      'th',
      {
        class: [col.numeric ? 'num' : '', sortable ? 'sortable' : ''].join(' '),
        scope: 'col',
        dataset: { key: col.key },
        'aria-sort': 'none',
        tabindex: sortable ? '0' : null,
      },
      col.label ?? col.key,
      sortable ? h('span.sort-ind', { 'aria-hidden': 'true' }) : null,
    );
    if (sortable) {
      const act = () => {
        if (sortKey === col.key) sortDir = sortDir === 'asc' ? 'desc' : 'asc';
        else {
          sortKey = col.key;
          sortDir = col.defaultDir || 'asc';
        }
        renderBody();
      };
      th.addEventListener('click', act);
      th.addEventListener('keydown', (e) => {
        if (e.key === 'Enter' || e.key === ' ') {
          e.preventDefault();
          act();
        }
      });
    }
    headRow.appendChild(th);
    return th;
  });
  thead.appendChild(headRow);

  function sortValue(col, row) {
    if (col.value) return col.value(row);
    return row[col.key];
  }

  function renderBody() {
    clear(tbody);
    let list = rows.slice();
    const col = columns.find((c) => c.key === sortKey);
    if (col) {
      const dir = sortDir === 'asc' ? 1 : -1;
      list = list
        .map((r, i) => ({ r, i, v: sortValue(col, r) }))
        .sort((a, b) => {
          const an = a.v === null || a.v === undefined || (typeof a.v === 'number' && Number.isNaN(a.v));
          const bn = b.v === null || b.v === undefined || (typeof b.v === 'number' && Number.isNaN(b.v));
          if (an && bn) return a.i - b.i;
          if (an) return 1; // missing values always last
          if (bn) return -1;
          let c;
          if (typeof a.v === 'number' && typeof b.v === 'number') c = a.v - b.v;
          else c = String(a.v).localeCompare(String(b.v), undefined, { numeric: true });
          return c !== 0 ? c * dir : a.i - b.i;
        })
        .map((x) => x.r);
    }
    ths.forEach((th, i) => {
      const active = columns[i].key === sortKey;
      th.setAttribute('aria-sort', active ? (sortDir === 'asc' ? 'ascending' : 'descending') : 'none');
      const ind = th.querySelector('.sort-ind');
      if (ind) ind.textContent = active ? (sortDir === 'asc' ? ' ▲' : ' ▼') : '';
    });
    if (list.length === 0) {
      tbody.appendChild(h('tr.empty', h('td', { colspan: String(columns.length) }, opts.empty || 'Nothing yet.')));
      return;
    }
    for (const row of list) {
      const tr = h('tr', opts.rowAttrs ? opts.rowAttrs(row) : null);
      for (const c of columns) {
        const content = c.render ? c.render(row) : fmtCell(row[c.key]);
        tr.appendChild(h('td', { class: [c.numeric ? 'num' : '', c.className || ''].join(' ') }, content));
      }
      tbody.appendChild(tr);
    }
  }

  renderBody();
  const wrap = h('div.table-wrap', table);
  wrap.update = (newRows) => {
    rows = newRows;
    renderBody();
  };
  return wrap;
}

function fmtCell(v) {
  if (typeof v === 'number') return fmtNum(v);
  if (v === null || v === undefined) return '—';
  return String(v);
}

/** A definition list from [[term, value], ...]. */
export function defList(pairs, testid) {
  return h(
    'dl.props',
    { 'data-testid': testid },
    pairs.filter(Boolean).map(([k, v]) => [h('dt', k), h('dd', v === null || v === undefined ? '—' : v)]),
  );
}

/** A button that runs an async action, disabling itself meanwhile; errors go to `errEl`. A
 * disabled button loses the keyboard's focus: it gets it back when it is enabled again. */
export function actionButton(label, attrs, fn, errEl) {
  const btn = h('button', { type: 'button', ...attrs }, label);
  btn.addEventListener('click', async () => {
    if (btn.disabled) return;
    const hadFocus = document.activeElement === btn;
    btn.disabled = true;
    if (errEl) clear(errEl);
    try {
      await fn(btn);
    } catch (e) {
      if (errEl) errEl.appendChild(errorBox(e));
    } finally {
      btn.disabled = false;
      if (hadFocus) regainFocus(btn);
    }
  });
  return btn;
}

/** Focuses `el` again if the focus was lost (to the page's body) meanwhile, not if the
 * visitor moved it elsewhere. */
export function regainFocus(el) {
  const active = document.activeElement;
  if (el.isConnected && (!active || active === document.body)) el.focus({ preventScroll: true });
}

/** The control that has the focus within `container`, as a selector that finds the same one
 * once the container is drawn again (by id, test id, or link target); null when the focus is
 * elsewhere. With [`refocus`]: a part of a page redrawn by a poll keeps the keyboard's place. */
export function focusWithin(container) {
  const el = document.activeElement;
  if (!el || el === document.body || !container.contains(el)) return null;
  if (el.id) return `#${CSS.escape(el.id)}`;
  // A link by its target first: rows' links share their test id.
  const href = el.getAttribute('href');
  if (href) return `a[href="${CSS.escape(href)}"]`;
  const testid = el.getAttribute('data-testid');
  if (testid) return `[data-testid="${CSS.escape(testid)}"]`;
  return null;
}

/** Focuses the control `selector` (from [`focusWithin`]) in `container` if the focus was lost. */
export function refocus(container, selector) {
  if (!selector) return;
  const el = container.querySelector(selector);
  if (el) regainFocus(el);
}

export function section(title, ...children) {
  return h('section.card', title ? h('h2', title) : null, ...children);
}
