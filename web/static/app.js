// MimicArena front end: the shell (nav, token box, who-am-I) and the routes.

import { getToken, onIdentityRefused, onTokenChange, setToken, whoami } from './api.js';
import { h } from './ui.js';
import { Router, notFoundPage } from './router.js';
import { homePage } from './page-home.js';
import { benchmarkPage } from './page-benchmark.js';
import { leaderboardPage, phasePage } from './page-leaderboard.js';
import { submissionPage } from './page-submission.js';
import { episodePage } from './page-episode.js';
import { teamPage } from './page-team.js';
import { adminPage } from './page-admin.js';

const routes = [
  ['/', homePage, 'home'],
  ['/benchmarks/:name', benchmarkPage, 'benchmark'],
  ['/leaderboards/:benchmark', leaderboardPage, 'leaderboard'],
  ['/phases/:id', phasePage, 'phase'],
  ['/submissions/:id', submissionPage, 'submission'],
  ['/submissions/:id/episodes/:idx', episodePage, 'episode'],
  ['/team', teamPage, 'team'],
  ['/admin', adminPage, 'admin'],
];

const NAV_OF = { home: 'home', benchmark: 'home', leaderboard: 'home', phase: 'home', team: 'team', submission: 'team', episode: 'team', admin: 'admin' };

function setupTokenBox(router) {
  const form = document.getElementById('tokenbox');
  const input = document.getElementById('token-input');
  const clearBtn = document.getElementById('token-clear');
  const label = document.getElementById('whoami');

  async function showWho() {
    const t = getToken();
    input.value = '';
    // Short enough for the box (18 characters); the title says the rest.
    input.placeholder = t ? 'paste to replace' : 'paste a token';
    input.title = t ? 'a token is set: paste another to replace it' : 'paste a team token or the admin token';
    clearBtn.hidden = !t;
    label.className = 'whoami';
    if (!t) {
      label.textContent = 'anonymous';
      label.title = 'no token: public pages only';
      label.dataset.role = 'anonymous';
      return;
    }
    label.textContent = 'checking…';
    const who = await whoami();
    if (t !== getToken()) return;
    label.dataset.role = who.role;
    if (who.role === 'admin') {
      label.textContent = 'organiser (admin)';
      label.classList.add('admin');
      label.title = 'admin token';
    } else if (who.role === 'team') {
      label.textContent = who.team ? `team ${who.team}` : 'team token';
      label.classList.add('team');
      label.title = 'team token';
    } else if (who.role === 'invalid') {
      label.textContent = 'token rejected';
      label.classList.add('bad');
      label.title = who.message || '';
      // The server's reason for screen readers too (the box is a live region): a tooltip is
      // for a mouse alone.
      if (who.message) label.append(h('span.sr-only', `: ${who.message}`));
    } else {
      label.textContent = 'token (unchecked)';
      label.title = who.message || '';
    }
  }

  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    if (input.value.trim()) setToken(input.value);
  });
  clearBtn.addEventListener('click', () => {
    setToken('');
    // The button hides itself: the focus goes to the token field rather than the page's body.
    input.focus();
  });
  onTokenChange(() => {
    showWho().then(() => highlightNav(currentRoute));
    router.render();
  });
  // A token revoked while the tab is open: the header stops naming its team (the page stays).
  onIdentityRefused(() => showWho().then(() => highlightNav(currentRoute)));
  showWho().then(() => highlightNav(currentRoute));
}

let currentRoute = '';

/** Lights the nav tab of route `name`: a submission or an episode belongs to the organiser's
 * tab for the admin token, to the team's otherwise. */
function highlightNav(name) {
  currentRoute = name;
  const admin = document.getElementById('whoami').dataset.role === 'admin';
  const key = admin && (name === 'submission' || name === 'episode') ? 'admin' : NAV_OF[name] || '';
  for (const a of document.querySelectorAll('.mainnav a')) {
    a.classList.toggle('active', a.dataset.nav === key);
    if (a.dataset.nav === key) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
}

const router = new Router(document.getElementById('app'), routes, notFoundPage);
document.addEventListener('routechange', (ev) => {
  highlightNav(ev.detail.name);
  window.scrollTo(0, 0);
});
setupTokenBox(router);
// The skip link moves the focus into the page (its `#app` is no route).
document.getElementById('skip-link').addEventListener('click', (ev) => {
  ev.preventDefault();
  const main = document.getElementById('app');
  main.setAttribute('tabindex', '-1');
  main.focus();
});
router.render();
