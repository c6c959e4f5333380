// Minimal JSON Schema checks for tool arguments (and MCP structured output): `type` (one or a
// list of object, array, string, number, integer, boolean, null), `required`, `properties`,
// `additionalProperties: false`, `items` and `enum` of primitives, nested up to MAX_DEPTH levels.
// Everything else (formats, patterns, ranges, $ref, combinators) is accepted unchecked: a tool
// (or the MCP server) validates its own domain rules. No code generation, so it runs in workerd.
//
// Messages (exact, used in tests and shown to the model):
//   expected an object                         the value itself has the wrong type
//   "precision" must be a number               a property (dotted path, [i] for array items)
//   missing required property "expr"
//   unknown property "foo"                     only with additionalProperties: false
//   "unit" must be one of "c", "f"

export type JsonSchema = Record<string, unknown>;

const MAX_DEPTH = 8;

const TYPE_WORDS: Record<string, string> = {
  object: 'an object',
  array: 'an array',
  string: 'a string',
  number: 'a number',
  integer: 'an integer',
  boolean: 'a boolean',
  null: 'null',
};

const isRecord = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

function hasType(value: unknown, type: string): boolean {
  switch (type) {
    case 'object':
      return isRecord(value);
    case 'array':
      return Array.isArray(value);
    case 'string':
      return typeof value === 'string';
    case 'number':
      return typeof value === 'number' && Number.isFinite(value);
    case 'integer':
      return typeof value === 'number' && Number.isInteger(value);
    case 'boolean':
      return typeof value === 'boolean';
    case 'null':
      return value === null;
    default:
      return true; // an unknown type name is not ours to reject
  }
}

const subject = (path: string): string => (path === '' ? 'expected' : `"${path}" must be`);
const join = (path: string, key: string): string => (path === '' ? key : `${path}.${key}`);

function check(schema: JsonSchema, value: unknown, path: string, depth: number): string | undefined {
  if (depth > MAX_DEPTH) return undefined;

  const types = typeof schema.type === 'string' ? [schema.type] : Array.isArray(schema.type) ? schema.type : [];
  const typeNames = types.filter((t): t is string => typeof t === 'string');
  if (typeNames.length > 0 && !typeNames.some((t) => hasType(value, t))) {
    return `${subject(path)} ${typeNames.map((t) => TYPE_WORDS[t] ?? t).join(' or ')}`;
  }

  if (Array.isArray(schema.enum)) {
    const options = schema.enum;
    if (!options.some((o) => o === value)) {
      return `${subject(path)} one of ${options.map((o) => JSON.stringify(o)).join(', ')}`;
    }
  }

  if (isRecord(value)) {
    if (Array.isArray(schema.required)) {
      for (const key of schema.required) {
        if (typeof key === 'string' && !Object.hasOwn(value, key)) return `missing required property "${join(path, key)}"`;
      }
    }
    const properties = isRecord(schema.properties) ? schema.properties : {};
    for (const [key, v] of Object.entries(value)) {
      const sub = Object.hasOwn(properties, key) ? properties[key] : undefined;
      if (isRecord(sub)) {
        const problem = check(sub, v, join(path, key), depth + 1);
        if (problem) return problem;
      } else if (sub === undefined && schema.additionalProperties === false) {
        return `unknown property "${join(path, key)}"`;
      } else if (sub === undefined && isRecord(schema.additionalProperties)) {
        const problem = check(schema.additionalProperties, v, join(path, key), depth + 1);
        if (problem) return problem;
      }
    }
  }

  if (Array.isArray(value) && isRecord(schema.items)) {
    for (let i = 0; i < value.length; i++) {
      const problem = check(schema.items, value[i], `${path}[${i}]`, depth + 1);
      if (problem) return problem;
    }
  }
  return undefined;
}

/** Checks `value` against `schema`; returns the first problem found, or undefined. */
export const validateJson = (schema: JsonSchema, value: unknown): string | undefined => check(schema, value, '', 0);

/**
 * Checks tool arguments against the tool's input schema. Arguments are always a JSON object
 * (whatever the schema says at its root). Returns "invalid arguments: <problem>" or undefined.
 */
export function checkArgs(schema: JsonSchema, args: unknown): string | undefined {
  const problem = isRecord(args) ? validateJson(schema, args) : 'expected an object';
  return problem === undefined ? undefined : `invalid arguments: ${problem}`;
}
