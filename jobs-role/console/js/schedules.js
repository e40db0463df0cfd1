/*
 * The schedules pages: #/schedules (every schedule with its next runs, its last runs
 * by status, and Pause/Resume and Trigger buttons) and #/schedules/<name> (one in
 * full: its spec, next five runs and newest twenty jobs).
 */

import { displayValue, el, jobHref, statusBadge, timeBoth, workflowHref } from './dom.js';
import { callVerb, clearBanner, errorText, isAbort, loadVerb, reportLoadError } from './api.js';

/** The hash of a schedule's page. */
export function scheduleHref(name) {
  return '#/schedules/' + encodeURIComponent(String(name));
}

/** "30 2 * * * (America/New_York)". */
function cronText(schedule) {
  const zone = schedule.timezone ? String(schedule.timezone) : 'UTC';
  return displayValue(schedule.cron) + ' (' + zone + ')';
}

/** A list of instants (RFC 3339), each shown as a time. */
function timeList(cls, times) {
  const list = el('ul', { class: cls });
  for (const time of times) list.appendChild(el('li', null, timeBoth(String(time))));
  if (times.length === 0) list.appendChild(el('li', { class: 'muted', text: 'none' }));
  return list;
}

/** A job of a schedule: its status badge linking to its page, and its tick. */
function jobRun(job) {
  return el('li', { 'data-job': String(job.jobId), 'data-status': String(job.status) },
    el('a', { href: jobHref(job.jobId) }, statusBadge(String(job.status))),
    ' ', timeBoth(String(job.scheduledFor)));
}

/** Pause/Resume and Trigger for one schedule; `after` runs when one acted. */
function scheduleButtons(name, paused, signal, after) {
  const outcome = el('span', { class: 'outcome', role: 'status' });
  const pause = el('button', { type: 'button', class: 'pause-schedule', text: paused ? 'Resume' : 'Pause' });
  pause.addEventListener('click', async () => {
    pause.disabled = true;
    try {
      const verb = paused ? 'resume-schedule' : 'pause-schedule';
      const body = paused ? { name } : { name, reason: 'paused from the console' };
      const answer = await callVerb(verb, body, signal);
      if (answer.ok === false) throw new Error(String(answer.error || 'refused'));
      await after();
    } catch (err) {
      if (isAbort(err)) return;
      pause.disabled = false;
      outcome.textContent = ' ' + errorText(err);
    }
  });
  const trigger = el('button', { type: 'button', class: 'trigger-schedule', text: 'Trigger now' });
  trigger.addEventListener('click', async () => {
    trigger.disabled = true;
    try {
      const answer = await callVerb('trigger-schedule', { name }, signal);
      if (answer.ok === false) throw new Error(String(answer.error || 'refused'));
      outcome.replaceChildren(' Started ',
        el('a', { class: 'triggered-job mono', href: jobHref(answer.jobId), text: String(answer.jobId) }));
      trigger.disabled = false;
    } catch (err) {
      if (isAbort(err)) return;
      trigger.disabled = false;
      outcome.textContent = ' ' + errorText(err);
    }
  });
  return el('span', { class: 'schedule-buttons' }, pause, trigger, outcome);
}

export function renderSchedulesView(main) {
  document.title = 'Schedules · ProtoMolt Jobs';
  const abort = new AbortController();
  const list = el('ul', { id: 'schedule-list', class: 'schedule-list' }, el('li', { class: 'loading', text: 'Loading…' }));
  main.replaceChildren(el('h1', { text: 'Schedules' }), list);

  async function load() {
    try {
      const answer = await loadVerb('list-schedules', {}, abort.signal);
      const schedules = Array.isArray(answer.schedules) ? answer.schedules : [];
      clearBanner();
      list.replaceChildren(...schedules.map((s) => {
        const name = String(s.name);
        const paused = s.paused === true;
        const next = Array.isArray(s.nextFireTimes) ? s.nextFireTimes.slice(0, 3) : [];
        const jobs = Array.isArray(s.lastJobs) ? s.lastJobs : [];
        return el('li', { 'data-schedule': name, 'data-paused': String(paused) },
          el('p', null,
            el('a', { href: scheduleHref(name), class: 'mono', text: name }),
            el('span', { class: 'muted', text: ' · ' + cronText(s) + ' · ' }),
            el('a', { href: workflowHref(s.workflowName), text: displayValue(s.workflowName) }),
            paused ? el('span', { class: 'marker paused', text: 'paused' + (s.pausedReason ? ': ' + displayValue(s.pausedReason) : '') }) : null),
          s.lastError ? el('p', { class: 'schedule-error', text: displayValue(s.lastError) }) : null,
          el('div', { class: 'schedule-runs' },
            el('div', null, el('h2', { text: 'Next runs' }), timeList('next-runs', next)),
            el('div', null, el('h2', { text: 'Last runs' }),
              jobs.length ? el('ul', { class: 'last-runs' }, ...jobs.map(jobRun)) : el('p', { class: 'muted', text: 'none yet' }))),
          scheduleButtons(name, paused, abort.signal, load));
      }));
      if (schedules.length === 0) list.appendChild(el('li', { class: 'muted', text: 'No schedules. put-schedule (or protomolt schedules put) makes one.' }));
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

export function renderScheduleView(main, params) {
  const name = params.name;
  document.title = 'Schedule ' + name + ' · ProtoMolt Jobs';
  const abort = new AbortController();
  const details = el('div', { class: 'schedule-details' }, el('p', { class: 'loading', text: 'Loading…' }));
  main.replaceChildren(
    el('p', { class: 'breadcrumb' }, el('a', { href: '#/schedules', text: 'Schedules' })),
    el('h1', null, 'Schedule ', el('span', { class: 'mono', text: name })),
    details);

  async function load() {
    try {
      const answer = await loadVerb('get-schedule', { name }, abort.signal);
      clearBanner();
      if (answer.ok === false) {
        details.replaceChildren(el('p', { class: 'muted', text: displayValue(answer.error) }));
        return;
      }
      const s = answer.schedule || {};
      const facts = [
        ['Cron', cronText(s)],
        ['Workflow', displayValue(s.workflowName)],
        ['Overlap', displayValue(s.overlap)],
        ['Catch-up', displayValue(s.catchup)],
        ['Input', JSON.stringify(s.input)],
      ];
      if (s.paused === true) facts.push(['Paused', displayValue(s.pausedReason || 'yes')]);
      if (s.lastError) facts.push(['Last error', displayValue(s.lastError)]);
      const jobs = Array.isArray(s.jobs) ? s.jobs : [];
      details.replaceChildren(
        el('dl', { class: 'schedule-facts' }, ...facts.flatMap(([k, v]) => [el('dt', { text: k }), el('dd', { text: v })])),
        scheduleButtons(name, s.paused === true, abort.signal, load),
        el('h2', { text: 'Next runs' }),
        timeList('next-runs', Array.isArray(s.nextFireTimes) ? s.nextFireTimes : []),
        el('h2', { text: 'Last runs' }),
        jobs.length ? el('ul', { class: 'last-runs' }, ...jobs.map(jobRun)) : el('p', { class: 'muted', text: 'none yet' }));
    } catch (err) {
      if (isAbort(err)) return;
      details.replaceChildren(el('p', { class: 'muted', text: 'The schedule did not load.' }));
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
