/*
 * A job's place in its tree of child workflows: the parent and the root it was
 * started by (links), and the children its child steps started (the first 100
 * get-job lists, each a link with its status, step and element; list-jobs pages the
 * rest with parentJobId).
 */

import { el, jobHref, setChildren, shortId, statusBadge } from './dom.js';

/** Draws `job`'s tree into `box`; the box is hidden for a job with neither. */
export function drawJobTree(box, job) {
  const parent = job.parentJobId;
  const children = Array.isArray(job.children) ? job.children : [];
  box.hidden = !parent && children.length === 0;
  if (box.hidden) return;
  const parts = [el('h2', { id: 'tree-heading', text: 'Child workflows' })];
  if (parent) {
    parts.push(el('p', { id: 'job-parent' }, 'Started by step ', el('code', { text: String(job.parentStep || '') }),
      ' (element ' + String(job.parentItem ?? 0) + ') of ',
      el('a', { href: jobHref(parent), class: 'mono', title: String(parent), text: shortId(String(parent)) }),
      job.rootJobId && job.rootJobId !== parent
        ? el('span', null, ' · root ', el('a', { href: jobHref(job.rootJobId), class: 'mono', title: String(job.rootJobId), text: shortId(String(job.rootJobId)) }))
        : null));
  }
  if (children.length > 0) {
    const total = Number(job.childCount) || children.length;
    parts.push(el('p', { class: 'muted', text: total + (total === 1 ? ' child' : ' children') +
      (total > children.length ? ' (the first ' + children.length + ' shown)' : '') }));
    parts.push(el('ul', { id: 'job-children', class: 'job-children' }, ...children.map((child) =>
      el('li', { 'data-child': String(child.jobId), 'data-status': String(child.status) },
        el('a', { href: jobHref(child.jobId), class: 'mono', title: String(child.jobId), text: shortId(String(child.jobId)) }), ' ',
        statusBadge(child.status), ' ',
        el('span', { class: 'muted', text: String(child.workflowName) + ' · step ' + String(child.step) + ' #' + String(child.item) })))));
  }
  setChildren(box, ...parts);
}
