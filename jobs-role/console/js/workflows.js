/*
 * The workflows pages: #/workflows (the stored workflows, each with a Pause or Resume
 * button) and #/workflows/<name> (its steps drawn as a flow, and a submit form).
 */

import { displayValue, el, jobHref, setChildren, workflowHref } from './dom.js';
import { drawGraph, stepsOfDefinition } from './graph.js';
import { callVerb, clearBanner, errorText, isAbort, loadVerb, reportLoadError } from './api.js';
import { createGeneratedForm, loadFormSpec, violationList } from './forms.js';
import { parseDefinition, withoutDescriptorBlob } from './definition.js';

export function renderWorkflowsView(main) {
  document.title = 'Workflows · ProtoMolt Jobs';
  const abort = new AbortController();
  const list = el('ul', { id: 'workflow-list', class: 'workflow-list' }, el('li', { class: 'loading', text: 'Loading…' }));
  main.replaceChildren(el('h1', { text: 'Workflows' }), list);

  async function load() {
    try {
      const answer = await loadVerb('list-workflows', {}, abort.signal);
      const workflows = Array.isArray(answer.workflows) ? answer.workflows : [];
      clearBanner();
      list.replaceChildren(...workflows.map((w) => {
        const steps = Array.isArray(w.steps) ? w.steps.length : Number(w.steps) || 0;
        const paused = w.paused === true;
        return el('li', { 'data-workflow': String(w.name), 'data-paused': String(paused) },
          el('a', { href: workflowHref(w.name), text: String(w.name) }),
          el('span', { class: 'muted', text: ' · ' + steps + (steps === 1 ? ' step' : ' steps') }),
          w.source !== undefined && w.source !== null ? el('span', { class: 'muted workflow-source', text: ' · ' + displayValue(w.source) }) : null,
          paused ? el('span', { class: 'marker paused', text: 'paused' + (w.pausedReason ? ': ' + displayValue(w.pausedReason) : '') }) : null,
          pauseButton(String(w.name), paused));
      }));
      if (workflows.length === 0) list.appendChild(el('li', { class: 'muted', text: 'No workflows are stored.' }));
    } catch (err) {
      reportLoadError(err);
    }
  }
  /** Pause (no node claims its jobs) or resume a workflow, then list again. */
  function pauseButton(name, paused) {
    const button = el('button', { type: 'button', class: 'pause-workflow', text: paused ? 'Resume' : 'Pause' });
    button.addEventListener('click', async () => {
      button.disabled = true;
      try {
        const verb = paused ? 'resume-workflow' : 'pause-workflow';
        const body = paused ? { workflowName: name } : { workflowName: name, reason: 'paused from the console' };
        const answer = await callVerb(verb, body, abort.signal);
        if (answer.ok === false) throw new Error(String(answer.error || 'refused'));
        await load();
      } catch (err) {
        if (isAbort(err)) return;
        button.disabled = false;
        button.after(el('span', { class: 'outcome', role: 'status', text: ' ' + errorText(err) }));
      }
    });
    return button;
  }

  load();
  return {
    dispose() {
      abort.abort();
    },
    onToken: load,
  };
}

export function renderWorkflowView(main, params) {
  const name = params.name;
  document.title = 'Workflow ' + name + ' · ProtoMolt Jobs';
  const abort = new AbortController();
  const details = el('div', { class: 'workflow-details' }, el('p', { class: 'loading', text: 'Loading…' }));
  const formBox = el('div', { class: 'submit-form-box' }, el('p', { class: 'loading', text: 'Loading…' }));
  const outcome = el('div', { class: 'submit-outcome outcome', 'aria-live': 'polite' });
  main.replaceChildren(
    el('p', { class: 'breadcrumb' }, el('a', { href: '#/workflows', text: 'Workflows' })),
    el('h1', null, 'Workflow ', el('span', { class: 'mono', text: name })),
    details,
    el('section', { 'aria-labelledby': 'submit-heading' }, el('h2', { id: 'submit-heading', text: 'Submit a job' }), formBox, outcome));

  async function loadWorkflow() {
    try {
      const answer = await loadVerb('get-workflow', { name }, abort.signal);
      clearBanner();
      details.replaceChildren(...workflowDetails(parseDefinition(answer.workflow), answer.source));
    } catch (err) {
      if (isAbort(err)) return;
      details.replaceChildren(el('p', { class: 'muted', text: 'The workflow did not load.' }));
      reportLoadError(err);
    }
  }

  async function loadForm() {
    const spec = await loadFormSpec({ workflowName: name }, formBox, abort.signal);
    if (!spec) return;
    let generated = null;
    generated = createGeneratedForm(spec, {
      formClass: 'submit-form',
      submitClass: 'submit-workflow',
      submitLabel: 'Submit job',
      validatesNote: 'The node checks these rules again when you submit, and refuses input that breaks them.',
      attrs: { 'data-workflow': name },
      async onSubmit(input) {
        outcome.removeAttribute('data-outcome');
        outcome.replaceChildren(el('p', { text: 'Submitting…' }));
        try {
          const answer = await callVerb('submit-workflow', { workflowName: name, input }, abort.signal);
          if (answer.ok && answer.jobId) {
            outcome.setAttribute('data-outcome', 'SUBMITTED');
            outcome.replaceChildren(el('p', null, 'Submitted job ',
              el('a', { class: 'submitted-job mono', href: jobHref(answer.jobId), text: String(answer.jobId) }),
              answer.status ? ' (status ' + String(answer.status) + ').' : '.'));
          } else {
            const unmatched = Array.isArray(answer.violations) ? generated.showViolations(answer.violations) : [];
            outcome.setAttribute('data-outcome', 'ERROR');
            setChildren(outcome, el('p', { text: String(answer.error || 'The node did not accept the job.') }), unmatched.length ? violationList(unmatched) : null);
          }
        } catch (err) {
          if (isAbort(err)) return;
          outcome.setAttribute('data-outcome', 'ERROR');
          outcome.replaceChildren(el('p', { text: errorText(err) }));
        }
      },
    });
    formBox.replaceChildren(generated.form);
  }

  loadWorkflow();
  loadForm();
  return {
    dispose() {
      abort.abort();
    },
    onToken() {
      loadWorkflow();
      if (!formBox.querySelector('form')) loadForm();
    },
  };
}

/** The workflow's input type, its steps as a flow of boxes, and its output. */
function workflowDetails(workflow, source) {
  const steps = Array.isArray(workflow.steps) ? workflow.steps : [];
  const facts = el('dl', { class: 'columns' },
    el('div', { class: 'column-row' }, el('dt', { text: 'Input type' }), el('dd', { class: 'mono workflow-input-type', text: displayValue(workflow.inputType) })),
    source !== undefined ? el('div', { class: 'column-row' }, el('dt', { text: 'Source' }), el('dd', { text: displayValue(source) })) : null,
    workflow.deadlineMs !== undefined ? el('div', { class: 'column-row' }, el('dt', { text: 'Deadline' }), el('dd', { text: displayValue(workflow.deadlineMs) + ' ms' })) : null,
    workflow.schema ? el('div', { class: 'column-row' }, el('dt', { text: 'Schema' }), el('dd', { text: withoutDescriptorBlob(workflow).schema.descriptorSetBase64 })) : null);
  const flow = el('ol', { class: 'flow' }, steps.map(flowStep));
  const graph = el('div', { class: 'graph-scroll' }, drawGraph(stepsOfDefinition(workflow), 'The steps of the workflow and what each waits for'));
  const nodes = [facts, el('h2', { text: 'Steps' }), graph, flow];
  const output = workflow.output;
  nodes.push(el('h2', { text: 'Output' }));
  if (output && typeof output === 'object') {
    nodes.push(el('p', null, 'Type ', el('span', { class: 'mono workflow-output-type', text: displayValue(output.type) })));
    if (Array.isArray(output.rules) && output.rules.length > 0) nodes.push(ruleList(output.rules));
  } else nodes.push(el('p', { class: 'muted', text: 'The last step\'s response is the output.' }));
  return nodes;
}

function flowStep(step) {
  const known = new Set(['name', 'target', 'method', 'outputType', 'requestType', 'rules', 'when', 'completion', 'validate', 'after', 'forEach', 'maxParallel', 'onItemFailure']);
  const box = el('li', { 'data-step': String(step.name), class: 'flow-step' },
    el('div', { class: 'flow-head' },
      el('strong', { class: 'step-name', text: String(step.name) }),
      step.completion === 'external' ? el('span', { class: 'marker external', text: 'human step' }) : null,
      step.validate ? el('span', { class: 'marker validates', text: 'validates' }) : null),
    step.target ? el('p', { class: 'step-target' }, 'target ', el('code', { text: String(step.target) })) : null,
    step.method ? el('p', { class: 'step-method' }, 'method ', el('code', { text: String(step.method) })) : null,
    step.requestType ? el('p', { class: 'step-request-type' }, 'shows ', el('code', { text: String(step.requestType) })) : null,
    step.outputType ? el('p', { class: 'step-output-type' }, 'answered with ', el('code', { text: String(step.outputType) })) : null,
    step.when ? el('p', { class: 'step-when' }, el('code', { text: 'when: ' + String(step.when) })) : null,
    Array.isArray(step.after) ? el('p', { class: 'step-after' }, step.after.length === 0 ? 'starts with the job' : 'after ' + step.after.map(String).join(', ')) : null,
    step.forEach !== undefined ? el('p', { class: 'step-for-each' }, 'for each of ', el('code', { text: String(step.forEach) }),
      ' · at most ' + displayValue(step.maxParallel === undefined ? 8 : step.maxParallel) + ' at once · on a failed element: ' + displayValue(step.onItemFailure || 'fail')) : null);
  if (Array.isArray(step.rules) && step.rules.length > 0) box.appendChild(ruleList(step.rules));
  const extra = Object.keys(step).filter((k) => !known.has(k));
  if (extra.length > 0) box.appendChild(el('p', { class: 'muted step-extra', text: extra.map((k) => k + ': ' + displayValue(step[k])).join(' · ') }));
  return box;
}

function ruleList(rules) {
  return el('ul', { class: 'rules' }, rules.map((rule) => el('li', null, el('code', { text: displayValue(rule) }))));
}
