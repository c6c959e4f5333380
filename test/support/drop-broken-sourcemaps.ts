// A Vite plugin for the in-runtime test runner: drops the sourcemaps of packages that publish maps
// pointing to source files they do not ship (@modelcontextprotocol/sdk), so Vite does not warn
// "Sourcemap for … points to missing source files" once per module on every run. Stack traces
// through those packages then point at their published JavaScript, which is what exists.
import type { Plugin } from 'vite';

const BROKEN_MAPS = /\/node_modules\/@modelcontextprotocol\/sdk\/dist\/.*\.js$/;

export function dropBrokenSourcemaps(): Plugin {
  return {
    name: 'edgestr:drop-broken-sourcemaps',
    transform(code, id) {
      if (!BROKEN_MAPS.test(id.split('?')[0]!)) return null;
      // `mappings: ''` tells Vite there is no sourcemap for this module any more. Vite keeps the
      // loaded map of a module whose code no plugin changed (and it has already removed the
      // sourceMappingURL comment), so the code gets one trailing newline: a change that means nothing.
      return { code: `${code}\n`, map: { mappings: '' } };
    },
  };
}
