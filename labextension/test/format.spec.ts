import { basename, formatAgo, formatDuration, parseTime, stripAnsi } from '../src/format';

describe('formatDuration (same rules as the Python side)', () => {
  it.each([
    [0, '0s'],
    [0.5, '0.5s'],
    [1.234, '1.23s'],
    [9.99, '9.99s'],
    [12.4, '12s'],
    [59.4, '59s'],
    [65, '1m5s'],
    [3600, '1h0m0s'],
    [-3, '0s']
  ])('%s → %s', (s, text) => {
    expect(formatDuration(s)).toBe(text);
  });
});

describe('parseTime', () => {
  it('reads microseconds, Z and offsets; rejects garbage', () => {
    expect(parseTime('2026-11-29T15:00:00.123456Z')).toBe(Date.UTC(2026, 10, 29, 15, 0, 0, 123));
    expect(parseTime('2026-11-29T16:00:00+01:00')).toBe(Date.UTC(2026, 10, 29, 15, 0, 0));
    expect(parseTime('nope')).toBeNull();
    expect(parseTime(undefined)).toBeNull();
  });
});

describe('stripAnsi', () => {
  it('removes colour codes from an IPython traceback', () => {
    const tb =
      '\u001b[0;31m---------\u001b[0m\n\u001b[0;31mZeroDivisionError\u001b[0m: division by zero\u001b]8;;http://x\u0007link\u001b]8;;\u0007';
    expect(stripAnsi(tb)).toBe('---------\nZeroDivisionError: division by zero' + 'link');
    expect(stripAnsi(null)).toBe('');
  });
});

describe('misc', () => {
  it('basename and formatAgo', () => {
    expect(basename('a/b/c.ipynb')).toBe('c.ipynb');
    expect(basename('c.ipynb')).toBe('c.ipynb');
    expect(formatAgo(0, 30_000)).toBe('30s ago');
    expect(formatAgo(0, 3_600_000 * 3)).toBe('3h ago');
  });
});
