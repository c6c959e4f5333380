import { describe, expect, it } from 'vitest';
import { keyValues, parseArgs, secondsOption } from './args.js';

const parsed = (argv: string[]) => {
  const r = parseArgs(argv);
  return r.ok ? { words: r.value.spec?.words.join(' '), args: r.value.args, options: r.value.options } : r.error;
};

describe('parseArgs', () => {
  it('commands of one and two words, positionals, global and command options in any order', () => {
    expect(parsed(['ask', 'demo', 'hello world', '--json', '--timeout', '5', '--url=http://x:1'])).toEqual({
      words: 'ask',
      args: ['demo', 'hello world'],
      options: { json: true, timeout: '5', url: 'http://x:1' },
    });
    expect(parsed(['--key', 'k', 'agent', 'create', '--name', 'n', '--model', 'a', '--model', 'b', '--tool', 't'])).toEqual({
      words: 'agent create',
      args: [],
      options: { key: 'k', name: 'n', model: ['a', 'b'], tool: ['t'] },
    });
    expect(parsed(['call', 'srv', 'echo', 'a=1', 'b=x', '--max-sats', '10'])).toEqual({ words: 'call', args: ['srv', 'echo', 'a=1', 'b=x'], options: { 'max-sats': '10' } });
    expect(parsed(['relay', 'info'])).toEqual({ words: 'relay info', args: [], options: {} });
  });

  it('agent create and update take --web-fetch-host, repeatable (the hosts web_fetch may fetch)', () => {
    for (const words of [['agent', 'create'], ['agent', 'update', 'a']]) {
      expect(parsed([...words, '--tool', 'web_fetch', '--web-fetch-host', 'example.org', '--web-fetch-host=*.example.net'])).toEqual({
        words: words.slice(0, 2).join(' '),
        args: words.slice(2),
        options: { tool: ['web_fetch'], 'web-fetch-host': ['example.org', '*.example.net'] },
      });
    }
  });

  it('--help (or -h) anywhere asks for help, with or without a command', () => {
    expect(parsed(['--help'])).toEqual({ words: undefined, args: [], options: { help: true } });
    expect(parsed(['agent', '--help'])).toEqual({ words: undefined, args: [], options: { help: true } });
    expect(parsed(['chat', '-h'])).toEqual({ words: 'chat', args: [], options: { help: true } });
  });

  it('usage errors name the problem', () => {
    expect(parsed([])).toBe('no command given');
    expect(parsed(['frobnicate'])).toBe('unknown command: frobnicate');
    expect(parsed(['agent'])).toBe('agent needs a subcommand');
    expect(parsed(['agent', 'explode'])).toBe('unknown command: agent explode');
    expect(parsed(['ask'])).toBe('ask needs <agent>');
    expect(parsed(['cancel-turn', 'a'])).toBe('cancel-turn needs <agent> <run>');
    expect(parsed(['whoami', 'extra'])).toBe('too many arguments for whoami: extra');
    expect(parsed(['ask', 'demo', '--modle', 'x'])).toBe('unknown option --modle for ask');
    expect(parsed(['ask', 'demo', '--model'])).toBe('--model needs a value');
    expect(parsed(['keygen', '--force=yes'])).toBe('--force takes no value');
    expect(parsed(['--force', 'keygen'])).toBe('unknown option --force');
  });
});

describe('option values', () => {
  it('seconds', () => {
    expect(secondsOption(undefined, 'timeout')).toEqual({ ok: true, value: undefined });
    expect(secondsOption('1.5', 'timeout')).toEqual({ ok: true, value: 1500 });
    for (const bad of ['0', '-1', 'soon', '']) expect(secondsOption(bad, 'timeout')).toEqual({ ok: false, error: '--timeout must be a positive number of seconds' });
  });

  it('k=v arguments: JSON values when they parse, else strings', () => {
    expect(keyValues(['n=3', 'flag=true', 's=hello world', 'o={"a":1}', 'eq=a=b', 'empty='])).toEqual({
      ok: true,
      value: { n: 3, flag: true, s: 'hello world', o: { a: 1 }, eq: 'a=b', empty: '' },
    });
    expect(keyValues(['novalue'])).toEqual({ ok: false, error: 'not a k=v argument: novalue' });
    expect(keyValues(['=x'])).toEqual({ ok: false, error: 'not a k=v argument: =x' });
  });
});
