/*
 * The form generator: the DOM around forms-rules.js, shared by the review form (job.js)
 * and the submit form (workflows.js).
 */

import { el, prettyJson } from './dom.js';
import { errorText, isAbort, loadVerb } from './api.js';
import {
  FLOAT_KINDS,
  INT32_RANGES,
  INT64_RANGES,
  boolUsesSelect,
  buildForm,
  childPath,
  hintText,
  itemField,
  jsonKey,
  mapKeyField,
  mapValueField,
  newSlot,
  newSlots,
} from './forms-rules.js';

// String fields whose name suggests long text get a textarea.
const LONG_TEXT_RE = /notes|comment|description|text|body|reason/i;

let formCount = 0;

/** The get-form answer for `request`, or null (its failure shown in formBox, or the user left). */
export async function loadFormSpec(request, formBox, signal) {
  try {
    return await loadVerb('get-form', request, signal);
  } catch (err) {
    if (!isAbort(err)) formBox.replaceChildren(el('p', { class: 'form-load-error', text: 'The form did not load: ' + errorText(err) }));
    return null;
  }
}

/**
 * Builds a <form> from a get-form answer. options: {formClass, submitClass,
 * submitLabel, attrs (extra attributes for the form), validatesNote (shown when the
 * node checks the rules again), onSubmit(value) -> Promise}.
 * Returns {form, showViolations(violations) -> unmatched violations, clearServerErrors()}.
 */
export function createGeneratedForm(spec, options) {
  const ctl = {
    fields: spec.fields || [],
    slots: null,
    idPrefix: 'f' + ++formCount + '-',
    idCount: 0,
    submitted: false,
    bindings: new WeakMap(), // control element -> {slot, read()}
    serverErrors: new Map(), // json path -> message from the node's violations
    build: null,
    form: null,
    preview: null,
  };
  ctl.slots = newSlots(ctl.fields);
  ctl.nextId = () => ctl.idPrefix + ++ctl.idCount;

  const form = el('form', Object.assign({ class: options.formClass, novalidate: true }, options.attrs || {}));
  ctl.form = form;

  if (Array.isArray(spec.messageRules) && spec.messageRules.length > 0) {
    form.appendChild(
      el('div', { class: 'message-rules' },
        el('p', { text: 'Rules on the whole answer (the node checks these; this page cannot):' }),
        el('ul', null, spec.messageRules.map((rule) => el('li', { text: rule.message || rule.id })))),
    );
  }
  if (spec.messageType) form.appendChild(el('p', { class: 'muted form-type', text: 'Message type: ' + spec.messageType }));
  if (spec.validates && options.validatesNote) form.appendChild(el('p', { class: 'form-note', text: options.validatesNote }));
  if (spec.truncated) {
    form.appendChild(el('p', { class: 'form-note warning', role: 'note',
      text: 'This message is larger than a form can show: some fields (or enum values) are left out, and the answer is sent without them.' }));
  }

  const fieldsBox = el('div', { class: 'form-fields' });
  for (const field of ctl.fields) fieldsBox.appendChild(renderField(field, ctl.slots[jsonKey(field)], childPath({ json: '', proto: '' }, field), ctl));
  if (ctl.fields.length === 0) fieldsBox.appendChild(el('p', { class: 'muted', text: 'This message has no fields.' }));
  const submit = el('button', { type: 'submit', class: options.submitClass, text: options.submitLabel });
  ctl.preview = el('pre', { class: 'form-json', 'aria-label': 'JSON that will be sent' });
  form.append(fieldsBox, el('div', { class: 'form-actions' }, submit), el('p', { class: 'form-json-label muted', text: 'JSON that will be sent:' }), ctl.preview);

  // One listener for every control: controls write their raw text into their slot.
  const onEdit = (event) => {
    const binding = ctl.bindings.get(event.target);
    if (!binding) return;
    binding.slot.raw = binding.read();
    binding.slot.touched = true;
    ctl.serverErrors.delete(event.target.getAttribute('data-path'));
    refreshForm(ctl);
  };
  form.addEventListener('input', onEdit);
  form.addEventListener('change', onEdit);
  form.addEventListener('focusout', (event) => {
    const binding = ctl.bindings.get(event.target);
    if (binding && binding.slot.touched) {
      binding.slot.show = true;
      refreshForm(ctl);
    }
  });
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    ctl.submitted = true;
    refreshForm(ctl);
    if (ctl.build.errors.length > 0) {
      focusFirstError(ctl, new Set(ctl.build.errors.map((e) => e.path)));
      return;
    }
    submit.disabled = true;
    try {
      await options.onSubmit(ctl.build.value);
    } finally {
      submit.disabled = false;
    }
  });

  refreshForm(ctl);
  return {
    form,
    showViolations(violations) {
      const unmatched = [];
      for (const violation of violations || []) {
        const jsonPath = ctl.build.pathMap[violation && violation.field];
        if (jsonPath !== undefined && findErrorElement(ctl, jsonPath)) {
          if (!ctl.serverErrors.has(jsonPath)) ctl.serverErrors.set(jsonPath, violationMessage(ctl.fields, jsonPath, violation));
        } else unmatched.push(violation);
      }
      refreshForm(ctl);
      if (ctl.serverErrors.size > 0) focusFirstError(ctl, new Set(ctl.serverErrors.keys()));
      return unmatched;
    },
    clearServerErrors() {
      ctl.serverErrors.clear();
      refreshForm(ctl);
    },
  };
}

/**
 * The sentence for a node's violation: its message, or (where the validator gave only
 * the rule's id, as for string.email) the declared rule's message from the form.
 */
function violationMessage(fields, jsonPath, violation) {
  const message = violation && violation.message ? String(violation.message) : '';
  const rule = violation && violation.rule ? String(violation.rule) : '';
  if (message && message !== rule) return message;
  let field = null;
  let list = fields;
  for (const part of jsonPath.replace(/\[[^\]]*\]/g, '').split('.')) {
    field = (list || []).find((f) => jsonKey(f) === part) || null;
    if (!field) break;
    list = field.fields;
  }
  const declared = field && (field.rules || []).find((r) => r && r.id === rule);
  return declared && declared.message ? String(declared.message) : message || rule || 'rejected';
}

/** Rebuilds the JSON from the slots, updates the preview and the visible errors. */
function refreshForm(ctl) {
  ctl.build = buildForm(ctl.fields, ctl.slots);
  ctl.preview.textContent = ctl.build.hasShapeError ? '—' : prettyJson(ctl.build.value);
  const invalid = new Set();
  for (const node of ctl.form.querySelectorAll('.field-error')) {
    const path = node.getAttribute('data-for');
    const error = ctl.build.firstErrors.get(path);
    // Errors appear on submit or after a touched input loses focus, not while typing the first time.
    let text = error && (ctl.submitted || error.slot.show) ? error.message : '';
    if (!text && ctl.serverErrors.has(path)) text = ctl.serverErrors.get(path);
    node.textContent = text;
    if (text) invalid.add(path);
  }
  for (const control of ctl.form.querySelectorAll('input[data-path], select[data-path], textarea[data-path]')) {
    if (invalid.has(control.getAttribute('data-path'))) control.setAttribute('aria-invalid', 'true');
    else control.removeAttribute('aria-invalid');
  }
}

function findErrorElement(ctl, path) {
  for (const node of ctl.form.querySelectorAll('.field-error')) if (node.getAttribute('data-for') === path) return node;
  return null;
}

/** Focuses the first control (in page order) whose path has an error; lists focus their Add button. */
function focusFirstError(ctl, paths) {
  for (const control of ctl.form.querySelectorAll('[data-path]')) {
    if (paths.has(control.getAttribute('data-path'))) {
      control.focus();
      return;
    }
  }
}

/** The description, hint and error elements under a field, and the ids for aria-describedby. */
function fieldNotes(field, path, ctl, withHint) {
  const nodes = [];
  const ids = [];
  if (withHint && field.description) {
    const id = ctl.nextId();
    nodes.push(el('p', { class: 'field-description', id, text: field.description }));
    ids.push(id);
  }
  if (withHint) {
    const id = ctl.nextId();
    nodes.push(el('p', { class: 'field-hint', id, text: hintText(field) }));
    ids.push(id);
  }
  const errorId = ctl.nextId();
  nodes.push(el('p', { class: 'field-error', id: errorId, 'data-for': path.json }));
  ids.push(errorId);
  return { nodes, ids };
}

function renderField(field, slot, path, ctl) {
  if (field.map && !field.asItem) return renderMap(field, slot, path, ctl);
  if (field.repeated && !field.asItem) return renderList(field, slot, path, ctl);
  return renderSingle(field, slot, path, ctl, field.label || field.name, [], true);
}

/**
 * One value: a fieldset for a message, else a label + control. extraDescribedBy lets a
 * list item point at its list's hint; withHint is false for items (the list has it).
 */
function renderSingle(field, slot, path, ctl, labelText, extraDescribedBy, withHint) {
  if (field.kind === 'message') {
    const notes = fieldNotes(field, path, ctl, withHint);
    const fieldset = el('fieldset', { class: 'field field-message' }, el('legend', { text: labelText }));
    fieldset.append(...notes.nodes);
    const box = el('div', { class: 'message-fields' });
    for (const child of field.fields || []) {
      const key = jsonKey(child);
      if (!slot.sub[key]) slot.sub[key] = newSlot(child);
      box.appendChild(renderField(child, slot.sub[key], childPath(path, child), ctl));
    }
    fieldset.appendChild(box);
    return fieldset;
  }
  const id = ctl.nextId();
  const notes = fieldNotes(field, path, ctl, withHint);
  const control = createControl(field, slot, id, path, ctl);
  control.setAttribute('aria-describedby', extraDescribedBy.concat(notes.ids).join(' '));
  const label = el('label', { for: id, text: labelText });
  const isCheckbox = control.type === 'checkbox';
  const wrapper = el('div', { class: 'field field-' + String(field.kind).replace(/[^a-z0-9]/g, '') + (isCheckbox ? ' field-checkbox' : '') });
  if (isCheckbox) wrapper.append(el('div', { class: 'checkbox-row' }, control, label));
  else wrapper.append(label, control);
  wrapper.append(...notes.nodes);
  return wrapper;
}

/** The input, select or textarea for a scalar kind, bound to its slot. */
function createControl(field, slot, id, path, ctl) {
  let control;
  let read;
  if (field.kind === 'bool' && !boolUsesSelect(field)) {
    control = el('input', { type: 'checkbox', id, checked: slot.raw === true });
    read = () => control.checked;
  } else if (field.kind === 'bool' || field.kind === 'enum') {
    control = el('select', { id });
    control.appendChild(el('option', { value: '', text: '(unset)' }));
    const names = field.kind === 'bool' ? ['true', 'false'] : (field.enumValues || []).map((v) => String(v.name));
    for (const name of names) control.appendChild(el('option', { value: name, text: name, selected: slot.raw === name }));
    read = () => control.value;
  } else {
    const multiline = field.kind === 'json' || (field.kind === 'string' && LONG_TEXT_RE.test(field.name || ''));
    if (multiline) control = el('textarea', { id, rows: field.kind === 'json' ? 5 : 3, class: field.kind === 'json' ? 'mono' : null });
    else control = el('input', { type: 'text', id, autocomplete: 'off', spellcheck: field.kind === 'string' ? null : 'false' });
    control.value = typeof slot.raw === 'string' ? slot.raw : '';
    const placeholder = { timestamp: '2026-12-03T09:30:00Z', duration: '1.5s', bytes: 'base64', json: '{"key": "value"}' }[field.kind];
    if (placeholder) control.setAttribute('placeholder', placeholder);
    if (field.kind in INT32_RANGES || field.kind in INT64_RANGES) control.setAttribute('inputmode', 'numeric');
    if (FLOAT_KINDS.has(field.kind)) control.setAttribute('inputmode', 'decimal');
    if (field.kind !== 'string') control.classList.add('mono');
    read = () => control.value;
  }
  control.setAttribute('data-path', path.json);
  ctl.bindings.set(control, { slot, read });
  return control;
}

/** A repeated field: its items in order, each with a Remove button, and an "Add <label>" button. */
function renderList(field, slot, path, ctl) {
  const label = field.label || field.name;
  const item = itemField(field);
  const notes = fieldNotes(field, path, ctl, true);
  const itemsBox = el('ol', { class: 'list-items' });
  const add = el('button', { type: 'button', class: 'add-item', 'data-path': path.json, text: 'Add ' + label });
  const box = el('fieldset', { class: 'field field-list' }, el('legend', { text: label }), itemsBox, add, notes.nodes);

  // Items are redrawn from their slots after add/remove, so paths and ids stay in order; typed values live in the slots.
  function draw() {
    itemsBox.replaceChildren();
    slot.items.forEach((itemSlot, i) => {
      const itemPath = { json: path.json + '[' + i + ']', proto: path.proto + '[' + i + ']' };
      const remove = el('button', { type: 'button', class: 'remove-item', text: 'Remove', 'aria-label': 'Remove ' + label + ' ' + (i + 1) });
      remove.addEventListener('click', () => {
        slot.items.splice(i, 1);
        draw();
        refreshForm(ctl);
        const next = itemsBox.querySelectorAll(':scope > li > .remove-item')[i];
        (next || add).focus();
      });
      itemsBox.appendChild(el('li', { class: 'list-item' }, renderSingle(item, itemSlot, itemPath, ctl, label + ' ' + (i + 1), notes.ids.slice(0, -1), false), remove));
    });
  }
  add.addEventListener('click', () => {
    slot.items.push(newSlot(item));
    draw();
    refreshForm(ctl);
    const last = itemsBox.lastElementChild;
    const first = last && last.querySelector('input, select, textarea');
    if (first) first.focus();
  });
  draw();
  return box;
}

/** A map: key/value rows with "Add entry"; sent as an object. */
function renderMap(field, slot, path, ctl) {
  const label = field.label || field.name;
  const keyField = mapKeyField(field);
  const valueField = mapValueField(field);
  const notes = fieldNotes(field, path, ctl, true);
  const rows = el('ol', { class: 'list-items map-entries' });
  const add = el('button', { type: 'button', class: 'add-item', 'data-path': path.json, text: 'Add entry' });
  const box = el('fieldset', { class: 'field field-map' }, el('legend', { text: label }), rows, add, notes.nodes);

  function draw() {
    rows.replaceChildren();
    slot.entries.forEach((entry, i) => {
      const row = path.json + '[' + i + ']';
      const remove = el('button', { type: 'button', class: 'remove-item', text: 'Remove', 'aria-label': 'Remove entry ' + (i + 1) });
      remove.addEventListener('click', () => {
        slot.entries.splice(i, 1);
        draw();
        refreshForm(ctl);
        const next = rows.querySelectorAll(':scope > li > .remove-item')[i];
        (next || add).focus();
      });
      rows.appendChild(
        el('li', { class: 'list-item map-entry' },
          renderSingle(keyField, entry.key, { json: row + '.key', proto: row + '.key' }, ctl, 'Key ' + (i + 1), [], false),
          renderSingle(valueField, entry.value, { json: row + '.value', proto: row + '.value' }, ctl, 'Value ' + (i + 1), [], false),
          remove),
      );
    });
  }
  add.addEventListener('click', () => {
    slot.entries.push({ key: newSlot(keyField), value: newSlot(valueField) });
    draw();
    refreshForm(ctl);
    const last = rows.lastElementChild;
    const first = last && last.querySelector('input, select, textarea');
    if (first) first.focus();
  });
  draw();
  return box;
}

export function violationList(violations) {
  return el('ul', { class: 'violations' }, violations.map((v) => el('li', { text: (v.field ? String(v.field) + ': ' : '') + String(v.message || v.rule || '') })));
}
