/*
 * ProtoMolt Jobs console: the browser front end served by the node at /console.
 *
 * One classic script, no libraries, no build step. It is read top to bottom in
 * these sections:
 *
 *   1. Small helpers      DOM building (createElement + textContent only: every value
 *                         shown is hostile user data), time formatting.
 *   2. API + auth         POST /v1/actions/{verb}, the bearer token in sessionStorage,
 *                         the token prompt on 401, the error banner.
 *   3. SSE reader         GET /v1/jobs/{id}/events read with fetch() (EventSource cannot
 *                         send an Authorization header), reconnecting with Last-Event-ID.
 *   4. Form logic (pure)  typed text -> proto3 JSON, the page-checkable rules. No DOM, so
 *                         node can exercise it (see module.exports at the bottom).
 *   5. Form generator     the DOM around section 4, shared by the review and submit forms.
 *   6. Fleet view         #/fleet
 *   7. Job view           #/jobs/<id>
 *   8. Inbox view         #/inbox
 *   9. Workflows view     #/workflows and #/workflows/<name>
 *  10. Router             hash routes, nav, the token form and sign-out wiring.
 *
 * Every view is a function render(main, params, query) that fills <main id="view">
 * and returns a controller {dispose(), update?(query), onToken?()}; the router calls
 * dispose() before leaving so timers stop and streams are aborted.
 */
'use strict';

/* ======================================================================
 * 1. Small helpers
 * ==================================================================== */

const STATUSES = ['QUEUED', 'RUNNING', 'WAITING', 'COMPLETED', 'FAILED', 'DEAD', 'CANCELLED'];
const TERMINAL_EVENT_TYPES = new Set(['TYPE_COMPLETED', 'TYPE_FAILED', 'TYPE_DEAD', 'TYPE_CANCELLED']);
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const REFRESH_MS = 5000;

/**
 * Creates an element. attrs: "text" sets textContent, hidden/disabled/checked/selected
 * set the property, anything else goes through setAttribute (never innerHTML, so data
 * can never become markup). Children may be nodes, strings, arrays or null.
 */
function el(tag, attrs, ...children) {
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
function setChildren(node, ...children) {
  node.replaceChildren();
  appendAll(node, children);
}

function byId(id) {
  return document.getElementById(id);
}

/** The only kind of link built from data: a hash route with the id percent-encoded. */
function jobHref(jobId) {
  return '#/jobs/' + encodeURIComponent(String(jobId));
}

function workflowHref(name) {
  return '#/workflows/' + encodeURIComponent(String(name));
}

/** "3 s", "4 min", "2 h", "5 d". */
function humanizeAge(seconds) {
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
function parseTime(iso) {
  if (typeof iso !== 'string' || iso === '') return NaN;
  return Date.parse(iso.replace(/(\.\d{3})\d+/, '$1'));
}

/** "3 min ago" / "in 12 s" / "" when the text is not a time. */
function relativeTime(iso, now = Date.now()) {
  const t = parseTime(iso);
  if (Number.isNaN(t)) return '';
  const diff = (now - t) / 1000;
  return diff >= 0 ? humanizeAge(diff) + ' ago' : 'in ' + humanizeAge(-diff);
}

/** A <time> showing the relative age, the absolute value in its title. */
function timeAgo(iso) {
  if (!iso) return el('span', { class: 'muted', text: '—' });
  return el('time', { datetime: iso, title: iso, text: relativeTime(iso) || iso });
}

/** Absolute ISO text plus the relative age, for the job page. */
function timeBoth(iso) {
  if (!iso) return el('span', { class: 'muted', text: '—' });
  const rel = relativeTime(iso);
  // Shown to the second, in UTC; the full value (every fraction digit) in the title.
  const shown = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d/.test(String(iso))
    ? String(iso).slice(0, 10) + ' ' + String(iso).slice(11, 19) + (/(Z|[+-]00:?00)$/.test(String(iso)) ? ' UTC' : ' ' + (String(iso).match(/[+-]\d\d:?\d\d$/) || [''])[0])
    : String(iso);
  return el('span', null, el('time', { datetime: iso, title: iso, text: shown }), rel ? el('span', { class: 'muted', text: ' (' + rel + ')' }) : null);
}

function compactJson(value) {
  try {
    return JSON.stringify(value) ?? '';
  } catch (_) {
    return '';
  }
}

function prettyJson(value) {
  try {
    return JSON.stringify(value, null, 2) ?? '';
  } catch (_) {
    return '';
  }
}

/** Scalars as text, objects as compact JSON, null as a dash. */
function displayValue(value) {
  if (value === null || value === undefined) return '—';
  if (typeof value === 'object') return compactJson(value);
  return String(value);
}

function truncate(text, max) {
  return text.length > max ? text.slice(0, max - 1) + '…' : text;
}

function shortId(id) {
  const s = String(id);
  return s.length > 13 ? s.slice(0, 8) + '…' : s;
}

function statusBadge(status, attrs) {
  const s = String(status || '');
  return el('span', Object.assign({ class: 'badge status-' + s.replace(/[^A-Z_]/g, ''), text: s }, attrs || {}));
}

/** Sets a badge's text and colour class in place (keeps its id and position). */
function setBadge(badge, status) {
  const s = String(status || '');
  badge.textContent = s;
  badge.className = 'badge status-' + s.replace(/[^A-Z_]/g, '');
}

/** "camelCaseKey" -> "Camel case key", for labels of the job's columns. */
function humanizeKey(key) {
  const words = String(key).replace(/([a-z0-9])([A-Z])/g, '$1 $2').toLowerCase();
  return words.charAt(0).toUpperCase() + words.slice(1);
}

/**
 * Runs task so that at most one run is in flight and at most one more is queued: many
 * events arriving together cause one or two reads, not one read each.
 */
function coalesced(task) {
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

/* ======================================================================
 * 2. API + auth
 * ==================================================================== */

const TOKEN_KEY = 'protomolt.token';
const HTTP_CODES = { 400: 'invalid_argument', 401: 'unauthenticated', 403: 'permission_denied', 404: 'not_found', 500: 'internal', 503: 'unavailable' };

/** An error worth showing: code + message from the node, or a network failure. */
class NodeError extends Error {
  constructor(code, message, httpStatus) {
    super(message);
    this.code = code;
    this.httpStatus = httpStatus || 0;
  }
}

/** The one text shown for any error: "<code>: <message>"; never a stack or a raw exception. */
function errorText(err) {
  if (err instanceof NodeError) return err.code ? err.code + ': ' + err.message : err.message;
  return 'internal: the page failed unexpectedly';
}

function isAbort(err) {
  return !!err && err.name === 'AbortError';
}

function networkError() {
  const reason = typeof navigator !== 'undefined' && navigator.onLine === false ? 'the browser is offline' : 'connection failed';
  return new NodeError('', 'the node did not answer: ' + reason);
}

function readToken() {
  try {
    return sessionStorage.getItem(TOKEN_KEY) || '';
  } catch (_) {
    return '';
  }
}

function storeToken(token) {
  try {
    sessionStorage.setItem(TOKEN_KEY, token);
  } catch (_) {
    /* storage disabled: the token lives only until the next read fails */
  }
  updateSignOut();
}

function clearToken() {
  try {
    sessionStorage.removeItem(TOKEN_KEY);
  } catch (_) {
    /* nothing stored */
  }
  updateSignOut();
}

function authHeaders(extra) {
  const headers = Object.assign({}, extra);
  const token = readToken();
  if (token) headers.Authorization = 'Bearer ' + token;
  return headers;
}

/** The body as JSON, or null when it is empty or not JSON (a proxy's HTML page, say). */
async function readJson(response) {
  let text;
  try {
    text = await response.text();
  } catch (_) {
    throw networkError();
  }
  try {
    return parseLossless(text);
  } catch (_) {
    return null;
  }
}

/**
 * JSON.parse, keeping integers beyond 2^53 exact: the node stores 64-bit integers of
 * checkpoints and results as JSON numbers, which a plain parse would round (an
 * operator must read 18446744073709551615, not 18446744073709552000). Where the
 * browser has JSON.rawJSON and the reviver's source text, such a number stays its
 * digits and JSON.stringify prints it as it came; elsewhere it parses as usual.
 */
function parseLossless(text) {
  if (typeof JSON.rawJSON !== 'function') return JSON.parse(text);
  return JSON.parse(text, (key, value, context) => {
    if (typeof value === 'number' && !Number.isSafeInteger(value) && context && /^-?\d+$/.test(context.source)) {
      return JSON.rawJSON(context.source);
    }
    return value;
  });
}

function errorFromResponse(status, payload) {
  const code = payload && typeof payload.code === 'string' ? payload.code : HTTP_CODES[status] || (status >= 500 ? 'unavailable' : 'http_' + status);
  const message = payload && typeof payload.message === 'string' ? payload.message : 'HTTP ' + status;
  return new NodeError(code, message, status);
}

/**
 * Calls one verb. Resolves with the JSON answer (which may still say ok:false);
 * rejects with a NodeError for HTTP errors and network failures, or an AbortError
 * when the view went away. A 401 also opens the token prompt.
 */
async function callVerb(verb, body, signal) {
  let response;
  try {
    // Relative to the page (/console): a node served under a path prefix works too.
    response = await fetch('v1/actions/' + encodeURIComponent(verb), {
      method: 'POST',
      headers: authHeaders({ 'Content-Type': 'application/json', Accept: 'application/json' }),
      body: JSON.stringify(body || {}),
      signal,
      cache: 'no-store',
      credentials: 'same-origin',
    });
  } catch (err) {
    if (isAbort(err)) throw err;
    throw networkError();
  }
  const payload = await readJson(response);
  if (!response.ok) {
    const err = errorFromResponse(response.status, payload);
    if (response.status === 401) askForToken(err.message);
    throw err;
  }
  if (payload === null || typeof payload !== 'object') {
    throw new NodeError('internal', 'the node answered with something that is not JSON', response.status);
  }
  return payload;
}

/** For page loads: an ok:false answer becomes an error too. */
async function loadVerb(verb, body, signal) {
  const payload = await callVerb(verb, body, signal);
  if (payload.ok === false) throw new NodeError('', String(payload.error || verb + ' failed'));
  return payload;
}

function showBanner(text) {
  const banner = byId('error-banner');
  if (!banner) return;
  banner.textContent = text;
  banner.hidden = false;
}

function clearBanner() {
  const banner = byId('error-banner');
  if (!banner) return;
  banner.textContent = '';
  banner.hidden = true;
}

/** Errors of page loads go to the banner; aborted loads (the user left) are silent. */
function reportLoadError(err) {
  if (isAbort(err)) return;
  showBanner(errorText(err));
}

/** Shows the token form with the node's reason; focuses it only when it first opens, so refreshes do not steal focus. */
function askForToken(reason) {
  const form = byId('token-form');
  if (!form) return;
  byId('token-message').textContent = reason || 'The node needs an access token.';
  if (form.hidden) {
    form.hidden = false;
    // Not while the user is typing elsewhere (a background read's 401 mid-review).
    const active = document.activeElement;
    const typing = active && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName) && !form.contains(active);
    if (!typing) byId('token-input').focus();
  }
}

function updateSignOut() {
  const button = typeof document !== 'undefined' ? byId('sign-out') : null;
  if (button) button.hidden = readToken() === '';
}

/* ======================================================================
 * 3. SSE reader
 * ==================================================================== */

/**
 * A text/event-stream parser: push() decoded text in any chunking, onMessage gets
 * {id, event, data} for each event (a blank line ends one). Lines starting ":" are
 * comments. The last id persists across events, as in the EventSource spec.
 */
function createSseParser(onMessage) {
  let buffer = '';
  let data = [];
  let eventName = '';
  let lastId = '';

  function line(text) {
    if (text === '') {
      if (data.length > 0) onMessage({ id: lastId, event: eventName || 'message', data: data.join('\n') });
      data = [];
      eventName = '';
      return;
    }
    if (text.charAt(0) === ':') return;
    const colon = text.indexOf(':');
    const field = colon < 0 ? text : text.slice(0, colon);
    let value = colon < 0 ? '' : text.slice(colon + 1);
    if (value.charAt(0) === ' ') value = value.slice(1);
    if (field === 'data') data.push(value);
    else if (field === 'event') eventName = value;
    else if (field === 'id' && value.indexOf('\0') < 0) lastId = value;
  }

  return {
    push(text) {
      buffer += text;
      for (;;) {
        const match = /\r\n|\r|\n/.exec(buffer);
        if (!match) break;
        // A "\r" at the very end may be the first half of "\r\n": wait for more.
        if (match[0] === '\r' && match.index === buffer.length - 1) break;
        const text = buffer.slice(0, match.index);
        buffer = buffer.slice(match.index + match[0].length);
        line(text);
      }
    },
    lastEventId() {
      return lastId;
    },
  };
}

/**
 * Follows a job's events. handlers.onEvent(event) for each WorkflowRunEvent,
 * handlers.onState(state, text) with state live | reconnecting | ended | error.
 * Returns {stop(), restart()}: restart() reconnects after the stream ended (a retried
 * job writes new events after its terminal one).
 */
function followJobEvents(jobId, handlers) {
  let controller = null;
  let lastId = '';
  let stopped = false;
  let running = false;
  let timer = null;
  let failures = 0;

  function retryLater(text) {
    failures += 1;
    // About a second, as asked; slower when the node keeps failing.
    // Jittered, so the pages open on a restarted node do not all come back at once.
    const delay = Math.min(1000 * 2 ** (failures - 1), 10000) * (0.5 + Math.random());
    handlers.onState('reconnecting', text);
    timer = setTimeout(connect, delay);
  }

  async function connect() {
    timer = null;
    if (stopped) return;
    running = true;
    controller = new AbortController();
    const headers = authHeaders({ Accept: 'text/event-stream' });
    if (lastId) headers['Last-Event-ID'] = lastId;
    let response;
    try {
      response = await fetch('v1/jobs/' + encodeURIComponent(jobId) + '/events', { headers, signal: controller.signal, cache: 'no-store' });
    } catch (err) {
      running = false;
      if (!stopped) retryLater(errorText(networkError()) + '; reconnecting');
      return;
    }
    if (response.status === 204) {
      running = false;
      handlers.onState('ended', 'The job is finished; no more events.');
      return;
    }
    if (!response.ok) {
      let payload = null;
      try {
        payload = await readJson(response);
      } catch (_) {
        /* shown as the HTTP status below */
      }
      running = false;
      if (stopped) return;
      const err = errorFromResponse(response.status, payload);
      if (response.status === 401) askForToken(err.message);
      if (response.status >= 500 || response.status === 429) retryLater(errorText(err) + '; reconnecting');
      else if (lastId && response.status === 400) {
        // The last event seen is unknown to the node: follow the job from its start
        // (events already shown are recognised by id) rather than stop for good.
        lastId = '';
        retryLater(errorText(err) + '; following the job from its first event');
      } else handlers.onState('error', errorText(err));
      return;
    }
    handlers.onState('live', 'Live');
    // Whether the latest event is terminal: the node ends a stream only then (a retried
    // job's stream goes on past its earlier terminal events); any other end is a drop.
    let endedOnTerminal = false;
    const parser = createSseParser((message) => {
      // The event this page saw last was pruned by retention: what follows is the
      // rest of the job's story.
      if (message.event === 'resumed') {
        handlers.onState('live', 'Live (the events before were pruned by retention)');
        return;
      }
      let event;
      try {
        event = parseLossless(message.data);
      } catch (_) {
        return; // not a WorkflowRunEvent; nothing to show
      }
      if (!event || typeof event !== 'object') return;
      lastId = message.id || event.eventId || lastId;
      failures = 0;
      endedOnTerminal = TERMINAL_EVENT_TYPES.has(event.type);
      handlers.onEvent(event);
    });
    try {
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        parser.push(decoder.decode(value, { stream: true }));
      }
    } catch (_) {
      /* the connection dropped: handled below like an early end */
    }
    running = false;
    if (stopped) return;
    if (endedOnTerminal) handlers.onState('ended', 'The job is finished; no more events.');
    else retryLater('The connection dropped; reconnecting');
  }

  connect();
  return {
    stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      if (controller) controller.abort();
    },
    restart() {
      if (stopped || running || timer) return;
      failures = 0;
      connect();
    },
  };
}

/* ======================================================================
 * 4. Form logic (pure: no DOM)
 *
 * A form is described by the node's Field list (get-form). The typed values live in a
 * "slot" tree mirroring the fields, so the DOM only writes raw text into slots and
 * everything below can run in node:
 *   scalar  {raw: string | boolean}     message {sub: {jsonName: slot}}
 *   list    {items: [slot]}             map     {entries: [{key: slot, value: slot}]}
 * buildForm() turns the slots into the proto3 JSON object plus the errors per path.
 * ==================================================================== */

const INT32_RANGES = {
  int32: [-2147483648, 2147483647],
  sint32: [-2147483648, 2147483647],
  sfixed32: [-2147483648, 2147483647],
  uint32: [0, 4294967295],
  fixed32: [0, 4294967295],
};
const INT64_MIN = BigInt('-9223372036854775808');
const INT64_MAX = BigInt('9223372036854775807');
const UINT64_MAX = BigInt('18446744073709551615');
const INT64_RANGES = {
  int64: [INT64_MIN, INT64_MAX],
  sint64: [INT64_MIN, INT64_MAX],
  sfixed64: [INT64_MIN, INT64_MAX],
  uint64: [BigInt(0), UINT64_MAX],
  fixed64: [BigInt(0), UINT64_MAX],
};
const FLOAT_KINDS = new Set(['double', 'float']);
const FLOAT_MAX = 3.4028234663852886e38;
const FLOAT_MIN_SUBNORMAL = 1.401298464324817e-45;
const NUMERIC_KINDS = new Set([...Object.keys(INT32_RANGES), ...Object.keys(INT64_RANGES), ...FLOAT_KINDS]);

const RFC3339_RE = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?(Z|([+-])(\d{2}):(\d{2}))$/;
const DURATION_RE = /^-?\d+(\.\d{1,9})?s$/;
const DECIMAL_RE = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;
const INTEGER_RE = /^[+-]?\d+$/;
// The WHATWG e-mail address grammar, which protovalidate's string.email follows.
const EMAIL_RE = /^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;
const URI_RE = /^[A-Za-z][A-Za-z0-9+.-]*:[^\s]*$/;
// String fields whose name suggests long text get a textarea.
const LONG_TEXT_RE = /notes|comment|description|text|body|reason/i;

function jsonKey(field) {
  return field.jsonName || field.name;
}

/** Rules the page must check itself (the node checks the others). */
function pageRules(field) {
  return (field.rules || []).filter((rule) => rule && rule.checkedBy === 'page' && typeof rule.id === 'string');
}

function ruleMessage(rule) {
  return rule.message || rule.summary || rule.id + ' ' + compactJson(rule.value);
}

/** True when a bool is shown as (unset)/true/false: it has presence, or is a list item or map value. */
function boolUsesSelect(field) {
  return !!(field.optional || field.asItem);
}

/** The field as one element of its list or map: item rules only, no presence of its own. */
function itemField(field) {
  return Object.assign({}, field, {
    repeated: false,
    map: false,
    optional: false,
    oneof: undefined,
    required: false,
    asItem: true,
    rules: (field.rules || []).filter((r) => !isCollectionRule(r.id)),
  });
}

function isCollectionRule(id) {
  return id === 'required' || /^(repeated|map)\./.test(String(id));
}

function mapKeyField(field) {
  return Object.assign({ name: 'key', jsonName: 'key', kind: 'string', rules: [] }, field.key || {}, { asItem: true, required: false, repeated: false, map: false });
}

function mapValueField(field) {
  return Object.assign({ name: 'value', jsonName: 'value', kind: 'string', rules: [] }, field.value || {}, { asItem: true, required: false, repeated: false, map: false });
}

/** An empty slot for a field (see the comment at the top of this section). */
function newSlot(field) {
  if (field.map) return { entries: [] };
  if (field.repeated) return { items: [] };
  if (field.kind === 'message') return { sub: newSlots(field.fields || []) };
  if (field.kind === 'bool' && !boolUsesSelect(field)) return { raw: false };
  return { raw: '' };
}

function newSlots(fields) {
  // Keys are field names from the submitter's descriptors ("__proto__" included): no prototype.
  const sub = Object.create(null);
  for (const field of fields || []) sub[jsonKey(field)] = newSlot(field);
  return sub;
}

/** Untouched means empty: numbers and times ignore surrounding spaces, strings are taken as typed. */
function isEmptyRaw(field, raw) {
  if (raw === undefined || raw === null || raw === false) return true;
  if (typeof raw !== 'string') return false;
  if (field.kind === 'string') return raw === '';
  return raw.trim() === '';
}

/** Decoded length of base64 (standard or URL-safe), or null when it is not base64. */
function base64Length(text) {
  if (!/^[A-Za-z0-9+/_-]*={0,2}$/.test(text)) return null;
  const body = text.replace(/=+$/, '');
  if (body.length % 4 === 1) return null;
  if (body.length !== text.length && text.length % 4 !== 0) return null;
  return Math.floor((body.length * 3) / 4);
}

function isRfc3339(text) {
  const m = RFC3339_RE.exec(text);
  if (!m) return false;
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number);
  const daysInMonth = new Date(Date.UTC(year, month, 0)).getUTCDate();
  if (year < 1 || month < 1 || month > 12 || day < 1 || day > daysInMonth) return false;
  if (hour > 23 || minute > 59 || second > 59) return false;
  if (m[8] !== 'Z' && (Number(m[10]) > 23 || Number(m[11]) > 59)) return false;
  return true;
}

/**
 * Typed text -> {value (proto3 JSON), cmp (what rules compare)} or {error}.
 * cmp: Number or BigInt for numbers, the string, the decoded byte count for bytes,
 * the enum number, the boolean.
 */
function convertScalar(field, raw) {
  const kind = field.kind;
  const text = typeof raw === 'string' ? raw.trim() : raw;
  if (kind === 'bool') {
    if (raw === true || text === 'true') return { value: true, cmp: true };
    if (text === 'false') return { value: false, cmp: false };
    return { error: 'must be true or false' };
  }
  if (kind in INT32_RANGES) {
    const [min, max] = INT32_RANGES[kind];
    if (!INTEGER_RE.test(text)) return { error: 'must be a whole number' };
    const n = Number(text);
    if (n < min || n > max) return { error: 'must be between ' + min + ' and ' + max };
    return { value: n === 0 ? 0 : n, cmp: n };
  }
  if (kind in INT64_RANGES) {
    const [min, max] = INT64_RANGES[kind];
    if (!INTEGER_RE.test(text)) return { error: 'must be a whole number' };
    const b = BigInt(text.replace(/^\+/, ''));
    if (b < min || b > max) return { error: 'must be between ' + min + ' and ' + max };
    // 64-bit integers travel as decimal strings in proto3 JSON (a JS number would round).
    return { value: b.toString(), cmp: b };
  }
  if (FLOAT_KINDS.has(kind)) {
    if (text === 'NaN' || text === 'Infinity' || text === '-Infinity') return { value: text, cmp: Number(text) };
    if (!DECIMAL_RE.test(text)) return { error: 'must be a number (or NaN, Infinity, -Infinity)' };
    const n = Number(text);
    if (!Number.isFinite(n) || (kind === 'float' && Math.abs(n) > FLOAT_MAX)) return { error: 'is out of range for ' + kind };
    // A non-zero value too small to represent would silently become 0.
    const nonZero = /[1-9]/.test(text.replace(/[eE].*$/, ''));
    if (nonZero && (n === 0 || (kind === 'float' && Math.abs(n) < FLOAT_MIN_SUBNORMAL))) return { error: 'is too close to zero for ' + kind };
    return { value: n, cmp: n };
  }
  switch (kind) {
    case 'string':
      return { value: raw, cmp: raw };
    case 'bytes': {
      const length = base64Length(text);
      if (length === null) return { error: 'must be base64' };
      return { value: text, cmp: length };
    }
    case 'enum': {
      const found = (field.enumValues || []).find((v) => v.name === text);
      if (!found) return { error: 'must be one of the listed values' };
      return { value: found.name, cmp: Number(found.number) };
    }
    case 'timestamp':
      if (!isRfc3339(text)) return { error: 'must be an RFC 3339 time such as 2026-12-03T09:30:00Z' };
      return { value: text, cmp: text };
    case 'duration':
      if (!DURATION_RE.test(text)) return { error: 'must be a duration in seconds such as 1.5s' };
      // protobuf's Duration spans about ±10,000 years.
      if (Math.abs(parseFloat(text)) > 315576000000) return { error: 'must be within ±315576000000s' };
      return { value: text, cmp: text };
    case 'json':
      try {
        // Integers past 2^53 keep every digit (a plain parse would round them).
        const parsed = parseLossless(raw);
        return { value: parsed, cmp: parsed };
      } catch (_) {
        return { error: 'must be valid JSON' };
      }
    default:
      return { error: 'has a kind this page does not know (' + kind + ')' };
  }
}

/** The proto3 JSON zero value, for a map entry whose value was left empty; undefined when there is none. */
function zeroJson(field) {
  if (field.kind in INT64_RANGES) return '0';
  if (NUMERIC_KINDS.has(field.kind)) return 0;
  if (field.kind === 'bool') return false;
  if (field.kind === 'string' || field.kind === 'bytes') return '';
  if (field.kind === 'enum') {
    const values = field.enumValues || [];
    const zero = values.find((v) => Number(v.number) === 0) || values[0];
    return zero ? zero.name : undefined;
  }
  if (field.kind === 'message') return {};
  return undefined;
}

/** True when cmp is the field kind's zero value (0, 0n, "", false, no bytes, enum number 0). */
function isZeroCmp(field, cmp) {
  const zero = zeroCmp(field);
  return zero !== null && cmp === zero;
}

/** What rules compare for a scalar left empty (its zero value), or null when the page cannot tell. */
function zeroCmp(field) {
  if (field.kind in INT64_RANGES) return 0n;
  if (NUMERIC_KINDS.has(field.kind)) return 0;
  if (field.kind === 'bool') return false;
  if (field.kind === 'string') return '';
  if (field.kind === 'bytes' || field.kind === 'enum') return 0;
  return null;
}

/** Converts a rule's value to the field's comparison type (64-bit rule values arrive as strings). */
function ruleNumber(field, value) {
  if (field.kind in INT64_RANGES) {
    try {
      return BigInt(String(value));
    } catch (_) {
      return NaN;
    }
  }
  return Number(value);
}

function sameNumber(a, b) {
  // == compares a BigInt with a Number by value; === would not.
  return typeof a === typeof b ? a === b : a == b; // eslint-disable-line eqeqeq
}

function numericPasses(name, cmp, bound) {
  switch (name) {
    case 'gt':
      return cmp > bound;
    case 'gte':
      return cmp >= bound;
    case 'lt':
      return cmp < bound;
    case 'lte':
      return cmp <= bound;
    default:
      return true;
  }
}

function splitRuleId(id) {
  const dot = id.indexOf('.');
  return dot < 0 ? [id, ''] : [id.slice(0, dot), id.slice(dot + 1)];
}

const patternCache = new Map();
/** The compiled pattern, or null when JavaScript cannot compile it (then the node checks it). */
function compilePattern(source) {
  if (!patternCache.has(source)) {
    let re = null;
    try {
      re = new RegExp(String(source), 'u');
    } catch (_) {
      re = null;
    }
    patternCache.set(source, re);
  }
  return patternCache.get(source);
}

function stringRuleBroken(name, v, s) {
  const length = () => [...s].length; // characters are Unicode code points
  const bytes = () => new TextEncoder().encode(s).length;
  switch (name) {
    case 'const':
      return s !== v;
    case 'len':
      return length() !== Number(v);
    case 'min_len':
      return length() < Number(v);
    case 'max_len':
      return length() > Number(v);
    case 'len_bytes':
      return bytes() !== Number(v);
    case 'min_bytes':
      return bytes() < Number(v);
    case 'max_bytes':
      return bytes() > Number(v);
    case 'pattern': {
      const re = compilePattern(v);
      return re !== null && !re.test(s);
    }
    case 'prefix':
      return !s.startsWith(String(v));
    case 'suffix':
      return !s.endsWith(String(v));
    case 'contains':
      return !s.includes(String(v));
    case 'not_contains':
      return s.includes(String(v));
    case 'in':
      return Array.isArray(v) && !v.includes(s);
    case 'not_in':
      return Array.isArray(v) && v.includes(s);
    case 'email':
      return v !== false && !EMAIL_RE.test(s);
    case 'uuid':
      return v !== false && !UUID_RE.test(s);
    case 'uri':
      return v !== false && !URI_RE.test(s);
    default:
      return false; // not one the page knows: the node checks it
  }
}

function bytesRuleBroken(name, v, length) {
  switch (name) {
    case 'len':
      return length !== Number(v);
    case 'min_len':
      return length < Number(v);
    case 'max_len':
      return length > Number(v);
    default:
      return false;
  }
}

function enumRuleBroken(name, v, number, field) {
  switch (name) {
    case 'const':
      return number !== Number(v);
    case 'defined_only':
      return v !== false && !(field.enumValues || []).some((e) => Number(e.number) === number);
    case 'in':
      return Array.isArray(v) && !v.map(Number).includes(number);
    case 'not_in':
      return Array.isArray(v) && v.map(Number).includes(number);
    default:
      return false;
  }
}

/**
 * The message of the first page-checkable rule that cmp breaks, or null. Each bound is
 * checked on its own: an exclusive range (lower bound above the upper one, meaning
 * "outside") arrives marked checkedBy "node", so the page never sees one.
 */
function firstBrokenRule(field, cmp) {
  const rules = pageRules(field).filter((r) => !isCollectionRule(r.id));
  const numeric = NUMERIC_KINDS.has(field.kind);
  for (const rule of rules) {
    const [family, name] = splitRuleId(rule.id);
    let broken = false;
    if (family === 'string') broken = typeof cmp === 'string' && stringRuleBroken(name, rule.value, cmp);
    else if (family === 'bytes') broken = typeof cmp === 'number' && bytesRuleBroken(name, rule.value, cmp);
    else if (family === 'enum') broken = enumRuleBroken(name, rule.value, cmp, field);
    else if (family === 'bool') broken = name === 'const' && cmp !== rule.value;
    else if (NUMERIC_KINDS.has(family) && numeric) {
      if (name === 'const') broken = !sameNumber(cmp, ruleNumber(field, rule.value));
      else if (name === 'in') broken = Array.isArray(rule.value) && !rule.value.some((x) => sameNumber(cmp, ruleNumber(field, x)));
      else if (name === 'not_in') broken = Array.isArray(rule.value) && rule.value.some((x) => sameNumber(cmp, ruleNumber(field, x)));
      else if (['gt', 'gte', 'lt', 'lte'].includes(name)) broken = !numericPasses(name, cmp, ruleNumber(field, rule.value));
    }
    if (broken) return ruleMessage(rule);
  }
  return null;
}

/** The message of the first broken list/map rule (count of items sent, their values), or null. */
function firstBrokenCollectionRule(field, values) {
  for (const rule of pageRules(field)) {
    let broken = false;
    switch (rule.id) {
      case 'repeated.min_items':
      case 'map.min_pairs':
        broken = values.length < Number(rule.value);
        break;
      case 'repeated.max_items':
      case 'map.max_pairs':
        broken = values.length > Number(rule.value);
        break;
      case 'repeated.unique': {
        const seen = values.map(compactJson);
        broken = rule.value !== false && new Set(seen).size !== seen.length;
        break;
      }
      default:
        break;
    }
    if (broken) return ruleMessage(rule);
  }
  return null;
}

/** The message shown when a required field is empty, or null when the page need not check it. */
function requiredMessage(field) {
  if (field.asItem) return null;
  const rule = (field.rules || []).find((r) => r && r.id === 'required');
  if (rule) return rule.checkedBy === 'page' && rule.value !== false ? ruleMessage(rule) : null;
  return field.required ? 'value is required' : null;
}

function childPath(path, field) {
  return {
    json: path.json ? path.json + '.' + jsonKey(field) : jsonKey(field),
    proto: path.proto ? path.proto + '.' + field.name : field.name,
  };
}

function addError(ctx, path, message, slot, shape) {
  if (shape) ctx.hasShapeError = true;
  ctx.errors.push({ path: path.json, message, slot, shape: !!shape });
}

/** Builds any field: {filled (the user entered something), value (undefined when it has a shape error)}. */
function buildField(field, slot, path, ctx) {
  ctx.pathMap[path.proto] = path.json;
  if (field.map && !field.asItem) return buildMap(field, slot, path, ctx);
  if (field.repeated && !field.asItem) return buildList(field, slot, path, ctx);
  if (field.kind === 'message') return buildMessageField(field, slot, path, ctx);
  return buildScalar(field, slot, path, ctx);
}

function buildScalar(field, slot, path, ctx) {
  if (isEmptyRaw(field, slot.raw)) {
    // Untouched: left out. The node checks a field without presence at its zero value
    // (rulesApplyWhenEmpty), so the page does too: an empty answer the node would
    // refuse must not fail the job.
    const required = requiredMessage(field);
    if (required) addError(ctx, path, required, slot, false);
    else if (field.rulesApplyWhenEmpty && !field.asItem) {
      const zero = zeroCmp(field);
      const broken = zero === null ? null : firstBrokenRule(field, zero);
      if (broken) addError(ctx, path, broken, slot, false);
    }
    return { filled: false };
  }
  const typed = convertScalar(field, slot.raw);
  if (typed.error) {
    addError(ctx, path, typed.error, slot, true);
    return { filled: true, value: undefined };
  }
  // proto3 cannot tell a zero from unset on a field without presence: "required" refuses it.
  if (!field.optional && !field.oneof && !field.asItem && isZeroCmp(field, typed.cmp)) {
    const required = requiredMessage(field);
    if (required) {
      addError(ctx, path, required, slot, false);
      return { filled: true, value: typed.value };
    }
  }
  const broken = firstBrokenRule(field, typed.cmp);
  if (broken) addError(ctx, path, broken, slot, false);
  return { filled: true, value: typed.value };
}

function buildMessageField(field, slot, path, ctx) {
  const mark = ctx.errors.length;
  const built = buildMessage(field.fields || [], slot.sub, path, ctx);
  if (!built.filled) {
    // A required message may hold nothing but defaults: it is sent present ({}), and its
    // fields' rules apply. Otherwise an absent message is not validated inside (as
    // protovalidate does): drop its children's rule errors.
    if (requiredMessage(field)) return { filled: true, value: built.value };
    ctx.errors.splice(mark);
    return { filled: false };
  }
  return { filled: true, value: built.value };
}

function buildMessage(fields, sub, path, ctx) {
  const value = Object.create(null);
  let filled = false;
  const oneofTaken = new Set();
  for (const field of fields) {
    const key = jsonKey(field);
    if (!sub[key]) sub[key] = newSlot(field);
    const p = childPath(path, field);
    const built = buildField(field, sub[key], p, ctx);
    if (!built.filled) continue;
    filled = true;
    if (field.oneof) {
      if (oneofTaken.has(field.oneof)) {
        addError(ctx, p, 'only one of ' + field.oneof + ' may be set', sub[key], true);
        continue;
      }
      oneofTaken.add(field.oneof);
    }
    if (built.value !== undefined) value[key] = built.value;
  }
  return { filled, value };
}

function buildList(field, slot, path, ctx) {
  const item = itemField(field);
  const values = [];
  slot.items.forEach((itemSlot, i) => {
    // Empty items are left out, so the index the node reports (proto path) may differ from the one on screen.
    const p = { json: path.json + '[' + i + ']', proto: path.proto + '[' + values.length + ']' };
    const built = buildField(item, itemSlot, p, ctx);
    if (built.filled) values.push(built.value);
  });
  return finishCollection(field, slot, path, ctx, values, values);
}

function buildMap(field, slot, path, ctx) {
  const keyField = mapKeyField(field);
  const valueField = mapValueField(field);
  const object = Object.create(null);
  const keys = [];
  slot.entries.forEach((entry, i) => {
    const row = path.json + '[' + i + ']';
    const keyPath = { json: row + '.key', proto: path.proto + '[' + i + '].key' };
    const keyEmpty = isEmptyRaw(keyField, entry.key.raw);
    let keyText = null;
    if (!keyEmpty) {
      const typed = convertScalar(keyField, entry.key.raw);
      if (typed.error) addError(ctx, keyPath, typed.error, entry.key, true);
      else {
        keyText = String(typed.value);
        const broken = firstBrokenRule(keyField, typed.cmp);
        if (broken) addError(ctx, keyPath, broken, entry.key, false);
        if (keys.includes(keyText)) {
          addError(ctx, keyPath, 'this key is already used', entry.key, true);
          keyText = null;
        }
      }
    }
    const literal = keyText === null ? '?' : keyField.kind === 'string' ? JSON.stringify(keyText) : keyText;
    const valuePath = { json: row + '.value', proto: path.proto + '[' + literal + ']' };
    const built = buildField(valueField, entry.value, valuePath, ctx);
    if (keyEmpty && !built.filled) return; // an untouched row
    if (keyEmpty) {
      addError(ctx, keyPath, 'enter a key', entry.key, true);
      return;
    }
    let value = built.value;
    if (!built.filled) {
      value = zeroJson(valueField);
      if (value === undefined) addError(ctx, valuePath, 'enter a value', entry.value, true);
    }
    if (keyText !== null) {
      keys.push(keyText);
      object[keyText] = value;
    }
  });
  return finishCollection(field, slot, path, ctx, keys, object);
}

/** The checks shared by lists and maps: required, then the collection rules; an empty one is left out. */
function finishCollection(field, slot, path, ctx, members, value) {
  if (members.length === 0) {
    const required = requiredMessage(field);
    if (required) addError(ctx, path, required, slot, false);
    else if (field.rulesApplyWhenEmpty) {
      const broken = firstBrokenCollectionRule(field, members);
      if (broken) addError(ctx, path, broken, slot, false);
    }
    return { filled: false };
  }
  const broken = firstBrokenCollectionRule(field, members);
  if (broken) addError(ctx, path, broken, slot, false);
  return { filled: true, value };
}

/**
 * The whole form: {value (the object to send, always an object), hasShapeError,
 * errors (in field order), firstErrors (Map json path -> first error), pathMap
 * (proto-name path -> json-name path, for the node's violations)}.
 */
function buildForm(fields, slots) {
  const ctx = { errors: [], pathMap: {}, hasShapeError: false };
  const built = buildMessage(fields || [], slots, { json: '', proto: '' }, ctx);
  const firstErrors = new Map();
  for (const error of ctx.errors) if (!firstErrors.has(error.path)) firstErrors.set(error.path, error);
  return { value: built.value, hasShapeError: ctx.hasShapeError, errors: ctx.errors, firstErrors, pathMap: ctx.pathMap };
}

/** The hint under a field: rule summaries, then the kind ("int32", "list of string", …). */
function hintText(field) {
  const parts = [];
  for (const rule of field.rules || []) if (rule && rule.summary) parts.push(rule.summary);
  if (field.required && !(field.rules || []).some((r) => r && r.id === 'required')) parts.push('required');
  if (field.optional) parts.push('optional');
  if (field.oneof) parts.push('one of ' + field.oneof);
  parts.push(kindText(field));
  return parts.join(' · ');
}

function kindText(field) {
  if (field.map && !field.asItem) return 'map of ' + kindText(mapKeyField(field)) + ' to ' + kindText(mapValueField(field));
  const single = field.kind === 'message' ? field.messageType || 'message' : field.kind === 'enum' && field.messageType ? 'enum ' + field.messageType : String(field.kind);
  if (field.repeated && !field.asItem) return 'list of ' + single;
  return single;
}

/* ======================================================================
 * 5. Form generator (DOM)
 * ==================================================================== */

let formCount = 0;

/** The get-form answer for `request`, or null (its failure shown in formBox, or the user left). */
async function loadFormSpec(request, formBox, signal) {
  try {
    return await loadVerb('get-form', request, signal);
  } catch (err) {
    if (!isAbort(err)) formBox.replaceChildren(el('p', { class: 'form-load-error', text: 'The form did not load: ' + errorText(err) }));
    return null;
  }
}

/**
 * Builds a <form> from a get-form answer. options: {formClass, submitClass,
 * submitLabel, attrs (extra attributes for the form), validatesNote (shown when the
 * node checks the rules again), onSubmit(value) -> Promise}.
 * Returns {form, showViolations(violations) -> unmatched violations, clearServerErrors()}.
 */
function createGeneratedForm(spec, options) {
  const ctl = {
    fields: spec.fields || [],
    slots: null,
    idPrefix: 'f' + ++formCount + '-',
    idCount: 0,
    submitted: false,
    bindings: new WeakMap(), // control element -> {slot, read()}
    serverErrors: new Map(), // json path -> message from the node's violations
    build: null,
    form: null,
    preview: null,
  };
  ctl.slots = newSlots(ctl.fields);
  ctl.nextId = () => ctl.idPrefix + ++ctl.idCount;

  const form = el('form', Object.assign({ class: options.formClass, novalidate: true }, options.attrs || {}));
  ctl.form = form;

  if (Array.isArray(spec.messageRules) && spec.messageRules.length > 0) {
    form.appendChild(
      el('div', { class: 'message-rules' },
        el('p', { text: 'Rules on the whole answer (the node checks these; this page cannot):' }),
        el('ul', null, spec.messageRules.map((rule) => el('li', { text: rule.message || rule.id })))),
    );
  }
  if (spec.messageType) form.appendChild(el('p', { class: 'muted form-type', text: 'Message type: ' + spec.messageType }));
  if (spec.validates && options.validatesNote) form.appendChild(el('p', { class: 'form-note', text: options.validatesNote }));
  if (spec.truncated) {
    form.appendChild(el('p', { class: 'form-note warning', role: 'note',
      text: 'This message is larger than a form can show: some fields (or enum values) are left out, and the answer is sent without them.' }));
  }

  const fieldsBox = el('div', { class: 'form-fields' });
  for (const field of ctl.fields) fieldsBox.appendChild(renderField(field, ctl.slots[jsonKey(field)], childPath({ json: '', proto: '' }, field), ctl));
  if (ctl.fields.length === 0) fieldsBox.appendChild(el('p', { class: 'muted', text: 'This message has no fields.' }));
  const submit = el('button', { type: 'submit', class: options.submitClass, text: options.submitLabel });
  ctl.preview = el('pre', { class: 'form-json', 'aria-label': 'JSON that will be sent' });
  form.append(fieldsBox, el('div', { class: 'form-actions' }, submit), el('p', { class: 'form-json-label muted', text: 'JSON that will be sent:' }), ctl.preview);

  // One listener for every control: controls write their raw text into their slot.
  const onEdit = (event) => {
    const binding = ctl.bindings.get(event.target);
    if (!binding) return;
    binding.slot.raw = binding.read();
    binding.slot.touched = true;
    ctl.serverErrors.delete(event.target.getAttribute('data-path'));
    refreshForm(ctl);
  };
  form.addEventListener('input', onEdit);
  form.addEventListener('change', onEdit);
  form.addEventListener('focusout', (event) => {
    const binding = ctl.bindings.get(event.target);
    if (binding && binding.slot.touched) {
      binding.slot.show = true;
      refreshForm(ctl);
    }
  });
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    ctl.submitted = true;
    refreshForm(ctl);
    if (ctl.build.errors.length > 0) {
      focusFirstError(ctl, new Set(ctl.build.errors.map((e) => e.path)));
      return;
    }
    submit.disabled = true;
    try {
      await options.onSubmit(ctl.build.value);
    } finally {
      submit.disabled = false;
    }
  });

  refreshForm(ctl);
  return {
    form,
    showViolations(violations) {
      const unmatched = [];
      for (const violation of violations || []) {
        const jsonPath = ctl.build.pathMap[violation && violation.field];
        if (jsonPath !== undefined && findErrorElement(ctl, jsonPath)) {
          if (!ctl.serverErrors.has(jsonPath)) ctl.serverErrors.set(jsonPath, violationMessage(ctl.fields, jsonPath, violation));
        } else unmatched.push(violation);
      }
      refreshForm(ctl);
      if (ctl.serverErrors.size > 0) focusFirstError(ctl, new Set(ctl.serverErrors.keys()));
      return unmatched;
    },
    clearServerErrors() {
      ctl.serverErrors.clear();
      refreshForm(ctl);
    },
  };
}

/**
 * The sentence for a node's violation: its message, or (where the validator gave only
 * the rule's id, as for string.email) the declared rule's message from the form.
 */
function violationMessage(fields, jsonPath, violation) {
  const message = violation && violation.message ? String(violation.message) : '';
  const rule = violation && violation.rule ? String(violation.rule) : '';
  if (message && message !== rule) return message;
  let field = null;
  let list = fields;
  for (const part of jsonPath.replace(/\[[^\]]*\]/g, '').split('.')) {
    field = (list || []).find((f) => jsonKey(f) === part) || null;
    if (!field) break;
    list = field.fields;
  }
  const declared = field && (field.rules || []).find((r) => r && r.id === rule);
  return declared && declared.message ? String(declared.message) : message || rule || 'rejected';
}

/** Rebuilds the JSON from the slots, updates the preview and the visible errors. */
function refreshForm(ctl) {
  ctl.build = buildForm(ctl.fields, ctl.slots);
  ctl.preview.textContent = ctl.build.hasShapeError ? '—' : prettyJson(ctl.build.value);
  const invalid = new Set();
  for (const node of ctl.form.querySelectorAll('.field-error')) {
    const path = node.getAttribute('data-for');
    const error = ctl.build.firstErrors.get(path);
    // Errors appear on submit or after a touched input loses focus, not while typing the first time.
    let text = error && (ctl.submitted || error.slot.show) ? error.message : '';
    if (!text && ctl.serverErrors.has(path)) text = ctl.serverErrors.get(path);
    node.textContent = text;
    if (text) invalid.add(path);
  }
  for (const control of ctl.form.querySelectorAll('input[data-path], select[data-path], textarea[data-path]')) {
    if (invalid.has(control.getAttribute('data-path'))) control.setAttribute('aria-invalid', 'true');
    else control.removeAttribute('aria-invalid');
  }
}

function findErrorElement(ctl, path) {
  for (const node of ctl.form.querySelectorAll('.field-error')) if (node.getAttribute('data-for') === path) return node;
  return null;
}

/** Focuses the first control (in page order) whose path has an error; lists focus their Add button. */
function focusFirstError(ctl, paths) {
  for (const control of ctl.form.querySelectorAll('[data-path]')) {
    if (paths.has(control.getAttribute('data-path'))) {
      control.focus();
      return;
    }
  }
}

/** The description, hint and error elements under a field, and the ids for aria-describedby. */
function fieldNotes(field, path, ctl, withHint) {
  const nodes = [];
  const ids = [];
  if (withHint && field.description) {
    const id = ctl.nextId();
    nodes.push(el('p', { class: 'field-description', id, text: field.description }));
    ids.push(id);
  }
  if (withHint) {
    const id = ctl.nextId();
    nodes.push(el('p', { class: 'field-hint', id, text: hintText(field) }));
    ids.push(id);
  }
  const errorId = ctl.nextId();
  nodes.push(el('p', { class: 'field-error', id: errorId, 'data-for': path.json }));
  ids.push(errorId);
  return { nodes, ids };
}

function renderField(field, slot, path, ctl) {
  if (field.map && !field.asItem) return renderMap(field, slot, path, ctl);
  if (field.repeated && !field.asItem) return renderList(field, slot, path, ctl);
  return renderSingle(field, slot, path, ctl, field.label || field.name, [], true);
}

/**
 * One value: a fieldset for a message, else a label + control. extraDescribedBy lets a
 * list item point at its list's hint; withHint is false for items (the list has it).
 */
function renderSingle(field, slot, path, ctl, labelText, extraDescribedBy, withHint) {
  if (field.kind === 'message') {
    const notes = fieldNotes(field, path, ctl, withHint);
    const fieldset = el('fieldset', { class: 'field field-message' }, el('legend', { text: labelText }));
    fieldset.append(...notes.nodes);
    const box = el('div', { class: 'message-fields' });
    for (const child of field.fields || []) {
      const key = jsonKey(child);
      if (!slot.sub[key]) slot.sub[key] = newSlot(child);
      box.appendChild(renderField(child, slot.sub[key], childPath(path, child), ctl));
    }
    fieldset.appendChild(box);
    return fieldset;
  }
  const id = ctl.nextId();
  const notes = fieldNotes(field, path, ctl, withHint);
  const control = createControl(field, slot, id, path, ctl);
  control.setAttribute('aria-describedby', extraDescribedBy.concat(notes.ids).join(' '));
  const label = el('label', { for: id, text: labelText });
  const isCheckbox = control.type === 'checkbox';
  const wrapper = el('div', { class: 'field field-' + String(field.kind).replace(/[^a-z0-9]/g, '') + (isCheckbox ? ' field-checkbox' : '') });
  if (isCheckbox) wrapper.append(el('div', { class: 'checkbox-row' }, control, label));
  else wrapper.append(label, control);
  wrapper.append(...notes.nodes);
  return wrapper;
}

/** The input, select or textarea for a scalar kind, bound to its slot. */
function createControl(field, slot, id, path, ctl) {
  let control;
  let read;
  if (field.kind === 'bool' && !boolUsesSelect(field)) {
    control = el('input', { type: 'checkbox', id, checked: slot.raw === true });
    read = () => control.checked;
  } else if (field.kind === 'bool' || field.kind === 'enum') {
    control = el('select', { id });
    control.appendChild(el('option', { value: '', text: '(unset)' }));
    const names = field.kind === 'bool' ? ['true', 'false'] : (field.enumValues || []).map((v) => String(v.name));
    for (const name of names) control.appendChild(el('option', { value: name, text: name, selected: slot.raw === name }));
    read = () => control.value;
  } else {
    const multiline = field.kind === 'json' || (field.kind === 'string' && LONG_TEXT_RE.test(field.name || ''));
    if (multiline) control = el('textarea', { id, rows: field.kind === 'json' ? 5 : 3, class: field.kind === 'json' ? 'mono' : null });
    else control = el('input', { type: 'text', id, autocomplete: 'off', spellcheck: field.kind === 'string' ? null : 'false' });
    control.value = typeof slot.raw === 'string' ? slot.raw : '';
    const placeholder = { timestamp: '2026-12-03T09:30:00Z', duration: '1.5s', bytes: 'base64', json: '{"key": "value"}' }[field.kind];
    if (placeholder) control.setAttribute('placeholder', placeholder);
    if (field.kind in INT32_RANGES || field.kind in INT64_RANGES) control.setAttribute('inputmode', 'numeric');
    if (FLOAT_KINDS.has(field.kind)) control.setAttribute('inputmode', 'decimal');
    if (field.kind !== 'string') control.classList.add('mono');
    read = () => control.value;
  }
  control.setAttribute('data-path', path.json);
  ctl.bindings.set(control, { slot, read });
  return control;
}

/** A repeated field: its items in order, each with a Remove button, and an "Add <label>" button. */
function renderList(field, slot, path, ctl) {
  const label = field.label || field.name;
  const item = itemField(field);
  const notes = fieldNotes(field, path, ctl, true);
  const itemsBox = el('ol', { class: 'list-items' });
  const add = el('button', { type: 'button', class: 'add-item', 'data-path': path.json, text: 'Add ' + label });
  const box = el('fieldset', { class: 'field field-list' }, el('legend', { text: label }), itemsBox, add, notes.nodes);

  // Items are redrawn from their slots after add/remove, so paths and ids stay in order; typed values live in the slots.
  function draw() {
    itemsBox.replaceChildren();
    slot.items.forEach((itemSlot, i) => {
      const itemPath = { json: path.json + '[' + i + ']', proto: path.proto + '[' + i + ']' };
      const remove = el('button', { type: 'button', class: 'remove-item', text: 'Remove', 'aria-label': 'Remove ' + label + ' ' + (i + 1) });
      remove.addEventListener('click', () => {
        slot.items.splice(i, 1);
        draw();
        refreshForm(ctl);
        const next = itemsBox.querySelectorAll(':scope > li > .remove-item')[i];
        (next || add).focus();
      });
      itemsBox.appendChild(el('li', { class: 'list-item' }, renderSingle(item, itemSlot, itemPath, ctl, label + ' ' + (i + 1), notes.ids.slice(0, -1), false), remove));
    });
  }
  add.addEventListener('click', () => {
    slot.items.push(newSlot(item));
    draw();
    refreshForm(ctl);
    const last = itemsBox.lastElementChild;
    const first = last && last.querySelector('input, select, textarea');
    if (first) first.focus();
  });
  draw();
  return box;
}

/** A map: key/value rows with "Add entry"; sent as an object. */
function renderMap(field, slot, path, ctl) {
  const label = field.label || field.name;
  const keyField = mapKeyField(field);
  const valueField = mapValueField(field);
  const notes = fieldNotes(field, path, ctl, true);
  const rows = el('ol', { class: 'list-items map-entries' });
  const add = el('button', { type: 'button', class: 'add-item', 'data-path': path.json, text: 'Add entry' });
  const box = el('fieldset', { class: 'field field-map' }, el('legend', { text: label }), rows, add, notes.nodes);

  function draw() {
    rows.replaceChildren();
    slot.entries.forEach((entry, i) => {
      const row = path.json + '[' + i + ']';
      const remove = el('button', { type: 'button', class: 'remove-item', text: 'Remove', 'aria-label': 'Remove entry ' + (i + 1) });
      remove.addEventListener('click', () => {
        slot.entries.splice(i, 1);
        draw();
        refreshForm(ctl);
        const next = rows.querySelectorAll(':scope > li > .remove-item')[i];
        (next || add).focus();
      });
      rows.appendChild(
        el('li', { class: 'list-item map-entry' },
          renderSingle(keyField, entry.key, { json: row + '.key', proto: row + '.key' }, ctl, 'Key ' + (i + 1), [], false),
          renderSingle(valueField, entry.value, { json: row + '.value', proto: row + '.value' }, ctl, 'Value ' + (i + 1), [], false),
          remove),
      );
    });
  }
  add.addEventListener('click', () => {
    slot.entries.push({ key: newSlot(keyField), value: newSlot(valueField) });
    draw();
    refreshForm(ctl);
    const last = rows.lastElementChild;
    const first = last && last.querySelector('input, select, textarea');
    if (first) first.focus();
  });
  draw();
  return box;
}

/* ======================================================================
 * 6. Fleet view (#/fleet)
 * ==================================================================== */

const PAGE_SIZE = 50;

/**
 * Paging is by keyset: `after` is where the page starts ('createdAt,jobId' of the
 * previous page's last job, as list-jobs answers it in `next`), `page` only numbers it.
 */
function filtersFromQuery(query) {
  const after = query.get('after') || '';
  return {
    status: STATUSES.includes(query.get('status')) ? query.get('status') : '',
    workflow: query.get('workflow') || '',
    createdAfter: query.get('createdAfter') || '',
    createdBefore: query.get('createdBefore') || '',
    jobId: query.get('jobId') || '',
    after,
    page: after ? Math.max(1, parseInt(query.get('page') || '1', 10) || 1) : 0,
  };
}

/** 'createdAt,jobId' -> list-jobs' cursor, or null. */
function cursorFromText(text) {
  const comma = text.lastIndexOf(',');
  if (comma <= 0) return null;
  return { createdAt: text.slice(0, comma), jobId: text.slice(comma + 1) };
}

function fleetHash(filters) {
  const query = new URLSearchParams();
  for (const key of ['status', 'workflow', 'createdAfter', 'createdBefore', 'jobId']) if (filters[key]) query.set(key, filters[key]);
  if (filters.after) {
    query.set('after', filters.after);
    query.set('page', String(filters.page));
  }
  const text = query.toString();
  return '#/fleet' + (text ? '?' + text : '');
}

/** datetime-local text (the browser's local time) -> RFC 3339 UTC, or '' when unset or invalid. */
function localToUtc(text) {
  if (!text) return '';
  const date = new Date(text);
  return Number.isNaN(date.getTime()) ? '' : date.toISOString();
}

function renderFleetView(main, params, query) {
  document.title = 'Fleet · ProtoMolt Jobs';
  const abort = new AbortController();
  let filters = filtersFromQuery(query);
  // Keyset paging: where the next page starts (from list-jobs' answer), and where the
  // pages this visit went through started, for Previous.
  let nextCursor = null;
  const earlierPages = [];
  const selected = new Set();
  const rowParts = new Map(); // job id -> the row's element and the cells that change

  // Counts.
  const countItem = (label, attrs) => el('div', { class: 'count' }, el('dt', { text: label }), el('dd', Object.assign({ text: '…' }, attrs)));
  const counts = el('section', { class: 'counts', 'aria-labelledby': 'counts-heading' },
    el('h2', { id: 'counts-heading', class: 'visually-hidden', text: 'Counts' }),
    el('div', { class: 'count-group' }, el('h3', { text: 'Live' }),
      el('dl', null, countItem('Queued', { 'data-count': 'QUEUED' }), countItem('Running', { 'data-count': 'RUNNING' }), countItem('Waiting', { 'data-count': 'WAITING' }),
        countItem('Oldest queued', { id: 'oldest-queued' }))),
    el('div', { class: 'count-group' }, el('h3', { text: 'Last hour' }),
      el('dl', null, countItem('Completed', { 'data-last-hour': 'COMPLETED' }), countItem('Failed', { 'data-last-hour': 'FAILED' }),
        countItem('Dead', { 'data-last-hour': 'DEAD' }), countItem('Cancelled', { 'data-last-hour': 'CANCELLED' }))),
    el('div', { class: 'count-group' }, el('h3', { text: 'Outbox' }),
      el('dl', null, countItem('Pending', { 'data-outbox': 'pending' }), countItem('Held', { 'data-outbox': 'held' }), countItem('Failed', { 'data-outbox': 'failed' })),
      el('button', { type: 'button', id: 'redrive-all', text: 'Redrive failed events', hidden: true }),
      el('p', { id: 'redrive-outcome', class: 'outcome', 'aria-live': 'polite' })));
  const waitingBox = el('div', { class: 'waiting-by-step' });
  const readAt = el('p', { class: 'muted read-at' });

  // Filters.
  const statusSelect = el('select', { id: 'filter-status' }, el('option', { value: '', text: 'All' }), STATUSES.map((s) => el('option', { value: s, text: s })));
  const workflowInput = el('input', { id: 'filter-workflow', type: 'text', autocomplete: 'off' });
  const afterInput = el('input', { id: 'filter-created-after', type: 'datetime-local', step: '1' });
  const beforeInput = el('input', { id: 'filter-created-before', type: 'datetime-local', step: '1' });
  const jobIdInput = el('input', { id: 'filter-job-id', type: 'text', autocomplete: 'off', spellcheck: 'false', class: 'mono' });
  const filterMessage = el('p', { id: 'filter-message', class: 'field-error', 'aria-live': 'polite' });
  const labelled = (text, control) => el('div', { class: 'filter' }, el('label', { for: control.id, text }), control);
  const filterForm = el('form', { id: 'job-filters', class: 'filters', novalidate: true },
    labelled('Status', statusSelect), labelled('Workflow', workflowInput), labelled('Created after', afterInput),
    labelled('Created before', beforeInput), labelled('Job id or prefix', jobIdInput),
    el('div', { class: 'filter filter-submit' }, el('button', { type: 'submit', id: 'apply-filters', text: 'Apply filters' })),
    filterMessage);

  // Bulk actions.
  const bulkReason = el('input', { id: 'bulk-reason', type: 'text', maxlength: '500', autocomplete: 'off' });
  const bulkCancel = el('button', { type: 'button', id: 'bulk-cancel', text: 'Cancel selected', disabled: true });
  const bulkRetry = el('button', { type: 'button', id: 'bulk-retry', text: 'Retry selected', disabled: true });
  const bulkOutcome = el('p', { id: 'bulk-outcome', class: 'outcome', 'aria-live': 'polite' });
  const bulk = el('section', { class: 'bulk', 'aria-label': 'Act on the selected jobs' },
    el('div', { class: 'filter' }, el('label', { for: 'bulk-reason', text: 'Reason' }), bulkReason), bulkCancel, bulkRetry, bulkOutcome);

  // Table.
  const selectAll = el('input', { type: 'checkbox', id: 'select-all', 'aria-label': 'Select all jobs on this page' });
  const tbody = el('tbody');
  const emptyRow = el('tr', { class: 'empty-row' }, el('td', { colspan: '9', text: 'Loading…' }));
  tbody.appendChild(emptyRow);
  const head = ['Job', 'Workflow', 'Status', 'Attempt', 'Priority', 'Outstanding step', 'Created', 'Updated'];
  const table = el('table', { id: 'jobs-table' },
    el('caption', { class: 'visually-hidden', text: 'Jobs, newest first' }),
    el('thead', null, el('tr', null, el('th', { scope: 'col', class: 'select-col' }, selectAll), head.map((h) => el('th', { scope: 'col', text: h })))),
    tbody);
  const pagePrev = el('button', { type: 'button', id: 'page-prev', text: 'Previous page', disabled: true });
  const pageNext = el('button', { type: 'button', id: 'page-next', text: 'Next page', disabled: true });
  const pageInfo = el('span', { id: 'page-info', 'aria-live': 'polite' });

  main.replaceChildren(
    el('h1', { text: 'Fleet' }), counts, waitingBox, readAt,
    el('h2', { text: 'Jobs' }), filterForm, bulk,
    el('div', { class: 'table-wrap' }, table),
    el('div', { class: 'paging' }, pagePrev, pageInfo, pageNext));

  function syncFilterInputs() {
    statusSelect.value = filters.status;
    workflowInput.value = filters.workflow;
    afterInput.value = filters.createdAfter;
    beforeInput.value = filters.createdBefore;
    jobIdInput.value = filters.jobId;
  }

  async function refreshCounts() {
    try {
      const fleet = await loadVerb('get-fleet', {}, abort.signal);
      const setAll = (attr, source) => {
        for (const node of main.querySelectorAll('[' + attr + ']')) {
          const value = source ? source[node.getAttribute(attr)] : undefined;
          node.textContent = value === undefined || value === null ? '0' : String(value);
        }
      };
      setAll('data-count', fleet.live);
      setAll('data-last-hour', fleet.lastHour);
      setAll('data-outbox', fleet.outbox);
      byId('redrive-all').hidden = !(fleet.outbox && fleet.outbox.failed > 0);
      const oldest = fleet.oldestQueuedSeconds;
      byId('oldest-queued').textContent = typeof oldest === 'number' ? humanizeAge(oldest) : '—';
      drawWaitingBySteps(fleet.waitingBySteps || []);
      readAt.textContent = fleet.readAt ? 'Counts read at ' + fleet.readAt : '';
      if (fleet.outbox && typeof fleet.outbox.oldestPendingSeconds === 'number' && fleet.outbox.pending > 0) {
        readAt.textContent += ' · oldest pending outbox event ' + humanizeAge(fleet.outbox.oldestPendingSeconds);
      }
    } catch (err) {
      reportLoadError(err);
    }
  }

  function drawWaitingBySteps(groups) {
    if (groups.length === 0) {
      waitingBox.replaceChildren();
      return;
    }
    waitingBox.replaceChildren(
      el('h3', { text: 'Waiting for a human, by step' }),
      el('ul', null, groups.map((g) => el('li', null, String(g.workflowName) + ' · ' + String(g.stepName) + ': ', el('strong', { text: String(g.count) })))),
      el('p', null, el('a', { href: '#/inbox', text: 'Open the review inbox' })));
  }

  async function fetchRows() {
    const jobId = filters.jobId.trim();
    nextCursor = null;
    if (UUID_RE.test(jobId)) {
      // A full id: show that one job (if it exists), whatever the other filters say.
      const answer = await callVerb('get-job', { jobId }, abort.signal);
      return answer.ok && answer.job ? [answer.job] : [];
    }
    const body = { limit: PAGE_SIZE };
    const after = cursorFromText(filters.after);
    if (after) body.after = after;
    if (filters.status) body.status = filters.status;
    if (filters.workflow.trim()) body.workflowName = filters.workflow.trim();
    if (localToUtc(filters.createdAfter)) body.createdAfter = localToUtc(filters.createdAfter);
    if (localToUtc(filters.createdBefore)) body.createdBefore = localToUtc(filters.createdBefore);
    if (jobId) body.jobIdPrefix = jobId;
    const answer = await loadVerb('list-jobs', body, abort.signal);
    if (answer.next && answer.next.createdAt && answer.next.jobId) nextCursor = answer.next.createdAt + ',' + answer.next.jobId;
    return Array.isArray(answer.jobs) ? answer.jobs : [];
  }

  const refreshTable = coalesced(async () => {
    const jobId = filters.jobId.trim();
    if (jobId && !/^[0-9a-fA-F-]{1,36}$/.test(jobId)) {
      filterMessage.textContent = 'Job id: type 1 to 36 hex digits and dashes.';
      drawRows([]);
      return;
    }
    filterMessage.textContent = '';
    try {
      const rows = await fetchRows();
      drawRows(rows);
      clearBanner();
    } catch (err) {
      reportLoadError(err);
    }
  });

  function createRow(job) {
    const id = String(job.jobId);
    const checkbox = el('input', { type: 'checkbox', class: 'select-job', 'aria-label': 'Select job ' + id });
    checkbox.addEventListener('change', () => {
      if (checkbox.checked) selected.add(id);
      else selected.delete(id);
      updateSelectionControls();
    });
    const parts = {
      tr: el('tr', { 'data-job-id': id }),
      checkbox,
      workflow: el('td'),
      status: el('td', { 'data-col': 'status' }),
      attempt: el('td', { class: 'num' }),
      priority: el('td', { class: 'num' }),
      step: el('td'),
      created: el('td'),
      updated: el('td'),
    };
    parts.tr.append(
      el('td', { class: 'select-col' }, checkbox),
      el('td', null, el('a', { href: jobHref(id), class: 'mono job-link', title: id, text: shortId(id) })),
      parts.workflow, parts.status, parts.attempt, parts.priority, parts.step, parts.created, parts.updated);
    return parts;
  }

  function updateRow(parts, job) {
    parts.workflow.textContent = displayValue(job.workflowName);
    // The cell's text is exactly the status; a pending cancel shows as the badge's title.
    parts.status.replaceChildren(statusBadge(job.status, { title: job.cancelRequested && job.status === 'RUNNING' ? 'cancel requested' : null }));
    parts.attempt.textContent = displayValue(job.attempt) + '/' + displayValue(job.maxAttempts);
    parts.priority.textContent = displayValue(job.priority);
    parts.step.textContent = job.outstandingStep ? String(job.outstandingStep) : '—';
    parts.created.replaceChildren(timeAgo(job.createdAt));
    parts.updated.replaceChildren(timeAgo(job.updatedAt));
  }

  /** Updates rows in place, keyed by job id, so a 5-second refresh keeps checked boxes and focus. */
  function drawRows(jobs) {
    const seen = new Set();
    jobs.forEach((job, i) => {
      const id = String(job.jobId);
      seen.add(id);
      let parts = rowParts.get(id);
      if (!parts) {
        parts = createRow(job);
        rowParts.set(id, parts);
      }
      updateRow(parts, job);
      parts.checkbox.checked = selected.has(id);
      // Move a row only when it is out of place: moving a focused row would blur it.
      if (tbody.children[i] !== parts.tr) tbody.insertBefore(parts.tr, tbody.children[i] || null);
    });
    for (const [id, parts] of rowParts) {
      if (!seen.has(id)) {
        parts.tr.remove();
        rowParts.delete(id);
      }
    }
    // A selection that is no longer on screen must not be acted on by accident.
    for (const id of [...selected]) if (!seen.has(id)) selected.delete(id);
    emptyRow.firstChild.textContent = 'No jobs match.';
    if (jobs.length === 0) tbody.appendChild(emptyRow);
    else emptyRow.remove();

    pagePrev.disabled = !filters.after;
    pageNext.disabled = !nextCursor;
    const first = filters.page * PAGE_SIZE;
    pageInfo.textContent = jobs.length === 0 ? 'No jobs' : 'Jobs ' + (first + 1) + '–' + (first + jobs.length);
    updateSelectionControls();
  }

  function updateSelectionControls() {
    const boxes = [...rowParts.values()].map((p) => p.checkbox);
    const checked = boxes.filter((b) => b.checked).length;
    selectAll.checked = boxes.length > 0 && checked === boxes.length;
    selectAll.indeterminate = checked > 0 && checked < boxes.length;
    bulkCancel.disabled = selected.size === 0;
    bulkRetry.disabled = selected.size === 0;
  }

  async function bulkAct(kind) {
    const jobIds = [...selected];
    if (jobIds.length === 0) return;
    const reason = bulkReason.value.trim();
    if (kind === 'cancel' && reason === '') {
      bulkOutcome.textContent = 'Give a reason to cancel the selected jobs.';
      bulkReason.focus();
      return;
    }
    if (reason.length > 500) {
      bulkOutcome.textContent = 'The reason is longer than 500 characters.';
      bulkReason.focus();
      return;
    }
    bulkCancel.disabled = true;
    bulkRetry.disabled = true;
    bulkOutcome.textContent = kind === 'cancel' ? 'Cancelling…' : 'Retrying…';
    try {
      const answer = kind === 'cancel'
        ? await callVerb('cancel-jobs', { jobIds, reason }, abort.signal)
        : await callVerb('retry-jobs', { jobIds }, abort.signal);
      bulkOutcome.textContent = bulkOutcomeText(kind, answer);
    } catch (err) {
      if (isAbort(err)) return;
      bulkOutcome.textContent = errorText(err);
    }
    selected.clear();
    for (const parts of rowParts.values()) parts.checkbox.checked = false;
    updateSelectionControls();
    refreshCounts();
    refreshTable();
  }

  filterForm.addEventListener('submit', (event) => {
    event.preventDefault();
    const next = {
      status: statusSelect.value,
      workflow: workflowInput.value.trim(),
      createdAfter: afterInput.value,
      createdBefore: beforeInput.value,
      jobId: jobIdInput.value.trim(),
      after: '',
      page: 0,
    };
    earlierPages.length = 0;
    navigateFleet(next);
  });
  // Back one page: where the page before started, if this visit saw it; else the
  // first page (after a reload deep in the list).
  pagePrev.addEventListener('click', () => {
    const back = earlierPages.length > 0 ? earlierPages.pop() : { after: '', page: 0 };
    navigateFleet(Object.assign({}, filters, back));
  });
  pageNext.addEventListener('click', () => {
    if (!nextCursor) return;
    earlierPages.push({ after: filters.after, page: filters.page });
    navigateFleet(Object.assign({}, filters, { after: nextCursor, page: filters.page + 1 }));
  });
  selectAll.addEventListener('change', () => {
    for (const [id, parts] of rowParts) {
      parts.checkbox.checked = selectAll.checked;
      if (selectAll.checked) selected.add(id);
      else selected.delete(id);
    }
    updateSelectionControls();
  });
  bulkCancel.addEventListener('click', () => bulkAct('cancel'));
  bulkRetry.addEventListener('click', () => bulkAct('retry'));
  byId('redrive-all').addEventListener('click', async (clicked) => {
    const button = clicked.currentTarget;
    button.disabled = true;
    try {
      const answer = await callVerb('redrive-events', { all: true, limit: 10000 }, abort.signal);
      byId('redrive-outcome').textContent = 'Redrove ' + answer.events + ' events of ' + answer.jobs + ' jobs' + (answer.more ? '; more remain: press again' : '');
    } catch (err) {
      if (isAbort(err)) return;
      byId('redrive-outcome').textContent = errorText(err);
    }
    button.disabled = false;
    refreshCounts();
  });

  /** Filters and paging live in the hash so a reload keeps them; the router calls update() back. */
  function navigateFleet(next) {
    const hash = fleetHash(next);
    if (location.hash === hash) {
      applyFilters(next);
    } else location.hash = hash;
  }

  function applyFilters(next) {
    filters = next;
    selected.clear();
    syncFilterInputs();
    refreshTable();
  }

  syncFilterInputs();
  refreshCounts();
  refreshTable();
  // Polling costs every tab a read every few seconds: none while the tab is hidden; the
  // table only on its first page (a later page would shift under the reader) and never while rows are
  // selected (a row moving under the pointer would be acted on by mistake).
  const timer = setInterval(() => {
    if (document.hidden) return;
    refreshCounts();
    if (!filters.after && selected.size === 0) refreshTable();
  }, REFRESH_MS);

  return {
    dispose() {
      clearInterval(timer);
      abort.abort();
    },
    update(nextQuery) {
      applyFilters(filtersFromQuery(nextQuery));
    },
    onToken() {
      refreshCounts();
      refreshTable();
    },
  };
}

/** "Cancelled 3; not changed 1: <id> ALREADY_FINISHED". */
function bulkOutcomeText(kind, answer) {
  if (answer.ok === false && answer.changed === undefined) return String(answer.error || 'the node refused');
  const verb = kind === 'cancel' ? 'Cancelled' : 'Retried';
  let text = verb + ' ' + (answer.changed || 0);
  const notChanged = Array.isArray(answer.notChanged) ? answer.notChanged : [];
  if (notChanged.length > 0) {
    text += '; not changed ' + notChanged.length + ': ' +
      notChanged.map((n) => String(n.jobId) + ' ' + String(n.outcome || '') + (n.error ? ' (' + String(n.error) + ')' : '')).join(', ');
  }
  if (answer.more) text += '; more not listed';
  return text;
}

/* ======================================================================
 * 7. Job view (#/jobs/<id>)
 *
 * The skeleton is drawn once; each get-job answer updates the parts in place (status,
 * columns, timeline, actions), so typed values, outcomes and focus survive the live
 * updates. The review section is created when the job is first seen WAITING.
 * ==================================================================== */

const BIG_JOB_KEYS = new Set(['workflowDefinition', 'input', 'checkpoints', 'result', 'events']);
const CANCELLABLE = new Set(['QUEUED', 'RUNNING', 'WAITING']);
const RETRYABLE = new Set(['DEAD', 'FAILED', 'CANCELLED']);

function renderJobView(main, params) {
  const jobId = params.id;
  document.title = 'Job ' + jobId + ' · ProtoMolt Jobs';
  const abort = new AbortController();
  const state = {
    job: null,
    definition: undefined, // the job's workflow snapshot, read once (include: definition)
    events: [],
    eventIds: new Set(),
    stepTimes: new Map(), // step name -> occurredAt of its latest checkpoint event
    stepsKey: null,
    timelineItems: [],
    review: null,
  };

  // Skeleton.
  const statusBadgeEl = el('span', { id: 'job-status', class: 'badge', text: 'Loading…' });
  const meta = el('p', { class: 'job-meta' });
  const cancelReason = el('input', { id: 'cancel-reason', type: 'text', maxlength: '500', autocomplete: 'off' });
  const cancelButton = el('button', { type: 'button', id: 'cancel-job', text: 'Cancel job', disabled: true });
  const retryFrom = el('select', { id: 'retry-from-step' }, el('option', { value: '', text: 'keep every checkpoint' }));
  const retryReason = el('input', { id: 'retry-reason', type: 'text', maxlength: '500', autocomplete: 'off' });
  const retryButton = el('button', { type: 'button', id: 'retry-job', text: 'Retry job', disabled: true });
  const redriveButton = el('button', { type: 'button', id: 'redrive-events', text: 'Redrive events', disabled: true });
  const redriveNote = el('span', { id: 'redrive-note', class: 'muted' });
  const actionOutcome = el('p', { id: 'action-outcome', class: 'outcome', 'aria-live': 'polite' });
  const actions = el('section', { class: 'job-actions', 'aria-labelledby': 'actions-heading' },
    el('h2', { id: 'actions-heading', text: 'Actions' }),
    el('div', { class: 'action-row' },
      el('div', { class: 'filter' }, el('label', { for: 'cancel-reason', text: 'Reason for cancelling' }), cancelReason), cancelButton),
    el('div', { class: 'action-row' },
      el('div', { class: 'filter' }, el('label', { for: 'retry-from-step', text: 'Retry from step' }), retryFrom),
      el('div', { class: 'filter' }, el('label', { for: 'retry-reason', text: 'Reason for retrying (optional)' }), retryReason), retryButton),
    el('div', { class: 'action-row' }, redriveButton, redriveNote),
    actionOutcome);
  const reviewSlot = el('div', { class: 'review-slot' });
  const timeline = el('ol', { id: 'timeline', class: 'timeline' });
  const inputPre = el('pre', { id: 'job-input', class: 'json' });
  const resultPre = el('pre', { id: 'job-result', class: 'json' });
  const columns = el('dl', { id: 'job-columns', class: 'columns' });
  const streamState = el('p', { class: 'stream-state muted', 'aria-live': 'polite', text: 'Connecting to live events…' });
  const eventsList = el('ol', { id: 'events', class: 'events' });
  const definitionPre = el('pre', { class: 'json' });

  main.replaceChildren(
    el('h1', { class: 'job-heading' }, el('span', { text: 'Job ' }), el('span', { class: 'mono job-id', text: jobId }), ' ', statusBadgeEl),
    meta,
    // The job's story first (and the review while it waits on a human), the acts
    // and every column after it.
    reviewSlot,
    el('section', { 'aria-labelledby': 'timeline-heading' }, el('h2', { id: 'timeline-heading', text: 'Timeline' }), timeline),
    el('section', { 'aria-labelledby': 'events-heading' }, el('h2', { id: 'events-heading', text: 'Events' }), streamState, eventsList),
    actions,
    el('div', { class: 'two-col' },
      el('section', { 'aria-labelledby': 'input-heading' }, el('h2', { id: 'input-heading', text: 'Input' }), inputPre),
      el('section', { 'aria-labelledby': 'result-heading' }, el('h2', { id: 'result-heading', text: 'Result' }), resultPre)),
    el('section', { 'aria-labelledby': 'columns-heading' }, el('h2', { id: 'columns-heading', text: 'Every column' }), columns),
    el('section', { 'aria-labelledby': 'definition-heading' }, el('h2', { id: 'definition-heading', text: 'Workflow definition' }),
      el('details', null, el('summary', { text: 'Show the definition snapshot' }), definitionPre)));
  inputPre.textContent = 'Loading…';

  const reload = coalesced(loadJob);

  async function loadJob() {
    try {
      // The workflow snapshot never changes: read it with the first answer only.
      const body = state.definition === undefined ? { jobId, include: ['definition'] } : { jobId };
      const answer = await callVerb('get-job', body, abort.signal);
      if (!answer.ok || !answer.job) {
        // No such job: nothing to follow.
        stream.stop();
        showBanner(String(answer.error || 'no workflow run ' + jobId));
        setBadge(statusBadgeEl, '');
        statusBadgeEl.textContent = 'not found';
        inputPre.textContent = '—';
        return;
      }
      clearBanner();
      applyJob(answer.job);
    } catch (err) {
      reportLoadError(err);
    }
  }

  function applyJob(job) {
    if (job.workflowDefinition !== undefined) state.definition = job.workflowDefinition;
    job.workflowDefinition = state.definition;
    state.job = job;
    const definition = parseDefinition(job.workflowDefinition);
    const steps = Array.isArray(definition.steps) ? definition.steps : [];
    setBadge(statusBadgeEl, job.status);
    meta.replaceChildren('Workflow ', el('a', { href: workflowHref(job.workflowName), text: String(job.workflowName) }),
      job.outstandingStep ? ' · waiting on step ' + String(job.outstandingStep) : '');
    drawColumns(job);
    drawTimeline(job, steps);
    inputPre.textContent = prettyJson(job.input);
    resultPre.textContent = job.result === null || job.result === undefined ? '—' : prettyJson(job.result);
    definitionPre.textContent = prettyJson(withoutDescriptorBlob(definition));
    updateRetryOptions(steps);
    updateActionButtons();
    updateReview(job);
    updateCountdown();
    // A retried job writes events after its terminal one (and may reach its next terminal
    // event before this read): ask again from the last event seen. A no-op while the
    // stream is live; a finished job with nothing newer answers 204 at once.
    stream.restart();
  }

  function drawColumns(job) {
    const keys = Object.keys(job).filter((k) => !BIG_JOB_KEYS.has(k));
    for (const required of ['verdict', 'error']) if (!keys.includes(required)) keys.push(required);
    const rows = [];
    for (const key of keys) {
      const value = job[key];
      const dd = el('dd', { 'data-key': key });
      if (key === 'error') dd.appendChild(el('pre', { id: 'job-error', class: 'error-text', text: value === null || value === undefined ? '—' : String(value) }));
      else if (key === 'verdict') {
        dd.id = 'job-verdict';
        dd.textContent = displayValue(value);
      } else if (key === 'attempt') {
        const left = Number(job.maxAttempts) - Number(value);
        dd.textContent = displayValue(value) + ' of ' + displayValue(job.maxAttempts) + (Number.isFinite(left) ? ' · ' + Math.max(0, left) + (left === 1 ? ' retry' : ' retries') + ' left' : '');
      } else if (key === 'runAfter') {
        dd.appendChild(timeBoth(value));
        if (job.status === 'QUEUED' && parseTime(value) > Date.now()) dd.append(' ', el('span', { id: 'run-after-countdown', class: 'countdown', 'data-until': value }));
      } else if ((/At$|Until$/.test(key)) && typeof value === 'string') dd.appendChild(timeBoth(value));
      else if (key === 'leaseOwner' && job.status === 'RUNNING' && value) dd.append(String(value), el('span', { class: 'muted', text: ' (holds the lease)' }));
      else dd.textContent = displayValue(value);
      rows.push(el('div', { class: 'column-row' }, el('dt', { text: humanizeKey(key) }), dd));
    }
    columns.replaceChildren(...rows);
  }

  function drawTimeline(job, steps) {
    const key = steps.map((s) => String(s.name)).join('\u0000');
    if (key !== state.stepsKey) {
      // The step list changes only when the definition does: rebuild then; otherwise update in place
      // so an opened <details> stays open.
      state.stepsKey = key;
      state.timelineItems = steps.map((step) => {
        const parts = {
          li: el('li', { 'data-step': String(step.name), class: 'timeline-step' }),
          state: el('span', { class: 'step-state' }),
          when: el('span', { class: 'step-when muted' }),
          pre: el('pre', { class: 'json' }),
          details: null,
        };
        parts.details = el('details', { hidden: true }, el('summary', { text: 'Response' }), parts.pre);
        parts.li.append(el('span', { class: 'step-name', text: String(step.name) }), parts.state, parts.when, parts.details);
        return parts;
      });
      timeline.replaceChildren(...state.timelineItems.map((p) => p.li));
      if (steps.length === 0) timeline.appendChild(el('li', { class: 'muted', text: 'The definition lists no steps.' }));
    }
    const checkpoints = Array.isArray(job.checkpoints) ? job.checkpoints : [];
    steps.forEach((step, i) => {
      const parts = state.timelineItems[i];
      const checkpoint = checkpoints[i] && checkpoints[i].name === step.name ? checkpoints[i] : checkpoints.find((c) => c && c.name === step.name);
      let stepState = 'not reached';
      if (checkpoint) stepState = checkpoint.skipped ? 'skipped' : 'done';
      else if (job.status === 'WAITING' && job.outstandingStep === step.name) stepState = 'waiting here';
      parts.state.textContent = stepState;
      parts.li.setAttribute('data-state', stepState.replace(' ', '-'));
      const when = state.stepTimes.get(String(step.name));
      parts.when.replaceChildren(when ? timeBoth(when) : '');
      const hasResponse = checkpoint && checkpoint.response !== undefined && checkpoint.response !== null;
      parts.details.hidden = !hasResponse;
      parts.pre.textContent = hasResponse ? prettyJson(checkpoint.response) : '';
    });
  }

  function updateRetryOptions(steps) {
    const names = steps.map((s) => String(s.name));
    const current = [...retryFrom.options].slice(1).map((o) => o.value);
    if (names.join('\u0000') === current.join('\u0000')) return; // keep the user's choice and focus
    const chosen = retryFrom.value;
    setChildren(retryFrom, el('option', { value: '', text: 'keep every checkpoint' }), names.map((n) => el('option', { value: n, text: n })));
    if (names.includes(chosen)) retryFrom.value = chosen;
  }

  function updateActionButtons() {
    const status = state.job ? state.job.status : '';
    cancelButton.disabled = !CANCELLABLE.has(status);
    retryButton.disabled = !(RETRYABLE.has(status) || (status === 'COMPLETED' && retryFrom.value !== ''));
    // Dead-lettered events (and those held behind them) are published again by a
    // redrive, in order.
    const stuck = state.job && Array.isArray(state.job.events)
      ? state.job.events.filter((e) => e.status === 'FAILED' || e.status === 'HELD').length : 0;
    redriveButton.disabled = stuck === 0;
    redriveNote.textContent = stuck === 0 ? '' : stuck + ' events dead-lettered or held behind one';
  }

  function updateCountdown() {
    const node = byId('run-after-countdown');
    if (!node) return;
    const left = (parseTime(node.getAttribute('data-until')) - Date.now()) / 1000;
    node.textContent = left > 0 ? 'starts in ' + humanizeAge(Math.ceil(left)) : 'due now';
  }

  function addEvent(event) {
    const id = String(event.eventId || '');
    if (id && state.eventIds.has(id)) return; // a reconnect may repeat one
    if (id) state.eventIds.add(id);
    state.events.push(event);
    if (event.type === 'TYPE_STEP_CHECKPOINT' && event.step) {
      const previous = state.stepTimes.get(String(event.step));
      if (!previous || parseTime(event.occurredAt) >= parseTime(previous)) state.stepTimes.set(String(event.step), event.occurredAt);
    }
    eventsList.appendChild(eventItem(event));
  }

  async function act(verb, body, button) {
    button.disabled = true;
    actionOutcome.textContent = 'Working…';
    try {
      const answer = await callVerb(verb, body, abort.signal);
      actionOutcome.textContent = actionOutcomeText(answer);
    } catch (err) {
      if (isAbort(err)) return;
      actionOutcome.textContent = errorText(err);
    }
    updateActionButtons();
    stream.restart();
    reload();
  }

  cancelButton.addEventListener('click', () => {
    const reason = cancelReason.value.trim();
    if (reason === '' || reason.length > 500) {
      actionOutcome.textContent = reason === '' ? 'Give a reason to cancel the job.' : 'The reason is longer than 500 characters.';
      cancelReason.focus();
      return;
    }
    act('cancel-job', { jobId, reason }, cancelButton);
  });
  retryButton.addEventListener('click', () => {
    const body = { jobId };
    if (retryFrom.value) body.fromStep = retryFrom.value;
    const reason = retryReason.value.trim();
    if (reason) body.reason = reason;
    act('retry-job', body, retryButton);
  });
  retryFrom.addEventListener('change', updateActionButtons);
  redriveButton.addEventListener('click', () => {
    act('redrive-events', { jobIds: [jobId] }, redriveButton);
  });

  /* -- The review section: once per visit; its form once per WAITING episode. -- */

  function updateReview(job) {
    const waiting = job.status === 'WAITING' && job.outstandingStep;
    const review = state.review;
    if (!waiting) {
      if (review && review.episodeOpen) {
        review.episodeOpen = false;
        review.note.textContent = 'The job is no longer waiting on step ' + review.step + ' (status ' + job.status + ').';
        foldAnsweredReview();
      }
      return;
    }
    if (!review) state.review = createReviewSection();
    const step = String(job.outstandingStep);
    if (!state.review.episodeOpen || state.review.step !== step) startEpisode(job, step);
  }

  function createReviewSection() {
    const heading = el('h2', { id: 'review-heading' });
    const body = el('div', { class: 'review-body' });
    const note = el('p', { class: 'review-note muted', 'aria-live': 'polite' });
    // The outcome lives outside the per-episode body so it survives the job moving on.
    const outcome = el('div', { class: 'review-outcome outcome', 'aria-live': 'polite' });
    const section = el('section', { id: 'review', 'aria-labelledby': 'review-heading' }, heading, note, body, outcome);
    reviewSlot.appendChild(section);
    return { section, heading, body, note, outcome, step: null, episodeOpen: false };
  }

  function setReviewOutcome(outcome, text, extra) {
    const box = state.review.outcome;
    box.setAttribute('data-outcome', outcome);
    setChildren(box, el('p', { text }), extra);
    foldAnsweredReview();
  }

  /**
   * Once this page's answer settled the step and the job has moved on, the form has
   * done its work: fold it away, keeping the heading, the note and the outcome. A
   * reviewer who has not answered keeps the form (a late answer is told ALREADY_DONE).
   */
  function foldAnsweredReview() {
    const review = state.review;
    const outcome = review.outcome.getAttribute('data-outcome');
    if (!review.episodeOpen && ['COMPLETED', 'REJECTED', 'ALREADY_DONE'].includes(outcome)) review.body.hidden = true;
  }

  function startEpisode(job, step) {
    const review = state.review;
    review.step = step;
    review.episodeOpen = true;
    review.heading.textContent = 'Review step ' + step;
    review.note.textContent = '';
    review.body.hidden = false;

    const formBox = el('div', { class: 'review-form-box' }, el('p', { class: 'loading', text: 'Loading…' }));
    const rejectReason = el('input', { type: 'text', class: 'reject-reason', id: 'reject-reason', maxlength: '500', autocomplete: 'off' });
    const rejectButton = el('button', { type: 'button', class: 'reject-step danger', text: 'Reject' });
    const rejectMessage = el('p', { class: 'reject-message field-error', 'aria-live': 'polite' });
    const rejectBox = el('div', { class: 'reject' },
      el('div', { class: 'filter' }, el('label', { for: 'reject-reason', text: 'Reason for rejecting' }), rejectReason), rejectButton, rejectMessage);
    const context = reviewContext(job, step);
    review.body.replaceChildren(el('div', { class: 'review-layout' }, el('div', { class: 'review-main' }, formBox, rejectBox), context));

    rejectButton.addEventListener('click', async () => {
      const reason = rejectReason.value.trim();
      if (reason === '' || reason.length > 500) {
        rejectMessage.textContent = reason === '' ? 'Give a reason for rejecting.' : 'The reason is longer than 500 characters.';
        rejectReason.focus();
        return;
      }
      rejectMessage.textContent = '';
      rejectButton.disabled = true;
      try {
        const answer = await callVerb('reject-step', { jobId, stepName: step, reason }, abort.signal);
        const [outcome, text] = reviewOutcomeText(answer, 'reject');
        setReviewOutcome(outcome, text);
      } catch (err) {
        if (isAbort(err)) return;
        setReviewOutcome('ERROR', errorText(err));
      } finally {
        rejectButton.disabled = false;
      }
      reload();
    });

    loadReviewForm(job, step, formBox);
  }

  async function loadReviewForm(job, step, formBox) {
    const spec = await loadFormSpec({ jobId, stepName: step }, formBox, abort.signal);
    if (!spec) return;
    let generated = null;
    generated = createGeneratedForm(spec, {
      formClass: 'review-form',
      submitClass: 'submit-review',
      submitLabel: 'Complete step',
      validatesNote: 'The node checks these rules again when you send: an answer that breaks them fails the job.',
      attrs: { 'data-job-id': jobId, 'data-step': step },
      async onSubmit(response) {
        try {
          // Asked first without writing: the node checks every rule (the page checks only
          // some), so an answer the node would refuse never fails the job.
          const check = await callVerb('complete-step', { jobId, stepName: step, response, dryRun: true }, abort.signal);
          if (check.outcome === 'INVALID') {
            const unmatched = generated.showViolations(Array.isArray(check.violations) ? check.violations : []);
            setReviewOutcome('INVALID', 'Not sent: the answer breaks the step\'s rules; fix the fields marked.',
              unmatched.length > 0 ? violationList(unmatched) : null);
            return;
          }
          if (check.outcome !== 'VALID') {
            const [outcome, text] = reviewOutcomeText(check, 'complete');
            setReviewOutcome(outcome, text);
            reload();
            return;
          }
          const answer = await callVerb('complete-step', { jobId, stepName: step, response }, abort.signal);
          const [outcome, text] = reviewOutcomeText(answer, 'complete');
          let extra = null;
          if (outcome === 'REJECTED' && Array.isArray(answer.violations)) {
            const unmatched = generated.showViolations(answer.violations);
            if (unmatched.length > 0) extra = violationList(unmatched);
          }
          setReviewOutcome(outcome, text, extra);
        } catch (err) {
          if (isAbort(err)) return;
          setReviewOutcome('ERROR', errorText(err));
        }
        reload();
      },
    });
    formBox.replaceChildren(generated.form);
  }

  const stream = followJobEvents(jobId, {
    onEvent(event) {
      addEvent(event);
      reload();
    },
    onState(kind, text) {
      streamState.textContent = text;
      streamState.setAttribute('data-state', kind);
    },
  });

  reload();
  const countdownTimer = setInterval(updateCountdown, 1000);
  // Claims, backoffs and lease changes write no event: a live job is read again every
  // few seconds too (one row by its key), and so is any job while its stream is down.
  const pollTimer = setInterval(() => {
    if (document.hidden || !state.job) return;
    const live = ['QUEUED', 'RUNNING', 'WAITING'].includes(state.job.status);
    const streamDown = ['reconnecting', 'error'].includes(streamState.getAttribute('data-state'));
    if (live || streamDown) reload();
  }, REFRESH_MS);

  return {
    dispose() {
      clearInterval(countdownTimer);
      clearInterval(pollTimer);
      stream.stop();
      abort.abort();
    },
    onToken() {
      reload();
      stream.restart();
    },
  };
}

/** The definition as an object (it may arrive as JSON text). */
function parseDefinition(definition) {
  if (typeof definition === 'string') {
    try {
      return JSON.parse(definition) || {};
    } catch (_) {
      return {};
    }
  }
  return definition && typeof definition === 'object' ? definition : {};
}

/** A copy with the descriptor set replaced by its size: the blob is unreadable and can be large. */
function withoutDescriptorBlob(definition) {
  const copy = Object.assign({}, definition);
  if (copy.schema && typeof copy.schema === 'object') {
    const blob = copy.schema.descriptorSetBase64;
    const bytes = typeof blob === 'string' ? base64Length(blob.trim()) ?? Math.floor((blob.length * 3) / 4) : 0;
    copy.schema = Object.assign({}, copy.schema, { descriptorSetBase64: '(descriptor set, ' + bytes + ' bytes)' });
  }
  return copy;
}

/** "CANCELLED (status CANCELLED)", with the node's error appended when there is one. */
function actionOutcomeText(answer) {
  if (typeof answer.events === 'number' && answer.outcome === undefined) return 'Redrove ' + answer.events + ' events; they publish in order.';
  if (!answer.outcome) return String(answer.error || (answer.ok ? 'Done' : 'the node refused'));
  let text = String(answer.outcome) + (answer.status ? ' (status ' + String(answer.status) + ')' : '');
  if (answer.checkpointsKept !== undefined && answer.checkpointsKept !== null) text += '; checkpoints kept: ' + String(answer.checkpointsKept);
  if (answer.error) text += ': ' + String(answer.error);
  return text;
}

/** [data-outcome, sentence] for complete-step and reject-step answers. */
function reviewOutcomeText(answer, verb) {
  const status = answer.status ? String(answer.status) : 'unknown';
  switch (answer.outcome) {
    case 'COMPLETED':
      return ['COMPLETED', 'Step completed; the job runs on (status ' + status + ').'];
    case 'ALREADY_DONE':
      return ['ALREADY_DONE', 'Already done: someone answered this step before you (status ' + status + '). Nothing was changed.'];
    case 'WRONG_STATE':
      return ['WRONG_STATE', 'This job is not waiting on this step any more: ' + String(answer.error || 'status ' + status)];
    case 'REJECTED':
      if (verb === 'reject') return ['REJECTED', 'Step rejected; the job failed (status ' + status + ').'];
      return ['REJECTED', 'The node rejected the answer: ' + String(answer.error || 'it breaks the rules')];
    default:
      return ['ERROR', String(answer.error || 'the node refused the answer')];
  }
}

function violationList(violations) {
  return el('ul', { class: 'violations' }, violations.map((v) => el('li', { text: (v.field ? String(v.field) + ': ' : '') + String(v.message || v.rule || '') })));
}

/** "What the reviewer judges": the input and every earlier step's response. */
function reviewContext(job, step) {
  const aside = el('aside', { id: 'review-context', class: 'review-context', 'aria-labelledby': 'review-context-heading' },
    el('h3', { id: 'review-context-heading', text: 'What the reviewer judges' }));
  // What the step's rules built when the job parked: the request to approve.
  if (job.pendingRequest !== undefined && job.pendingRequest !== null) {
    aside.append(el('h4', { text: 'The request' }), el('pre', { id: 'pending-request', class: 'json', text: prettyJson(job.pendingRequest) }));
  }
  aside.append(el('h4', { text: 'Input' }), el('pre', { class: 'json', text: prettyJson(job.input) }));
  for (const checkpoint of Array.isArray(job.checkpoints) ? job.checkpoints : []) {
    if (!checkpoint || checkpoint.name === step) continue;
    aside.append(el('h4', { text: 'Step ' + String(checkpoint.name) }),
      checkpoint.skipped ? el('p', { class: 'muted', text: '(skipped)' }) : el('pre', { class: 'json', text: prettyJson(checkpoint.response) }));
  }
  return aside;
}

function eventItem(event) {
  const type = String(event.type || '');
  const li = el('li', { 'data-event-type': type, class: 'event' },
    el('span', { class: 'event-type', text: type.replace(/^TYPE_/, '') }),
    event.step ? el('span', { class: 'event-step', text: 'step ' + String(event.step) }) : null,
    event.attempt !== undefined && event.attempt !== null ? el('span', { class: 'event-attempt', text: 'attempt ' + String(event.attempt) }) : null,
    el('span', { class: 'event-when' }, timeAgo(event.occurredAt)));
  if (event.verdict) li.appendChild(el('span', { class: 'event-verdict', text: 'verdict: ' + String(event.verdict) }));
  if (event.error) li.appendChild(el('pre', { class: 'event-error error-text', text: String(event.error) }));
  if (event.detail !== undefined && event.detail !== null) li.appendChild(el('code', { class: 'event-detail', text: compactJson(event.detail) }));
  return li;
}

/* ======================================================================
 * 8. Inbox view (#/inbox)
 * ==================================================================== */

function renderInboxView(main) {
  document.title = 'Review inbox · ProtoMolt Jobs';
  const abort = new AbortController();
  const summary = el('p', { class: 'inbox-summary', 'aria-live': 'polite', text: 'Loading…' });
  const groupsBox = el('div', { class: 'inbox-groups' });
  main.replaceChildren(el('h1', { text: 'Review inbox' }), summary, groupsBox);
  const UNAVAILABLE = '(input unavailable)';
  const previews = new Map(); // job id -> preview text; inputs never change, so read each once
  const previewQueue = [];
  let previewsInFlight = 0;
  let signature = '';
  let previewBudget = INBOX_PREVIEWS;

  function previewText(input) {
    return truncate(compactJson(input === undefined ? null : input), 120);
  }

  function setPreview(jobId, text) {
    for (const li of groupsBox.querySelectorAll('li[data-job-id]')) {
      if (li.getAttribute('data-job-id') === jobId) li.querySelector('.input-preview').textContent = text;
    }
  }

  /** list-jobs carries no input, so previews are read with get-job, a few at a time, once per job. */
  function wantPreview(jobId) {
    if (previews.has(jobId)) return previews.get(jobId);
    previews.set(jobId, '…');
    previewQueue.push(jobId);
    pumpPreviews();
    return '…';
  }

  function pumpPreviews() {
    while (previewsInFlight < 3 && previewQueue.length > 0) {
      const jobId = previewQueue.shift();
      previewsInFlight += 1;
      callVerb('get-job', { jobId }, abort.signal)
        .then((answer) => (answer.ok && answer.job ? previewText(answer.job.input) : UNAVAILABLE))
        .catch((err) => (isAbort(err) ? null : UNAVAILABLE))
        .then((text) => {
          previewsInFlight -= 1;
          if (text === null) return;
          previews.set(jobId, text);
          setPreview(jobId, text);
          pumpPreviews();
        });
    }
  }

  async function refresh() {
    let jobs;
    let counts = new Map(); // group key -> WAITING jobs in it, from get-fleet (every one, not only those listed)
    try {
      const answer = await loadVerb('list-jobs', { status: 'WAITING', oldestFirst: true, limit: INBOX_LISTED }, abort.signal);
      jobs = Array.isArray(answer.jobs) ? answer.jobs : [];
      clearBanner();
    } catch (err) {
      reportLoadError(err);
      return;
    }
    try {
      const fleet = await callVerb('get-fleet', {}, abort.signal);
      for (const g of Array.isArray(fleet.waitingBySteps) ? fleet.waitingBySteps : []) {
        counts.set(groupKey(g.workflowName, g.stepName), Number(g.count) || 0);
      }
    } catch (err) {
      if (isAbort(err)) return;
      counts = new Map(); // the listed jobs alone, then
    }
    // Inputs are read for the first few listed jobs only; forget those no longer listed.
    const listed = new Set(jobs.map((j) => String(j.jobId)));
    for (const jobId of [...previews.keys()]) if (!listed.has(jobId)) previews.delete(jobId);
    previewBudget = INBOX_PREVIEWS;
    const groups = groupWaiting(jobs);
    for (const [key, count] of counts) {
      if (count > 0 && !groups.some((g) => groupKey(g.workflow, g.step) === key)) {
        const [workflow, step] = JSON.parse(key);
        groups.push({ workflow, step, jobs: [] });
      }
    }
    for (const group of groups) group.total = Math.max(counts.get(groupKey(group.workflow, group.step)) || 0, group.jobs.length);
    const total = groups.reduce((sum, g) => sum + g.total, 0);
    summary.textContent = total === 0
      ? 'Nothing is waiting for a human.'
      : total + (total === 1 ? ' job is' : ' jobs are') + ' waiting for a human' + (jobs.length < total ? ' (the oldest ' + jobs.length + ' listed).' : '.');
    const next = compactJson(groups.map((g) => [g.workflow, g.step, g.total, g.jobs.map((j) => String(j.jobId))]));
    if (next === signature) {
      // Same jobs: only the "waiting since" ages move. Leaves links (and focus) alone.
      for (const time of groupsBox.querySelectorAll('time[datetime]')) time.textContent = relativeTime(time.getAttribute('datetime'));
      return;
    }
    signature = next;
    const focusedJob = document.activeElement && document.activeElement.closest ? document.activeElement.closest('li[data-job-id]') : null;
    const focusedId = focusedJob && groupsBox.contains(focusedJob) ? focusedJob.getAttribute('data-job-id') : null;
    groupsBox.replaceChildren(...groups.map(drawGroup));
    if (focusedId) {
      for (const li of groupsBox.querySelectorAll('li[data-job-id]')) if (li.getAttribute('data-job-id') === focusedId) li.querySelector('a').focus();
    }
  }

  function drawGroup(group) {
    const more = group.total - group.jobs.length;
    return el('section', { class: 'inbox-group', 'data-workflow': group.workflow, 'data-step': group.step },
      el('h2', { text: group.workflow + ' · ' + group.step + ' (' + group.total + ' waiting)' }),
      more > 0
        ? el('p', { class: 'muted' }, more + ' more, newer than those listed: ',
          el('a', { href: fleetHash({ status: 'WAITING', workflow: group.workflow, after: '', page: 0 }), text: 'see them in the jobs table' }))
        : null,
      el('ol', { class: 'inbox-jobs' }, group.jobs.map((job) => {
        const id = String(job.jobId);
        return el('li', { 'data-job-id': id },
          el('a', { class: 'review-link', href: jobHref(id), text: 'Review', 'aria-label': 'Review job ' + id }),
          el('span', { class: 'mono job-id', title: id, text: id }),
          el('span', { class: 'waiting-since' }, 'waiting since ', timeAgo(job.updatedAt)),
          el('code', { class: 'input-preview', text: previewBudget-- > 0 ? wantPreview(id) : '' }));
      })));
  }

  refresh();
  const timer = setInterval(() => {
    if (!document.hidden) refresh();
  }, REFRESH_MS);
  return {
    dispose() {
      clearInterval(timer);
      abort.abort();
    },
    onToken() {
      // Previews that failed for want of a token are worth reading again.
      for (const [jobId, text] of previews) if (text === UNAVAILABLE) previews.delete(jobId);
      signature = '';
      refresh();
    },
  };
}

/** Groups jobs (already oldest first) by workflow, then step, in order of each group's oldest job. */
/** Jobs the inbox lists (the oldest first), and of those the ones whose input it previews. */
const INBOX_LISTED = 500;
const INBOX_PREVIEWS = 50;

function groupKey(workflow, step) {
  return JSON.stringify([String(workflow ?? ''), String(step ?? '')]);
}

function groupWaiting(jobs) {
  const groups = new Map();
  for (const job of jobs) {
    const workflow = String(job.workflowName ?? '');
    const step = String(job.outstandingStep ?? '');
    const key = JSON.stringify([workflow, step]);
    if (!groups.has(key)) groups.set(key, { workflow, step, jobs: [] });
    groups.get(key).jobs.push(job);
  }
  return [...groups.values()];
}

/* ======================================================================
 * 9. Workflows view (#/workflows and #/workflows/<name>)
 * ==================================================================== */

function renderWorkflowsView(main) {
  document.title = 'Workflows · ProtoMolt Jobs';
  const abort = new AbortController();
  const list = el('ul', { id: 'workflow-list', class: 'workflow-list' }, el('li', { class: 'loading', text: 'Loading…' }));
  main.replaceChildren(el('h1', { text: 'Workflows' }), list);

  async function load() {
    try {
      const answer = await loadVerb('list-workflows', {}, abort.signal);
      const workflows = Array.isArray(answer.workflows) ? answer.workflows : [];
      clearBanner();
      list.replaceChildren(...workflows.map((w) => {
        const steps = Array.isArray(w.steps) ? w.steps.length : Number(w.steps) || 0;
        return el('li', { 'data-workflow': String(w.name) },
          el('a', { href: workflowHref(w.name), text: String(w.name) }),
          el('span', { class: 'muted', text: ' · ' + steps + (steps === 1 ? ' step' : ' steps') }),
          w.source !== undefined && w.source !== null ? el('span', { class: 'muted workflow-source', text: ' · ' + displayValue(w.source) }) : null);
      }));
      if (workflows.length === 0) list.appendChild(el('li', { class: 'muted', text: 'No workflows are stored.' }));
    } catch (err) {
      reportLoadError(err);
    }
  }
  load();
  return {
    dispose() {
      abort.abort();
    },
    onToken: load,
  };
}

function renderWorkflowView(main, params) {
  const name = params.name;
  document.title = 'Workflow ' + name + ' · ProtoMolt Jobs';
  const abort = new AbortController();
  const details = el('div', { class: 'workflow-details' }, el('p', { class: 'loading', text: 'Loading…' }));
  const formBox = el('div', { class: 'submit-form-box' }, el('p', { class: 'loading', text: 'Loading…' }));
  const outcome = el('div', { class: 'submit-outcome outcome', 'aria-live': 'polite' });
  main.replaceChildren(
    el('p', { class: 'breadcrumb' }, el('a', { href: '#/workflows', text: 'Workflows' })),
    el('h1', null, 'Workflow ', el('span', { class: 'mono', text: name })),
    details,
    el('section', { 'aria-labelledby': 'submit-heading' }, el('h2', { id: 'submit-heading', text: 'Submit a job' }), formBox, outcome));

  async function loadWorkflow() {
    try {
      const answer = await loadVerb('get-workflow', { name }, abort.signal);
      clearBanner();
      details.replaceChildren(...workflowDetails(parseDefinition(answer.workflow), answer.source));
    } catch (err) {
      if (isAbort(err)) return;
      details.replaceChildren(el('p', { class: 'muted', text: 'The workflow did not load.' }));
      reportLoadError(err);
    }
  }

  async function loadForm() {
    const spec = await loadFormSpec({ workflowName: name }, formBox, abort.signal);
    if (!spec) return;
    let generated = null;
    generated = createGeneratedForm(spec, {
      formClass: 'submit-form',
      submitClass: 'submit-workflow',
      submitLabel: 'Submit job',
      validatesNote: 'The node checks these rules again when you submit, and refuses input that breaks them.',
      attrs: { 'data-workflow': name },
      async onSubmit(input) {
        outcome.removeAttribute('data-outcome');
        outcome.replaceChildren(el('p', { text: 'Submitting…' }));
        try {
          const answer = await callVerb('submit-workflow', { workflowName: name, input }, abort.signal);
          if (answer.ok && answer.jobId) {
            outcome.setAttribute('data-outcome', 'SUBMITTED');
            outcome.replaceChildren(el('p', null, 'Submitted job ',
              el('a', { class: 'submitted-job mono', href: jobHref(answer.jobId), text: String(answer.jobId) }),
              answer.status ? ' (status ' + String(answer.status) + ').' : '.'));
          } else {
            const unmatched = Array.isArray(answer.violations) ? generated.showViolations(answer.violations) : [];
            outcome.setAttribute('data-outcome', 'ERROR');
            setChildren(outcome, el('p', { text: String(answer.error || 'The node did not accept the job.') }), unmatched.length ? violationList(unmatched) : null);
          }
        } catch (err) {
          if (isAbort(err)) return;
          outcome.setAttribute('data-outcome', 'ERROR');
          outcome.replaceChildren(el('p', { text: errorText(err) }));
        }
      },
    });
    formBox.replaceChildren(generated.form);
  }

  loadWorkflow();
  loadForm();
  return {
    dispose() {
      abort.abort();
    },
    onToken() {
      loadWorkflow();
      if (!formBox.querySelector('form')) loadForm();
    },
  };
}

/** The workflow's input type, its steps as a flow of boxes, and its output. */
function workflowDetails(workflow, source) {
  const steps = Array.isArray(workflow.steps) ? workflow.steps : [];
  const facts = el('dl', { class: 'columns' },
    el('div', { class: 'column-row' }, el('dt', { text: 'Input type' }), el('dd', { class: 'mono workflow-input-type', text: displayValue(workflow.inputType) })),
    source !== undefined ? el('div', { class: 'column-row' }, el('dt', { text: 'Source' }), el('dd', { text: displayValue(source) })) : null,
    workflow.deadlineMs !== undefined ? el('div', { class: 'column-row' }, el('dt', { text: 'Deadline' }), el('dd', { text: displayValue(workflow.deadlineMs) + ' ms' })) : null,
    workflow.schema ? el('div', { class: 'column-row' }, el('dt', { text: 'Schema' }), el('dd', { text: withoutDescriptorBlob(workflow).schema.descriptorSetBase64 })) : null);
  const flow = el('ol', { class: 'flow' }, steps.map(flowStep));
  const nodes = [facts, el('h2', { text: 'Steps' }), flow];
  const output = workflow.output;
  nodes.push(el('h2', { text: 'Output' }));
  if (output && typeof output === 'object') {
    nodes.push(el('p', null, 'Type ', el('span', { class: 'mono workflow-output-type', text: displayValue(output.type) })));
    if (Array.isArray(output.rules) && output.rules.length > 0) nodes.push(ruleList(output.rules));
  } else nodes.push(el('p', { class: 'muted', text: 'The last step\'s response is the output.' }));
  return nodes;
}

function flowStep(step) {
  const known = new Set(['name', 'target', 'method', 'outputType', 'requestType', 'rules', 'when', 'completion', 'validate']);
  const box = el('li', { 'data-step': String(step.name), class: 'flow-step' },
    el('div', { class: 'flow-head' },
      el('strong', { class: 'step-name', text: String(step.name) }),
      step.completion === 'external' ? el('span', { class: 'marker external', text: 'human step' }) : null,
      step.validate ? el('span', { class: 'marker validates', text: 'validates' }) : null),
    step.target ? el('p', { class: 'step-target' }, 'target ', el('code', { text: String(step.target) })) : null,
    step.method ? el('p', { class: 'step-method' }, 'method ', el('code', { text: String(step.method) })) : null,
    step.requestType ? el('p', { class: 'step-request-type' }, 'shows ', el('code', { text: String(step.requestType) })) : null,
    step.outputType ? el('p', { class: 'step-output-type' }, 'answered with ', el('code', { text: String(step.outputType) })) : null,
    step.when ? el('p', { class: 'step-when' }, el('code', { text: 'when: ' + String(step.when) })) : null);
  if (Array.isArray(step.rules) && step.rules.length > 0) box.appendChild(ruleList(step.rules));
  const extra = Object.keys(step).filter((k) => !known.has(k));
  if (extra.length > 0) box.appendChild(el('p', { class: 'muted step-extra', text: extra.map((k) => k + ': ' + displayValue(step[k])).join(' · ') }));
  return box;
}

function ruleList(rules) {
  return el('ul', { class: 'rules' }, rules.map((rule) => el('li', null, el('code', { text: displayValue(rule) }))));
}

/* ======================================================================
 * 10. Router
 * ==================================================================== */

const ROUTES = [
  { name: 'fleet', pattern: /^\/fleet$/, render: renderFleetView, nav: '#/fleet' },
  { name: 'inbox', pattern: /^\/inbox$/, render: renderInboxView, nav: '#/inbox' },
  { name: 'workflows', pattern: /^\/workflows$/, render: renderWorkflowsView, nav: '#/workflows' },
  { name: 'workflow', pattern: /^\/workflows\/(.+)$/, render: renderWorkflowView, nav: '#/workflows', param: 'name' },
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

// For the node self-check only; harmless in the browser, where `module` does not exist.
if (typeof module !== 'undefined' && module.exports) {
  module.exports = {
    convertScalar,
    firstBrokenRule,
    firstBrokenCollectionRule,
    buildForm,
    newSlot,
    newSlots,
    isRfc3339,
    base64Length,
    createSseParser,
    humanizeAge,
    relativeTime,
    bulkOutcomeText,
    reviewOutcomeText,
    actionOutcomeText,
    withoutDescriptorBlob,
    groupWaiting,
    hintText,
  };
}
