/*
 * Form logic (pure: no DOM): typed text -> proto3 JSON, and the rules the page checks.
 *
 * A form is described by the node's Field list (get-form). The typed values live in a
 * "slot" tree mirroring the fields, so the DOM (forms.js) only writes raw text into slots
 * and everything in this module can run in node:
 *   scalar  {raw: string | boolean}     message {sub: {jsonName: slot}}
 *   list    {items: [slot]}             map     {entries: [{key: slot, value: slot}]}
 * buildForm() turns the slots into the proto3 JSON object plus the errors per path.
 */

import { UUID_RE, compactJson, parseLossless } from './dom.js';

export const INT32_RANGES = {
  int32: [-2147483648, 2147483647],
  sint32: [-2147483648, 2147483647],
  sfixed32: [-2147483648, 2147483647],
  uint32: [0, 4294967295],
  fixed32: [0, 4294967295],
};
const INT64_MIN = BigInt('-9223372036854775808');
const INT64_MAX = BigInt('9223372036854775807');
const UINT64_MAX = BigInt('18446744073709551615');
export const INT64_RANGES = {
  int64: [INT64_MIN, INT64_MAX],
  sint64: [INT64_MIN, INT64_MAX],
  sfixed64: [INT64_MIN, INT64_MAX],
  uint64: [BigInt(0), UINT64_MAX],
  fixed64: [BigInt(0), UINT64_MAX],
};
export const FLOAT_KINDS = new Set(['double', 'float']);
const FLOAT_MAX = 3.4028234663852886e38;
const FLOAT_MIN_SUBNORMAL = 1.401298464324817e-45;
const NUMERIC_KINDS = new Set([...Object.keys(INT32_RANGES), ...Object.keys(INT64_RANGES), ...FLOAT_KINDS]);

const RFC3339_RE = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?(Z|([+-])(\d{2}):(\d{2}))$/;
const DURATION_RE = /^-?\d+(\.\d{1,9})?s$/;
const DECIMAL_RE = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;
const INTEGER_RE = /^[+-]?\d+$/;
// The WHATWG e-mail address grammar, which protovalidate's string.email follows.
const EMAIL_RE = /^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;
const URI_RE = /^[A-Za-z][A-Za-z0-9+.-]*:[^\s]*$/;

export function jsonKey(field) {
  return field.jsonName || field.name;
}

/** Rules the page must check itself (the node checks the others). */
function pageRules(field) {
  return (field.rules || []).filter((rule) => rule && rule.checkedBy === 'page' && typeof rule.id === 'string');
}

function ruleMessage(rule) {
  return rule.message || rule.summary || rule.id + ' ' + compactJson(rule.value);
}

/** True when a bool is shown as (unset)/true/false: it has presence, or is a list item or map value. */
export function boolUsesSelect(field) {
  return !!(field.optional || field.asItem);
}

/** The field as one element of its list or map: item rules only, no presence of its own. */
export function itemField(field) {
  return Object.assign({}, field, {
    repeated: false,
    map: false,
    optional: false,
    oneof: undefined,
    required: false,
    asItem: true,
    rules: (field.rules || []).filter((r) => !isCollectionRule(r.id)),
  });
}

function isCollectionRule(id) {
  return id === 'required' || /^(repeated|map)\./.test(String(id));
}

export function mapKeyField(field) {
  return Object.assign({ name: 'key', jsonName: 'key', kind: 'string', rules: [] }, field.key || {}, { asItem: true, required: false, repeated: false, map: false });
}

export function mapValueField(field) {
  return Object.assign({ name: 'value', jsonName: 'value', kind: 'string', rules: [] }, field.value || {}, { asItem: true, required: false, repeated: false, map: false });
}

/** An empty slot for a field (see the comment at the top of this module). */
export function newSlot(field) {
  if (field.map) return { entries: [] };
  if (field.repeated) return { items: [] };
  if (field.kind === 'message') return { sub: newSlots(field.fields || []) };
  if (field.kind === 'bool' && !boolUsesSelect(field)) return { raw: false };
  return { raw: '' };
}

export function newSlots(fields) {
  // Keys are field names from the submitter's descriptors ("__proto__" included): no prototype.
  const sub = Object.create(null);
  for (const field of fields || []) sub[jsonKey(field)] = newSlot(field);
  return sub;
}

/** Untouched means empty: numbers and times ignore surrounding spaces, strings are taken as typed. */
function isEmptyRaw(field, raw) {
  if (raw === undefined || raw === null || raw === false) return true;
  if (typeof raw !== 'string') return false;
  if (field.kind === 'string') return raw === '';
  return raw.trim() === '';
}

/** Decoded length of base64 (standard or URL-safe), or null when it is not base64. */
export function base64Length(text) {
  if (!/^[A-Za-z0-9+/_-]*={0,2}$/.test(text)) return null;
  const body = text.replace(/=+$/, '');
  if (body.length % 4 === 1) return null;
  if (body.length !== text.length && text.length % 4 !== 0) return null;
  return Math.floor((body.length * 3) / 4);
}

export function isRfc3339(text) {
  const m = RFC3339_RE.exec(text);
  if (!m) return false;
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number);
  const daysInMonth = new Date(Date.UTC(year, month, 0)).getUTCDate();
  if (year < 1 || month < 1 || month > 12 || day < 1 || day > daysInMonth) return false;
  if (hour > 23 || minute > 59 || second > 59) return false;
  if (m[8] !== 'Z' && (Number(m[10]) > 23 || Number(m[11]) > 59)) return false;
  return true;
}

/**
 * Typed text -> {value (proto3 JSON), cmp (what rules compare)} or {error}.
 * cmp: Number or BigInt for numbers, the string, the decoded byte count for bytes,
 * the enum number, the boolean.
 */
export function convertScalar(field, raw) {
  const kind = field.kind;
  const text = typeof raw === 'string' ? raw.trim() : raw;
  if (kind === 'bool') {
    if (raw === true || text === 'true') return { value: true, cmp: true };
    if (text === 'false') return { value: false, cmp: false };
    return { error: 'must be true or false' };
  }
  if (kind in INT32_RANGES) {
    const [min, max] = INT32_RANGES[kind];
    if (!INTEGER_RE.test(text)) return { error: 'must be a whole number' };
    const n = Number(text);
    if (n < min || n > max) return { error: 'must be between ' + min + ' and ' + max };
    return { value: n === 0 ? 0 : n, cmp: n };
  }
  if (kind in INT64_RANGES) {
    const [min, max] = INT64_RANGES[kind];
    if (!INTEGER_RE.test(text)) return { error: 'must be a whole number' };
    const b = BigInt(text.replace(/^\+/, ''));
    if (b < min || b > max) return { error: 'must be between ' + min + ' and ' + max };
    // 64-bit integers travel as decimal strings in proto3 JSON (a JS number would round).
    return { value: b.toString(), cmp: b };
  }
  if (FLOAT_KINDS.has(kind)) {
    if (text === 'NaN' || text === 'Infinity' || text === '-Infinity') return { value: text, cmp: Number(text) };
    if (!DECIMAL_RE.test(text)) return { error: 'must be a number (or NaN, Infinity, -Infinity)' };
    const n = Number(text);
    if (!Number.isFinite(n) || (kind === 'float' && Math.abs(n) > FLOAT_MAX)) return { error: 'is out of range for ' + kind };
    // A non-zero value too small to represent would silently become 0.
    const nonZero = /[1-9]/.test(text.replace(/[eE].*$/, ''));
    if (nonZero && (n === 0 || (kind === 'float' && Math.abs(n) < FLOAT_MIN_SUBNORMAL))) return { error: 'is too close to zero for ' + kind };
    return { value: n, cmp: n };
  }
  switch (kind) {
    case 'string':
      return { value: raw, cmp: raw };
    case 'bytes': {
      const length = base64Length(text);
      if (length === null) return { error: 'must be base64' };
      return { value: text, cmp: length };
    }
    case 'enum': {
      const found = (field.enumValues || []).find((v) => v.name === text);
      if (!found) return { error: 'must be one of the listed values' };
      return { value: found.name, cmp: Number(found.number) };
    }
    case 'timestamp':
      if (!isRfc3339(text)) return { error: 'must be an RFC 3339 time such as 2026-12-03T09:30:00Z' };
      return { value: text, cmp: text };
    case 'duration':
      if (!DURATION_RE.test(text)) return { error: 'must be a duration in seconds such as 1.5s' };
      // protobuf's Duration spans about ±10,000 years.
      if (Math.abs(parseFloat(text)) > 315576000000) return { error: 'must be within ±315576000000s' };
      return { value: text, cmp: text };
    case 'json':
      try {
        // Integers past 2^53 keep every digit (a plain parse would round them).
        const parsed = parseLossless(raw);
        return { value: parsed, cmp: parsed };
      } catch (_) {
        return { error: 'must be valid JSON' };
      }
    default:
      return { error: 'has a kind this page does not know (' + kind + ')' };
  }
}

/** The proto3 JSON zero value, for a map entry whose value was left empty; undefined when there is none. */
function zeroJson(field) {
  if (field.kind in INT64_RANGES) return '0';
  if (NUMERIC_KINDS.has(field.kind)) return 0;
  if (field.kind === 'bool') return false;
  if (field.kind === 'string' || field.kind === 'bytes') return '';
  if (field.kind === 'enum') {
    const values = field.enumValues || [];
    const zero = values.find((v) => Number(v.number) === 0) || values[0];
    return zero ? zero.name : undefined;
  }
  if (field.kind === 'message') return {};
  return undefined;
}

/** True when cmp is the field kind's zero value (0, 0n, "", false, no bytes, enum number 0). */
function isZeroCmp(field, cmp) {
  const zero = zeroCmp(field);
  return zero !== null && cmp === zero;
}

/** What rules compare for a scalar left empty (its zero value), or null when the page cannot tell. */
function zeroCmp(field) {
  if (field.kind in INT64_RANGES) return 0n;
  if (NUMERIC_KINDS.has(field.kind)) return 0;
  if (field.kind === 'bool') return false;
  if (field.kind === 'string') return '';
  if (field.kind === 'bytes' || field.kind === 'enum') return 0;
  return null;
}

/** Converts a rule's value to the field's comparison type (64-bit rule values arrive as strings). */
function ruleNumber(field, value) {
  if (field.kind in INT64_RANGES) {
    try {
      return BigInt(String(value));
    } catch (_) {
      return NaN;
    }
  }
  return Number(value);
}

function sameNumber(a, b) {
  // == compares a BigInt with a Number by value; === would not.
  return typeof a === typeof b ? a === b : a == b; // eslint-disable-line eqeqeq
}

function numericPasses(name, cmp, bound) {
  switch (name) {
    case 'gt':
      return cmp > bound;
    case 'gte':
      return cmp >= bound;
    case 'lt':
      return cmp < bound;
    case 'lte':
      return cmp <= bound;
    default:
      return true;
  }
}

function splitRuleId(id) {
  const dot = id.indexOf('.');
  return dot < 0 ? [id, ''] : [id.slice(0, dot), id.slice(dot + 1)];
}

const patternCache = new Map();
/** The compiled pattern, or null when JavaScript cannot compile it (then the node checks it). */
function compilePattern(source) {
  if (!patternCache.has(source)) {
    let re = null;
    try {
      re = new RegExp(String(source), 'u');
    } catch (_) {
      re = null;
    }
    patternCache.set(source, re);
  }
  return patternCache.get(source);
}

function stringRuleBroken(name, v, s) {
  const length = () => [...s].length; // characters are Unicode code points
  const bytes = () => new TextEncoder().encode(s).length;
  switch (name) {
    case 'const':
      return s !== v;
    case 'len':
      return length() !== Number(v);
    case 'min_len':
      return length() < Number(v);
    case 'max_len':
      return length() > Number(v);
    case 'len_bytes':
      return bytes() !== Number(v);
    case 'min_bytes':
      return bytes() < Number(v);
    case 'max_bytes':
      return bytes() > Number(v);
    case 'pattern': {
      const re = compilePattern(v);
      return re !== null && !re.test(s);
    }
    case 'prefix':
      return !s.startsWith(String(v));
    case 'suffix':
      return !s.endsWith(String(v));
    case 'contains':
      return !s.includes(String(v));
    case 'not_contains':
      return s.includes(String(v));
    case 'in':
      return Array.isArray(v) && !v.includes(s);
    case 'not_in':
      return Array.isArray(v) && v.includes(s);
    case 'email':
      return v !== false && !EMAIL_RE.test(s);
    case 'uuid':
      return v !== false && !UUID_RE.test(s);
    case 'uri':
      return v !== false && !URI_RE.test(s);
    default:
      return false; // not one the page knows: the node checks it
  }
}

function bytesRuleBroken(name, v, length) {
  switch (name) {
    case 'len':
      return length !== Number(v);
    case 'min_len':
      return length < Number(v);
    case 'max_len':
      return length > Number(v);
    default:
      return false;
  }
}

function enumRuleBroken(name, v, number, field) {
  switch (name) {
    case 'const':
      return number !== Number(v);
    case 'defined_only':
      return v !== false && !(field.enumValues || []).some((e) => Number(e.number) === number);
    case 'in':
      return Array.isArray(v) && !v.map(Number).includes(number);
    case 'not_in':
      return Array.isArray(v) && v.map(Number).includes(number);
    default:
      return false;
  }
}

/**
 * The message of the first page-checkable rule that cmp breaks, or null. Each bound is
 * checked on its own: an exclusive range (lower bound above the upper one, meaning
 * "outside") arrives marked checkedBy "node", so the page never sees one.
 */
export function firstBrokenRule(field, cmp) {
  const rules = pageRules(field).filter((r) => !isCollectionRule(r.id));
  const numeric = NUMERIC_KINDS.has(field.kind);
  for (const rule of rules) {
    const [family, name] = splitRuleId(rule.id);
    let broken = false;
    if (family === 'string') broken = typeof cmp === 'string' && stringRuleBroken(name, rule.value, cmp);
    else if (family === 'bytes') broken = typeof cmp === 'number' && bytesRuleBroken(name, rule.value, cmp);
    else if (family === 'enum') broken = enumRuleBroken(name, rule.value, cmp, field);
    else if (family === 'bool') broken = name === 'const' && cmp !== rule.value;
    else if (NUMERIC_KINDS.has(family) && numeric) {
      if (name === 'const') broken = !sameNumber(cmp, ruleNumber(field, rule.value));
      else if (name === 'in') broken = Array.isArray(rule.value) && !rule.value.some((x) => sameNumber(cmp, ruleNumber(field, x)));
      else if (name === 'not_in') broken = Array.isArray(rule.value) && rule.value.some((x) => sameNumber(cmp, ruleNumber(field, x)));
      else if (['gt', 'gte', 'lt', 'lte'].includes(name)) broken = !numericPasses(name, cmp, ruleNumber(field, rule.value));
    }
    if (broken) return ruleMessage(rule);
  }
  return null;
}

/** The message of the first broken list/map rule (count of items sent, their values), or null. */
export function firstBrokenCollectionRule(field, values) {
  for (const rule of pageRules(field)) {
    let broken = false;
    switch (rule.id) {
      case 'repeated.min_items':
      case 'map.min_pairs':
        broken = values.length < Number(rule.value);
        break;
      case 'repeated.max_items':
      case 'map.max_pairs':
        broken = values.length > Number(rule.value);
        break;
      case 'repeated.unique': {
        const seen = values.map(compactJson);
        broken = rule.value !== false && new Set(seen).size !== seen.length;
        break;
      }
      default:
        break;
    }
    if (broken) return ruleMessage(rule);
  }
  return null;
}

/** The message shown when a required field is empty, or null when the page need not check it. */
function requiredMessage(field) {
  if (field.asItem) return null;
  const rule = (field.rules || []).find((r) => r && r.id === 'required');
  if (rule) return rule.checkedBy === 'page' && rule.value !== false ? ruleMessage(rule) : null;
  return field.required ? 'value is required' : null;
}

export function childPath(path, field) {
  return {
    json: path.json ? path.json + '.' + jsonKey(field) : jsonKey(field),
    proto: path.proto ? path.proto + '.' + field.name : field.name,
  };
}

function addError(ctx, path, message, slot, shape) {
  if (shape) ctx.hasShapeError = true;
  ctx.errors.push({ path: path.json, message, slot, shape: !!shape });
}

/** Builds any field: {filled (the user entered something), value (undefined when it has a shape error)}. */
function buildField(field, slot, path, ctx) {
  ctx.pathMap[path.proto] = path.json;
  if (field.map && !field.asItem) return buildMap(field, slot, path, ctx);
  if (field.repeated && !field.asItem) return buildList(field, slot, path, ctx);
  if (field.kind === 'message') return buildMessageField(field, slot, path, ctx);
  return buildScalar(field, slot, path, ctx);
}

function buildScalar(field, slot, path, ctx) {
  if (isEmptyRaw(field, slot.raw)) {
    // Untouched: left out. The node checks a field without presence at its zero value
    // (rulesApplyWhenEmpty), so the page does too: an empty answer the node would
    // refuse must not fail the job.
    const required = requiredMessage(field);
    if (required) addError(ctx, path, required, slot, false);
    else if (field.rulesApplyWhenEmpty && !field.asItem) {
      const zero = zeroCmp(field);
      const broken = zero === null ? null : firstBrokenRule(field, zero);
      if (broken) addError(ctx, path, broken, slot, false);
    }
    return { filled: false };
  }
  const typed = convertScalar(field, slot.raw);
  if (typed.error) {
    addError(ctx, path, typed.error, slot, true);
    return { filled: true, value: undefined };
  }
  // proto3 cannot tell a zero from unset on a field without presence: "required" refuses it.
  if (!field.optional && !field.oneof && !field.asItem && isZeroCmp(field, typed.cmp)) {
    const required = requiredMessage(field);
    if (required) {
      addError(ctx, path, required, slot, false);
      return { filled: true, value: typed.value };
    }
  }
  const broken = firstBrokenRule(field, typed.cmp);
  if (broken) addError(ctx, path, broken, slot, false);
  return { filled: true, value: typed.value };
}

function buildMessageField(field, slot, path, ctx) {
  const mark = ctx.errors.length;
  const built = buildMessage(field.fields || [], slot.sub, path, ctx);
  if (!built.filled) {
    // A required message may hold nothing but defaults: it is sent present ({}), and its
    // fields' rules apply. Otherwise an absent message is not validated inside (as
    // protovalidate does): drop its children's rule errors.
    if (requiredMessage(field)) return { filled: true, value: built.value };
    ctx.errors.splice(mark);
    return { filled: false };
  }
  return { filled: true, value: built.value };
}

function buildMessage(fields, sub, path, ctx) {
  const value = Object.create(null);
  let filled = false;
  const oneofTaken = new Set();
  for (const field of fields) {
    const key = jsonKey(field);
    if (!sub[key]) sub[key] = newSlot(field);
    const p = childPath(path, field);
    const built = buildField(field, sub[key], p, ctx);
    if (!built.filled) continue;
    filled = true;
    if (field.oneof) {
      if (oneofTaken.has(field.oneof)) {
        addError(ctx, p, 'only one of ' + field.oneof + ' may be set', sub[key], true);
        continue;
      }
      oneofTaken.add(field.oneof);
    }
    if (built.value !== undefined) value[key] = built.value;
  }
  return { filled, value };
}

function buildList(field, slot, path, ctx) {
  const item = itemField(field);
  const values = [];
  slot.items.forEach((itemSlot, i) => {
    // Empty items are left out, so the index the node reports (proto path) may differ from the one on screen.
    const p = { json: path.json + '[' + i + ']', proto: path.proto + '[' + values.length + ']' };
    const built = buildField(item, itemSlot, p, ctx);
    if (built.filled) values.push(built.value);
  });
  return finishCollection(field, slot, path, ctx, values, values);
}

function buildMap(field, slot, path, ctx) {
  const keyField = mapKeyField(field);
  const valueField = mapValueField(field);
  const object = Object.create(null);
  const keys = [];
  slot.entries.forEach((entry, i) => {
    const row = path.json + '[' + i + ']';
    const keyPath = { json: row + '.key', proto: path.proto + '[' + i + '].key' };
    const keyEmpty = isEmptyRaw(keyField, entry.key.raw);
    let keyText = null;
    if (!keyEmpty) {
      const typed = convertScalar(keyField, entry.key.raw);
      if (typed.error) addError(ctx, keyPath, typed.error, entry.key, true);
      else {
        keyText = String(typed.value);
        const broken = firstBrokenRule(keyField, typed.cmp);
        if (broken) addError(ctx, keyPath, broken, entry.key, false);
        if (keys.includes(keyText)) {
          addError(ctx, keyPath, 'this key is already used', entry.key, true);
          keyText = null;
        }
      }
    }
    const literal = keyText === null ? '?' : keyField.kind === 'string' ? JSON.stringify(keyText) : keyText;
    const valuePath = { json: row + '.value', proto: path.proto + '[' + literal + ']' };
    const built = buildField(valueField, entry.value, valuePath, ctx);
    if (keyEmpty && !built.filled) return; // an untouched row
    if (keyEmpty) {
      addError(ctx, keyPath, 'enter a key', entry.key, true);
      return;
    }
    let value = built.value;
    if (!built.filled) {
      value = zeroJson(valueField);
      if (value === undefined) addError(ctx, valuePath, 'enter a value', entry.value, true);
    }
    if (keyText !== null) {
      keys.push(keyText);
      object[keyText] = value;
    }
  });
  return finishCollection(field, slot, path, ctx, keys, object);
}

/** The checks shared by lists and maps: required, then the collection rules; an empty one is left out. */
function finishCollection(field, slot, path, ctx, members, value) {
  if (members.length === 0) {
    const required = requiredMessage(field);
    if (required) addError(ctx, path, required, slot, false);
    else if (field.rulesApplyWhenEmpty) {
      const broken = firstBrokenCollectionRule(field, members);
      if (broken) addError(ctx, path, broken, slot, false);
    }
    return { filled: false };
  }
  const broken = firstBrokenCollectionRule(field, members);
  if (broken) addError(ctx, path, broken, slot, false);
  return { filled: true, value };
}

/**
 * The whole form: {value (the object to send, always an object), hasShapeError,
 * errors (in field order), firstErrors (Map json path -> first error), pathMap
 * (proto-name path -> json-name path, for the node's violations)}.
 */
export function buildForm(fields, slots) {
  const ctx = { errors: [], pathMap: {}, hasShapeError: false };
  const built = buildMessage(fields || [], slots, { json: '', proto: '' }, ctx);
  const firstErrors = new Map();
  for (const error of ctx.errors) if (!firstErrors.has(error.path)) firstErrors.set(error.path, error);
  return { value: built.value, hasShapeError: ctx.hasShapeError, errors: ctx.errors, firstErrors, pathMap: ctx.pathMap };
}

/** The hint under a field: rule summaries, then the kind ("int32", "list of string", …). */
export function hintText(field) {
  const parts = [];
  for (const rule of field.rules || []) if (rule && rule.summary) parts.push(rule.summary);
  if (field.required && !(field.rules || []).some((r) => r && r.id === 'required')) parts.push('required');
  if (field.optional) parts.push('optional');
  if (field.oneof) parts.push('one of ' + field.oneof);
  parts.push(kindText(field));
  return parts.join(' · ');
}

function kindText(field) {
  if (field.map && !field.asItem) return 'map of ' + kindText(mapKeyField(field)) + ' to ' + kindText(mapValueField(field));
  const single = field.kind === 'message' ? field.messageType || 'message' : field.kind === 'enum' && field.messageType ? 'enum ' + field.messageType : String(field.kind);
  if (field.repeated && !field.asItem) return 'list of ' + single;
  return single;
}
