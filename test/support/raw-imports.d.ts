// Vite's `?raw` imports (test vectors read as text, e.g. the JSONL interop captures).
declare module '*?raw' {
  const text: string;
  export default text;
}
