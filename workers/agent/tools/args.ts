// Tool argument checks: JSON Schema validation by @cfworker/json-schema (draft 2020-12, no code
// generation, so it runs in workerd; the library the MCP SDK's Workers validator wraps, used here
// directly because its error units give the messages below), and the input schemas of the
// built-in tools derived from their zod schemas (so the type a tool receives is the schema's).
// The registry checks every call once (registry.ts); tools trust their typed input.
//
// Messages (the first problem found; paths are dotted, "[i]" for array items):
//   invalid arguments: expected an object                       the arguments are not an object
//   invalid arguments: "precision" must be a number             a property of the wrong type
//   invalid arguments: missing required property "expr"
//   invalid arguments: unknown property "foo"                   with additionalProperties: false
//   invalid arguments: "unit" must be one of "c", "f"
//   invalid arguments: "code": string is too long (2 > 1)       any other keyword: the
//                                                               library's own text
//   invalid arguments: the tool's input schema cannot be applied: <reason>   (a broken schema)
//
// No regular expression of a schema is run: `pattern`, `format` (checked with the library's
// regular expressions, some of them slow on crafted input) and `patternProperties` (with its
// `additionalProperties`) are removed. An MCP server writes its own schemas, and one pattern could
// keep the agent busy without bound (ReDoS); the server checks those rules itself.

import { Validator, type OutputUnit, type Schema } from '@cfworker/json-schema';
import { z } from 'zod';
import { err, errorMessage, ok, type Result } from '../../../src/shared/errors.js';
import type { ToolArgs } from './types.js';

export type JsonSchema = Record<string, unknown>;

/** Checks a call's arguments; the checked arguments, or the message for the model. */
export type ArgsCheck = (args: unknown) => Result<ToolArgs, string>;

const TYPE_WORDS: Record<string, string> = {
  object: 'an object',
  array: 'an array',
  string: 'a string',
  number: 'a number',
  integer: 'an integer',
  boolean: 'a boolean',
  null: 'null',
};

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The input schema of a built-in tool, from the zod schema of its arguments (without `$schema`). */
export function inputSchemaOf(args: z.ZodObject): JsonSchema {
  const { $schema: _draft, ...schema } = z.toJSONSchema(args, { io: 'input' });
  return schema;
}

/** Keywords that run regular expressions (see the header). */
const REGEX_KEYWORDS = new Set(['pattern', 'format', 'patternProperties']);
/** Keywords whose value is data, not a schema: kept as is. */
const DATA_KEYWORDS = new Set(['const', 'enum', 'default', 'examples']);
/** Keywords whose value maps names (not keywords) to schemas or lists. */
const NAME_MAPS = new Set(['properties', '$defs', 'definitions', 'dependentSchemas', 'dependentRequired', 'dependencies']);

/** `schema` without the keywords that run regular expressions (see the header). */
export function withoutRegexes(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(withoutRegexes);
  if (!isRecord(schema)) return schema;
  const byPattern = Object.hasOwn(schema, 'patternProperties');
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(schema)) {
    if (REGEX_KEYWORDS.has(key) || (byPattern && key === 'additionalProperties')) continue;
    if (DATA_KEYWORDS.has(key)) out[key] = value;
    else if (NAME_MAPS.has(key) && isRecord(value)) {
      out[key] = Object.fromEntries(Object.entries(value).map(([name, sub]) => [name, withoutRegexes(sub)]));
    } else out[key] = withoutRegexes(value);
  }
  return out;
}

/** A JSON pointer into `value` ("#/tags/1") as a dotted path ("tags[1]"). */
function pathOf(pointer: string, value: unknown): string {
  let path = '';
  let at = value;
  for (const raw of pointer.replace(/^#\/?/, '').split('/').filter((s) => s !== '')) {
    const key = decodeURIComponent(raw).replaceAll('~1', '/').replaceAll('~0', '~');
    path = Array.isArray(at) ? `${path}[${key}]` : path === '' ? key : `${path}.${key}`;
    at = Array.isArray(at) ? at[Number(key)] : isRecord(at) ? at[key] : undefined;
  }
  return path;
}

function jsonList(text: string): unknown[] | undefined {
  try {
    const value: unknown = JSON.parse(text);
    return Array.isArray(value) ? value : undefined;
  } catch {
    return undefined;
  }
}

/** The message of the failing unit (the last: with short-circuiting, the chain ends at the cause). */
function problemOf(errors: readonly OutputUnit[], value: unknown): string {
  const leaf = errors.at(-1);
  if (!leaf) return 'does not match the schema';
  const path = pathOf(leaf.instanceLocation, value);
  const subject = path === '' ? 'expected' : `"${path}" must be`;
  const parent = errors.at(-2);
  if (leaf.keyword === 'false' && parent?.keyword === 'additionalProperties') return `unknown property "${path}"`;
  const type = /^Instance type "[^"]*" is invalid\. Expected (.+)\.$/.exec(leaf.error);
  if (leaf.keyword === 'type' && type) {
    const names = [...type[1]!.matchAll(/"([^"]+)"/g)].map((m) => TYPE_WORDS[m[1]!] ?? m[1]!);
    return `${subject} ${names.join(' or ')}`;
  }
  const required = /^Instance does not have required property "(.*)"\.$/.exec(leaf.error);
  if (leaf.keyword === 'required' && required) {
    return `missing required property "${path === '' ? required[1] : `${path}.${required[1]}`}"`;
  }
  const options = /^Instance does not match any of (.*)\.$/.exec(leaf.error);
  const list = leaf.keyword === 'enum' && options ? jsonList(options[1]!) : undefined;
  if (list) return `${subject} one of ${list.map((o) => JSON.stringify(o)).join(', ')}`;
  const text = leaf.error.replace(/\.$/, '');
  const lowered = text.charAt(0).toLowerCase() + text.slice(1);
  return path === '' ? lowered : `"${path}": ${lowered}`;
}

/** Why a schema cannot be applied: the first line of the library's message (it then lists the schemas it knows). */
const unusable = (e: unknown): string =>
  `invalid arguments: the tool's input schema cannot be applied: ${errorMessage(e).split('\n')[0]!.trim()}`;

/** Compiles the check of a tool's input schema (once per tool). Never throws. */
export function argsCheck(schema: JsonSchema): ArgsCheck {
  let validator: Validator;
  try {
    validator = new Validator(withoutRegexes(schema) as Schema, '2020-12', true);
  } catch (e) {
    const broken = unusable(e);
    return () => err(broken);
  }
  return (args) => {
    // Arguments are always a JSON object, whatever the schema says at its root.
    if (!isRecord(args)) return err('invalid arguments: expected an object');
    try {
      const result = validator.validate(args);
      return result.valid ? ok(args) : err(`invalid arguments: ${problemOf(result.errors, args)}`);
    } catch (e) {
      // An unusable schema (an unresolved $ref, a $ref cycle) refuses the call rather than skipping the check.
      return err(unusable(e));
    }
  };
}
