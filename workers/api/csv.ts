// CSV answers of the management API (GET /api/usage with Accept: text/csv): RFC 4180 (a header
// line, CRLF line ends, a field with a comma, quote or line end quoted), and a text field a
// spreadsheet would run as a formula (starting with =, +, -, @, a tab or a carriage return: a
// tenant's model name or server id reaching the operator's spreadsheet) prefixed with an apostrophe,
// so it is shown as text (OWASP's CSV injection advice).

const FORMULA_START = /^[=+\-@\t\r]/;

const csvField = (v: string | number): string => {
  if (typeof v === 'number') return String(v);
  const text = FORMULA_START.test(v) ? `'${v}` : v;
  return /[",\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
};

/** Rows as CSV with `columns` in that order (see the header). */
export const toCsv = <R extends Record<C, string | number>, C extends string>(columns: readonly C[], rows: R[]): string =>
  [columns.join(','), ...rows.map((r) => columns.map((k) => csvField(r[k])).join(','))].map((l) => `${l}\r\n`).join('');
