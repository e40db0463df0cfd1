/*
 * The fleet page (#/fleet): the counts, the charts of the last hour with the busiest
 * keys, limits and pauses (charts.js), the jobs table with its filters and keyset
 * paging, bulk cancel and retry.
 */

import {
  REFRESH_MS,
  UUID_RE,
  byId,
  coalesced,
  displayValue,
  el,
  fleetHash,
  humanizeAge,
  jobHref,
  shortId,
  statusBadge,
  timeAgo,
} from './dom.js';
import { callVerb, clearBanner, errorText, isAbort, loadVerb, reportLoadError } from './api.js';
import { drawFlow } from './charts.js';

const STATUSES = ['QUEUED', 'RUNNING', 'WAITING', 'COMPLETED', 'FAILED', 'DEAD', 'CANCELLED'];
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
    meta: query.get('meta') || '',
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

/**
 * The metadata filter's text ('customer=acme, region=eu') -> list-jobs' `metadata`
 * object; null when a pair has no '=' or no key; {} when empty.
 */
export function metadataFromText(text) {
  // No prototype: a key such as `__proto__` (a valid metadata key) stays a key.
  const out = Object.create(null);
  for (const pair of text.split(',')) {
    if (pair.trim() === '') continue;
    const at = pair.indexOf('=');
    if (at <= 0 || pair.slice(0, at).trim() === '') return null;
    out[pair.slice(0, at).trim()] = pair.slice(at + 1).trim();
  }
  return out;
}

/** A job's metadata as 'key=value, ...' ('—' for none). */
function metadataText(metadata) {
  const pairs = metadata && typeof metadata === 'object' ? Object.entries(metadata) : [];
  return pairs.length ? pairs.map(([k, v]) => k + '=' + String(v)).join(', ') : '—';
}

/** datetime-local text (the browser's local time) -> RFC 3339 UTC, or '' when unset or invalid. */
function localToUtc(text) {
  if (!text) return '';
  const date = new Date(text);
  return Number.isNaN(date.getTime()) ? '' : date.toISOString();
}

export function renderFleetView(main, params, query) {
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
  const flowBox = el('section', { id: 'fleet-flow', class: 'fleet-flow' });
  const readAt = el('p', { class: 'muted read-at' });
  // Which server answered: after a failover, the promoted standby's address.
  const databasePrimary = el('p', { id: 'database-primary', class: 'muted' });

  // Filters.
  const statusSelect = el('select', { id: 'filter-status' }, el('option', { value: '', text: 'All' }), STATUSES.map((s) => el('option', { value: s, text: s })));
  const workflowInput = el('input', { id: 'filter-workflow', type: 'text', autocomplete: 'off' });
  const afterInput = el('input', { id: 'filter-created-after', type: 'datetime-local', step: '1' });
  const beforeInput = el('input', { id: 'filter-created-before', type: 'datetime-local', step: '1' });
  const jobIdInput = el('input', { id: 'filter-job-id', type: 'text', autocomplete: 'off', spellcheck: 'false', class: 'mono' });
  const metaInput = el('input', { id: 'filter-metadata', type: 'text', autocomplete: 'off', spellcheck: 'false', placeholder: 'customer=acme, region=eu' });
  const filterMessage = el('p', { id: 'filter-message', class: 'field-error', 'aria-live': 'polite' });
  const labelled = (text, control) => el('div', { class: 'filter' }, el('label', { for: control.id, text }), control);
  const filterForm = el('form', { id: 'job-filters', class: 'filters', novalidate: true },
    labelled('Status', statusSelect), labelled('Workflow', workflowInput), labelled('Created after', afterInput),
    labelled('Created before', beforeInput), labelled('Job id or prefix', jobIdInput), labelled('Metadata', metaInput),
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
  const emptyRow = el('tr', { class: 'empty-row' }, el('td', { colspan: '10', text: 'Loading…' }));
  tbody.appendChild(emptyRow);
  const head = ['Job', 'Workflow', 'Status', 'Attempt', 'Priority', 'Outstanding step', 'Metadata', 'Created', 'Updated'];
  const table = el('table', { id: 'jobs-table' },
    el('caption', { class: 'visually-hidden', text: 'Jobs, newest first' }),
    el('thead', null, el('tr', null, el('th', { scope: 'col', class: 'select-col' }, selectAll), head.map((h) => el('th', { scope: 'col', text: h })))),
    tbody);
  const pagePrev = el('button', { type: 'button', id: 'page-prev', text: 'Previous page', disabled: true });
  const pageNext = el('button', { type: 'button', id: 'page-next', text: 'Next page', disabled: true });
  const pageInfo = el('span', { id: 'page-info', 'aria-live': 'polite' });

  main.replaceChildren(
    el('h1', { text: 'Fleet' }), counts, waitingBox, readAt, databasePrimary, flowBox,
    el('h2', { text: 'Jobs' }), filterForm, bulk,
    el('div', { class: 'table-wrap' }, table),
    el('div', { class: 'paging' }, pagePrev, pageInfo, pageNext));

  function syncFilterInputs() {
    statusSelect.value = filters.status;
    workflowInput.value = filters.workflow;
    afterInput.value = filters.createdAfter;
    beforeInput.value = filters.createdBefore;
    jobIdInput.value = filters.jobId;
    metaInput.value = filters.meta;
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
      drawFlow(flowBox, fleet);
      readAt.textContent = fleet.readAt ? 'Counts read at ' + fleet.readAt : '';
      if (fleet.outbox && typeof fleet.outbox.oldestPendingSeconds === 'number' && fleet.outbox.pending > 0) {
        readAt.textContent += ' · oldest pending outbox event ' + humanizeAge(fleet.outbox.oldestPendingSeconds);
      }
      const primary = fleet.database && fleet.database.primary;
      databasePrimary.textContent = primary ? 'Database primary: ' + primary : '';
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
    const metadata = metadataFromText(filters.meta);
    if (metadata && Object.keys(metadata).length) body.metadata = metadata;
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
    if (metadataFromText(filters.meta) === null) {
      filterMessage.textContent = 'Metadata: write key=value pairs separated by commas (customer=acme, region=eu).';
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
      metadata: el('td', { 'data-col': 'metadata', class: 'metadata' }),
      created: el('td'),
      updated: el('td'),
    };
    parts.tr.append(
      el('td', { class: 'select-col' }, checkbox),
      el('td', null, el('a', { href: jobHref(id), class: 'mono job-link', title: id, text: shortId(id) })),
      parts.workflow, parts.status, parts.attempt, parts.priority, parts.step, parts.metadata, parts.created, parts.updated);
    return parts;
  }

  function updateRow(parts, job) {
    parts.workflow.textContent = displayValue(job.workflowName);
    // The cell's text is exactly the status; a pending cancel shows as the badge's title.
    parts.status.replaceChildren(statusBadge(job.status, { title: job.cancelRequested && job.status === 'RUNNING' ? 'cancel requested' : null }));
    parts.attempt.textContent = displayValue(job.attempt) + '/' + displayValue(job.maxAttempts);
    parts.priority.textContent = displayValue(job.priority);
    parts.step.textContent = job.outstandingStep ? String(job.outstandingStep) : '—';
    parts.metadata.textContent = metadataText(job.metadata);
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
      meta: metaInput.value.trim(),
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
export function bulkOutcomeText(kind, answer) {
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
