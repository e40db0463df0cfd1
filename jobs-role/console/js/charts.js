/*
 * The fleet page's charts over the last hour (SVG, drawn from get-fleet's `history`:
 * one entry a minute, oldest first), and its tables of the busiest concurrency keys,
 * the fleet-wide limits and the paused workflows. No chart library: a bar or line per
 * series, scaled to its own maximum, with its latest value written beside it.
 *
 * Every name drawn is user data: text goes in with textContent, attributes with
 * setAttribute, never markup.
 */

import { displayValue, el } from './dom.js';

const SVG_NS = 'http://www.w3.org/2000/svg';
const WIDTH = 360;
const HEIGHT = 90;

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
  for (const child of children) if (child) node.appendChild(child);
  return node;
}

/** A number, or null for a minute with no reading. */
function valueOf(entry, field) {
  const value = entry ? entry[field] : null;
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

/**
 * One chart: `series` ({field, label, kind: 'bar' | 'line', css}) over `history`, each
 * scaled to the largest value of all of them. Answers a figure with the SVG and a
 * legend giving each series' latest value.
 */
export function chart(id, title, history, series, unit) {
  const count = Math.max(history.length, 1);
  const step = WIDTH / count;
  let max = 0;
  for (const s of series) for (const entry of history) max = Math.max(max, valueOf(entry, s.field) || 0);
  const scale = max > 0 ? (HEIGHT - 4) / max : 0;
  const shapes = [];
  series.forEach((s, index) => {
    if (s.kind === 'bar') {
      const width = Math.max(1, step / series.filter((x) => x.kind === 'bar').length - 1);
      history.forEach((entry, i) => {
        const value = valueOf(entry, s.field);
        if (!value) return;
        const height = value * scale;
        shapes.push(svg('rect', { class: 'bar ' + s.css, x: (i * step + index * width).toFixed(1), y: (HEIGHT - height).toFixed(1), width: width.toFixed(1), height: height.toFixed(1) },
          svg('title', null, document.createTextNode(s.label + ' ' + value + ' at ' + String(entry.at)))));
      });
    } else {
      const points = [];
      history.forEach((entry, i) => {
        const value = valueOf(entry, s.field);
        if (value !== null) points.push((i * step + step / 2).toFixed(1) + ',' + (HEIGHT - value * scale).toFixed(1));
      });
      if (points.length > 0) shapes.push(svg('polyline', { class: 'line ' + s.css, points: points.join(' '), fill: 'none' }));
    }
  });
  const picture = svg('svg', { viewBox: '0 0 ' + WIDTH + ' ' + HEIGHT, width: WIDTH, height: HEIGHT, role: 'img', 'aria-label': title + ' over the last hour' },
    svg('line', { class: 'axis', x1: 0, y1: HEIGHT - 0.5, x2: WIDTH, y2: HEIGHT - 0.5 }), ...shapes);
  const latest = (s) => {
    for (let i = history.length - 1; i >= 0; i -= 1) {
      const value = valueOf(history[i], s.field);
      if (value !== null) return value;
    }
    return null;
  };
  const legend = el('ul', { class: 'chart-legend' }, series.map((s) => el('li', { class: s.css, 'data-series': s.field },
    s.label + ': ', el('strong', { text: latest(s) === null ? '—' : String(latest(s)) + (unit || '') }))));
  return el('figure', { id, class: 'chart', 'data-points': String(history.length) },
    el('figcaption', { text: title + ' (max ' + String(max) + (unit || '') + ')' }), picture, legend);
}

/** A small table: `head` and `rows` (arrays of cell values). */
function table(id, caption, head, rows, empty) {
  if (rows.length === 0) return el('p', { id, class: 'muted', text: empty });
  return el('table', { id, class: 'flow-table' },
    el('caption', { text: caption }),
    el('thead', null, el('tr', null, head.map((h) => el('th', { scope: 'col', text: h })))),
    el('tbody', null, rows.map((row) => el('tr', null, row.map((cell) => el('td', { text: displayValue(cell) }))))));
}

/** The charts and the flow tables of one get-fleet answer. */
export function drawFlow(box, fleet) {
  const history = Array.isArray(fleet.history) ? fleet.history : [];
  const keys = Array.isArray(fleet.keys) ? fleet.keys : [];
  const limits = Array.isArray(fleet.limits) ? fleet.limits : [];
  const paused = Array.isArray(fleet.pausedWorkflows) ? fleet.pausedWorkflows : [];
  box.replaceChildren(
    el('h2', { text: 'The last hour' }),
    el('div', { class: 'charts' },
      chart('chart-finished', 'Finished per minute', history, [
        { field: 'completed', label: 'Completed', kind: 'bar', css: 'completed' },
        { field: 'failed', label: 'Failed or dead', kind: 'bar', css: 'failed' }]),
      chart('chart-queue', 'Queue depth', history, [
        { field: 'queued', label: 'Queued', kind: 'line', css: 'queued' },
        { field: 'running', label: 'Running', kind: 'line', css: 'running' }]),
      chart('chart-latency', 'p95 step latency (this node)', history, [
        { field: 'p95StepMs', label: 'p95', kind: 'line', css: 'latency' }], ' ms')),
    el('h2', { text: 'Keys, limits and pauses' }),
    table('busiest-keys', 'The busiest concurrency keys', ['Key', 'Running', 'Limit', 'Queued work', 'Paused'],
      keys.map((k) => [k.key, k.running, k.limit, k.queued ? 'yes' : 'no', k.paused ? 'paused' : '']), 'No concurrency key holds jobs.'),
    table('fleet-limits', 'Fleet-wide limits', ['Limit', 'Tokens', 'Burst', 'In flight', 'Cap'],
      limits.map((l) => [l.name, typeof l.tokens === 'number' ? l.tokens.toFixed(1) : '—', l.burst, l.inFlight, l.maxConcurrent]), 'No fleet-wide limit has been used.'),
    table('paused-workflows', 'Paused workflows', ['Workflow', 'Since', 'Reason'],
      paused.map((p) => [p.workflowName, p.pausedAt, p.reason]), 'No workflow is paused.'));
}
