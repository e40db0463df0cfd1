/*
 * The review inbox (#/inbox): WAITING jobs grouped by workflow and step, each a link to
 * its review.
 */

import {
  REFRESH_MS,
  compactJson,
  el,
  fleetHash,
  jobHref,
  relativeTime,
  timeAgo,
  truncate,
} from './dom.js';
import { callVerb, clearBanner, isAbort, loadVerb, reportLoadError } from './api.js';

/** Jobs the inbox lists (the oldest first), and of those the ones whose input it previews. */
const INBOX_LISTED = 500;
const INBOX_PREVIEWS = 50;

export function renderInboxView(main) {
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
  let fleetDenied = false; // get-fleet answered 403 (a reviewer's token): not asked again
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
        // A reviewer's view may hold the request and not the input: preview what it holds.
        .then((answer) => (answer.ok && answer.job ? previewText(answer.job.input !== undefined ? answer.job.input : answer.job.pendingRequest) : UNAVAILABLE))
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
      // A reviewer's token (jobs:review) cannot read the fleet: asked once, not again.
      if (fleetDenied) throw new Error('the fleet needs jobs:read');
      const fleet = await callVerb('get-fleet', {}, abort.signal);
      for (const g of Array.isArray(fleet.waitingBySteps) ? fleet.waitingBySteps : []) {
        counts.set(groupKey(g.workflowName, g.stepName), Number(g.count) || 0);
      }
    } catch (err) {
      if (isAbort(err)) return;
      if (err && err.code === 'permission_denied') fleetDenied = true;
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

function groupKey(workflow, step) {
  return JSON.stringify([String(workflow ?? ''), String(step ?? '')]);
}

/** Groups jobs (already oldest first) by workflow, then step, in order of each group's oldest job. */
export function groupWaiting(jobs) {
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
