/*
 * The node's API: POST /v1/actions/{verb}, the bearer token in sessionStorage, the token
 * prompt on 401, the one text shown for an error, and the error banner.
 */

import { byId, parseLossless } from './dom.js';

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
export function errorText(err) {
  if (err instanceof NodeError) return err.code ? err.code + ': ' + err.message : err.message;
  return 'internal: the page failed unexpectedly';
}

export function isAbort(err) {
  return !!err && err.name === 'AbortError';
}

export function networkError() {
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

export function storeToken(token) {
  try {
    sessionStorage.setItem(TOKEN_KEY, token);
  } catch (_) {
    /* storage disabled: the token lives only until the next read fails */
  }
  updateSignOut();
}

export function clearToken() {
  try {
    sessionStorage.removeItem(TOKEN_KEY);
  } catch (_) {
    /* nothing stored */
  }
  updateSignOut();
}

export function authHeaders(extra) {
  const headers = Object.assign({}, extra);
  const token = readToken();
  if (token) headers.Authorization = 'Bearer ' + token;
  return headers;
}

/** The body as JSON, or null when it is empty or not JSON (a proxy's HTML page, say). */
export async function readJson(response) {
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

export function errorFromResponse(status, payload) {
  const code = payload && typeof payload.code === 'string' ? payload.code : HTTP_CODES[status] || (status >= 500 ? 'unavailable' : 'http_' + status);
  const message = payload && typeof payload.message === 'string' ? payload.message : 'HTTP ' + status;
  return new NodeError(code, message, status);
}

/**
 * Calls one verb. Resolves with the JSON answer (which may still say ok:false);
 * rejects with a NodeError for HTTP errors and network failures, or an AbortError
 * when the view went away. A 401 also opens the token prompt.
 */
export async function callVerb(verb, body, signal) {
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
export async function loadVerb(verb, body, signal) {
  const payload = await callVerb(verb, body, signal);
  if (payload.ok === false) throw new NodeError('', String(payload.error || verb + ' failed'));
  return payload;
}

export function showBanner(text) {
  const banner = byId('error-banner');
  if (!banner) return;
  banner.textContent = text;
  banner.hidden = false;
}

export function clearBanner() {
  const banner = byId('error-banner');
  if (!banner) return;
  banner.textContent = '';
  banner.hidden = true;
}

/** Errors of page loads go to the banner; aborted loads (the user left) are silent. */
export function reportLoadError(err) {
  if (isAbort(err)) return;
  showBanner(errorText(err));
}

/** Shows the token form with the node's reason; focuses it only when it first opens, so refreshes do not steal focus. */
export function askForToken(reason) {
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

export function updateSignOut() {
  const button = typeof document !== 'undefined' ? byId('sign-out') : null;
  if (button) button.hidden = readToken() === '';
}
