/*
 * A job's events: GET /v1/jobs/{id}/events read with fetch() (EventSource cannot send an
 * Authorization header), reconnecting with Last-Event-ID, and the text/event-stream
 * parser it reads them with.
 */

import { parseLossless } from './dom.js';
import {
  askForToken,
  authHeaders,
  errorFromResponse,
  errorText,
  networkError,
  readJson,
} from './api.js';

const TERMINAL_EVENT_TYPES = new Set(['TYPE_COMPLETED', 'TYPE_FAILED', 'TYPE_DEAD', 'TYPE_CANCELLED']);

/**
 * A text/event-stream parser: push() decoded text in any chunking, onMessage gets
 * {id, event, data} for each event (a blank line ends one). Lines starting ":" are
 * comments. The last id persists across events, as in the EventSource spec.
 */
export function createSseParser(onMessage) {
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
export function followJobEvents(jobId, handlers) {
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
