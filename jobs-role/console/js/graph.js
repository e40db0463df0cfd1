/*
 * A workflow drawn as a graph (SVG): each step a box in the column of its depth (the
 * longest chain of steps it waits for), an arrow from every step it waits for. On the
 * job page the boxes are coloured by the step's state (from get-job's `steps`) and a
 * map step shows its progress; on the workflow page they show what each step is.
 *
 * Every name drawn is user data: text goes in with textContent, attributes with
 * setAttribute, never markup.
 */

const SVG_NS = 'http://www.w3.org/2000/svg';
const BOX_WIDTH = 168;
const BOX_HEIGHT = 58;
const COLUMN_GAP = 56;
const ROW_GAP = 18;
const MARGIN = 8;
let graphCount = 0;

/** The steps of a definition as the graph needs them: `after` as written, or the step before. */
export function stepsOfDefinition(definition) {
  const steps = Array.isArray(definition && definition.steps) ? definition.steps : [];
  return steps.map((step, i) => ({
    name: String(step.name),
    after: Array.isArray(step.after) ? step.after.map(String) : (i > 0 ? [String(steps[i - 1].name)] : []),
    kind: step.completion === 'external' ? 'human step' : (step.forEach !== undefined ? 'map over ' + String(step.forEach) : ''),
  }));
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null) continue;
    if (name === 'text') node.textContent = String(value);
    else node.setAttribute(name, String(value));
  }
  for (const child of children) if (child) node.appendChild(child);
  return node;
}

/**
 * Where each step goes: its column (depth) and its row in that column. Steps caught in
 * a cycle (a definition that does not compile) are put after the others.
 */
function layout(steps) {
  const byName = new Map(steps.map((s, i) => [s.name, i]));
  const depth = new Array(steps.length).fill(-1);
  const visiting = new Set();
  function depthOf(i) {
    if (depth[i] >= 0) return depth[i];
    if (visiting.has(i)) return 0;
    visiting.add(i);
    let d = 0;
    for (const dep of steps[i].after) {
      const j = byName.get(dep);
      if (j !== undefined) d = Math.max(d, depthOf(j) + 1);
    }
    visiting.delete(i);
    depth[i] = d;
    return d;
  }
  steps.forEach((_, i) => depthOf(i));
  const rows = [];
  const place = steps.map((_, i) => {
    const column = depth[i];
    rows[column] = (rows[column] || 0) + 1;
    return { column, row: rows[column] - 1 };
  });
  return { place, columns: rows.length, rowsMax: Math.max(1, ...rows.map((n) => n || 0)) };
}

function boxOrigin(spot) {
  return {
    x: MARGIN + spot.column * (BOX_WIDTH + COLUMN_GAP),
    y: MARGIN + spot.row * (BOX_HEIGHT + ROW_GAP),
  };
}

/** Shortens a name to what fits a box (the whole name is the box's title). */
function fit(text, max) {
  return text.length > max ? text.slice(0, max - 1) + '…' : text;
}

/**
 * The graph of `steps` ([{name, after, state?, kind?, map?: {done, failed, total}}]) as
 * an <svg class="step-graph">: a <g class="graph-step state-…" data-step=…> per step
 * and a <path class="graph-edge" data-from data-to> per dependency.
 */
export function drawGraph(steps, label) {
  const { place, columns, rowsMax } = layout(steps);
  const width = MARGIN * 2 + columns * BOX_WIDTH + Math.max(0, columns - 1) * COLUMN_GAP;
  const height = MARGIN * 2 + rowsMax * BOX_HEIGHT + Math.max(0, rowsMax - 1) * ROW_GAP;
  const root = svg('svg', {
    class: 'step-graph', viewBox: '0 0 ' + width + ' ' + height, width, height,
    role: 'img', 'aria-label': label,
  });
  // An id of its own per graph: a page may hold more than one.
  graphCount += 1;
  const arrowId = 'graph-arrow-' + graphCount;
  root.appendChild(svg('defs', null,
    svg('marker', { id: arrowId, viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
      svg('path', { d: 'M 0 0 L 10 5 L 0 10 z', class: 'graph-arrowhead' }))));
  const byName = new Map(steps.map((s, i) => [s.name, i]));
  steps.forEach((step, i) => {
    for (const dep of step.after) {
      const j = byName.get(dep);
      if (j === undefined) continue;
      const from = boxOrigin(place[j]);
      const to = boxOrigin(place[i]);
      const x1 = from.x + BOX_WIDTH;
      const y1 = from.y + BOX_HEIGHT / 2;
      const x2 = to.x;
      const y2 = to.y + BOX_HEIGHT / 2;
      const bend = Math.max(16, (x2 - x1) / 2);
      root.appendChild(svg('path', {
        class: 'graph-edge', 'data-from': dep, 'data-to': step.name,
        d: 'M ' + x1 + ' ' + y1 + ' C ' + (x1 + bend) + ' ' + y1 + ', ' + (x2 - bend) + ' ' + y2 + ', ' + x2 + ' ' + y2,
        'marker-end': 'url(#' + arrowId + ')',
      }));
    }
  });
  steps.forEach((step, i) => {
    const { x, y } = boxOrigin(place[i]);
    const state = step.state ? String(step.state) : 'plain';
    const group = svg('g', { class: 'graph-step state-' + state, 'data-step': step.name, transform: 'translate(' + x + ' ' + y + ')' },
      svg('title', { text: step.name + (step.state ? ' · ' + step.state : '') }),
      svg('rect', { class: 'graph-box', width: BOX_WIDTH, height: BOX_HEIGHT, rx: 6 }),
      svg('text', { class: 'graph-name', x: 10, y: 20, text: fit(step.name, 22) }),
      svg('text', { class: 'graph-state', x: 10, y: 37, text: fit(step.state || step.kind || '', 26) }));
    if (step.map && typeof step.map === 'object') {
      const known = step.map.total !== null && step.map.total !== undefined;
      const total = known ? Number(step.map.total) : NaN;
      const done = Number(step.map.done) + Number(step.map.failed || 0);
      const share = Number.isFinite(total) && total > 0 ? Math.min(1, done / total) : 0;
      const barWidth = BOX_WIDTH - 20;
      group.appendChild(svg('rect', { class: 'graph-progress-track', x: 10, y: 44, width: barWidth, height: 6, rx: 3 }));
      group.appendChild(svg('rect', { class: 'graph-progress', x: 10, y: 44, width: Math.round(barWidth * share), height: 6, rx: 3 }));
      group.appendChild(svg('text', {
        class: 'graph-count', x: BOX_WIDTH - 10, y: 37, 'text-anchor': 'end',
        text: (Number.isFinite(done) ? done : 0) + '/' + (Number.isFinite(total) ? total : '?'),
      }));
    }
    root.appendChild(group);
  });
  return root;
}
