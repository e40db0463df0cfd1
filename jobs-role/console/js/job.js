/*
 * The job page (#/jobs/<id>).
 *
 * The skeleton is drawn once; each get-job answer updates the parts in place (status,
 * columns, timeline, actions), so typed values, outcomes and focus survive the live
 * updates. The review section is created when the job is first seen WAITING.
 */

import {
  REFRESH_MS,
  byId,
  coalesced,
  compactJson,
  copyButton,
  displayValue,
  el,
  humanizeAge,
  humanizeKey,
  parseTime,
  prettyJson,
  setBadge,
  setChildren,
  timeAgo,
  timeBoth,
  workflowHref,
} from './dom.js';
import { callVerb, clearBanner, errorText, isAbort, reportLoadError, showBanner } from './api.js';
import { followJobEvents } from './sse.js';
import { createGeneratedForm, loadFormSpec, violationList } from './forms.js';
import { parseDefinition, withoutDescriptorBlob } from './definition.js';
import { drawGraph } from './graph.js';
import { updateMapItems } from './map-items.js';
import { drawJobTree } from './tree.js';

const BIG_JOB_KEYS = new Set(['workflowDefinition', 'input', 'checkpoints', 'result', 'events', 'steps', 'waits', 'children']);
const CANCELLABLE = new Set(['QUEUED', 'RUNNING', 'WAITING']);
const RETRYABLE = new Set(['DEAD', 'FAILED', 'CANCELLED']);

/** 12 ms, 1.20 s, 2 min 3 s. */
function humanizeMillis(ms) {
  if (ms < 1000) return Math.round(ms) + ' ms';
  if (ms < 60000) return (ms / 1000).toFixed(2) + ' s';
  return Math.floor(ms / 60000) + ' min ' + Math.round((ms % 60000) / 1000) + ' s';
}

export function renderJobView(main, params) {
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
  // Why a QUEUED job is not running (a key at its limit, a pause, a throttle, its start).
  const heldBox = el('ul', { id: 'held-by', class: 'held-by', hidden: true });
  const timeline = el('ol', { id: 'timeline', class: 'timeline' });
  const graphBox = el('div', { id: 'job-graph', class: 'graph-scroll' });
  const mapItemsBox = el('div', { id: 'map-items', class: 'map-items' });
  const treeBox = el('section', { id: 'job-tree', 'aria-labelledby': 'tree-heading', hidden: true });
  const inputPre = el('pre', { id: 'job-input', class: 'json' });
  const resultPre = el('pre', { id: 'job-result', class: 'json' });
  const columns = el('dl', { id: 'job-columns', class: 'columns' });
  const streamState = el('p', { class: 'stream-state muted', 'aria-live': 'polite', text: 'Connecting to live events…' });
  const eventsList = el('ol', { id: 'events', class: 'events' });
  const definitionPre = el('pre', { class: 'json' });

  main.replaceChildren(
    el('h1', { class: 'job-heading' }, el('span', { text: 'Job ' }), el('span', { class: 'mono job-id', text: jobId }), ' ', statusBadgeEl,
      ' ', copyButton(jobId, 'Copy the job id')),
    meta,
    heldBox,
    // The job's story first (and the review while it waits on a human), the acts
    // and every column after it.
    reviewSlot,
    el('section', { 'aria-labelledby': 'graph-heading' }, el('h2', { id: 'graph-heading', text: 'Steps' }), graphBox, mapItemsBox),
    treeBox,
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
    drawHeldBy(job);
    drawColumns(job);
    drawJobGraph(job);
    drawJobTree(treeBox, job);
    drawTimeline(job, steps);
    // A reviewer's view (jobs:review) holds only what the step's reviewerSees lists.
    const reviewerView = job.reviewer === true;
    inputPre.textContent = job.input !== undefined ? prettyJson(job.input) : (reviewerView ? 'Not shown to a reviewer of this step.' : '—');
    resultPre.textContent = job.result === null || job.result === undefined ? '—' : prettyJson(job.result);
    definitionPre.textContent = prettyJson(withoutDescriptorBlob(definition));
    updateRetryOptions(steps);
    updateActionButtons();
    updateReview(job);
    updateCountdown();
    if (reviewerView) {
      // The event stream is jobs:read's: its events carry responses and results.
      stream.stop();
      streamState.setAttribute('data-state', 'reviewer');
      streamState.textContent = 'Events are not shown to a reviewer: they hold the job\'s responses and result.';
      return;
    }
    // A retried job writes events after its terminal one (and may reach its next terminal
    // event before this read): ask again from the last event seen. A no-op while the
    // stream is live; a finished job with nothing newer answers 204 at once.
    stream.restart();
  }

  function drawHeldBy(job) {
    const held = Array.isArray(job.heldBy) ? job.heldBy : [];
    heldBox.hidden = held.length === 0;
    heldBox.replaceChildren(...held.map((h) => el('li', { 'data-reason': String(h.reason) },
      el('strong', { text: String(h.reason) }), ': ' + displayValue(h.detail))));
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

  /** The graph from get-job's step states; a map step's elements paged below it. */
  function drawJobGraph(job) {
    const views = Array.isArray(job.steps) ? job.steps : [];
    if (views.length === 0) {
      graphBox.replaceChildren(el('p', { class: 'muted', text: 'The node did not describe the steps.' }));
      return;
    }
    const steps = views.map((v) => ({
      name: String(v.name),
      after: Array.isArray(v.after) ? v.after.map(String) : [],
      state: String(v.state || ''),
      map: v.map && typeof v.map === 'object' ? v.map : null,
    }));
    graphBox.replaceChildren(drawGraph(steps, 'The steps of job ' + jobId + ' and what each waits for'));
    updateMapItems(mapItemsBox, jobId, steps, abort.signal);
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
          took: el('span', { class: 'step-took' }),
          fill: el('span', { class: 'step-bar-fill' }),
          pre: el('pre', { class: 'json' }),
          details: null,
        };
        parts.details = el('details', { hidden: true }, el('summary', { text: 'Response' }), parts.pre);
        const bar = el('span', { class: 'step-bar', 'aria-hidden': 'true' }, parts.fill);
        parts.li.append(el('span', { class: 'step-name', text: String(step.name) }), parts.state, parts.when, parts.took, bar, parts.details);
        return parts;
      });
      timeline.replaceChildren(...state.timelineItems.map((p) => p.li));
      if (steps.length === 0) timeline.appendChild(el('li', { class: 'muted', text: 'The definition lists no steps.' }));
    }
    const checkpoints = Array.isArray(job.checkpoints) ? job.checkpoints : [];
    // Each step's state as the node says it (pending, running, done, skipped, failed,
    // waiting), and a bar from its first call to its checkpoint, on one clock for the
    // whole job, so branches that overlapped and the slow step show at a glance.
    const views = new Map((Array.isArray(job.steps) ? job.steps : []).map((v) => [String(v.name), v]));
    const spans = [...views.values()]
      .filter((v) => typeof v.startedAt === 'string' && Number.isFinite(Number(v.tookMs)))
      .map((v) => ({ name: String(v.name), start: parseTime(v.startedAt), took: Number(v.tookMs) }));
    const first = Math.min(...spans.map((s) => s.start));
    const last = Math.max(...spans.map((s) => s.start + s.took));
    const window = Math.max(1, last - first);
    steps.forEach((step, i) => {
      const parts = state.timelineItems[i];
      const checkpoint = checkpoints[i] && checkpoints[i].name === step.name ? checkpoints[i] : checkpoints.find((c) => c && c.name === step.name);
      const view = views.get(String(step.name));
      let stepState = view && view.state ? String(view.state) : 'pending';
      if (!view && checkpoint) stepState = checkpoint.skipped ? 'skipped' : 'done';
      else if (!view && job.status === 'WAITING' && job.outstandingStep === step.name) stepState = 'waiting';
      // The step that ended the job says how and after how many tries, in one line
      // with its state (the error whole in the job's columns above).
      parts.state.textContent = stepState === 'failed'
        ? 'failed after ' + displayValue(job.attempt) + ' of ' + displayValue(job.maxAttempts) + ' attempts: ' + String(job.error || '').slice(0, 300)
        : stepState;
      parts.li.setAttribute('data-state', stepState);
      const span = spans.find((s) => s.name === String(step.name));
      parts.took.textContent = span ? 'took ' + humanizeMillis(span.took) : '';
      // CSSOM, not a style attribute: the page's policy allows no inline style.
      parts.fill.style.marginLeft = span ? ((span.start - first) / window * 100).toFixed(2) + '%' : '0';
      parts.fill.style.width = span ? Math.max(0.5, span.took / window * 100).toFixed(2) + '%' : '0';
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
    const wait = waitOf(job, step);
    if (wait.kind === 'sleep') {
      // A sleep beside other waits: nothing to answer, it ends by itself.
      review.heading.textContent = 'Step ' + step + ' sleeps';
      review.note.textContent = 'It ends by itself' + (job.sleepingUntil ? ' at ' + String(job.sleepingUntil) : '') + '.';
      review.body.replaceChildren();
      return;
    }
    if (wait.kind === 'event') {
      startEventEpisode(job, step, String(wait.key || ''));
      return;
    }

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

  /**
   * A step waiting for an event: the key it waits on, and a form generated from the
   * step's outputType that sends the event with send-event (which answers every job
   * waiting on the key, this one among them).
   */
  function startEventEpisode(job, step, key) {
    const review = state.review;
    review.heading.textContent = 'Send an event to step ' + step;
    review.note.textContent = '';
    const keyLine = el('p', { class: 'event-key' }, 'Waits on key ', el('code', { id: 'event-key', text: key }),
      el('span', { class: 'muted', text: ' · an event sent on this key answers every job waiting on it.' }));
    const formBox = el('div', { class: 'review-form-box' }, el('p', { class: 'loading', text: 'Loading…' }));
    review.body.replaceChildren(el('div', { class: 'review-layout' }, el('div', { class: 'review-main' }, keyLine, formBox), reviewContext(job, step)));
    loadEventForm(step, key, formBox);
  }

  async function loadEventForm(step, key, formBox) {
    const spec = await loadFormSpec({ jobId, stepName: step }, formBox, abort.signal);
    if (!spec) return;
    const generated = createGeneratedForm(spec, {
      formClass: 'review-form event-form',
      submitClass: 'send-event',
      submitLabel: 'Send event',
      validatesNote: 'The node checks these rules when the event arrives: a payload that breaks them is refused for this job, which keeps waiting.',
      attrs: { 'data-job-id': jobId, 'data-step': step, 'data-key': key },
      async onSubmit(payload) {
        try {
          const answer = await callVerb('send-event', { key, payload }, abort.signal);
          const [outcome, text] = sendEventOutcomeText(answer, jobId);
          setReviewOutcome(outcome, text);
        } catch (err) {
          if (isAbort(err)) return;
          setReviewOutcome('ERROR', errorText(err));
        }
        reload();
      },
    });
    formBox.replaceChildren(generated.form);
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

/** "CANCELLED (status CANCELLED)", with the node's error appended when there is one. */
export function actionOutcomeText(answer) {
  if (typeof answer.events === 'number' && answer.outcome === undefined) return 'Redrove ' + answer.events + ' events; they publish in order.';
  if (!answer.outcome) return String(answer.error || (answer.ok ? 'Done' : 'the node refused'));
  let text = String(answer.outcome) + (answer.status ? ' (status ' + String(answer.status) + ')' : '');
  if (answer.checkpointsKept !== undefined && answer.checkpointsKept !== null) text += '; checkpoints kept: ' + String(answer.checkpointsKept);
  if (answer.error) text += ': ' + String(answer.error);
  return text;
}

/** [data-outcome, sentence] for complete-step and reject-step answers. */
export function reviewOutcomeText(answer, verb) {
  const status = answer.status ? String(answer.status) : 'unknown';
  switch (answer.outcome) {
    case 'COMPLETED':
      // The node's own sentence (the CLI prints the same): whether the job resumes
      // or still waits on other steps, and its status.
      if (typeof answer.message === 'string' && answer.message !== '') {
        const sentence = answer.message.replace(/^answer accepted: /, '');
        return ['COMPLETED', 'Answer accepted: ' + sentence + (sentence.endsWith('.') ? '' : '.')];
      }
      return ['COMPLETED', 'Answer accepted; the job runs on (status ' + status + ').'];
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

/** The entry of `job.waits` for `step` (empty when there is none). */
function waitOf(job, step) {
  return (Array.isArray(job.waits) ? job.waits : []).find((w) => w && w.step === step) || {};
}

/** [data-outcome, sentence] for a send-event answer, as it concerns job `id`. */
export function sendEventOutcomeText(answer, id) {
  if (answer.duplicate) return ['ALREADY_DONE', 'This event was sent before: nothing was resumed.'];
  const resumed = (Array.isArray(answer.resumed) ? answer.resumed : []).filter((r) => r.jobId === id);
  const refused = (Array.isArray(answer.refused) ? answer.refused : []).filter((r) => r.jobId === id);
  const others = (Array.isArray(answer.resumed) ? answer.resumed.length : 0) - resumed.length;
  const also = others > 0 ? ' It answered ' + others + ' other job' + (others === 1 ? '' : 's') + ' waiting on the key.' : '';
  if (resumed.length > 0) return ['COMPLETED', 'Event ' + String(answer.eventId) + ' sent: the job takes it (' + String(resumed[0].status) + ').' + also];
  if (refused.length > 0) return ['INVALID', 'Event sent, but refused for this job: ' + String(refused[0].reason) + '. It keeps waiting.' + also];
  return ['WRONG_STATE', 'Event ' + String(answer.eventId) + ' sent; this job was no longer waiting on the key.' + also];
}

/**
 * "What the reviewer judges": the request, and the input and every earlier step's
 * response when the job shows them (a reviewer's view holds what the step's
 * reviewerSees lists, and says so).
 */
function reviewContext(job, step) {
  const aside = el('aside', { id: 'review-context', class: 'review-context', 'aria-labelledby': 'review-context-heading' },
    el('h3', { id: 'review-context-heading', text: 'What the reviewer judges' }));
  if (Array.isArray(job.reviewerSees)) {
    aside.append(el('p', { id: 'reviewer-sees', class: 'muted', text: 'Shown to a reviewer of this step: ' + job.reviewerSees.map(String).join(', ') + '.' }));
  }
  // What the step's rules built when the job parked: the request to approve.
  if (job.pendingRequest !== undefined && job.pendingRequest !== null) {
    aside.append(el('h4', { text: 'The request' }), el('pre', { id: 'pending-request', class: 'json', text: prettyJson(job.pendingRequest) }));
  }
  if (job.input !== undefined) aside.append(el('h4', { text: 'Input' }), el('pre', { class: 'json', text: prettyJson(job.input) }));
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
