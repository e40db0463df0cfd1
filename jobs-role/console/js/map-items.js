/*
 * The elements of a job's map steps, paged (get-job-items): one <details> per map
 * step under the graph, its summary the step's progress; opened, it lists a page of
 * elements (each element's response, or its error when collected) with a button for
 * the next page. Live updates refresh the summaries and leave an opened list as it is.
 */

import { compactJson, el } from './dom.js';
import { callVerb, errorText, isAbort } from './api.js';

const PAGE = 50;

/** Draws (or refreshes) one <details data-step> per map step of `steps` in `box`. */
export function updateMapItems(box, jobId, steps, signal) {
  const maps = steps.filter((s) => s.map);
  const wanted = new Set(maps.map((s) => s.name));
  for (const old of [...box.children]) {
    if (!wanted.has(old.getAttribute('data-step'))) old.remove();
  }
  for (const step of maps) {
    let details = [...box.children].find((d) => d.getAttribute('data-step') === step.name);
    if (!details) {
      details = newList(jobId, step.name, signal);
      box.appendChild(details);
    }
    const { done, failed, total, inFlight } = step.map;
    details.querySelector('summary').textContent = 'Elements of ' + step.name + ': ' + Number(done || 0) + ' done'
      + (Number(failed) > 0 ? ', ' + Number(failed) + ' failed' : '')
      + (Number(inFlight) > 0 ? ', about ' + Number(inFlight) + ' in flight' : '')
      + ' of ' + (total === null || total === undefined ? 'a list not read yet' : Number(total));
  }
}

function newList(jobId, stepName, signal) {
  const list = el('ol', { class: 'map-item-list' });
  const moreButton = el('button', { type: 'button', class: 'secondary map-items-more', text: 'Next elements', hidden: true });
  const note = el('p', { class: 'muted map-items-note', 'aria-live': 'polite' });
  const details = el('details', { class: 'map-step-items', 'data-step': stepName }, el('summary'), list, moreButton, note);
  let next = 0;
  let loading = false;
  async function load() {
    if (loading) return;
    loading = true;
    note.textContent = 'Loading…';
    try {
      const answer = await callVerb('get-job-items', { jobId, stepName, offset: next, limit: PAGE }, signal);
      for (const item of Array.isArray(answer.items) ? answer.items : []) {
        const failed = item.error !== undefined && item.error !== null;
        list.appendChild(el('li', { class: failed ? 'map-item failed' : 'map-item', 'data-index': String(item.index) },
          el('span', { class: 'map-item-index mono', text: '#' + String(item.index) }),
          el('code', { class: failed ? 'error-text' : 'map-item-response', text: failed ? String(item.error) : compactJson(item.response) })));
      }
      // On the last page, the next read starts after the last element listed: the
      // elements that end later are read from there ("Newer elements").
      const items = Array.isArray(answer.items) ? answer.items : [];
      const last = items.length > 0 ? Number(items[items.length - 1].index) : next - 1;
      const more = Number.isInteger(answer.nextOffset) && answer.nextOffset >= 0;
      next = more ? answer.nextOffset : last + 1;
      moreButton.textContent = more ? 'Next elements' : 'Newer elements';
      moreButton.hidden = false;
      note.textContent = list.children.length === 0 ? 'No element has ended yet.' : '';
    } catch (err) {
      if (!isAbort(err)) note.textContent = errorText(err);
    }
    loading = false;
  }
  details.addEventListener('toggle', () => {
    if (details.open && list.children.length === 0) load();
  });
  moreButton.addEventListener('click', load);
  return details;
}
