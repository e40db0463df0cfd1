/*
 * A workflow definition as the pages show it (a job's snapshot, a stored workflow):
 * parsed from JSON text, its descriptor set replaced by its size.
 */

import { base64Length } from './forms-rules.js';

/** The definition as an object (it may arrive as JSON text). */
export function parseDefinition(definition) {
  if (typeof definition === 'string') {
    try {
      return JSON.parse(definition) || {};
    } catch (_) {
      return {};
    }
  }
  return definition && typeof definition === 'object' ? definition : {};
}

/** A copy with the descriptor set replaced by its size: the blob is unreadable and can be large. */
export function withoutDescriptorBlob(definition) {
  const copy = Object.assign({}, definition);
  if (copy.schema && typeof copy.schema === 'object') {
    const blob = copy.schema.descriptorSetBase64;
    const bytes = typeof blob === 'string' ? base64Length(blob.trim()) ?? Math.floor((blob.length * 3) / 4) : 0;
    copy.schema = Object.assign({}, copy.schema, { descriptorSetBase64: '(descriptor set, ' + bytes + ' bytes)' });
  }
  return copy;
}
