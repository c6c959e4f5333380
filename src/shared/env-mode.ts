// The local modes of EDGESTR_ENV, read in one place: `development` (npm start) and `test` (the test
// suites). What each allows is written where it is used (workers/common/local-mode.ts: the hosts and
// pages served; outbound-url.ts: the private hosts development may reach; secrets.ts, owners.ts,
// shards.ts, payments.ts). Any other value, or none, is a deployment.

export type LocalMode = 'development' | 'test';

/** The local mode `env` is in, if any. */
export function localMode(env: { EDGESTR_ENV?: string }): LocalMode | undefined {
  return env.EDGESTR_ENV === 'development' || env.EDGESTR_ENV === 'test' ? env.EDGESTR_ENV : undefined;
}

/** Whether `env` is in development mode (`npm start`). */
export const isDevelopment = (env: { EDGESTR_ENV?: string }): boolean => localMode(env) === 'development';
