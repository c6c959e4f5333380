// The `calculator` tool: a recursive-descent arithmetic evaluator (no eval, no Function, no
// property lookups on objects: names resolve through fixed null-prototype tables).
//
// Grammar (lowest to highest precedence):
//   expr    := term (('+' | '-') term)*                      left-associative
//   term    := unary (('*' | '/' | '%') unary)*              left-associative
//   unary   := ('-' | '+') unary | power                     so -2^2 = -(2^2) = -4
//   power   := primary ('^' unary)?                          right-associative: 2^3^2 = 2^9
//   primary := number | name | name '(' args ')' | '(' expr ')'
//   number  := digits ['.' digits] | '.' digits, then optional [eE][+-]digits   (1, 2.5, .5, 1e3)
// Functions: sqrt abs floor ceil ln sin cos tan (1 argument, radians for trigonometry),
// round(x[, digits]) (half away from zero), log(x[, base]) (base 10 by default), min/max(x, ...) (1 or more).
// Constants: pi, e. Names are case-insensitive. `%` is the remainder (sign of the dividend).
// There is no implicit multiplication: "2pi" is an error.
//
// Errors are values with 1-based character positions where a position exists:
//   unexpected ')' at 5 / unexpected end of expression / unexpected character '$' at 3
//   unknown function foo at 1 / unknown constant foo at 1 / sqrt expects 1 argument, got 2 at 1
//   expected '(' after sqrt at 5
//   invalid number '1e' at 1 / number out of range '1e999' at 1
//   division by zero / modulo by zero / sqrt of a negative number / ln of a non-positive number
//   log of a non-positive number / invalid logarithm base / result is not a number / numeric overflow
//   empty expression / expression too long (max 1000 characters) / nesting too deep (max 64 levels) at N
//   precision must be an integer from 0 to 20
//
// Output: stdout = the result; with `precision`, exactly that many decimal places (toFixed);
// without it, rounded to 15 significant digits (so 0.1 + 0.2 prints 0.3). -0 prints as 0.

import { z } from 'zod';
import { inputSchemaOf } from './args.js';
import { fail, succeed } from './result.js';
import type { Tool, ToolDefinition, ToolResult } from './types.js';
import { errorMessage } from '../../../src/shared/errors.js';

export const MAX_EXPRESSION_CHARS = 1000;
export const MAX_NESTING = 64;
export const MAX_PRECISION = 20;

/** The arguments (the NIP-XX example schema); `precision`'s range is checked by the tool. */
const CalculatorArgs = z.object({ expr: z.string(), precision: z.number().optional() });
export type CalculatorArgs = z.infer<typeof CalculatorArgs>;

export const CALCULATOR_DEFINITION: ToolDefinition = {
  name: 'calculator',
  description:
    'Evaluate arithmetic expressions: + - * / % ^ (power), parentheses, unary minus, ' +
    'sqrt abs round floor ceil min max log ln sin cos tan, constants pi and e. ' +
    'precision = number of decimal places in the result.',
  schema_version: 1,
  requires_approval: false,
  input_schema: inputSchemaOf(CalculatorArgs),
};

// ---- tokens --------------------------------------------------------------------------------

type TokenKind = 'number' | 'name' | 'op' | 'end';

interface Token {
  kind: TokenKind;
  text: string;
  /** 1-based position of the first character. */
  pos: number;
  value: number;
}

/** Evaluation and syntax failures inside this module; converted to an error value at the boundary. */
class CalcError {
  constructor(readonly message: string) {}
}

const describe = (t: Token): string => (t.kind === 'end' ? 'end of expression' : `'${t.text}'`);
const unexpected = (t: Token): CalcError =>
  new CalcError(t.kind === 'end' ? 'unexpected end of expression' : `unexpected ${describe(t)} at ${t.pos}`);

const isDigit = (c: string | undefined): boolean => c !== undefined && c >= '0' && c <= '9';
const isNameStart = (c: string | undefined): boolean =>
  c !== undefined && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c === '_');
const isNameChar = (c: string | undefined): boolean => isNameStart(c) || isDigit(c);
const OPERATORS = new Set(['+', '-', '*', '/', '%', '^', '(', ')', ',']);
const SPACE = new Set([' ', '\t', '\n', '\r']);

function tokenize(src: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  while (i < src.length) {
    const c = src[i];
    if (c !== undefined && SPACE.has(c)) {
      i++;
      continue;
    }
    const start = i;
    if (isDigit(c) || (c === '.' && isDigit(src[i + 1]))) {
      while (isDigit(src[i])) i++;
      if (src[i] === '.') {
        i++;
        while (isDigit(src[i])) i++;
      }
      if (src[i] === 'e' || src[i] === 'E') {
        // An exponent needs digits ("1e3", "1e-3"); "1e" or "1ex" is a malformed number.
        let j = i + 1;
        if (src[j] === '+' || src[j] === '-') j++;
        if (!isDigit(src[j])) {
          while (isNameChar(src[i])) i++;
          throw new CalcError(`invalid number '${src.slice(start, i)}' at ${start + 1}`);
        }
        i = j;
        while (isDigit(src[i])) i++;
      }
      const text = src.slice(start, i);
      const value = Number(text);
      if (!Number.isFinite(value)) throw new CalcError(`number out of range '${text}' at ${start + 1}`);
      tokens.push({ kind: 'number', text, pos: start + 1, value });
    } else if (isNameStart(c)) {
      while (isNameChar(src[i])) i++;
      tokens.push({ kind: 'name', text: src.slice(start, i), pos: start + 1, value: 0 });
    } else if (c !== undefined && OPERATORS.has(c)) {
      i++;
      tokens.push({ kind: 'op', text: c, pos: start + 1, value: 0 });
    } else {
      const ch = String.fromCodePoint(src.codePointAt(i) ?? 0);
      throw new CalcError(`unexpected character '${ch}' at ${start + 1}`);
    }
  }
  tokens.push({ kind: 'end', text: '', pos: src.length + 1, value: 0 });
  return tokens;
}

// ---- syntax tree ---------------------------------------------------------------------------

type Node =
  | { type: 'num'; value: number }
  | { type: 'neg'; arg: Node }
  | { type: 'bin'; op: string; left: Node; right: Node }
  | { type: 'call'; fn: FunctionSpec; args: Node[] };

interface FunctionSpec {
  name: string;
  min: number;
  max: number;
  apply(args: number[]): number;
}

const CONSTANTS: Readonly<Record<string, number>> = Object.freeze(
  Object.assign(Object.create(null) as Record<string, number>, { pi: Math.PI, e: Math.E }),
);

const unary = (name: string, apply: (x: number) => number): FunctionSpec => ({
  name,
  min: 1,
  max: 1,
  apply: (a) => apply(a[0] ?? NaN),
});

function roundTo(x: number, digits: number): number {
  if (!Number.isInteger(digits) || digits < 0 || digits > MAX_PRECISION) {
    throw new CalcError(`round digits must be an integer from 0 to ${MAX_PRECISION}`);
  }
  // Half away from zero, shifting the decimal exponent in text so that 1.005 rounds to 1.01
  // (1.005 * 100 is 100.49999999999999 in binary floating point).
  const [mantissa, exponent] = Math.abs(x).toExponential().split('e');
  const shifted = Number(`${mantissa}e${Number(exponent) + digits}`);
  const rounded = Number(`${Math.round(shifted)}e-${digits}`);
  return x < 0 ? -rounded : rounded;
}

function logarithm(x: number, base: number | undefined): number {
  if (x <= 0) throw new CalcError('log of a non-positive number');
  if (base === undefined) return Math.log10(x);
  if (base <= 0 || base === 1) throw new CalcError('invalid logarithm base');
  return Math.log(x) / Math.log(base);
}

const FUNCTIONS: Readonly<Record<string, FunctionSpec>> = Object.freeze(
  Object.assign(Object.create(null) as Record<string, FunctionSpec>, {
    sqrt: unary('sqrt', (x) => {
      if (x < 0) throw new CalcError('sqrt of a negative number');
      return Math.sqrt(x);
    }),
    abs: unary('abs', Math.abs),
    floor: unary('floor', Math.floor),
    ceil: unary('ceil', Math.ceil),
    ln: unary('ln', (x) => {
      if (x <= 0) throw new CalcError('ln of a non-positive number');
      return Math.log(x);
    }),
    sin: unary('sin', Math.sin),
    cos: unary('cos', Math.cos),
    tan: unary('tan', Math.tan),
    round: { name: 'round', min: 1, max: 2, apply: (a: number[]) => roundTo(a[0] ?? NaN, a[1] ?? 0) },
    log: { name: 'log', min: 1, max: 2, apply: (a: number[]) => logarithm(a[0] ?? NaN, a[1]) },
    min: { name: 'min', min: 1, max: Infinity, apply: (a: number[]) => Math.min(...a) },
    max: { name: 'max', min: 1, max: Infinity, apply: (a: number[]) => Math.max(...a) },
  }),
);

function arityMessage(fn: FunctionSpec, got: number): string {
  const plural = (n: number): string => `${n} argument${n === 1 ? '' : 's'}`;
  const expected =
    fn.min === fn.max
      ? plural(fn.min)
      : fn.max === Infinity
        ? `at least ${plural(fn.min)}`
        : `${fn.min} or ${plural(fn.max)}`;
  return `${fn.name} expects ${expected}, got ${got}`;
}

class Parser {
  private i = 0;
  private depth = 0;

  constructor(private readonly tokens: Token[]) {}

  parse(): Node {
    if (this.peek().kind === 'end') throw new CalcError('empty expression');
    const node = this.expr();
    const rest = this.peek();
    if (rest.kind !== 'end') throw unexpected(rest);
    return node;
  }

  private peek(): Token {
    // The token list always ends with an 'end' token, and `i` never moves past it.
    return this.tokens[this.i] ?? (this.tokens[this.tokens.length - 1] as Token);
  }

  private next(): Token {
    const t = this.peek();
    if (t.kind !== 'end') this.i++;
    return t;
  }

  private isOp(text: string): boolean {
    const t = this.peek();
    return t.kind === 'op' && t.text === text;
  }

  private expr(): Node {
    let left = this.term();
    while (this.isOp('+') || this.isOp('-')) {
      const op = this.next().text;
      left = { type: 'bin', op, left, right: this.term() };
    }
    return left;
  }

  private term(): Node {
    let left = this.unary();
    while (this.isOp('*') || this.isOp('/') || this.isOp('%')) {
      const op = this.next().text;
      left = { type: 'bin', op, left, right: this.unary() };
    }
    return left;
  }

  /** Every recursion (parentheses, arguments, exponents, unary chains) passes through here. */
  private unary(): Node {
    const t = this.peek();
    if (++this.depth > MAX_NESTING) throw new CalcError(`nesting too deep (max ${MAX_NESTING} levels) at ${t.pos}`);
    try {
      if (this.isOp('-')) {
        this.next();
        return { type: 'neg', arg: this.unary() };
      }
      if (this.isOp('+')) {
        this.next();
        return this.unary();
      }
      return this.power();
    } finally {
      this.depth--;
    }
  }

  private power(): Node {
    const base = this.primary();
    if (this.isOp('^')) {
      this.next();
      return { type: 'bin', op: '^', left: base, right: this.unary() };
    }
    return base;
  }

  private primary(): Node {
    const t = this.next();
    if (t.kind === 'number') return { type: 'num', value: t.value };
    if (t.kind === 'op' && t.text === '(') {
      const inner = this.expr();
      const close = this.next();
      if (close.kind !== 'op' || close.text !== ')') throw unexpected(close);
      return inner;
    }
    if (t.kind === 'name') {
      const key = t.text.toLowerCase();
      if (this.isOp('(')) {
        const fn = FUNCTIONS[key];
        if (fn === undefined) throw new CalcError(`unknown function ${t.text} at ${t.pos}`);
        this.next();
        const args: Node[] = [];
        if (!this.isOp(')')) {
          args.push(this.expr());
          while (this.isOp(',')) {
            this.next();
            args.push(this.expr());
          }
        }
        const close = this.next();
        if (close.kind !== 'op' || close.text !== ')') throw unexpected(close);
        if (args.length < fn.min || args.length > fn.max) {
          throw new CalcError(`${arityMessage(fn, args.length)} at ${t.pos}`);
        }
        return { type: 'call', fn, args };
      }
      if (FUNCTIONS[key] !== undefined) throw new CalcError(`expected '(' after ${t.text} at ${this.peek().pos}`);
      const value = CONSTANTS[key];
      if (value === undefined) throw new CalcError(`unknown constant ${t.text} at ${t.pos}`);
      return { type: 'num', value };
    }
    throw unexpected(t);
  }
}

// ---- evaluation ----------------------------------------------------------------------------

function checked(x: number): number {
  if (Number.isNaN(x)) throw new CalcError('result is not a number');
  if (!Number.isFinite(x)) throw new CalcError('numeric overflow');
  return x;
}

function evaluate(node: Node): number {
  switch (node.type) {
    case 'num':
      return node.value;
    case 'neg':
      return -evaluate(node.arg);
    case 'call':
      return checked(node.fn.apply(node.args.map(evaluate)));
    case 'bin': {
      const a = evaluate(node.left);
      const b = evaluate(node.right);
      switch (node.op) {
        case '+':
          return checked(a + b);
        case '-':
          return checked(a - b);
        case '*':
          return checked(a * b);
        case '/':
          if (b === 0) throw new CalcError('division by zero');
          return checked(a / b);
        case '%':
          if (b === 0) throw new CalcError('modulo by zero');
          return checked(a % b);
        default:
          return checked(a ** b);
      }
    }
  }
}

/** The result as text: `precision` decimal places, or up to 15 significant digits. */
export function formatNumber(x: number, precision?: number): string {
  if (precision !== undefined) {
    const text = x.toFixed(precision);
    // "-0.00" → "0.00": a value that rounds to zero has no sign.
    return /^-[0.]+$/.test(text) ? text.slice(1) : text;
  }
  const rounded = Number(x.toPrecision(15));
  return String(Object.is(rounded, -0) ? 0 : rounded);
}

export type CalcResult = { ok: true; value: number } | { ok: false; error: string };

/** Parses and evaluates an expression. */
export function calculate(expr: string): CalcResult {
  if (expr.length > MAX_EXPRESSION_CHARS) {
    return { ok: false, error: `expression too long (max ${MAX_EXPRESSION_CHARS} characters)` };
  }
  try {
    const tree = new Parser(tokenize(expr)).parse();
    return { ok: true, value: evaluate(tree) };
  } catch (e) {
    if (e instanceof CalcError) return { ok: false, error: e.message };
    return { ok: false, error: `internal error: ${errorMessage(e)}` };
  }
}

export class CalculatorTool implements Tool<CalculatorArgs> {
  readonly definition = CALCULATOR_DEFINITION;

  /** Synchronous work: the signal has nothing to interrupt. */
  run({ expr, precision }: CalculatorArgs, _ctx?: { signal: AbortSignal }): Promise<ToolResult> {
    if (precision !== undefined && (!Number.isInteger(precision) || precision < 0 || precision > MAX_PRECISION)) {
      return Promise.resolve(fail(`precision must be an integer from 0 to ${MAX_PRECISION}`));
    }
    const result = calculate(expr);
    return Promise.resolve(result.ok ? succeed(formatNumber(result.value, precision)) : fail(result.error));
  }
}
