// Serves the web console at /console: the page and stylesheet from this module, the browser bundle
// (dist/console/console.js) from the Workers Static Assets binding. Every answer carries a strict
// Content-Security-Policy: scripts and styles only from this origin, network only to this origin
// (HTTP and its WebSocket relay), no frames, no plugins, no inline code.

import { CONSOLE_HTML } from './page.js';
import { CONSOLE_CSS } from './style.js';

export interface ConsoleBindings {
  /** The assets of wrangler.toml `[assets]` (the built console bundle). */
  ASSETS: Fetcher;
}

/** The CSP of every console answer; `connect-src` names the WebSocket origin explicitly. */
export function consoleCsp(origin: string): string {
  const ws = origin.replace(/^http/, 'ws');
  return [
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    `connect-src 'self' ${ws}`,
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
}

function headers(origin: string, contentType: string): Headers {
  return new Headers({
    'Content-Type': contentType,
    'Content-Security-Policy': consoleCsp(origin),
    'X-Content-Type-Options': 'nosniff',
    'Referrer-Policy': 'no-referrer',
    'Cache-Control': 'no-cache',
  });
}

/** Answers GET /console, /console/console.css and /console/console.js; undefined for other paths. */
export async function serveConsole(req: Request, env: ConsoleBindings): Promise<Response | undefined> {
  const url = new URL(req.url);
  switch (url.pathname) {
    case '/console':
    case '/console/':
      return new Response(CONSOLE_HTML, { headers: headers(url.origin, 'text/html; charset=utf-8') });
    case '/console/console.css':
      return new Response(CONSOLE_CSS, { headers: headers(url.origin, 'text/css; charset=utf-8') });
    case '/console/console.js': {
      const asset = await env.ASSETS.fetch(new Request(`${url.origin}/console.js`));
      if (!asset.ok) {
        const error = `the console bundle is missing (assets answered ${asset.status}): run \`npm install\` or \`npm run build\` to build dist/console`;
        return new Response(JSON.stringify({ error }), { status: 503, headers: headers(url.origin, 'application/json') });
      }
      return new Response(asset.body, { headers: headers(url.origin, 'text/javascript; charset=utf-8') });
    }
    default:
      return undefined;
  }
}
