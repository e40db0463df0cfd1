/*
 * Small helpers for every module: DOM building (createElement + textContent only: every
 * value shown is hostile user data), the hash links built from data, time and JSON
 * formatting, status badges. Nothing here touches the page when it is loaded.
 */

/** A whole job id (the fleet's filter) and the string.uuid rule (forms-rules.js). */
export const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** How often a page reads its data again while the tab is visible. */
export const REFRESH_MS = 5000;

/**
 * Creates an element. attrs: "text" sets textContent, hidden/disabled/checked/selected
 * set the property, anything else goes through setAttribute (never innerHTML, so data
 * can never become markup). Children may be nodes, strings, arrays or null.
 */
export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  if (attrs) {
    for (const [name, value] of Object.entries(attrs)) {
      if (value === undefined || value === null || value === false) continue;
      if (name === 'text') node.textContent = String(value);
      else if (name === 'hidden' || name === 'disabled' || name === 'checked' || name === 'selected') node[name] = true;
      else if (name === 'value') node.value = String(value);
      else node.setAttribute(name, value === true ? '' : String(value));
    }
  }
  appendAll(node, children);
  return node;
}

function appendAll(node, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) appendAll(node, child);
    else if (typeof child === 'string' || typeof child === 'number') node.appendChild(document.createTextNode(String(child)));
    else node.appendChild(child);
  }
}

/** Replaces a node's children; like el(), it accepts arrays and skips null (replaceChildren() would print them). */
export function setChildren(node, ...children) {
  node.replaceChildren();
  appendAll(node, children);
}

export function byId(id) {
  return document.getElementById(id);
}

/** The only kind of link built from data: a hash route with the id percent-encoded. */
export function jobHref(jobId) {
  return '#/jobs/' + encodeURIComponent(String(jobId));
}

export function workflowHref(name) {
  return '#/workflows/' + encodeURIComponent(String(name));
}

/** The fleet page's hash for these filters and page (fleet.js reads it back; the inbox links to it). */
export function fleetHash(filters) {
  const query = new URLSearchParams();
  for (const key of ['status', 'workflow', 'createdAfter', 'createdBefore', 'jobId', 'meta']) if (filters[key]) query.set(key, filters[key]);
  if (filters.after) {
    query.set('after', filters.after);
    query.set('page', String(filters.page));
  }
  const text = query.toString();
  return '#/fleet' + (text ? '?' + text : '');
}

/** "3 s", "4 min", "2 h", "5 d". */
export function humanizeAge(seconds) {
  const s = Math.max(0, Math.floor(Number(seconds) || 0));
  if (s < 60) return s + ' s';
  if (s < 3600) return Math.floor(s / 60) + ' min';
  if (s < 86400) return Math.floor(s / 3600) + ' h';
  return Math.floor(s / 86400) + ' d';
}

/**
 * Milliseconds since the epoch, or NaN. Postgres writes microseconds, which not every
 * browser's Date.parse accepts, so the fraction is cut to milliseconds first.
 */
export function parseTime(iso) {
  if (typeof iso !== 'string' || iso === '') return NaN;
  return Date.parse(iso.replace(/(\.\d{3})\d+/, '$1'));
}

/** "3 min ago" / "in 12 s" / "" when the text is not a time. */
export function relativeTime(iso, now = Date.now()) {
  const t = parseTime(iso);
  if (Number.isNaN(t)) return '';
  const diff = (now - t) / 1000;
  return diff >= 0 ? humanizeAge(diff) + ' ago' : 'in ' + humanizeAge(-diff);
}

/** A <time> showing the relative age, the absolute value in its title. */
export function timeAgo(iso) {
  if (!iso) return el('span', { class: 'muted', text: '—' });
  return el('time', { datetime: iso, title: iso, 'data-relative': 'age', text: relativeTime(iso) || iso });
}

/**
 * Brings every relative time on the page up to date (`data-relative` elements:
 * `age` shows "3 min ago", `paren` "(3 min ago)"); the console calls it every few
 * seconds, so an age read a minute ago never stays "3 s ago".
 */
export function refreshRelativeTimes(root = document, now = Date.now()) {
  for (const node of root.querySelectorAll('[data-relative]')) {
    const iso = node.getAttribute('datetime') || node.getAttribute('data-datetime');
    const rel = relativeTime(iso, now);
    if (!rel) continue;
    node.textContent = node.getAttribute('data-relative') === 'paren' ? ' (' + rel + ')' : rel;
  }
}

/** Absolute ISO text plus the relative age, for the job page. */
export function timeBoth(iso) {
  if (!iso) return el('span', { class: 'muted', text: '—' });
  const rel = relativeTime(iso);
  // Shown to the second, in UTC; the full value (every fraction digit) in the title.
  const shown = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d/.test(String(iso))
    ? String(iso).slice(0, 10) + ' ' + String(iso).slice(11, 19) + (/(Z|[+-]00:?00)$/.test(String(iso)) ? ' UTC' : ' ' + (String(iso).match(/[+-]\d\d:?\d\d$/) || [''])[0])
    : String(iso);
  return el('span', null, el('time', { datetime: iso, title: iso, text: shown }),
    rel ? el('span', { class: 'muted', 'data-relative': 'paren', 'data-datetime': iso, text: ' (' + rel + ')' }) : null);
}

export function compactJson(value) {
  try {
    return JSON.stringify(value) ?? '';
  } catch (_) {
    return '';
  }
}

export function prettyJson(value) {
  try {
    return JSON.stringify(value, null, 2) ?? '';
  } catch (_) {
    return '';
  }
}

/**
 * JSON.parse, keeping integers beyond 2^53 exact: the node stores 64-bit integers of
 * checkpoints and results as JSON numbers, which a plain parse would round (an
 * operator must read 18446744073709551615, not 18446744073709552000). Where the
 * browser has JSON.rawJSON and the reviver's source text, such a number stays its
 * digits and JSON.stringify prints it as it came; elsewhere it parses as usual.
 */
export function parseLossless(text) {
  if (typeof JSON.rawJSON !== 'function') return JSON.parse(text);
  return JSON.parse(text, (key, value, context) => {
    if (typeof value === 'number' && !Number.isSafeInteger(value) && context && /^-?\d+$/.test(context.source)) {
      return JSON.rawJSON(context.source);
    }
    return value;
  });
}

/** Scalars as text, objects as compact JSON, null as a dash. */
export function displayValue(value) {
  if (value === null || value === undefined) return '—';
  if (typeof value === 'object') return compactJson(value);
  return String(value);
}

export function truncate(text, max) {
  return text.length > max ? text.slice(0, max - 1) + '…' : text;
}

/**
 * An id shortened for a table: its first 13 characters (a UUIDv7's whole timestamp)
 * and its last 4 (random: ids made in the same millisecond still differ); the full id
 * goes in the element's title.
 */
export function shortId(id) {
  const s = String(id);
  return s.length > 18 ? s.slice(0, 13) + '…' + s.slice(-4) : s;
}

/** A button that copies `text` to the clipboard and says so. */
export function copyButton(text, label) {
  const button = el('button', { type: 'button', class: 'copy', 'aria-label': label || 'Copy', text: 'Copy' });
  button.addEventListener('click', async () => {
    try {
      await navigator.clipboard.writeText(text);
      button.textContent = 'Copied';
    } catch {
      // No clipboard (an insecure origin, a denied permission): select the text instead.
      button.textContent = 'Select and copy';
    }
    setTimeout(() => { button.textContent = 'Copy'; }, 2000);
  });
  return button;
}

export function statusBadge(status, attrs) {
  const s = String(status || '');
  return el('span', Object.assign({ class: 'badge status-' + s.replace(/[^A-Z_]/g, ''), text: s }, attrs || {}));
}

/** Sets a badge's text and colour class in place (keeps its id and position). */
export function setBadge(badge, status) {
  const s = String(status || '');
  badge.textContent = s;
  badge.className = 'badge status-' + s.replace(/[^A-Z_]/g, '');
}

/** "camelCaseKey" -> "Camel case key", for labels of the job's columns. */
export function humanizeKey(key) {
  const words = String(key).replace(/([a-z0-9])([A-Z])/g, '$1 $2').toLowerCase();
  return words.charAt(0).toUpperCase() + words.slice(1);
}

/**
 * Runs task so that at most one run is in flight and at most one more is queued: many
 * events arriving together cause one or two reads, not one read each.
 */
export function coalesced(task) {
  let running = false;
  let queued = false;
  return async function run() {
    if (running) {
      queued = true;
      return;
    }
    running = true;
    try {
      do {
        queued = false;
        await task();
      } while (queued);
    } finally {
      running = false;
    }
  };
}
