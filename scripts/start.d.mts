// Types of scripts/start.mjs (a plain Node module, imported by tests).

/** The provider settings (names only, never values) a `.dev.vars` file sets. */
export const PROVIDER_VARS: readonly string[];

/** The names of the variables set in a dotenv-style file, or undefined when there is no file. */
export function varNames(path: string): string[] | undefined;

/** The banner lines for a running deployment at `origin` whose /health answered `health`. */
export function bannerLines(
  origin: string,
  health: { version: string; demo?: { owner: string; agent: string; relay: string } },
  devVars: readonly string[] | undefined,
): string[];

/** The flag that accepts a non-loopback `--ip` in development or test mode (not passed on to wrangler). */
export const UNSAFE_REMOTE_DEV: '--unsafe-remote-dev';

/** Whether wrangler's `--ip` value binds loopback only (127.0.0.0/8, ::1, localhost). */
export function isLoopbackIp(ip: string): boolean;

/** wrangler's arguments for `npm start -- <extra>`; throws when they would expose development or test mode beyond loopback. */
export function wranglerArgs(extra: readonly string[]): string[];

/** The URL origin that reaches wrangler bound to `ip` on `port` from this machine. */
export function localOrigin(ip: string, port: string | number): string;
