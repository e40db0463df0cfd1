/*
 * ProtoMolt Jobs console: the browser front end served by the node at /console.
 *
 * ES modules, no libraries, no build step. This entry module is the router; the rest is
 * in ./js/, one module per concept (each imports only modules listed above it, so
 * there is no import circle):
 *
 *   dom.js            DOM building (createElement + textContent only), links, time and JSON formatting, badges.
 *   api.js            POST /v1/actions/{verb}, the token in sessionStorage, the prompt on 401, the error banner.
 *   sse.js            a job's events read with fetch(), reconnecting with Last-Event-ID; the SSE parser.
 *   forms-rules.js    form logic (pure: no DOM): typed text -> proto3 JSON, the page-checkable rules.
 *   forms.js          the form generator around forms-rules.js, shared by the review and submit forms.
 *   definition.js     a workflow definition as shown: parsed, its descriptor set replaced by its size.
 *   graph.js          a workflow's steps drawn as a graph (SVG): boxes by state, arrows for `after`, map progress.
 *   map-items.js      a job's map steps' elements, paged (get-job-items).
 *   fleet.js          the fleet page, #/fleet.
 *   job.js            a job's page, #/jobs/<id>, with its review form.
 *   inbox.js          the review inbox, #/inbox.
 *   workflows.js      #/workflows and #/workflows/<name>, with the submit form.
 *   schedules.js      #/schedules and #/schedules/<name>: next runs, last runs, pause, resume, trigger.
 *   console.js        (this file) hash routes, nav, the token form and sign-out wiring.
 *
 * Every view is a function render(main, params, query) that fills <main id="view">
 * and returns a controller {dispose(), update?(query), onToken?()}; the router calls
 * dispose() before leaving so timers stop and streams are aborted. Only this module
 * acts when it is loaded (it starts the router); the others only declare, so node can
 * import the pure functions they export (the form rules, the SSE parser, the outcome
 * sentences).
 */

import { byId, el, refreshRelativeTimes } from './js/dom.js';
import { clearBanner, clearToken, storeToken, updateSignOut } from './js/api.js';
import { renderFleetView } from './js/fleet.js';
import { renderJobView } from './js/job.js';
import { renderInboxView } from './js/inbox.js';
import { renderWorkflowView, renderWorkflowsView } from './js/workflows.js';
import { renderScheduleView, renderSchedulesView } from './js/schedules.js';

const ROUTES = [
  { name: 'fleet', pattern: /^\/fleet$/, render: renderFleetView, nav: '#/fleet' },
  { name: 'inbox', pattern: /^\/inbox$/, render: renderInboxView, nav: '#/inbox' },
  { name: 'workflows', pattern: /^\/workflows$/, render: renderWorkflowsView, nav: '#/workflows' },
  { name: 'workflow', pattern: /^\/workflows\/(.+)$/, render: renderWorkflowView, nav: '#/workflows', param: 'name' },
  { name: 'schedules', pattern: /^\/schedules$/, render: renderSchedulesView, nav: '#/schedules' },
  { name: 'schedule', pattern: /^\/schedules\/(.+)$/, render: renderScheduleView, nav: '#/schedules', param: 'name' },
  { name: 'job', pattern: /^\/jobs\/(.+)$/, render: renderJobView, nav: null, param: 'id' },
];

let currentView = null; // {key, controller}

function parseHash(hash) {
  const text = String(hash || '').replace(/^#/, '');
  const q = text.indexOf('?');
  return { path: q < 0 ? text : text.slice(0, q), query: new URLSearchParams(q < 0 ? '' : text.slice(q + 1)) };
}

function route(moveFocus) {
  const { path, query } = parseHash(location.hash);
  if (path === '' || path === '/') {
    history.replaceState(null, '', '#/fleet');
    route(false);
    return;
  }
  const main = byId('view');
  let matched = null;
  let params = {};
  for (const candidate of ROUTES) {
    const m = candidate.pattern.exec(path);
    if (!m) continue;
    try {
      if (candidate.param) params = { [candidate.param]: decodeURIComponent(m[1]) };
      matched = candidate;
    } catch (_) {
      matched = null; // a malformed %-escape: treat as not found
    }
    break;
  }
  const key = matched ? matched.name + '\u0000' + (params.id || params.name || '') : 'not-found';
  // The same view with a new query (fleet filters, paging): update it in place, keeping focus.
  if (currentView && currentView.key === key && currentView.controller.update) {
    currentView.controller.update(query);
    return;
  }
  if (currentView) currentView.controller.dispose();
  clearBanner();
  main.replaceChildren(el('p', { class: 'loading', text: 'Loading…' }));
  for (const link of document.querySelectorAll('header nav a')) {
    if (matched && link.getAttribute('href') === matched.nav) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  let controller;
  if (matched) {
    controller = matched.render(main, params, query);
  } else {
    document.title = 'Not found · ProtoMolt Jobs';
    main.replaceChildren(el('h1', { text: 'Not found' }), el('p', null, 'This page does not exist. ', el('a', { href: '#/fleet', text: 'Go to the fleet' })));
    controller = { dispose() {} };
  }
  currentView = { key, controller };
  if (moveFocus) main.focus({ preventScroll: true });
}

/** After a new token (or sign-out): the view reloads its data without losing typed values. */
function refreshCurrentView() {
  if (currentView && currentView.controller.onToken) currentView.controller.onToken();
  else {
    if (currentView) currentView.controller.dispose();
    currentView = null;
    route(false);
  }
}

function start() {
  const tokenForm = byId('token-form');
  tokenForm.addEventListener('submit', (event) => {
    event.preventDefault();
    const input = byId('token-input');
    const token = input.value.trim();
    if (token === '') {
      byId('token-message').textContent = 'Type a token first.';
      input.focus();
      return;
    }
    // A header carries visible ASCII only (a pasted smart quote would make every call fail).
    if (!/^[\x21-\x7E]+$/.test(token)) {
      byId('token-message').textContent = 'A token is letters, digits and ASCII punctuation, without spaces: check what was pasted.';
      input.focus();
      return;
    }
    storeToken(token);
    input.value = '';
    tokenForm.hidden = true;
    clearBanner();
    refreshCurrentView();
  });
  byId('sign-out').addEventListener('click', () => {
    clearToken();
    byId('view').focus({ preventScroll: true });
    // Drawn again from scratch: the view's streams and polls stop with it.
    if (currentView) currentView.controller.dispose();
    currentView = null;
    route(false);
  });
  updateSignOut();
  window.addEventListener('hashchange', () => route(true));
  route(false);
}

if (typeof document !== 'undefined') {
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
}

// Relative ages ("3 min ago") move on by themselves, on every page.
setInterval(() => refreshRelativeTimes(), 5000);
