// Hash router: "#/benchmarks/g1-smoke" -> a page function. The server only serves "/",
// so every page lives behind the hash.
//
// A page is `async (root, params, ctx) => void`. `ctx.live()` is false once the user has
// navigated away (so late answers are dropped); `ctx.onCleanup(fn)` registers a function run
// on navigation (timers, WebGL renderers); `ctx.signal` aborts pending fetches.

import { clear, errorBox, h } from './ui.js';

export class Router {
  constructor(root, routes, notFound) {
    this.root = root;
    this.routes = routes.map(([pattern, page, name]) => ({ ...compile(pattern), page, name }));
    this.notFound = notFound;
    this.current = null;
    this.seq = 0;
    // A page the visitor went to takes the focus (its heading); a page drawn again (a token
    // set) leaves it where it is.
    window.addEventListener('hashchange', () => this.render({ moveFocus: true }));
  }

  path() {
    const raw = location.hash.replace(/^#/, '') || '/';
    // The skip link's target (`#app`) is no route: opened on its own it shows the home page.
    if (raw === 'app') return '/';
    const [p] = raw.split('?');
    return p.startsWith('/') ? p : `/${p}`;
  }

  query() {
    const raw = location.hash.replace(/^#/, '');
    const i = raw.indexOf('?');
    return new URLSearchParams(i >= 0 ? raw.slice(i + 1) : '');
  }

  /** Re-renders the current route (e.g. after the token changed). */
  async render({ moveFocus = false } = {}) {
    const seq = ++this.seq;
    if (this.current) {
      for (const fn of this.current.cleanups.splice(0)) {
        try {
          fn();
        } catch {
          /* a cleanup never blocks navigation */
        }
      }
      this.current.abort.abort();
    }
    const path = this.path();
    let match = null;
    let route = null;
    for (const r of this.routes) {
      match = r.re.exec(path);
      if (match) {
        route = r;
        break;
      }
    }
    const abort = new AbortController();
    const ctx = {
      cleanups: [],
      abort,
      signal: abort.signal,
      query: this.query(),
      live: () => seq === this.seq,
      onCleanup(fn) {
        this.cleanups.push(fn);
      },
    };
    this.current = ctx;
    const root = this.root;
    clear(root);
    document.body.dataset.page = route ? route.name : 'not-found';
    document.dispatchEvent(new CustomEvent('routechange', { detail: { name: route ? route.name : null } }));
    root.setAttribute('aria-busy', 'true');
    try {
      if (!route) {
        await this.notFound(root, {}, ctx);
      } else {
        const params = {};
        route.keys.forEach((k, i) => {
          params[k] = decodeURIComponent(match[i + 1]);
        });
        await route.page(root, params, ctx);
      }
    } catch (e) {
      if (e && e.name === 'AbortError') return;
      if (ctx.live()) root.appendChild(errorBox(e, 'This page failed'));
    } finally {
      if (ctx.live()) {
        root.removeAttribute('aria-busy');
        root.dataset.ready = String(seq);
        announcePage(root, moveFocus);
      }
    }
  }
}

/** The tab's title names the page (browser history and tab lists showed "MimicArena" for every
 * one); after a navigation the page's heading takes the focus, so that a screen reader says
 * where the visitor is, unless the visitor already moved into the page. */
function announcePage(root, moveFocus) {
  const heading = root.querySelector('h1');
  const name = heading ? heading.textContent.replace(/\s+/g, ' ').trim() : '';
  document.title = name ? `${name} – MimicArena` : 'MimicArena';
  const active = document.activeElement;
  const typing = active && active.matches && active.matches('input, select, textarea');
  if (moveFocus && heading && !root.contains(active) && !typing) {
    heading.setAttribute('tabindex', '-1');
    heading.focus({ preventScroll: true });
  }
}

function compile(pattern) {
  const keys = [];
  const src = pattern.replace(/\//g, '\\/').replace(/:(\w+)/g, (_, k) => {
    keys.push(k);
    return '([^/]+)';
  });
  return { re: new RegExp(`^${src}\\/?$`), keys };
}

export function notFoundPage(root) {
  root.append(h('h1', 'Page not found'), h('p', h('a', { href: '#/' }, 'Back to the home page')));
}
